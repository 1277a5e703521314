"""One storage transaction, all or nothing.

A SAVEPOINT rather than BEGIN so the holder's transaction nests inside a
caller's (the simulator wraps a round and the alarm write in one
transaction, as the reference's engine does). The outermost RELEASE commits.
A class, not ``@contextmanager``: this sits on every round, sync and queue
operation, and a generator-based context manager costs several times more.
"""

from __future__ import annotations

import sqlite3
from types import TracebackType


class transaction:  # lower case: used like a function, ``with transaction(conn):``
    """Commit the block's writes together, or roll every one of them back on any error."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("SAVEPOINT semaphore")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            self._conn.execute("ROLLBACK TO semaphore")
        self._conn.execute("RELEASE semaphore")
