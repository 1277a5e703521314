"""The checker's debug mode (``--full-checks``): every incremental reading checked from scratch.

semsim's checkers judge from state they keep up to date as the run goes:
a holder's rows mirrored from what each commit changed
(:class:`~semsim.check.row_mirror.RowMirror`), totals over the clients
reread only where a client's storage changed
(:class:`~semsim.check.across_clients.AcrossClients`), ``conservative``'s
judgement of only what can have changed. Each is a place a bug in the
checker could hide a bug in the protocol. The debug mode keeps them all
and recomputes each answer the slow way beside it:

- :class:`CrossCheckedMirror` rereads every row at every commit, demands the
  mirror's rows, and hands the commit's checkers every row as changed;
- :class:`CrossCheckedAcross` recounts every client for each total;
- :class:`FullConservative` judges ``conservative`` from every client's
  storage after the incremental judgement, which must have found what it finds;
- every reading of a client's storage kept while it is unchanged
  (:func:`~semsim.check.client_reads.kept`) is made again from storage each
  time it is answered from memory, and must be the same
  (:func:`~semsim.check.client_reads.reading`).

A disagreement is the ``checker`` verdict (:class:`CrossCheckFailed`): the
run stops and says which reading was wrong. The verdict of a run is
otherwise the same in both modes (a test sweeps the scenarios to show it).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Collection, Container, Mapping
from typing import TYPE_CHECKING, Final

from semaphore_core import queue_reads
from semsim.check import client_reads
from semsim.check.across_clients import AcrossClients
from semsim.check.checker import Checker, Fail
from semsim.check.conservative import NAME, Conservative, Holding, holding
from semsim.check.cross_check_failed import CrossCheckFailed as CrossCheckFailed  # re-exported
from semsim.check.events import Commit
from semsim.check.reads import select
from semsim.check.row_mirror import Delta, RowMirror, read_rows

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

#: What the holder charges each grant (at ``?``, now) and each lease, read straight from SQL.
GRANT_CHARGES: Final = (
    "SELECT grant_id, CASE WHEN claimed < permits AND expires_at <= ? THEN claimed "
    "ELSE permits END - released FROM durability_semaphore_grants"
)
LEASE_CHARGES: Final = "SELECT lease_id, permits - released FROM durability_semaphore_leases"


class CrossCheckedMirror(RowMirror):
    """A row mirror whose every refresh is checked against every stored row; ``key``: its holder's."""

    def __init__(self, conn: sqlite3.Connection, key: str) -> None:
        super().__init__(conn)
        self.key = key

    def refresh(self, now: int) -> Delta:
        """The mirror's delta, with every current row named as changed (checkers judge them all),
        then the rows deleted since the last refresh, as the mirror's own delta names them: a
        checker that judges what ran on a deleted row (``conservative``, a lease gone while an
        item still runs on it) must see it in this mode too, or the full judgement beside it
        reports a miss the incremental judgement alone would not have made."""
        delta = super().refresh(now)
        stored = read_rows(self._conn)
        if stored != delta.after:
            raise CrossCheckFailed(f"{self.key}: the row mirror differs from the holder's rows", self.key)
        every = {
            name: [*table, *(row_id for row_id in delta.changed.get(name, ()) if row_id not in table)]
            for name, table in stored.items()
        }
        return Delta(delta.before, stored, every, delta.deadlines)

    def unknown_footprint(self, known: Container[str]) -> int:
        mirrored = super().unknown_footprint(known)
        stored = sum(
            max(0, int(permits) - int(released))
            for lease_id, permits, released in select(
                self._conn, "SELECT lease_id, permits, released FROM durability_semaphore_leases"
            )
            if lease_id not in known
        )
        if stored != mirrored:
            raise CrossCheckFailed(f"the row mirror's leaked footprint {mirrored} is not the stored {stored}")
        return mirrored


class CrossCheckedAcross(AcrossClients):
    """Totals over the clients, each recounted from every client when it is read."""

    def lease_in_use(self, key: str) -> int:
        running = super().lease_in_use(key)
        if running != client_reads.lease_in_use(self._clients(), key):
            raise CrossCheckFailed(f"{key}: kept lease permits in use {running} differ from the clients'")
        return running

    def waiting_by_group(self, key: str) -> dict[str, tuple[int, int]]:
        waiting = super().waiting_by_group(key)
        if waiting != client_reads.waiting_by_group(self._clients(), key):
            raise CrossCheckFailed(f"{key}: kept waiting items {waiting} differ from the clients'")
        return waiting

    def known_leases(self) -> Collection[str]:
        known = super().known_leases()
        if set(known) != client_reads.known_leases(self._clients()):
            raise CrossCheckFailed("the kept lease ids differ from the clients'")
        return known

    def _clients(self) -> Mapping[str, DurableObject]:
        assert self._source is not None, "read after a refresh"
        return self._source


class FullConservative(Checker):
    """``conservative`` judged at every commit from every client's storage, after the incremental
    judgement (:class:`~semsim.check.conservative.Conservative`), which must have stopped the run
    on anything this finds."""

    name = NAME
    description = "the incremental conservative judgement finds what the full one finds"

    def __init__(
        self, fail: Fail, incremental: Conservative, storage: Callable[[str], sqlite3.Connection]
    ) -> None:
        """``storage``: a key's holder storage, whose stored rows this judges from."""
        self.fail = fail
        self.incremental = incremental
        self._storage = storage

    def on_commit(self, commit: Commit) -> None:
        clients, key = self.incremental.clients, commit.key
        if clients is None or commit.in_use <= 0:
            return
        conn = self._storage(key)
        grants = {grant_id: int(charged) for grant_id, charged in select(conn, GRANT_CHARGES, (commit.t_ms,))}
        leases = {lease_id: int(charged) for lease_id, charged in select(conn, LEASE_CHARGES)}
        for name, obj in sorted(clients.items()):
            stored: Counter[Holding] = Counter()
            for grant_id, lease_id, running in select(obj.storage, queue_reads.RUNNING_ITEMS, (key,)):
                stored[holding(grant_id, lease_id)] = running
                what, charged = (
                    ("lease", leases.get(lease_id, 0)) if lease_id else ("grant", grants.get(grant_id, 0))
                )
                if charged < running:
                    self.fail(
                        "checker",
                        f"the incremental conservative judgement missed: {key}: {name} runs {running} items "
                        f"on {what} {lease_id or grant_id} but the holder charges it {charged}",
                        key=key,
                    )
            if stored != self.incremental.announced(key, name):
                self.incremental.announced_differently(key, name)
