"""The ``durability_calls`` table: its schema, its rows and the reads of ``durability.ts``.

One row per operation id (seed 002, "Behind the scenes", lines 1932-1936):
"handler name, serialized payload, generation, status, attempt count, retry
time, error, and result", with "pending-time and creation-time indexes".
The columns are ``callRowSchema``'s (lines 170-183); the DDL is inferred
(``migrations.js`` is not in the seed), with SQLite ``CHECK``s for what the
zod schema validates on every read.

The state table of a row (docs/DURABILITY.md, "States"):

| from | event | to | written by |
|---|---|---|---|
| (none) | register | pending, attempt 0 | ``insert_call`` |
| pending, attempt n < max | claim | pending, attempt n+1 | ``storage.claim_attempt`` |
| pending, attempt n >= max | claim | failed (exhausted) | ``storage.exhaust_attempts`` |
| pending at attempt n | attempt n succeeds | completed | ``complete_call`` (fenced) |
| pending at attempt n | attempt n fails, retryable | pending, due later | ``settleFailure`` (fenced) |
| pending at attempt n | attempt n fails, terminal | failed | ``settleFailure`` (fenced) |
| any | purge | (none) | ``storage.purge_created_before`` |

Completed and failed are final: every write but purge requires ``pending``.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final, Literal, TypeAlias

import attrs

from semaphore_core.durability.errors import DuplicateDurableCallError
from semaphore_core.durability.serialization import deserialize
from semaphore_core.durability.storage import DurableTable, Fence, update_attempt

CALLS: Final = DurableTable(name="durability_calls", key="id")
#: ``#runDue`` takes at most this many due rows per pass (line 603).
DUE_BATCH: Final = 100

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS durability_calls (
        id              TEXT    NOT NULL PRIMARY KEY,
        operation       TEXT    NOT NULL,
        payload         TEXT    NOT NULL,
        status          TEXT    NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
        result          TEXT,
        attempt         INTEGER NOT NULL CHECK (attempt >= 0),
        next_attempt_at INTEGER NOT NULL CHECK (next_attempt_at >= 0),
        last_error      TEXT,
        last_error_name TEXT,
        completed_at    INTEGER CHECK (completed_at >= 0),
        created_at      INTEGER NOT NULL CHECK (created_at >= 0),
        generation_id   TEXT    NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS durability_calls_pending ON durability_calls (status, next_attempt_at)",
    "CREATE INDEX IF NOT EXISTS durability_calls_created ON durability_calls (created_at)",
)

Status: TypeAlias = Literal["pending", "completed", "failed"]


@attrs.frozen
class CallRow:
    """One ``durability_calls`` row (``CallRow``)."""

    id: str
    operation: str
    payload: str
    status: Status
    result: str | None
    attempt: int
    next_attempt_at: int
    last_error: str | None
    last_error_name: str | None
    completed_at: int | None
    created_at: int
    generation_id: str


_COLUMNS: Final = tuple(field.name for field in attrs.fields(CallRow))
_SELECT: Final = f"SELECT {', '.join(_COLUMNS)} FROM durability_calls"


def migrate_calls(conn: sqlite3.Connection) -> None:
    """Create the table and its indexes if absent (``durabilityOperationMigrations``, inferred)."""
    for statement in _SCHEMA:
        conn.execute(statement)


def read_call(conn: sqlite3.Connection, id: str) -> CallRow | None:
    """``readCall``."""
    row = conn.execute(f"{_SELECT} WHERE id = ?", (id,)).fetchone()
    return None if row is None else CallRow(*row)


def all_calls(conn: sqlite3.Connection) -> list[CallRow]:
    """Every row, by id (for tests and checks)."""
    return [CallRow(*row) for row in conn.execute(f"{_SELECT} ORDER BY id").fetchall()]


def insert_call(
    conn: sqlite3.Connection, id: str, operation: str, payload: str, now_ms: int, generation: str
) -> bool:
    """``INSERT ... ON CONFLICT(id) DO NOTHING RETURNING id`` (lines 643-660): True if inserted."""
    row = conn.execute(
        "INSERT INTO durability_calls"
        " (id, operation, payload, status, attempt, next_attempt_at, created_at, generation_id)"
        " VALUES (?, ?, ?, 'pending', 0, ?, ?, ?) ON CONFLICT(id) DO NOTHING RETURNING id",
        (id, operation, payload, now_ms, now_ms, generation),
    ).fetchone()
    return row is not None


def due_ids(conn: sqlite3.Connection, now_ms: int) -> list[str]:
    """Pending rows due at ``now_ms``, earliest first, at most ``DUE_BATCH`` (``#runDue``, lines 595-606)."""
    rows = conn.execute(
        "SELECT id FROM durability_calls WHERE status = 'pending' AND next_attempt_at <= ?"
        " ORDER BY next_attempt_at ASC LIMIT ?",
        (now_ms, DUE_BATCH),
    ).fetchall()
    return [str(id) for (id,) in rows]


def complete_call(conn: sqlite3.Connection, fence: Fence, result: str, now_ms: int) -> bool:
    """The ``complete`` callback's fenced write (lines 788-806)."""
    return update_attempt(
        conn,
        CALLS,
        fence,
        "status = 'completed', result = ?, last_error = NULL, last_error_name = NULL, completed_at = ?",
        result,
        now_ms,
    )


def assert_operation(id: str, existing: str, requested: str) -> None:
    """``assertOperation`` (lines 384-396)."""
    if existing != requested:
        raise DuplicateDurableCallError(id, existing, requested)


# --- getResult ------------------------------------------------------------------------


@attrs.frozen
class NotFound:
    status: Literal["not_found"] = "not_found"


@attrs.frozen
class Pending:
    attempt: int
    next_attempt_at: int
    last_error: str | None
    status: Literal["pending"] = "pending"


@attrs.frozen
class Failed:
    attempt: int
    error_name: str
    error_message: str
    status: Literal["failed"] = "failed"


@attrs.frozen
class Completed:
    result: Any
    status: Literal["completed"] = "completed"


OperationResult: TypeAlias = NotFound | Pending | Failed | Completed


def call_state(call: CallRow) -> Pending | Failed | Completed:
    """``callState`` (lines 398-423)."""
    if call.status == "pending":
        return Pending(attempt=call.attempt, next_attempt_at=call.next_attempt_at, last_error=call.last_error)
    if call.status == "failed":
        return Failed(
            attempt=call.attempt,
            error_name="Error" if call.last_error_name is None else call.last_error_name,
            error_message="Durable operation failed" if call.last_error is None else call.last_error,
        )
    if call.result is None:
        raise RuntimeError(f'Completed durable call "{call.id}" has no result')
    return Completed(result=deserialize(call.result))
