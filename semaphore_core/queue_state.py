"""The queue client's state in memory: its tables' rows as objects, and the indexes its reads need.

``semaphore_core.queue`` decides; this module only holds what it decided.
SQLite stays the durable truth: every row here is a row of one of the
queue's four tables (open items, grants, leases, keys), field for field,
and ``QueueState.load`` rebuilds the whole of it from those tables, which
is what a new ``QueueClient`` on existing storage does (a client object
rebuilt after an eviction). The ids of finished items stay in SQLite only
(``durability_semaphore_queue_done``): they are read when an id is
enqueued again or asked about, never on a hot path, and keeping them here
would make memory grow with the queue's history.

The indexes answer the client's frequent questions without a query:

- ``queued``: per key, per group, the queued items as ``(enqueued_at, seq,
  id)`` in that order (the tables' ``ORDER BY enqueued_at, seq``); a key or
  group with nothing queued has no entry, so ``key in queued`` says whether
  the key has demand;
- ``running``: every running item as ``(admitted_at, seq, id)``, oldest
  first;
- ``by_grant``: per grant id, the ids of the open items that carry it;
- ``grants_of`` and ``leases_of``: per key, its grants and leases by id.

Nothing here may depend on the order in which a dict or set was filled: a
state rebuilt from storage fills them in another order than the live one
did, and the two must answer alike (``tests/test_queue_memory.py`` compares
them). Readers sort, or take a minimum.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_left, insort

import attrs

#: The statuses of an open item (a finished one leaves the items table).
OPEN_STATUSES = ("queued", "claiming", "running")


@attrs.define
class ItemRow:
    """A row of ``durability_semaphore_queue_items``."""

    seq: int
    id: str
    key: str
    group: str
    body: str
    status: str
    enqueued_at: int
    grant_id: str | None = None
    lease_id: str | None = None
    admitted_at: int | None = None


@attrs.define
class GrantRow:
    """A row of ``durability_semaphore_queue_grants``."""

    grant_id: str
    key: str
    group: str
    permits: int
    claimed: int
    confirmed: int
    released: int
    reported: int


@attrs.define
class LeaseRow:
    """A row of ``durability_semaphore_queue_leases`` (``retired`` is 0 or 1, as stored)."""

    lease_id: str
    key: str
    group: str
    permits: int
    drawn: int
    released: int
    retired: int
    expires_at: int
    reported_at: int
    reported: int


@attrs.define
class KeyRow:
    """A row of ``durability_semaphore_queue_keys``."""

    key: str
    next_request_at: int
    changes: int
    acked: int


@attrs.define
class QueueState:
    """Every open item, grant, lease and key of one client's queue, with the indexes on them."""

    items: dict[str, ItemRow] = attrs.Factory(dict)
    grants: dict[str, GrantRow] = attrs.Factory(dict)
    leases: dict[str, LeaseRow] = attrs.Factory(dict)
    keys: dict[str, KeyRow] = attrs.Factory(dict)
    queued: dict[str, dict[str, list[tuple[int, int, str]]]] = attrs.Factory(dict)
    running: list[tuple[int, int, str]] = attrs.Factory(list)
    by_grant: dict[str, set[str]] = attrs.Factory(dict)
    grants_of: dict[str, dict[str, GrantRow]] = attrs.Factory(dict)
    leases_of: dict[str, dict[str, LeaseRow]] = attrs.Factory(dict)

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> QueueState:
        """The state the queue's tables hold (they must exist)."""
        state = cls()
        for row in conn.execute(
            "SELECT seq, id, key, grp, body, status, enqueued_at, grant_id, lease_id, admitted_at "
            "FROM durability_semaphore_queue_items ORDER BY seq"
        ):
            state.add_item(ItemRow(*row))
        for row in conn.execute(
            "SELECT grant_id, key, grp, permits, claimed, confirmed, released, reported "
            "FROM durability_semaphore_queue_grants ORDER BY grant_id"
        ):
            state.add_grant(GrantRow(*row))
        for row in conn.execute(
            "SELECT lease_id, key, grp, permits, drawn, released, retired, expires_at, reported_at, reported "
            "FROM durability_semaphore_queue_leases ORDER BY lease_id"
        ):
            state.add_lease(LeaseRow(*row))
        for row in conn.execute(
            "SELECT key, next_request_at, changes, acked FROM durability_semaphore_queue_keys ORDER BY key"
        ):
            state.keys[row[0]] = KeyRow(*row)
        return state

    # --- items ---------------------------------------------------------------------------

    def add_item(self, item: ItemRow) -> None:
        assert item.id not in self.items, item
        assert item.status in OPEN_STATUSES, item
        self.items[item.id] = item
        if item.status == "queued":
            self._queue(item)
        elif item.status == "running":
            self._run(item)
        if item.grant_id is not None:
            self.by_grant.setdefault(item.grant_id, set()).add(item.id)

    def remove_item(self, item: ItemRow) -> None:
        """The item leaves the open items (it finished)."""
        assert self.items.get(item.id) is item, item
        if item.status == "queued":
            self._unqueue(item)
        elif item.status == "running":
            _remove(self.running, _running_entry(item))
        self._drop_grant(item)
        del self.items[item.id]

    def run(self, item: ItemRow, now: int, lease_id: str | None = None) -> None:
        """A queued item (drawn through ``lease_id``) or a claiming one (through its grant) runs."""
        assert item.status == ("queued" if lease_id is not None else "claiming"), item
        if lease_id is not None:
            self._unqueue(item)
            item.lease_id = lease_id
        item.status = "running"
        item.admitted_at = now
        self._run(item)

    def claim(self, item: ItemRow, grant_id: str) -> None:
        """A queued item is claimed on ``grant_id``."""
        assert item.status == "queued", item
        self._unqueue(item)
        item.status = "claiming"
        item.grant_id = grant_id
        self.by_grant.setdefault(grant_id, set()).add(item.id)

    def requeue(self, item: ItemRow) -> None:
        """A claiming item goes back to the queue, without its grant."""
        assert item.status == "claiming", item
        self._drop_grant(item)
        item.status = "queued"
        item.grant_id = None
        self._queue(item)

    def carrying(self, grant_id: str) -> list[ItemRow]:
        """The open items that carry ``grant_id``, in queue order (``enqueued_at, seq``)."""
        ids = self.by_grant.get(grant_id)
        if not ids:
            return []
        items = [self.items[item_id] for item_id in ids]
        items.sort(key=_queue_order)
        return items

    def _queue(self, item: ItemRow) -> None:
        groups = self.queued.setdefault(item.key, {})
        insort(groups.setdefault(item.group, []), _queue_entry(item))

    def _unqueue(self, item: ItemRow) -> None:
        groups = self.queued[item.key]
        entries = groups[item.group]
        _remove(entries, _queue_entry(item))
        if not entries:
            del groups[item.group]
            if not groups:
                del self.queued[item.key]

    def _run(self, item: ItemRow) -> None:
        assert item.admitted_at is not None, item
        insort(self.running, _running_entry(item))

    def _drop_grant(self, item: ItemRow) -> None:
        if item.grant_id is None:
            return
        ids = self.by_grant[item.grant_id]
        ids.remove(item.id)
        if not ids:
            del self.by_grant[item.grant_id]

    # --- grants and leases ------------------------------------------------------------------

    def add_grant(self, grant: GrantRow) -> None:
        assert grant.grant_id not in self.grants, grant
        self.grants[grant.grant_id] = grant
        self.grants_of.setdefault(grant.key, {})[grant.grant_id] = grant

    def remove_grant(self, grant: GrantRow) -> None:
        assert self.grants.get(grant.grant_id) is grant, grant
        del self.grants[grant.grant_id]
        of_key = self.grants_of[grant.key]
        del of_key[grant.grant_id]
        if not of_key:
            del self.grants_of[grant.key]

    def add_lease(self, lease: LeaseRow) -> None:
        assert lease.lease_id not in self.leases, lease
        self.leases[lease.lease_id] = lease
        self.leases_of.setdefault(lease.key, {})[lease.lease_id] = lease

    def remove_lease(self, lease: LeaseRow) -> None:
        assert self.leases.get(lease.lease_id) is lease, lease
        del self.leases[lease.lease_id]
        of_key = self.leases_of[lease.key]
        del of_key[lease.lease_id]
        if not of_key:
            del self.leases_of[lease.key]


def _queue_entry(item: ItemRow) -> tuple[int, int, str]:
    return (item.enqueued_at, item.seq, item.id)


def _queue_order(item: ItemRow) -> tuple[int, int]:
    return (item.enqueued_at, item.seq)


def _running_entry(item: ItemRow) -> tuple[int, int, str]:
    assert item.admitted_at is not None, item
    return (item.admitted_at, item.seq, item.id)


def _remove(entries: list[tuple[int, int, str]], entry: tuple[int, int, str]) -> None:
    """Take ``entry`` out of the sorted list ``entries`` (it must be there)."""
    index = bisect_left(entries, entry)
    assert index < len(entries), (entry, entries)
    assert entries[index] == entry, (entry, entries)
    del entries[index]
