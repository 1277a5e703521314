"""``conservative``: the holder accounts at least the permits actually in use, item by item.

Judged at each admission (holder-accounted usage read then, against the
oracle's count of permits in use) and after each holder commit, twice: in
total, and per client and grant or lease, so slack in one place hides no
shortfall in another. Each running item's own grant or lease must still be
charged for it (docs/INVARIANTS.md).

The per-item judgement is incremental. A full judgement compares, at every
commit, every client's running items (read from its storage) with what the
holder charges their grant or lease. Here:

- a client whose storage changed since this key last looked (SQLite's count
  of changed rows moved) is judged from its storage, as the full judgement
  does, and its running items are compared with what it announced (its
  admissions and releases);
- every other client's storage is what it announced (it was compared when
  it last changed), so it is judged from the announcements, and only where
  a judgement can have changed: a charge falls only when its row changes or
  its grant's claim deadline comes, and a count grows only by admission.

A failure ends the run, so nothing that held before needs judging again.
The first failure in the full judgement's order (client, grant, lease) is
reported, and storage that disagrees with the announcements is the
``checker`` verdict: semsim's models disagree with themselves, which is not
the protocol's fault. The debug mode (:mod:`semsim.check.cross_checks`) runs
the full judgement after this one and demands the same verdict.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, TypeVar

from semsim.check.checker import Checker, Fail
from semsim.check.client_reads import running_items
from semsim.check.events import Admission, Commit, Release
from semsim.check.row_mirror import Rows

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

#: An item's grant or lease as the books key it: ``("lease", id)`` or ``("grant", id)``.
Holding = tuple[str, str]
NAME: Final = "conservative"
_T = TypeVar("_T")


def holding(grant_id: str | None, lease_id: str | None) -> Holding:
    """An item's grant or lease as the books key it."""
    return ("lease", lease_id) if lease_id else ("grant", grant_id or "")


def charge(rows: Rows, kind: str, holding_id: str, now: int) -> int:
    """What the holder charges a grant or lease, from its mirrored row (0: no such row).

    A grant charges its permits until its claim deadline, then only what was
    claimed; a lease its permits; each less what was reported released.
    """
    if kind == "lease":
        lease = rows["leases"].get(holding_id)
        return 0 if lease is None else int(lease[3]) - int(lease[4])
    grant = rows["grants"].get(holding_id)
    if grant is None:
        return 0
    _, _, _, permits, claimed, released, _, expires_at = grant
    return int(claimed if claimed < permits and expires_at <= now else permits) - int(released)


