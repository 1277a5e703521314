"""The conditional writes that fence attempts (the seed's ``storage.js``, inferred).

Seed 002 imports ``claimAttempt``, ``exhaustAttempts``, ``updateAttempt``
and the ``DurableTable`` type from ``storage.js`` without their source.
Their behaviour is fixed by how the engine uses them and by the
walkthrough (seed 002, lines 1900-1945):

- ``claim_attempt``: "The engine increments the stored attempt count with a
  conditional UPDATE. If the attempt limit is reached, the operation fails
  instead of running." The row must be pending, of the same generation, and
  have ``attempt < maxAttempts``; it returns the new attempt number.
  ``next_attempt_at`` is not touched: the engine's comment on
  ``activeByTable`` (lines 1105-1106) speaks of "a still-due active row".
- ``exhaust_attempts``: the other branch of that sentence: a pending row of
  the same generation with ``attempt >= maxAttempts`` becomes ``failed``.
- ``update_attempt``: "The UPDATE only matches the same generation and
  attempt, so a late attempt cannot overwrite a newer one." It also requires
  ``status = 'pending'`` (an inference: "completed and failed records stay
  indefinitely", line 1943); see docs/DURABILITY.md.

Generic over the table, as the reference's are (named alarms share them).
Runs inside the caller's transaction, or alone as one statement.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs

from semaphore_core.durability.errors import SerializedError


@attrs.frozen
class DurableTable:
    """``DurableTable``: a record table and its key column."""

    name: str
    key: str


@attrs.frozen
class Fence:
    """Which attempt a write belongs to: it matches only while the row is still at that attempt."""

    key: str
    generation: str
    attempt: int


def claim_attempt(
    conn: sqlite3.Connection, table: DurableTable, key: str, generation: str, max_attempts: int
) -> int | None:
    """Count the next attempt before its handler runs; None when none may start."""
    row = conn.execute(
        f"UPDATE {table.name} SET attempt = attempt + 1"
        f" WHERE {table.key} = ? AND generation_id = ? AND status = 'pending' AND attempt < ?"
        " RETURNING attempt",
        (key, generation, max_attempts),
    ).fetchone()
    return None if row is None else int(row[0])


def exhaust_attempts(
    conn: sqlite3.Connection,
    table: DurableTable,
    key: str,
    generation: str,
    max_attempts: int,
    error: SerializedError,
) -> int | None:
    """Fail a pending row that has used every attempt; returns its attempt count, or None."""
    row = conn.execute(
        f"UPDATE {table.name} SET status = 'failed', last_error = ?, last_error_name = ?"
        f" WHERE {table.key} = ? AND generation_id = ? AND status = 'pending' AND attempt >= ?"
        " RETURNING attempt",
        (error.message, error.name, key, generation, max_attempts),
    ).fetchone()
    return None if row is None else int(row[0])


def update_attempt(
    conn: sqlite3.Connection,
    table: DurableTable,
    fence: Fence,
    assignments: str,
    *values: Any,
) -> bool:
    """Apply ``assignments`` only if the row is still pending at ``fence``'s generation and attempt."""
    cursor = conn.execute(
        f"UPDATE {table.name} SET {assignments}"
        f" WHERE {table.key} = ? AND generation_id = ? AND attempt = ? AND status = 'pending'",
        (*values, fence.key, fence.generation, fence.attempt),
    )
    return cursor.rowcount > 0


def pending_heads(conn: sqlite3.Connection, table: DurableTable, limit: int) -> list[tuple[str, int]]:
    """The first ``limit`` pending rows by due time: ``(key, next_attempt_at)`` (``pendingTimes``)."""
    rows = conn.execute(
        f"SELECT {table.key} AS pk, next_attempt_at FROM {table.name}"
        " WHERE status = 'pending' ORDER BY next_attempt_at ASC LIMIT ?",
        (limit,),
    ).fetchall()
    return [(str(pk), int(at)) for pk, at in rows]


def least_pending_at(conn: sqlite3.Connection, table: DurableTable) -> int | None:
    """The least ``next_attempt_at`` of ``table``'s pending rows (None: none pending).

    A read for checkers, written apart from ``pending_heads`` on purpose: what they hold the
    engine's reading to must not share its query."""
    (least,) = conn.execute(
        f"SELECT MIN(next_attempt_at) FROM {table.name} WHERE status = 'pending'"
    ).fetchone()
    return None if least is None else int(least)


def purge_created_before(conn: sqlite3.Connection, table: DurableTable, before: int) -> int:
    """Delete every record created before ``before``, whatever its status; returns how many (``purge``)."""
    (count,) = conn.execute(f"SELECT COUNT(*) FROM {table.name} WHERE created_at < ?", (before,)).fetchone()
    conn.execute(f"DELETE FROM {table.name} WHERE created_at < ?", (before,))
    return int(count)
