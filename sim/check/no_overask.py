"""``no_overask``: a client never asks for more than its queued items no permit already covers,
and dates each group's demand by its oldest queued item.

Judged at every request a client sends, against its own storage as it
sends it (the rule: :func:`~semsim.check.allocation_checks.overask_rule`).
The client's queued items per group are counted from its table until it has
:data:`~semsim.check.allocation_checks.KEEP_COUNTS_FROM` of them queued for a
key; from then on they are kept by triggers on its connection
(:class:`~semsim.check.queued_counts.QueuedCounts`), so the check costs the
same however long the backlog grows, and a short run (most of a fuzz
campaign's) pays nothing for the triggers. The debug mode also counts them
from the table and stops the run as ``checker`` if the two differ. The
oldest item of each group asked for is one index probe
(:func:`~semsim.check.allocation_checks.oldest_queued`), whatever the backlog.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from semsim.check.allocation_checks import (
    KEEP_COUNTS_FROM,
    NO_OVERASK,
    as_sent,
    client_cover,
    dating_rule,
    oldest_queued,
    overask_rule,
)
from semsim.check.checker import Checker, Fail
from semsim.check.events import Request
from semsim.check.queued_counts import QueuedCounts


class NoOverask(Checker):
    """Reads each requesting client's queue; keeps counts for clients with a long backlog."""

    name = NO_OVERASK
    description = "a client never asks for more than its uncovered queued items, dated by the oldest"

    def __init__(
        self,
        fail: Fail,
        storage: Callable[[str], sqlite3.Connection],
        full: bool = False,
        keep_counts_from: int = KEEP_COUNTS_FROM,
    ) -> None:
        """``storage``: a client's own storage, by name; ``full``: the debug mode."""
        self.fail = fail
        self._storage = storage
        self.full = full
        self.keep_counts_from = keep_counts_from
        #: Per client connection, its queued items per key and group, kept by triggers.
        self._counts: dict[sqlite3.Connection, QueuedCounts] = {}

    def on_request(self, request: Request) -> None:
        sent = as_sent(request.request, request.wire)  # judged as the holder receives it
        if not sent.demand:
            return
        key, conn = request.key, self._storage(request.client)
        counts = self._counts.get(conn)
        queued, headroom = client_cover(conn, key, request.t_ms, counts)
        if counts is None and sum(queued.values()) >= self.keep_counts_from:
            self._counts[conn] = QueuedCounts(conn)
        if self.full:
            counted = client_cover(conn, key, request.t_ms)
            if (queued, headroom) != counted:
                self.fail(
                    "checker",
                    f"{request.client}: {key}: kept queued items {queued} "
                    f"differ from the table's {counted[0]}",
                    key=key,
                )
        broken = overask_rule(sent, queued, headroom)
        if broken is None:
            groups = sorted({demand.group for demand in sent.demand})
            broken = dating_rule(sent, oldest_queued(conn, key, groups))
        if broken is not None:
            self.fail(NO_OVERASK, f"{key}: {broken}", key=key)
