"""How the checkers read a simulated object's storage, and what a failed read means.

A checker that turns every SQLite error into "no rows" cannot fail: a
mistyped column, or a holder variant that renamed a table, would make its
invariant judge nothing and pass. Only one failure is an honest empty
answer: the schema the missing table belongs to was never built. Each
schema is created whole, in one transaction (the holder's migrations, the
queue's tables), so a missing table whose schema has no table at all is an
object whose code never ran that part (a client that never queued, a
holder nobody called); a missing table beside others of its schema was
renamed or dropped. Every other error is :class:`CheckerReadError`, which
the :class:`~semsim.check.invariants.Monitor` reports as the ``checker``
verdict: the run stops and says which query failed.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Final

#: The table-name prefixes of the schemas built whole, most specific first: the client's
#: queue, then the holder's. Any other table is a schema of its own.
SCHEMAS: Final = ("durability_semaphore_queue_", "durability_semaphore_")
_MISSING: Final = re.compile(r"no such table: (?:main\.)?(\w+)")


class CheckerReadError(Exception):
    """A checker's query failed on storage whose schema exists: the check cannot judge."""


def select(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of a query, or none when the missing table's schema was never built."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as error:
        missing = _MISSING.fullmatch(str(error))
        if missing is not None and never_built(conn, missing.group(1)):
            return []
        raise CheckerReadError(f"a checker's query failed: {error} (in {' '.join(sql.split())})") from error


def never_built(conn: sqlite3.Connection, table: str) -> bool:
    """Whether no table of ``table``'s schema exists (see the module docstring)."""
    schema = _schema_of(table)
    names = [name for (name,) in conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")]
    return not any(_schema_of(name) == schema for name in names)


def _schema_of(table: str) -> str:
    return next((prefix for prefix in SCHEMAS if table.startswith(prefix)), table)
