"""``durability_memos``: a handler's memoized steps, kept across the attempts of one generation.

Seed 002 shows where memos come and go, not how they are stored
(``memoize.js`` is not in the seed):

- every handler call gets ``memoize``, bound to the call's id, generation
  and attempt (``createMemoize(sql, callsTable, {key, generation, attempt})``,
  lines 781-785), so a retried attempt can skip a step an earlier one
  finished ("Shared durability_memos holds intermediate memoized results",
  line 1934);
- a call's memos go with its terminal write, in the same transaction: a
  completion (``deleteMemos``, lines 1698-1704: "a failed memo cleanup must
  undo the completion, not orphan the memos"), an exhausted claim (line
  1762) and a terminal failure (line 1802);
- a purge deletes the memos whose record is gone or of another generation
  (``deleteStaleMemos``, line 1405).

The storage is inferred, as the oracle's stand-in (``memoize.ts``) guesses
it: one row per (table, record key, memo key) holding the generation, the
serialised value and the attempt that wrote it. A lookup sees only the
current generation's memo; a write replaces whatever the key held.

Sans-I/O, a handler's ``await memoize(key, fn)`` is two calls here: look
the key up (:meth:`Memoize.lookup`) and, on a miss, run ``fn`` and store
its value (:meth:`Memoize.store`). The shell does the awaiting
(``sim/runtime/scheduler.py``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import attrs

from semaphore_core.durability.serialization import deserialize, serialize
from semaphore_core.durability.storage import DurableTable

_SCHEMA: Final = """CREATE TABLE IF NOT EXISTS durability_memos (
    table_name    TEXT    NOT NULL,
    record_key    TEXT    NOT NULL,
    generation_id TEXT    NOT NULL,
    memo_key      TEXT    NOT NULL,
    value         TEXT    NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    PRIMARY KEY (table_name, record_key, memo_key)
)"""


def migrate_memos(conn: sqlite3.Connection) -> None:
    """``durabilityMemoMigrations``: the shared memos table (created if absent)."""
    conn.execute(_SCHEMA)


@attrs.frozen
class Memo:
    """A memo found for the current generation: its value, and the attempt that stored it."""

    value: Any
    attempt: int


@attrs.frozen
class Memoize:
    """``createMemoize(sql, table, {key, generation, attempt})``: one attempt's memos."""

    conn: sqlite3.Connection = attrs.field(repr=False)
    table: DurableTable
    key: str
    generation: str
    attempt: int

    def lookup(self, memo_key: str) -> Memo | None:
        """The memo stored under ``memo_key`` for this generation, if an attempt stored one."""
        _check_key(memo_key)
        row = self.conn.execute(
            "SELECT value, attempt FROM durability_memos"
            " WHERE table_name = ? AND record_key = ? AND generation_id = ? AND memo_key = ?",
            (self.table.name, self.key, self.generation, memo_key),
        ).fetchone()
        return None if row is None else Memo(value=deserialize(row[0]), attempt=int(row[1]))

    def store(self, memo_key: str, value: Any) -> None:
        """Keep ``value`` (JSON-serialisable) under ``memo_key``: what ``fn`` returned on a miss."""
        _check_key(memo_key)
        text = serialize(value)
        self.conn.execute(
            "INSERT OR REPLACE INTO durability_memos"
            " (table_name, record_key, generation_id, memo_key, value, attempt) VALUES (?, ?, ?, ?, ?, ?)",
            (self.table.name, self.key, self.generation, memo_key, text, self.attempt),
        )


def _check_key(memo_key: str) -> None:
    if not isinstance(memo_key, str):
        raise TypeError(f"memo keys are strings, got {memo_key!r}")


def delete_memos(conn: sqlite3.Connection, table: DurableTable, key: str) -> None:
    """``deleteMemos``: every memo of the record, whatever its generation (its terminal write)."""
    conn.execute("DELETE FROM durability_memos WHERE table_name = ? AND record_key = ?", (table.name, key))


def delete_stale_memos(conn: sqlite3.Connection, table: DurableTable) -> None:
    """``deleteStaleMemos``: memos whose record is gone or now of another generation (a purge)."""
    conn.execute(
        "DELETE FROM durability_memos WHERE table_name = ? AND NOT EXISTS ("
        f" SELECT 1 FROM {table.name} t WHERE t.{table.key} = durability_memos.record_key"
        " AND t.generation_id = durability_memos.generation_id)",
        (table.name,),
    )
