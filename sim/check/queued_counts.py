"""A client's queued items counted per key and group, kept in step by temporary triggers.

``no_overask`` judges every request against its client's own storage: how
many items of the key are queued per group. Counted with a query, that is a
scan of every queued item of the key, and an overloaded workload's backlog
grows without bound, so the check's cost grew with run length. Here
temporary triggers on the items table keep the count per (key, group) in a
temporary table as the client's own statements insert, update and delete
its rows, so the answer is a lookup whatever the backlog.

As with ``semsim.check.row_mirror``: temporary objects belong to the
connection, not to the database. The object never sees them, they never
reach its durable storage, and they are rolled back with the transaction
that wrote them. A schema change drops triggers with their table; the count
notices through ``PRAGMA schema_version`` and recounts from the table (as
it does when first installed, on items already queued). Statements a
trigger runs add to ``Connection.total_changes`` only when a row of the
items table changed anyway, so "same count, same rows" still holds.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from semaphore_core import queue_reads

ITEMS: Final = "durability_semaphore_queue_items"
_COUNTS: Final = "semsim_queued_counts"
#: The triggers: an item enters the count when it becomes queued, leaves it when it stops being.
_TRIGGERS: Final = (
    (
        "semsim_queued_insert",
        f"AFTER INSERT ON main.{ITEMS} WHEN NEW.status = 'queued'",
        f"INSERT INTO {_COUNTS} VALUES (NEW.key, NEW.grp, 1) ON CONFLICT (key, grp) DO UPDATE SET n = n + 1;",
    ),
    (
        "semsim_queued_delete",
        f"AFTER DELETE ON main.{ITEMS} WHEN OLD.status = 'queued'",
        f"UPDATE {_COUNTS} SET n = n - 1 WHERE key = OLD.key AND grp = OLD.grp;",
    ),
    (
        "semsim_queued_leave",
        f"AFTER UPDATE OF status, key, grp ON main.{ITEMS} WHEN OLD.status = 'queued'",
        f"UPDATE {_COUNTS} SET n = n - 1 WHERE key = OLD.key AND grp = OLD.grp;",
    ),
    (
        "semsim_queued_enter",
        f"AFTER UPDATE OF status, key, grp ON main.{ITEMS} WHEN NEW.status = 'queued'",
        f"INSERT INTO {_COUNTS} VALUES (NEW.key, NEW.grp, 1) ON CONFLICT (key, grp) DO UPDATE SET n = n + 1;",
    ),
)
#: What the triggers keep, counted from the table (on installing, and in the debug mode).
COUNT_QUEUED_SQL: Final = queue_reads.QUEUED_BY_KEY_AND_GROUP
_READ_SQL: Final = f"SELECT grp, n FROM temp.{_COUNTS} WHERE key = ? AND n > 0 ORDER BY grp"


class QueuedCounts:
    """Queued items per group of one connection's items table, by key."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        #: ``PRAGMA main.schema_version`` when the triggers were installed (None: not installed).
        self._schema: int | None = None

    def by_group(self, key: str) -> list[tuple[str, int]] | None:
        """(group, queued items) of ``key`` with at least one, by group; None if not kept here.

        None when the items table does not exist, or when the triggers are
        not installed and cannot be now (inside an open transaction, which
        could roll them back): the caller counts from the table instead.
        """
        conn = self._conn
        schema = int(conn.execute("PRAGMA main.schema_version").fetchone()[0])
        if schema != self._schema:
            self._schema = None
            if conn.in_transaction or not self._install():
                return None
            self._schema = schema
        return conn.execute(_READ_SQL, (key,)).fetchall()

    def _install(self) -> bool:
        """Triggers on the items table, and the count of what it holds now; whether installed."""
        conn = self._conn
        present = conn.execute(
            "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (ITEMS,)
        ).fetchone()
        if present is None:
            return False
        conn.execute("BEGIN")
        try:
            conn.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {_COUNTS} "
                "(key TEXT NOT NULL, grp TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (key, grp)) "
                "WITHOUT ROWID"
            )
            conn.execute(f"DELETE FROM temp.{_COUNTS}")
            for name, when, body in _TRIGGERS:
                # Dropped and made again: a trigger that followed its table through a rename
                # would otherwise stand in for this one.
                conn.execute(f"DROP TRIGGER IF EXISTS temp.{name}")
                conn.execute(f"CREATE TEMP TRIGGER {name} {when} BEGIN {body} END")
            conn.execute(f"INSERT INTO temp.{_COUNTS} {COUNT_QUEUED_SQL}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return True
