"""The object's one physical alarm, as the engine sees it: a small injected protocol.

Seed 002, "How it uses your Durable Object": "The object's one alarm
(ctx.storage.setAlarm) brings the object back after eviction. Every write
that adds or reschedules pending work sets the alarm in the same storage
transaction". The engine reads and writes the alarm only through
``StorageAlarm`` (``PhysicalAlarm``, scheduler.ts lines 969-972: ``getAlarm``,
``setAlarm``, ``deleteAlarm``), inside its SQLite transactions; a shell
that keeps the alarm elsewhere must make those calls commit and roll back
with the transaction. ``SqliteAlarm`` keeps it in the same connection, so
they do. Delivering the alarm when its time comes is the platform's job
(the shell's), not this package's.
"""

from __future__ import annotations

import sqlite3
from typing import Final, Protocol

#: Where ``SqliteAlarm`` keeps the time; one row at most.
ALARM_TABLE: Final = "durability_physical_alarm"


class StorageAlarm(Protocol):
    """The object's alarm: epoch milliseconds, or None when unset."""

    def get_alarm(self) -> int | None: ...

    def set_alarm(self, at_ms: int) -> None: ...

    def delete_alarm(self) -> None: ...


class SqliteAlarm:
    """A ``StorageAlarm`` stored in the engine's own connection (so it commits with the rows)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {ALARM_TABLE}"
            " (one INTEGER PRIMARY KEY CHECK (one = 1), at_ms INTEGER NOT NULL)"
        )

    def get_alarm(self) -> int | None:
        row = self._conn.execute(f"SELECT at_ms FROM {ALARM_TABLE}").fetchone()
        return None if row is None else int(row[0])

    def set_alarm(self, at_ms: int) -> None:
        self._conn.execute(
            f"INSERT INTO {ALARM_TABLE} (one, at_ms) VALUES (1, ?)"
            " ON CONFLICT(one) DO UPDATE SET at_ms = excluded.at_ms",
            (at_ms,),
        )

    def delete_alarm(self) -> None:
        self._conn.execute(f"DELETE FROM {ALARM_TABLE}")
