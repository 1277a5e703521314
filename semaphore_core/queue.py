"""The client side: ``DurabilitySemaphoreQueue`` as a pure state machine on ``sqlite3``.

The reference ships the queue's docs, not its source, so this follows what
the docs promise (semaphore.mdx, "Leases", and the account-concurrency
composition):

- Items (``id``, ``key``, ``group``, ``body``) are enqueued durably; a
  repeated id is a no-op, even long after the item finished. (A finished
  item leaves the table of open items for a table of finished ids, so no
  query's cost grows with the queue's history.)
- A request carries demand per group (count of queued items, ``oldestAt``
  of the oldest) and cumulative reports for every grant and lease of the
  key. The client does not ask a key again before its ``nextRequestAt``
  (what ``SemaphoreClient`` remembers per key).
- Items are admitted only through *confirmed* claims: a new grant assigns
  queued items to it and reports the claim; the holder's ``grantResults``
  say how many it honoured; those are admitted and the rest requeued
  (``expired``, ``not_found``).
- Leases are drawn locally, one permit per item, and one-shot: releasing
  an item returns its permit to the holder's footprint through the next
  report but never makes it drawable again.
- Every report heartbeats a lease; a lease with permits in use is due a
  report at half its remaining lifetime even when idle. On a ``contended``
  reply the client retires the leases of groups where nothing is queued,
  returning their undrawn permits. A lease the holder stopped (or that
  expired) is retired by the client and reported until the holder settles
  it.
- A lease's expiry is the client's to notice too, not only the holder's
  ("A client that stops talking to the holder keeps its lease until
  ``ttlMs``"): ``lease_expiry_at`` says when the next live lease runs out
  and ``retire_expired`` retires it there, so an idle client, which has no
  reply to learn it from, still reports the lease retired with what it drew
  and the holder settles it. Without that the holder, which keeps a retired
  lease "counted in full until its client confirms how much it drew",
  charges an idle client's lease for good.

The client's state lives in memory (``semaphore_core.queue_state``) and is
written through to SQLite, the durable truth, in the same transaction as
each change; a client rebuilt on existing storage (after an eviction) loads
it from the tables. See ``QueueClient``.

Nothing here does I/O or reads a clock: the simulator's client object
(``semsim.world.client_object``) sends what this builds and feeds back the replies.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TypeVar

import attrs

from semaphore_core.protocol import (
    Demand,
    GrantReport,
    GrantResult,
    LeaseGrant,
    LeaseReport,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
)
from semaphore_core.queue_state import GrantRow, ItemRow, KeyRow, LeaseRow, QueueState
from semaphore_core.transaction import transaction

_T = TypeVar("_T")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS durability_semaphore_queue_items (
        seq         INTEGER PRIMARY KEY,
        id          TEXT    NOT NULL UNIQUE,
        key         TEXT    NOT NULL,
        grp         TEXT    NOT NULL,
        body        TEXT    NOT NULL,
        status      TEXT    NOT NULL CHECK (status IN ('queued', 'claiming', 'running', 'done')),
        enqueued_at INTEGER NOT NULL,
        grant_id    TEXT,
        lease_id    TEXT,
        admitted_at INTEGER
    )""",
    # The items table holds open items only (queued, claiming, running): a finished
    # item moves to the done table, so no query's cost grows with history. The
    # indexes fit the lookups: per key and state (demand, due keys, claims), per
    # state (running, newest queued), per grant (claim results).
    "DROP INDEX IF EXISTS durability_semaphore_queue_items_open",
    """CREATE INDEX IF NOT EXISTS durability_semaphore_queue_items_by_key
        ON durability_semaphore_queue_items (key, status, grp)""",
    """CREATE INDEX IF NOT EXISTS durability_semaphore_queue_items_by_status
        ON durability_semaphore_queue_items (status)""",
    """CREATE INDEX IF NOT EXISTS durability_semaphore_queue_items_by_grant
        ON durability_semaphore_queue_items (grant_id)""",
    # Ids of finished (released or cancelled) items: an id stays taken for good, so
    # enqueueing it again is a no-op, at the cost of one primary-key probe.
    """CREATE TABLE IF NOT EXISTS durability_semaphore_queue_done (
        id TEXT NOT NULL PRIMARY KEY
    )""",
    # A store written before the done table existed keeps its finished items in the
    # items table: move them (a no-op once they are gone).
    "INSERT OR IGNORE INTO durability_semaphore_queue_done (id) "
    "SELECT id FROM durability_semaphore_queue_items WHERE status = 'done'",
    "DELETE FROM durability_semaphore_queue_items WHERE status = 'done'",
    """CREATE TABLE IF NOT EXISTS durability_semaphore_queue_grants (
        grant_id  TEXT    NOT NULL PRIMARY KEY,
        key       TEXT    NOT NULL,
        grp       TEXT    NOT NULL,
        permits   INTEGER NOT NULL,
        claimed   INTEGER NOT NULL,
        confirmed INTEGER NOT NULL,
        released  INTEGER NOT NULL,
        -- released as of the last report sent: what a reply's result answers
        reported  INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS durability_semaphore_queue_leases (
        lease_id    TEXT    NOT NULL PRIMARY KEY,
        key         TEXT    NOT NULL,
        grp         TEXT    NOT NULL,
        permits     INTEGER NOT NULL,
        drawn       INTEGER NOT NULL,
        released    INTEGER NOT NULL,
        retired     INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        reported_at INTEGER NOT NULL,
        -- ``released`` as last sent: a stopped lease is settled only once the holder
        -- has heard every release, however far ``released`` moved since.
        reported    INTEGER NOT NULL DEFAULT 0
    )""",
    # ``changes`` counts local changes the holder must hear of; ``acked`` is the
    # count carried by the newest message whose reply arrived.
    """CREATE TABLE IF NOT EXISTS durability_semaphore_queue_keys (
        key             TEXT    NOT NULL PRIMARY KEY,
        next_request_at INTEGER NOT NULL,
        changes         INTEGER NOT NULL,
        acked           INTEGER NOT NULL
    )""",
)


