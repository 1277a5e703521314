"""One storage transaction, all or nothing.

A SAVEPOINT rather than BEGIN so the holder's transaction nests inside a
caller's (the simulator wraps a round and the alarm write in one
transaction, as the reference's engine does). The outermost RELEASE commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """Commit the block's writes together, or roll every one of them back on any error."""
    conn.execute("SAVEPOINT semaphore")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO semaphore")
        conn.execute("RELEASE semaphore")
        raise
    conn.execute("RELEASE semaphore")