class Conservative(Checker):
    """Keeps the items each client announced running, per key and grant or lease."""

    name = NAME
    description = "holder-accounted usage >= permits actually in use"

    def __init__(
        self,
        fail: Fail,
        clients: Mapping[str, DurableObject] | None,
        rows: Callable[[str], Rows],
    ) -> None:
        """``clients``: the run's client objects by name (None: no world); ``rows``: a key's holder
        rows as the commit being judged left them (the row mirror's)."""
        self.fail = fail
        self.clients = clients
        self._rows = rows
        #: Per key, per grant or lease, the items each client runs on it.
        self._running: dict[str, dict[Holding, Counter[str]]] = {}
        #: The same per (key, client), and each running item's (key, grant or lease).
        self._running_by_client: dict[tuple[str, str], Counter[Holding]] = {}
        self._items: dict[tuple[str, str], tuple[str, Holding]] = {}
        #: Per key, the grants and leases an item was admitted on since the key's last commit.
        self._admitted_since: dict[str, set[Holding]] = {}
        #: Per key, each client's count of changed rows when it was last compared (``_changed_clients``).
        self._verified: dict[str, list[int]] = {}
        self._client_list: list[tuple[str, DurableObject]] = []
        self._client_conns: list[sqlite3.Connection] = []

    def on_admit(self, admission: Admission) -> None:
        held = holding(admission.grant, admission.lease)
        key, client = admission.key, admission.client
        self._items[client, admission.item] = (key, held)
        self._running.setdefault(key, {}).setdefault(held, Counter())[client] += 1
        self._running_by_client.setdefault((key, client), Counter())[held] += 1
        self._admitted_since.setdefault(key, set()).add(held)
        self._in_total(key, admission.accounted, admission.in_use)

    def on_release(self, release: Release) -> None:
        key, held = self._items.pop((release.client, release.item))
        assert key == release.key, (key, release.key)
        if _take_one(self._running[key][held], release.client):
            del self._running[key][held]
        _take_one(self._running_by_client[key, release.client], held)

    def on_commit(self, commit: Commit) -> None:
        self._in_total(commit.key, commit.usage.granted + commit.usage.leased, commit.in_use)
        self._per_item(commit)

    def _in_total(self, key: str, accounted: int, in_use: int) -> None:
        if accounted < in_use:
            self.fail(
                NAME, f"{key}: the holder accounts {accounted} permits but {in_use} are in use", key=key
            )

    def _per_item(self, commit: Commit) -> None:
        """Each running item's grant or lease still charged for it, judged where it can have changed."""
        key = commit.key
        admitted = self._admitted_since.pop(key, set())
        if self.clients is None or commit.in_use <= 0:
            return  # nothing announced running for this key
        rows, now = self._rows(key), commit.t_ms
        broken: list[tuple[str, str, str, str, str, int, int]] = []
        mismatched: list[str] = []
        judged: set[str] = set()
        for name, obj in self._changed_clients(key):
            judged.add(name)
            stored: Counter[Holding] = Counter()
            for grant_id, lease_id, running in running_items(obj, key):
                kind, holding_id = held = holding(grant_id, lease_id)
                stored[held] = running
                charged = charge(rows, kind, holding_id, now)
                if charged < running:
                    broken.append(
                        (
                            name,
                            "" if lease_id else holding_id,
                            lease_id or "",
                            kind,
                            holding_id,
                            running,
                            charged,
                        )
                    )
            if stored != self.announced(key, name):
                mismatched.append(name)
        running_here = self._running.get(key, {})
        suspects = admitted
        suspects.update(("grant", grant_id) for grant_id in commit.changes.ids("grants"))
        suspects.update(("grant", grant_id) for grant_id in commit.changes.deadlines)
        suspects.update(("lease", lease_id) for lease_id in commit.changes.ids("leases"))
        for held in suspects:
            on_it = running_here.get(held)
            if not on_it:
                continue
            kind, holding_id = held
            charged = charge(rows, kind, holding_id, now)
            for client, count in on_it.items():
                if client not in judged and charged < count:
                    grant_id, lease_id = ("", holding_id) if kind == "lease" else (holding_id, "")
                    broken.append((client, grant_id, lease_id, kind, holding_id, count, charged))
        if broken:
            client, _, _, kind, holding_id, count, charged = min(broken)
            self.fail(
                NAME,
                f"{key}: {client} runs {count} items on {kind} {holding_id} "
                f"but the holder charges it {charged}",
                key=key,
            )
        if mismatched:
            self.announced_differently(key, min(mismatched))

    def _changed_clients(self, key: str) -> list[tuple[str, DurableObject]]:
        """The clients whose storage changed since ``key`` last asked, marked as seen now.

        One pass over every client's count of changed rows, kept in flat lists:
        this runs at every commit, so its cost per client is what matters. A
        client in an open transaction is never marked seen (what it wrote may
        still be rolled back).
        """
        assert self.clients is not None
        if len(self._client_list) != len(self.clients):
            # Clients are added while the world is built: start over, every client unseen.
            self._client_list = list(self.clients.items())
            self._client_conns = [obj.storage for _, obj in self._client_list]
            self._verified.clear()
        conns = self._client_conns
        now = [conn.total_changes for conn in conns]
        seen = self._verified.get(key)
        if seen is None:
            seen = self._verified[key] = [-1] * len(conns)
        elif seen == now:
            return []
        changed = [index for index, count in enumerate(now) if count != seen[index]]
        for index in changed:
            if not conns[index].in_transaction:
                seen[index] = now[index]
        return [self._client_list[index] for index in changed]

    def announced(self, key: str, client: str) -> Counter[Holding]:
        """The items ``client`` announced running for ``key``, per grant or lease."""
        return +self._running_by_client.get((key, client), Counter())

    def announced_differently(self, key: str, client: str) -> None:
        """A client's storage runs other items than it announced: semsim's models disagree with
        themselves (an item marked running without its admission, say). Not an invariant of the
        protocol: the ``checker`` verdict, which no handler can mistake for an ordinary error."""
        assert self.clients is not None
        stored = sorted(
            (grant_id or "", lease_id or "", n)
            for grant_id, lease_id, n in running_items(self.clients[client], key)
        )
        announced = sorted(self.announced(key, client).items())
        self.fail(
            "checker",
            f"{key}: {client}'s storage runs {stored} (grant, lease, items) but it announced {announced}",
            key=key,
        )


def _take_one(counts: Counter[_T], entry: _T) -> bool:
    """One fewer of ``entry``, forgotten at zero; whether ``counts`` is now empty."""
    counts[entry] -= 1
    if not counts[entry]:
        del counts[entry]
    return not counts
