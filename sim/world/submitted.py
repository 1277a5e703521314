"""Items as the workload submits them, read by the designs' intakes (the gate's callers, the workers).

The workload (:mod:`semsim.world.workload`) sends every design the same
batches: ``[{"id", "key", "group", "body"}]``, where ``body`` is JSON with
the item's ``duration_ms``. The semaphore's clients keep the body for the
job they run; the other designs read it here, once, into a record, and
refuse a malformed batch as a protocol error (nothing of it is taken).
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs

from semsim.runtime.network import RemoteError
from semsim.world.external_api import MAX_WORK_MS

#: The most items one submission may carry (the workload's largest batch).
MAX_BATCH: Final = 10_000


@attrs.frozen
class Submitted:
    """One item: its id (the API's idempotency key), its account (the world's key), its group, and
    the work it asks of the API."""

    id: str
    account: str
    group: str
    work_ms: int


def parse_items(payload: Any, where: str) -> list[Submitted]:
    """The batch ``payload`` as records, or ``RemoteError("protocol")`` naming ``where``."""
    if not isinstance(payload, list) or len(payload) > MAX_BATCH:
        raise RemoteError("protocol", f"{where}: submit takes a list of at most {MAX_BATCH} items")
    items: list[Submitted] = []
    for item in payload:
        try:
            fields = (item["id"], item["key"], item["group"])
            work_ms = json.loads(item["body"])["duration_ms"]
        except (TypeError, KeyError, ValueError, RecursionError):
            raise RemoteError("protocol", f"{where}: malformed item {item!r}") from None
        if not all(isinstance(field, str) and field for field in fields):
            raise RemoteError("protocol", f"{where}: an item's id, key and group are non-empty strings")
        if type(work_ms) is not int or not 0 <= work_ms <= MAX_WORK_MS:
            raise RemoteError(
                "protocol", f"{where}: an item's duration_ms is an integer in [0, {MAX_WORK_MS}]"
            )
        items.append(Submitted(*fields, work_ms))
    return items
