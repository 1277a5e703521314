"""The queue client as it was before it kept its state in memory: every answer a query.

A frozen copy of ``semaphore_core.queue.QueueClient`` at 33e7eb8 (only the
class's name changed), the model ``tests/test_queue_memory.py`` runs in
lockstep with the client that keeps its state in memory: the same calls
must give the same answers, messages and steps, and leave the same rows.
Do not edit it to follow the client: it is what the client must still do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

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
from semaphore_core.queue import _SCHEMA, Admission, QueueItem, Step
from semaphore_core.transaction import transaction


class SqlQueueClient:
    """One client object's queue, grants and leases, for every holder key it uses."""

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

    # --- enqueue and release -------------------------------------------------------

    def enqueue(self, items: Iterable[QueueItem], now: int) -> int:
        """Queue items durably; an id seen before is ignored. Returns how many were new."""
        added = 0
        with transaction(self._conn):
            for item in items:
                cursor = self._conn.execute(
                    "INSERT INTO durability_semaphore_queue_items (id, key, grp, body, status, enqueued_at) "
                    "SELECT ?, ?, ?, ?, 'queued', ? "
                    "WHERE NOT EXISTS (SELECT 1 FROM durability_semaphore_queue_done WHERE id = ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (item.id, item.key, item.group, item.body, now, item.id),
                )
                if cursor.rowcount > 0:
                    added += 1
                    self._touch(item.key)
        return added

    def release(self, item_id: str) -> tuple[str, str] | None:
        """An admitted item finished: its permit goes back through the next report.

        Returns the item's ``(key, group)``, or None if it was not running (a repeat).
        """
        with transaction(self._conn):
            row = self._conn.execute(
                "SELECT key, grp, grant_id, lease_id FROM durability_semaphore_queue_items "
                "WHERE id = ? AND status = 'running'",
                (item_id,),
            ).fetchone()
            if row is None:
                return None
            key, grp, grant_id, lease_id = row
            self._finish(item_id)
            if grant_id is not None:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_grants SET released = released + 1 WHERE grant_id = ?",
                    (grant_id,),
                )
            if lease_id is not None:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET released = released + 1 WHERE lease_id = ?",
                    (lease_id,),
                )
            self._mark_dirty(key)
        return str(key), str(grp)

    def running(self) -> list[tuple[str, int]]:
        """Admitted, unreleased items and when they were admitted, oldest first."""
        rows = self._conn.execute(
            "SELECT id, admitted_at FROM durability_semaphore_queue_items "
            "WHERE status = 'running' ORDER BY admitted_at, seq"
        ).fetchall()
        return [(item_id, int(at)) for item_id, at in rows]

    def status(self, item_id: str) -> str | None:
        """``queued``, ``claiming``, ``running`` or ``done``; None for an id never enqueued."""
        row = self._conn.execute(
            "SELECT status FROM durability_semaphore_queue_items WHERE id = ?", (item_id,)
        ).fetchone()
        if row is not None:
            return str(row[0])
        done = self._conn.execute(
            "SELECT 1 FROM durability_semaphore_queue_done WHERE id = ?", (item_id,)
        ).fetchone()
        return None if done is None else "done"

    def _finish(self, item_id: str) -> None:
        """The item is done: out of the open items, its id kept so it is never enqueued again."""
        self._conn.execute("DELETE FROM durability_semaphore_queue_items WHERE id = ?", (item_id,))
        self._conn.execute("INSERT INTO durability_semaphore_queue_done (id) VALUES (?)", (item_id,))

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
        with transaction(self._conn):
            queued = self._conn.execute(
                "SELECT 1 FROM durability_semaphore_queue_items WHERE id = ? AND status = 'queued'",
                (item_id,),
            ).fetchone()
            if queued is not None:
                self._finish(item_id)
        return queued is not None

    def newest_queued(self, count: int) -> list[str]:
        """The ids of up to ``count`` queued items, newest first (what a user withdraws first)."""
        rows = self._conn.execute(
            "SELECT id FROM durability_semaphore_queue_items WHERE status = 'queued' "
            "ORDER BY enqueued_at DESC, seq DESC LIMIT ?",
            (count,),
        ).fetchall()
        return [str(item_id) for (item_id,) in rows]

    # --- leases, drawn locally ------------------------------------------------------

    def draw_leases(self, now: int) -> list[Admission]:
        """Admit queued items through live leases, oldest item first, one permit each."""
        admitted: list[Admission] = []
        leases = self._conn.execute(
            "SELECT lease_id, key, grp, permits - drawn FROM durability_semaphore_queue_leases "
            "WHERE retired = 0 AND expires_at > ? AND drawn < permits ORDER BY expires_at, lease_id",
            (now,),
        ).fetchall()
        if not leases:
            return admitted
        with transaction(self._conn):
            for lease_id, key, grp, room in leases:
                items = self._conn.execute(
                    "SELECT id, body FROM durability_semaphore_queue_items "
                    "WHERE key = ? AND grp = ? AND status = 'queued' ORDER BY enqueued_at, seq LIMIT ?",
                    (key, grp, room),
                ).fetchall()
                for item_id, body in items:
                    self._conn.execute(
                        "UPDATE durability_semaphore_queue_items SET status = 'running', lease_id = ?, "
                        "admitted_at = ? WHERE id = ?",
                        (lease_id, now, item_id),
                    )
                    admitted.append(Admission(item_id, key, grp, body, None, lease_id))
                if items:
                    self._conn.execute(
                        "UPDATE durability_semaphore_queue_leases SET drawn = drawn + ? WHERE lease_id = ?",
                        (len(items), lease_id),
                    )
                    self._mark_dirty(key)
            if self._return_idle_leases:
                for key in sorted({key for _, key, _, _ in leases}):
                    self._return_idle_headroom(key)
        return admitted

    # --- what to send ------------------------------------------------------------------

    def keys_due(self, now: int) -> list[str]:
        """Keys with queued items whose ``nextRequestAt`` has passed."""
        rows = self._conn.execute(
            "SELECT k.key FROM durability_semaphore_queue_keys k WHERE k.next_request_at <= ? AND EXISTS "
            "(SELECT 1 FROM durability_semaphore_queue_items i WHERE i.key = k.key AND i.status = 'queued') "
            "ORDER BY k.key",
            (now,),
        ).fetchall()
        return [key for (key,) in rows]

    def next_request_at(self) -> int | None:
        """When the earliest key with queued items may ask again."""
        row = self._conn.execute(
            "SELECT min(k.next_request_at) FROM durability_semaphore_queue_keys k WHERE EXISTS "
            "(SELECT 1 FROM durability_semaphore_queue_items i WHERE i.key = k.key AND i.status = 'queued')"
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def dirty_keys(self) -> list[str]:
        """Keys with changes the holder has not acknowledged (claims, releases, retirements)."""
        rows = self._conn.execute(
            "SELECT key FROM durability_semaphore_queue_keys WHERE changes > acked ORDER BY key"
        ).fetchall()
        return [key for (key,) in rows]

    def next_wakeup(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``(next_request_at(), heartbeat_at(), oldest running admission, lease_expiry_at())``
        in one query."""
        row = self._conn.execute(
            "SELECT (SELECT min(k.next_request_at) FROM durability_semaphore_queue_keys k WHERE EXISTS "
            "(SELECT 1 FROM durability_semaphore_queue_items i "
            "WHERE i.key = k.key AND i.status = 'queued')), "
            "(SELECT min(reported_at + (expires_at - reported_at) / 2) "
            "FROM durability_semaphore_queue_leases WHERE retired = 0 AND drawn > released), "
            "(SELECT min(admitted_at) FROM durability_semaphore_queue_items WHERE status = 'running'), "
            "(SELECT min(expires_at) FROM durability_semaphore_queue_leases WHERE retired = 0)"
        ).fetchone()
        return row[0], row[1], row[2], row[3]

    def lease_expiry_at(self) -> int | None:
        """When the earliest live (unretired) lease expires: ``retire_expired`` is due then.

        The holder's ``expiresAt`` as last echoed, so both sides stop the lease
        at the same instant of the shared clock.
        """
        row = self._conn.execute(
            "SELECT min(expires_at) FROM durability_semaphore_queue_leases WHERE retired = 0"
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def retire_expired(self, now: int) -> list[tuple[str, str]]:
        """Retire every live lease whose expiry has come; returns them as ``(key, lease_id)``.

        A retired lease stops drawing and is reported ``retired`` with what it
        drew until the holder settles it (its key is marked dirty). This is
        what makes an idle client's lease come back at its ``ttlMs``: with
        nothing queued it sends no request, so no reply would tell it.
        """
        due = self.lease_expiry_at()
        if due is None or due > now:
            return []  # the common case, read without opening a transaction
        with transaction(self._conn):
            return self._retire_expired(now)

    def heartbeat_at(self) -> int | None:
        """When a lease with permits in use is next due a report (half its remaining lifetime)."""
        row = self._conn.execute(
            "SELECT min(reported_at + (expires_at - reported_at) / 2) FROM durability_semaphore_queue_leases "
            "WHERE retired = 0 AND drawn > released"
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def heartbeat_keys(self, now: int) -> list[str]:
        rows = self._conn.execute(
            "SELECT DISTINCT key FROM durability_semaphore_queue_leases "
            "WHERE retired = 0 AND drawn > released "
            "AND reported_at + (expires_at - reported_at) / 2 <= ? ORDER BY key",
            (now,),
        ).fetchall()
        return [key for (key,) in rows]

    def build_request(self, key: str, now: int) -> PermitRequest:
        """Demand per group of the key's queued items, and every report, for one round."""
        rows = self._conn.execute(
            "SELECT grp, count(*), min(enqueued_at) FROM durability_semaphore_queue_items "
            "WHERE key = ? AND status = 'queued' GROUP BY grp ORDER BY grp",
            (key,),
        ).fetchall()
        demand = tuple(Demand(group=grp, count=count, oldest_at=oldest) for grp, count, oldest in rows)
        grants, leases = self._reports(key, now)
        return PermitRequest(client_id=self.client_id, demand=demand, grants=grants, leases=leases)

    def build_sync(self, key: str, now: int) -> PermitSync:
        grants, leases = self._reports(key, now)
        return PermitSync(client_id=self.client_id, grants=grants, leases=leases)

    def _reports(self, key: str, now: int) -> tuple[tuple[GrantReport, ...], tuple[LeaseReport, ...]]:
        grants = tuple(
            GrantReport(grant_id, claimed, released)
            for grant_id, claimed, released in self._conn.execute(
                "SELECT grant_id, claimed, released FROM durability_semaphore_queue_grants "
                "WHERE key = ? ORDER BY grant_id",
                (key,),
            )
        )
        leases = tuple(
            LeaseReport(lease_id, drawn, released, True if retired else None)
            for lease_id, drawn, released, retired in self._conn.execute(
                "SELECT lease_id, drawn, released, retired FROM durability_semaphore_queue_leases "
                "WHERE key = ? ORDER BY lease_id",
                (key,),
            )
        )
        return grants, leases

    def sent(self, key: str, now: int) -> int:
        """The reports of ``key`` went out; returns the change count they carry (see ``acked``)."""
        with transaction(self._conn):
            self._touch(key)
            self._conn.execute(
                "UPDATE durability_semaphore_queue_leases SET reported_at = ?, reported = released "
                "WHERE key = ?",
                (now, key),
            )
            self._conn.execute(
                "UPDATE durability_semaphore_queue_grants SET reported = released WHERE key = ?", (key,)
            )
            row = self._conn.execute(
                "SELECT changes FROM durability_semaphore_queue_keys WHERE key = ?", (key,)
            ).fetchone()
        return int(row[0])

    def acked(self, key: str, changes: int) -> None:
        """A reply arrived for a message that carried ``changes``: the holder has seen those."""
        with transaction(self._conn):
            self._conn.execute(
                "UPDATE durability_semaphore_queue_keys SET acked = max(acked, ?) WHERE key = ?",
                (changes, key),
            )

    # --- what came back ------------------------------------------------------------------

    def on_grant(self, key: str, reply: PermitGrant, now: int) -> Step:
        """A round's reply: results of the reports, new grants (claimed at once), lease echoes."""
        with transaction(self._conn):
            self._conn.execute(
                "UPDATE durability_semaphore_queue_keys SET next_request_at = ? WHERE key = ?",
                (reply.next_request_at, key),
            )
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
        with transaction(self._conn):
            step = self._results(key, reply.grant_results, now)
            settled = self._echoes(key, reply.leases or (), now)
            if reply.contended or self._return_idle_leases:
                self._return_idle_headroom(key)
        return attrs.evolve(step, settled=settled) if settled else step

    def _claim(self, key: str, grant_id: str, group: str, permits: int) -> int:
        items = self._conn.execute(
            "SELECT id FROM durability_semaphore_queue_items WHERE key = ? AND grp = ? AND status = 'queued' "
            "ORDER BY enqueued_at, seq LIMIT ?",
            (key, group, permits),
        ).fetchall()
        self._conn.execute(
            "INSERT INTO durability_semaphore_queue_grants (grant_id, key, grp, permits, claimed, confirmed, "
            "released, reported) VALUES (?, ?, ?, ?, ?, 0, 0, 0) ON CONFLICT (grant_id) DO NOTHING",
            (grant_id, key, group, permits, len(items)),
        )
        for (item_id,) in items:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_items SET status = 'claiming', grant_id = ? WHERE id = ?",
                (grant_id, item_id),
            )
        return len(items)

    def _results(self, key: str, results: Sequence[GrantResult], now: int) -> Step:
        admitted: list[Admission] = []
        requeued: list[str] = []
        for result in results:
            row = self._conn.execute(
                "SELECT grp, permits, claimed, confirmed, reported FROM durability_semaphore_queue_grants "
                "WHERE grant_id = ?",
                (result.grant_id,),
            ).fetchone()
            if row is None:
                continue
            grp, permits, claimed, confirmed, reported = row
            claiming = [
                (item_id, body)
                for item_id, body in self._conn.execute(
                    "SELECT id, body FROM durability_semaphore_queue_items WHERE grant_id = ? AND "
                    "status = 'claiming' ORDER BY enqueued_at, seq",
                    (result.grant_id,),
                )
            ]
            if result.status == "not_found":
                requeued += self._requeue(item_id for item_id, _ in claiming)
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_grants WHERE grant_id = ?", (result.grant_id,)
                )
                continue
            # What the holder honoured, less what is already running under this grant.
            admit = max(0, result.claimed - confirmed)
            for item_id, body in claiming[:admit]:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_items SET status = 'running', admitted_at = ? "
                    "WHERE id = ?",
                    (now, item_id),
                )
                admitted.append(Admission(item_id, key, grp, body, result.grant_id, None))
            confirmed = max(confirmed, result.claimed)
            if result.status == "expired":
                # The late claim was clamped: requeue what it could not admit.
                requeued += self._requeue(item_id for item_id, _ in claiming[admit:])
                claimed = permits = confirmed
            self._conn.execute(
                "UPDATE durability_semaphore_queue_grants SET permits = ?, claimed = ?, confirmed = ? "
                "WHERE grant_id = ?",
                (permits, claimed, confirmed, result.grant_id),
            )
            open_items = self._conn.execute(
                "SELECT count(*) FROM durability_semaphore_queue_items WHERE grant_id = ? AND "
                "status IN ('claiming', 'running')",
                (result.grant_id,),
            ).fetchone()[0]
            if open_items == 0 and reported == confirmed == claimed:
                # The holder has seen every release: nothing is left to report (it
                # reclaims any unclaimed permits itself). Judged by what was *sent*: a
                # release made while this message was in flight is not reported yet.
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_grants WHERE grant_id = ?", (result.grant_id,)
                )
        if requeued:
            self._touch(key)
        return Step(admitted=tuple(admitted), requeued=tuple(requeued), needs_sync=False)

    def _requeue(self, item_ids: Iterable[str]) -> list[str]:
        ids = list(item_ids)
        for item_id in ids:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_items SET status = 'queued', grant_id = NULL WHERE id = ?",
                (item_id,),
            )
        return ids

    def _echoes(self, key: str, echoes: Iterable[LeaseGrant], now: int) -> tuple[str, ...]:
        """Apply the holder's lease echoes; returns the leases it settled."""
        settled: list[str] = []
        for echo in echoes:
            row = self._conn.execute(
                "SELECT reported, retired FROM durability_semaphore_queue_leases WHERE lease_id = ?",
                (echo.lease_id,),
            ).fetchone()
            if row is None:
                if echo.expires_at > now:
                    self._conn.execute(
                        "INSERT INTO durability_semaphore_queue_leases (lease_id, key, grp, permits, drawn, "
                        "released, retired, expires_at, reported_at) VALUES (?, ?, ?, ?, 0, 0, 0, ?, ?)",
                        (echo.lease_id, key, echo.group, echo.permits, echo.expires_at, now),
                    )
                continue
            reported, retired = row
            if echo.expires_at > now:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET expires_at = ? WHERE lease_id = ?",
                    (echo.expires_at, echo.lease_id),
                )
                continue
            # Stopped by the holder (or unknown to it): stop drawing, report it retired
            # until the holder settles it. A settled echo carries the holder's released
            # mark, which is what this reply's report said; comparing with ``released``
            # instead would drop a lease whose last releases the holder never heard.
            if echo.permits <= reported:
                self._conn.execute(
                    "DELETE FROM durability_semaphore_queue_leases WHERE lease_id = ?", (echo.lease_id,)
                )
                settled.append(echo.lease_id)
            elif not retired:
                self._conn.execute(
                    "UPDATE durability_semaphore_queue_leases SET retired = 1, expires_at = ? "
                    "WHERE lease_id = ?",
                    (now, echo.lease_id),
                )
                self._mark_dirty(key)
            # Already retired here: the holder heard the retired report and waits for the
            # releases still running, which mark the key dirty themselves. Marking it dirty
            # on every echo would resend the same report every round trip (a report storm).
        # A lease past its own expiry is stopped too, even if no echo said so.
        self._retire_expired(now, key)
        return tuple(settled)

    def _retire_expired(self, now: int, key: str | None = None) -> list[tuple[str, str]]:
        """Retire live leases (of ``key``, or of every key) expired at ``now``; mark their keys dirty."""
        where = "retired = 0 AND expires_at <= ?" + ("" if key is None else " AND key = ?")
        params: tuple[object, ...] = (now,) if key is None else (now, key)
        stopped = [
            (str(k), str(lease_id))
            for k, lease_id in self._conn.execute(
                f"SELECT key, lease_id FROM durability_semaphore_queue_leases WHERE {where} "
                "ORDER BY key, lease_id",
                params,
            )
        ]
        if stopped:
            self._conn.execute(
                f"UPDATE durability_semaphore_queue_leases SET retired = 1 WHERE {where}", params
            )
            for dirty in sorted({k for k, _ in stopped}):
                self._mark_dirty(dirty)
        return stopped

    def _return_idle_headroom(self, key: str) -> None:
        """``contended``: retire live leases of groups where nothing is queued."""
        cursor = self._conn.execute(
            "UPDATE durability_semaphore_queue_leases SET retired = 1 WHERE key = ? AND retired = 0 AND "
            "drawn < permits AND NOT EXISTS (SELECT 1 FROM durability_semaphore_queue_items i WHERE "
            "i.key = durability_semaphore_queue_leases.key AND i.grp = durability_semaphore_queue_leases.grp "
            "AND i.status = 'queued')",
            (key,),
        )
        if cursor.rowcount > 0:
            self._mark_dirty(key)

    # --- per-key bookkeeping ----------------------------------------------------------

    def _touch(self, key: str) -> None:
        self._conn.execute(
            "INSERT INTO durability_semaphore_queue_keys (key, next_request_at, changes, acked) "
            "VALUES (?, 0, 0, 0) ON CONFLICT (key) DO NOTHING",
            (key,),
        )

    def _mark_dirty(self, key: str) -> None:
        self._touch(key)
        self._conn.execute(
            "UPDATE durability_semaphore_queue_keys SET changes = changes + 1 WHERE key = ?", (key,)
        )
