"""The literal port of the reference now lives in the package: :mod:`semsim.check.literal_holder`.

It shares no code with ``semaphore_core`` (its own parsing, collation,
policy, budgets and store) and speaks wire dicts. This shim keeps the old
typed API for ``benchmarks/bench_core.py``, which times it as the baseline:
on a connection the core migrated, the model uses the same two tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from semaphore_core import HolderConfig
from semaphore_core.protocol import PermitRequest, PermitSync
from semsim.check.literal_holder import LiteralHolder, options_from_config


class ReferencePort:
    def __init__(self, conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> None:
        self.model = LiteralHolder(conn, options_from_config(config), new_id)

    def round(self, requests: Sequence[PermitRequest], now: int) -> tuple[list[Any], list[Any]]:
        return self.model.round([request.to_wire() for request in requests], now)

    def sync(self, message: PermitSync, now: int) -> dict[str, Any]:
        return self.model.handle_sync(message.to_wire(), now)

    def reclaim_expired(self, now: int) -> list[dict[str, Any]]:
        return self.model.reclaim_expired(now)

    def next_alarm_at(self) -> int | None:
        return self.model.next_alarm_at()