@attrs.frozen
class QueueItem:
    id: str
    key: str
    group: str
    body: str = ""


@attrs.frozen
class Admission:
    """An item admitted to run, and the permit it holds (a grant's or a lease's)."""

    item_id: str
    key: str
    group: str
    body: str
    grant_id: str | None
    lease_id: str | None


@attrs.frozen
class Step:
    """What a reply changed: claims made on new grants, items admitted and requeued, whether to sync."""

    claims: tuple[tuple[str, int], ...] = ()
    admitted: tuple[Admission, ...] = ()
    requeued: tuple[str, ...] = ()
    needs_sync: bool = False
    #: Leases the holder settled (the client dropped them).
    settled: tuple[str, ...] = ()


class _Writing(transaction):
    """The queue's ``transaction``: on any error, after the rollback, memory is reloaded from storage.

    The queue changes its memory as it writes, statement by statement, so an
    error half-way leaves memory ahead of what the rollback kept; reloading
    puts it back. The queue's transaction must be the outermost one: a
    caller's transaction around it could roll back what memory already holds.
    """

    __slots__ = ("_queue",)

    def __init__(self, queue: QueueClient) -> None:
        super().__init__(queue._conn)
        self._queue = queue

    def __enter__(self) -> None:
        assert not self._conn.in_transaction, (
            "the queue's writes commit on their own, outside any transaction"
        )
        super().__enter__()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        super().__exit__(kind, error, traceback)
        if kind is not None:
            self._queue._state = QueueState.load(self._conn)


