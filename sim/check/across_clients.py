"""What the liveness checks read from every client at once, kept from the clients that changed.

While a key has items waiting, ``progress`` asks at every holder commit and
every sample how many lease permits the clients run, how many items wait per
group and since when, and which lease ids any client knows. Asked client by
client, even from a kept reading (``client_reads.kept``), that is Python work
in proportion to the clients at every commit: at 1,000 clients it was most of
what made a simulated event dearer than at 16. Here each client's storage is
read again only when its ``total_changes`` moved (SQLite counts every row a
connection writes, rolled back or not, so the same count means the same
rows), and the totals move by the difference.

It owns the three readings and their totals, nothing else: what they mean
for ``progress`` is :mod:`semsim.check.room`'s and :mod:`semsim.check.progress`'s business. The debug mode
(:class:`~semsim.check.cross_checks.CrossCheckedAcross`) recomputes each
answer from every client and demands the same.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any, Final

from semaphore_core import queue_reads
from semsim.check.reads import select
from semsim.runtime.durable import DurableObject

LEASE_IN_USE_BY_KEY: Final = queue_reads.LEASE_IN_USE_BY_KEY
WAITING_BY_KEY_AND_GROUP: Final = queue_reads.WAITING_BY_KEY_AND_GROUP
LEASE_IDS: Final = queue_reads.LEASE_IDS_IN_ORDER


class _Reading:
    """One client's part of the totals."""

    __slots__ = ("lease_ids", "lease_in_use", "waiting")

    def __init__(self) -> None:
        self.lease_in_use: dict[str, int] = {}
        #: (key, group) -> (items waiting, the oldest one's arrival)
        self.waiting: dict[tuple[str, str], tuple[int, int]] = {}
        self.lease_ids: tuple[str, ...] = ()


class AcrossClients:
    """Totals over every client of a run, brought up to date by :meth:`refresh`."""

    def __init__(self) -> None:
        self._source: Mapping[str, DurableObject] | None = None
        self._conns: list[sqlite3.Connection] = []
        self._objs: list[DurableObject] = []
        #: Per client, ``total_changes`` when last read (-1: read again next time).
        self._seen: list[int] = []
        self._readings: list[_Reading] = []
        self._lease_in_use: Counter[str] = Counter()
        self._waiting_count: dict[str, Counter[str]] = {}
        #: Per (key, group): the waiting clients' oldest arrivals, as a heap with lazy deletion
        #: (a value leaves the heap once its count in the Counter is 0).
        self._waiting_oldest: dict[tuple[str, str], tuple[list[int], Counter[int]]] = {}
        #: Every lease id some client knows, with how many clients know it (absent: none).
        self.known: Counter[str] = Counter()

    def refresh(self, clients: Mapping[str, DurableObject]) -> None:
        """Read again every client whose storage changed since the last refresh."""
        if clients is not self._source or len(clients) != len(self._objs):
            self._restart(clients)
        conns, seen = self._conns, self._seen
        now = [conn.total_changes for conn in conns]
        if now == seen:
            return
        for index, count in enumerate(now):
            if count != seen[index]:
                self._reread(index)
                # Inside an open transaction what was read may still be rolled back: read again.
                seen[index] = -1 if conns[index].in_transaction else count

    def lease_in_use(self, key: str) -> int:
        """Lease permits drawn and not yet released for ``key``, as the clients count them."""
        return self._lease_in_use[key]

    def known_leases(self) -> Collection[str]:
        """Every lease id some client knows."""
        return self.known

    def waiting_by_group(self, key: str) -> dict[str, tuple[int, int]]:
        """Per group, the items of ``key`` queued or being claimed, and the oldest one's arrival."""
        counts = self._waiting_count.get(key)
        if not counts:
            return {}
        return {group: (n, self._oldest(key, group)) for group, n in sorted(counts.items())}

    def _oldest(self, key: str, group: str) -> int:
        heap, live = self._waiting_oldest[key, group]
        while not live[heap[0]]:
            heapq.heappop(heap)
        return heap[0]

    # --- bookkeeping ---------------------------------------------------------------------

    def _restart(self, clients: Mapping[str, DurableObject]) -> None:
        self._source = clients
        self._objs = list(clients.values())
        self._conns = [obj.storage for obj in self._objs]
        self._seen = [-1] * len(self._objs)
        self._readings = [_Reading() for _ in self._objs]
        self._lease_in_use.clear()
        self._waiting_count.clear()
        self._waiting_oldest.clear()
        self.known.clear()

    def _reread(self, index: int) -> None:
        conn = self._conns[index]
        new = _Reading()
        for key, running in _select(conn, LEASE_IN_USE_BY_KEY):
            new.lease_in_use[key] = int(running or 0)
        for key, group, count, oldest in _select(conn, WAITING_BY_KEY_AND_GROUP):
            new.waiting[key, group] = (int(count), int(oldest))
        new.lease_ids = tuple(lease_id for (lease_id,) in _select(conn, LEASE_IDS))
        self._replace(self._readings[index], new)
        self._readings[index] = new

    def _replace(self, old: _Reading, new: _Reading) -> None:
        for key, running in old.lease_in_use.items():
            self._lease_in_use[key] -= running
        for key, running in new.lease_in_use.items():
            self._lease_in_use[key] += running
        for (key, group), (count, oldest) in old.waiting.items():
            counts = self._waiting_count[key]
            counts[group] -= count
            live = self._waiting_oldest[key, group][1]
            live[oldest] -= 1
            if not live[oldest]:
                del live[oldest]
            if not counts[group]:
                del counts[group]
                del self._waiting_oldest[key, group]
        for (key, group), (count, oldest) in new.waiting.items():
            self._waiting_count.setdefault(key, Counter())[group] += count
            heap, live = self._waiting_oldest.setdefault((key, group), ([], Counter()))
            if not live[oldest]:
                heapq.heappush(heap, oldest)
            live[oldest] += 1
            if len(heap) > 2 * len(live) + 16:  # too many values gone stale: keep the heap bounded
                heap[:] = sorted(live)
        for lease_id in old.lease_ids:
            self.known[lease_id] -= 1
            if not self.known[lease_id]:
                del self.known[lease_id]
        self.known.update(new.lease_ids)


def _select(conn: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a query; none only for a client never built (:mod:`semsim.check.reads`)."""
    return select(conn, sql)