class QueueClient:
    """One client object's queue, grants and leases, for every holder key it uses.

    Its state is kept in memory (``semaphore_core.queue_state``) and written
    through to SQLite in the same transaction as the change: storage ends
    with the same rows, and the same count of changed rows
    (``Connection.total_changes``, which the checkers read to know that a
    client's storage changed), as when every answer was a query. Memory
    decides what to write and every write is a statement on storage, made
    whenever it changes a row; reads never touch storage, except for the ids
    of finished items. A new instance on existing storage rebuilds the
    memory from it.
    """

    def __init__(self, conn: sqlite3.Connection, client_id: str, return_idle_leases: bool = False) -> None:
        conn.isolation_level = None
        self._conn = conn
        self.client_id = client_id
        #: Fix F4 (off in the docs' client): return a lease's undrawn headroom as soon as
        #: nothing is queued in its group, rather than only on a ``contended`` reply
        #: that a client with nothing to ask for never receives.
        self._return_idle_leases = return_idle_leases
        with transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
        self._state = QueueState.load(conn)

    def _writing(self) -> _Writing:
        return _Writing(self)

    def check_memory(self) -> None:
        """Debugging: raise AssertionError unless memory is what storage holds, indexes included."""
        stored = QueueState.load(self._conn)
        if stored != self._state:
            raise AssertionError(f"the queue's memory is not its storage:\n{self._state}\n!=\n{stored}")

    # --- enqueue and release -------------------------------------------------------

    def enqueue(self, items: Iterable[QueueItem], now: int) -> int:
        """Queue items durably; an id seen before is ignored. Returns how many were new."""
        added = 0
        state = self._state
        with self._writing():
            for item in items:
                cursor = self._conn.execute(
                    "INSERT INTO durability_semaphore_queue_items (id, key, grp, body, status, enqueued_at) "
                    "SELECT ?, ?, ?, ?, 'queued', ? "
                    "WHERE NOT EXISTS (SELECT 1 FROM durability_semaphore_queue_done WHERE id = ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (item.id, item.key, item.group, item.body, now, item.id),
                )
                if cursor.rowcount > 0:
                    assert cursor.lastrowid is not None
                    state.add_item(
                        ItemRow(cursor.lastrowid, item.id, item.key, item.group, item.body, "queued", now)
                    )
                    added += 1
                    self._touch(item.key)
        return added

    def release(self, item_id: str) -> tuple[str, str] | None:
        """An admitted item finished: its permit goes back through the next report.

        Returns the item's ``(key, group)``, or None if it was not running (a repeat).
        """
        state = self._state
        item = state.items.get(item_id)
        if item is None or item.status != "running":
            return None
        with self._writing():
            self._finish(item)
            grant = None if item.grant_id is None else state.grants.get(item.grant_id)
            if grant is not None:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_grants SET released = released + 1 WHERE grant_id = ?",
                    (grant.grant_id,),
                )
                grant.released += 1
            lease = None if item.lease_id is None else state.leases.get(item.lease_id)
            if lease is not None:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET released = released + 1 WHERE lease_id = ?",
                    (lease.lease_id,),
                )
                lease.released += 1
            self._mark_dirty(item.key)
        return item.key, item.group

    def running(self) -> list[tuple[str, int]]:
        """Admitted, unreleased items and when they were admitted, oldest first."""
        return [(item_id, at) for at, _, item_id in self._state.running]

    def status(self, item_id: str) -> str | None:
        """``queued``, ``claiming``, ``running`` or ``done``; None for an id never enqueued."""
        item = self._state.items.get(item_id)
        if item is not None:
            return item.status
        done = self._conn.execute(
            "SELECT 1 FROM durability_semaphore_queue_done WHERE id = ?", (item_id,)
        ).fetchone()
        return None if done is None else "done"

    def _finish(self, item: ItemRow) -> None:
        """The item is done: out of the open items, its id kept so it is never enqueued again."""
        self._conn.execute("DELETE FROM durability_semaphore_queue_items WHERE id = ?", (item.id,))
        self._conn.execute("INSERT INTO durability_semaphore_queue_done (id) VALUES (?)", (item.id,))
        self._state.remove_item(item)

    # --- cancelling ------------------------------------------------------------------

    def cancel(self, item_id: str) -> bool:
        """Withdraw an item that is still queued; returns whether it was.

        Only a queued item can go: one being claimed or running holds a permit
        that must be reported. A cancelled item is done without running, so
        its id stays taken (enqueueing it again is a no-op). If the request
        that counted it in its demand is still waiting for its round, the
        grant that answers it is claimed in part and the holder reclaims the
        rest at the claim deadline.
        """
        item = self._state.items.get(item_id)
        if item is None or item.status != "queued":
            return False
        with self._writing():
            self._finish(item)
        return True

    def newest_queued(self, count: int) -> list[str]:
        """The ids of up to ``count`` queued items, newest first (what a user withdraws first)."""
        entries = sorted(
            (
                entry
                for groups in self._state.queued.values()
                for queued in groups.values()
                for entry in queued
            ),
            reverse=True,
        )
        return [item_id for _, _, item_id in _limit(entries, count)]

    # --- leases, drawn locally ------------------------------------------------------

    def draw_leases(self, now: int) -> list[Admission]:
        """Admit queued items through live leases, oldest item first, one permit each."""
        state = self._state
        leases = sorted(
            (lease.expires_at, lease.lease_id, lease)
            for lease in state.leases.values()
            if not lease.retired and lease.expires_at > now and lease.drawn < lease.permits
        )
        admitted: list[Admission] = []
        if not leases:
            return admitted
        keys = sorted({lease.key for _, _, lease in leases})
        drawable = any(lease.group in state.queued.get(lease.key, ()) for _, _, lease in leases)
        if not drawable and not (self._return_idle_leases and any(self._idle_leases(key) for key in keys)):
            return admitted  # nothing to write: no transaction
        with self._writing():
            for _, lease_id, lease in leases:
                queued = state.queued.get(lease.key, {}).get(lease.group)
                if not queued:
                    continue
                items = [state.items[item_id] for _, _, item_id in queued[: lease.permits - lease.drawn]]
                for item in items:
                    self._conn.execute(
                        "UPDATE durability_semaphore_queue_items SET status = 'running', lease_id = ?, "
                        "admitted_at = ? WHERE id = ?",
                        (lease_id, now, item.id),
                    )
                    state.run(item, now, lease_id)
                    admitted.append(Admission(item.id, lease.key, lease.group, item.body, None, lease_id))
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET drawn = drawn + ? WHERE lease_id = ?",
                    (len(items), lease_id),
                )
                lease.drawn += len(items)
                self._mark_dirty(lease.key)
            if self._return_idle_leases:
                for key in keys:
                    self._return_idle_headroom(key)
        return admitted

    # --- what to send ------------------------------------------------------------------

    def keys_due(self, now: int) -> list[str]:
        """Keys with queued items whose ``nextRequestAt`` has passed."""
        keys = self._state.keys
        return sorted(key for key in self._state.queued if key in keys and keys[key].next_request_at <= now)

    def next_request_at(self) -> int | None:
        """When the earliest key with queued items may ask again."""
        keys = self._state.keys
        return min((keys[key].next_request_at for key in self._state.queued if key in keys), default=None)

    def dirty_keys(self) -> list[str]:
        """Keys with changes the holder has not acknowledged (claims, releases, retirements)."""
        return sorted(key for key, row in self._state.keys.items() if row.changes > row.acked)

    def next_wakeup(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``(next_request_at(), heartbeat_at(), oldest running admission, lease_expiry_at())``."""
        running = self._state.running
        return (
            self.next_request_at(),
            self.heartbeat_at(),
            running[0][0] if running else None,
            self.lease_expiry_at(),
        )

    def lease_expiry_at(self) -> int | None:
        """When the earliest live (unretired) lease expires: ``retire_expired`` is due then.

        The holder's ``expiresAt`` as last echoed, so both sides stop the lease
        at the same instant of the shared clock.
        """
        return min(
            (lease.expires_at for lease in self._state.leases.values() if not lease.retired), default=None
        )

    def retire_expired(self, now: int) -> list[tuple[str, str]]:
        """Retire every live lease whose expiry has come; returns them as ``(key, lease_id)``.

        A retired lease stops drawing and is reported ``retired`` with what it
        drew until the holder settles it (its key is marked dirty). This is
        what makes an idle client's lease come back at its ``ttlMs``: with
        nothing queued it sends no request, so no reply would tell it.
        """
        due = self.lease_expiry_at()
        if due is None or due > now:
            return []  # the common case, answered without opening a transaction
        with self._writing():
            return self._retire_expired(now)

    def heartbeat_at(self) -> int | None:
        """When a lease with permits in use is next due a report (half its remaining lifetime)."""
        return min(
            (
                _heartbeat(lease)
                for lease in self._state.leases.values()
                if not lease.retired and lease.drawn > lease.released
            ),
            default=None,
        )

    def heartbeat_keys(self, now: int) -> list[str]:
        return sorted(
            {
                lease.key
                for lease in self._state.leases.values()
                if not lease.retired and lease.drawn > lease.released and _heartbeat(lease) <= now
            }
        )

    def build_request(self, key: str, now: int) -> PermitRequest:
        """Demand per group of the key's queued items, and every report, for one round."""
        groups = self._state.queued.get(key)
        demand = (
            tuple(
                Demand(group=group, count=len(queued), oldest_at=queued[0][0])
                for group, queued in sorted(groups.items())
            )
            if groups
            else ()
        )
        grants, leases = self._reports(key, now)
        return PermitRequest(client_id=self.client_id, demand=demand, grants=grants, leases=leases)

    def build_sync(self, key: str, now: int) -> PermitSync:
        grants, leases = self._reports(key, now)
        return PermitSync(client_id=self.client_id, grants=grants, leases=leases)

    def _reports(self, key: str, now: int) -> tuple[tuple[GrantReport, ...], tuple[LeaseReport, ...]]:
        of_key = self._state.grants_of.get(key)
        grants = (
            tuple(
                GrantReport(grant.grant_id, grant.claimed, grant.released)
                for _, grant in sorted(of_key.items())
            )
            if of_key
            else ()
        )
        leases_of_key = self._state.leases_of.get(key)
        leases = (
            tuple(
                LeaseReport(lease.lease_id, lease.drawn, lease.released, True if lease.retired else None)
                for _, lease in sorted(leases_of_key.items())
            )
            if leases_of_key
            else ()
        )
        return grants, leases

    def sent(self, key: str, now: int) -> int:
        """The reports of ``key`` went out; returns the change count they carry (see ``acked``)."""
        state = self._state
        with self._writing():
            self._touch(key)
            leases = state.leases_of.get(key)
            if leases:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET reported_at = ?, reported = released "
                    "WHERE key = ?",
                    (now, key),
                )
                for lease in leases.values():
                    lease.reported_at = now
                    lease.reported = lease.released
            grants = state.grants_of.get(key)
            if grants:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_grants SET reported = released WHERE key = ?", (key,)
                )
                for grant in grants.values():
                    grant.reported = grant.released
        return state.keys[key].changes

    def acked(self, key: str, changes: int) -> None:
        """A reply arrived for a message that carried ``changes``: the holder has seen those."""
        row = self._state.keys.get(key)
        if row is None:
            return
        # One statement commits on its own (no savepoint around it); memory follows once it has.
        # Written even when ``acked`` stays: the row counts as changed, as it always did.
        assert not self._conn.in_transaction, (
            "the queue's writes commit on their own, outside any transaction"
        )
        self._conn.execute(
            "UPDATE durability_semaphore_queue_keys SET acked = max(acked, ?) WHERE key = ?", (changes, key)
        )
        row.acked = max(row.acked, changes)

    # --- what came back ------------------------------------------------------------------

    def on_grant(self, key: str, reply: PermitGrant, now: int) -> Step:
        """A round's reply: results of the reports, new grants (claimed at once), lease echoes."""
        with self._writing():
            row = self._state.keys.get(key)
            if row is not None:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_keys SET next_request_at = ? WHERE key = ?",
                    (reply.next_request_at, key),
                )
                row.next_request_at = reply.next_request_at
            step = self._results(key, reply.grant_results, now)
            claims = tuple(
                (granted.grant_id, self._claim(key, granted.grant_id, granted.group, granted.permits))
                for granted in reply.grants
            )
            settled = self._echoes(key, reply.leases or (), now)
            if reply.contended or self._return_idle_leases:
                self._return_idle_headroom(key)
            claimed = any(count for _, count in claims)
            if claimed:
                self._mark_dirty(key)
        return attrs.evolve(step, claims=claims, needs_sync=claimed, settled=settled)

    def on_synced(self, key: str, reply: PermitSyncResult, now: int) -> Step:
        with self._writing():
            step = self._results(key, reply.grant_results, now)
            settled = self._echoes(key, reply.leases or (), now)
            if reply.contended or self._return_idle_leases:
                self._return_idle_headroom(key)
        return attrs.evolve(step, settled=settled) if settled else step

    def _claim(self, key: str, grant_id: str, group: str, permits: int) -> int:
        state = self._state
        queued = state.queued.get(key, {}).get(group, [])
        items = [state.items[item_id] for _, _, item_id in _limit(queued, permits)]
        if grant_id not in state.grants:
            self._conn.execute(
                "INSERT INTO durability_semaphore_queue_grants (grant_id, key, grp, permits, claimed, "
                "confirmed, released, reported) VALUES (?, ?, ?, ?, ?, 0, 0, 0) "
                "ON CONFLICT (grant_id) DO NOTHING",
                (grant_id, key, group, permits, len(items)),
            )
            state.add_grant(GrantRow(grant_id, key, group, permits, len(items), 0, 0, 0))
        for item in items:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_items SET status = 'claiming', grant_id = ? WHERE id = ?",
                (grant_id, item.id),
            )
            state.claim(item, grant_id)
        return len(items)

    def _results(self, key: str, results: Sequence[GrantResult], now: int) -> Step:
        state = self._state
        admitted: list[Admission] = []
        requeued: list[str] = []
        for result in results:
            grant = state.grants.get(result.grant_id)
            if grant is None:
                continue
            claiming = [item for item in state.carrying(result.grant_id) if item.status == "claiming"]
            if result.status == "not_found":
                requeued += self._requeue(claiming)
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_grants WHERE grant_id = ?", (result.grant_id,)
                )
                state.remove_grant(grant)
                continue
            # What the holder honoured, less what is already running under this grant.
            admit = max(0, result.claimed - grant.confirmed)
            for item in claiming[:admit]:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_items SET status = 'running', admitted_at = ? "
                    "WHERE id = ?",
                    (now, item.id),
                )
                state.run(item, now)
                admitted.append(Admission(item.id, key, grant.group, item.body, result.grant_id, None))
            confirmed = max(grant.confirmed, result.claimed)
            claimed, permits = grant.claimed, grant.permits
            if result.status == "expired":
                # The late claim was clamped: requeue what it could not admit.
                requeued += self._requeue(claiming[admit:])
                claimed = permits = confirmed
            self._conn.execute(
                "UPDATE durability_semaphore_queue_grants SET permits = ?, claimed = ?, confirmed = ? "
                "WHERE grant_id = ?",
                (permits, claimed, confirmed, result.grant_id),
            )
            grant.permits, grant.claimed, grant.confirmed = permits, claimed, confirmed
            open_items = sum(
                1 for item in state.carrying(result.grant_id) if item.status in ("claiming", "running")
            )
            if open_items == 0 and grant.reported == confirmed == claimed:
                # The holder has seen every release: nothing is left to report (it
                # reclaims any unclaimed permits itself). Judged by what was *sent*: a
                # release made while this message was in flight is not reported yet.
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_grants WHERE grant_id = ?", (result.grant_id,)
                )
                state.remove_grant(grant)
        if requeued:
            self._touch(key)
        return Step(admitted=tuple(admitted), requeued=tuple(requeued), needs_sync=False)

    def _requeue(self, items: Iterable[ItemRow]) -> list[str]:
        ids = []
        for item in items:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_items SET status = 'queued', grant_id = NULL WHERE id = ?",
                (item.id,),
            )
            self._state.requeue(item)
            ids.append(item.id)
        return ids

    def _echoes(self, key: str, echoes: Iterable[LeaseGrant], now: int) -> tuple[str, ...]:
        """Apply the holder's lease echoes; returns the leases it settled."""
        state = self._state
        settled: list[str] = []
        for echo in echoes:
            lease = state.leases.get(echo.lease_id)
            if lease is None:
                if echo.expires_at > now:
                    self._conn.execute(
                        "INSERT INTO durability_semaphore_queue_leases (lease_id, key, grp, permits, drawn, "
                        "released, retired, expires_at, reported_at) VALUES (?, ?, ?, ?, 0, 0, 0, ?, ?)",
                        (echo.lease_id, key, echo.group, echo.permits, echo.expires_at, now),
                    )
                    state.add_lease(
                        LeaseRow(
                            echo.lease_id, key, echo.group, echo.permits, 0, 0, 0, echo.expires_at, now, 0
                        )
                    )
                continue
            if echo.expires_at > now:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET expires_at = ? WHERE lease_id = ?",
                    (echo.expires_at, echo.lease_id),
                )
                lease.expires_at = echo.expires_at
                continue
            # Stopped by the holder (or unknown to it): stop drawing, report it retired
            # until the holder settles it. A settled echo carries the holder's released
            # mark, which is what this reply's report said; comparing with ``released``
            # instead would drop a lease whose last releases the holder never heard.
            if echo.permits <= lease.reported:
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_leases WHERE lease_id = ?", (echo.lease_id,)
                )
                state.remove_lease(lease)
                settled.append(echo.lease_id)
            elif not lease.retired:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET retired = 1, expires_at = ? "
                    "WHERE lease_id = ?",
                    (now, echo.lease_id),
                )
                lease.retired, lease.expires_at = 1, now
                self._mark_dirty(key)
            # Already retired here: the holder heard the retired report and waits for the
            # releases still running, which mark the key dirty themselves. Marking it dirty
            # on every echo would resend the same report every round trip (a report storm).
        # A lease past its own expiry is stopped too, even if no echo said so.
        self._retire_expired(now, key)
        return tuple(settled)

    def _retire_expired(self, now: int, key: str | None = None) -> list[tuple[str, str]]:
        """Retire live leases (of ``key``, or of every key) expired at ``now``; mark their keys dirty."""
        state = self._state
        leases = state.leases.values() if key is None else state.leases_of.get(key, {}).values()
        stopped = sorted(
            (lease.key, lease.lease_id, lease)
            for lease in leases
            if not lease.retired and lease.expires_at <= now
        )
        if not stopped:
            return []
        self._retire([lease for _, _, lease in stopped])
        for dirty in sorted({k for k, _, _ in stopped}):
            self._mark_dirty(dirty)
        return [(k, lease_id) for k, lease_id, _ in stopped]

    def _idle_leases(self, key: str) -> list[LeaseRow]:
        """Live leases of ``key`` with undrawn permits in groups where nothing is queued."""
        leases = self._state.leases_of.get(key)
        if not leases:
            return []
        queued = self._state.queued.get(key, {})
        return [
            lease
            for _, lease in sorted(leases.items())
            if not lease.retired and lease.drawn < lease.permits and lease.group not in queued
        ]

    def _return_idle_headroom(self, key: str) -> None:
        """``contended``: retire live leases of groups where nothing is queued."""
        idle = self._idle_leases(key)
        if idle:
            self._retire(idle)
            self._mark_dirty(key)

    def _retire(self, leases: list[LeaseRow]) -> None:
        self._conn.executemany(
            "UPDATE durability_semaphore_queue_leases SET retired = 1 WHERE lease_id = ?",
            [(lease.lease_id,) for lease in leases],
        )
        for lease in leases:
            lease.retired = 1

    # --- per-key bookkeeping ----------------------------------------------------------

    def _touch(self, key: str) -> None:
        keys = self._state.keys
        if key in keys:
            return
        self._conn.execute(
            "INSERT INTO durability_semaphore_queue_keys (key, next_request_at, changes, acked) "
            "VALUES (?, 0, 0, 0) ON CONFLICT (key) DO NOTHING",
            (key,),
        )
        keys[key] = KeyRow(key, 0, 0, 0)

    def _mark_dirty(self, key: str) -> None:
        self._touch(key)
        self._conn.execute(
            "UPDATE durability_semaphore_queue_keys SET changes = changes + 1 WHERE key = ?", (key,)
        )
        self._state.keys[key].changes += 1


def _limit(entries: list[_T], count: int) -> list[_T]:
    """``LIMIT count`` as SQLite reads it: a negative count is no limit."""
    return entries if count < 0 else entries[:count]


def _heartbeat(lease: LeaseRow) -> int:
    """``reported_at + (expires_at - reported_at) / 2`` in SQLite's integer division (towards zero)."""
    span = lease.expires_at - lease.reported_at
    return lease.reported_at + (span // 2 if span >= 0 else -(-span // 2))
