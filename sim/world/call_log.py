"""F5's fix: each operation's last call to the external API, logged durably before it is sent.

Finding F5 (docs/FINDINGS.md): an attempt that timed out, or whose object
was evicted, leaves its call running at the API, while the operation's next
attempt calls again and, once the operation is over, its permit goes to
other work. The caller cannot stop a call, so the fix bounds it and
remembers it:

- every call carries its attempt's deadline (``deadlineAt``), which the API
  honours (``semsim.world.external_api``): the call cannot outlive it;
- the deadline is written here, in the object's storage, *before* the
  request leaves, so an eviction cannot lose it;
- an operation's next call waits while its last call may still run (sent,
  not answered, deadline not passed), and so does the return of its permit.

An answer (any: ok, an error, a conflict) means the call has ended at the
API, or never started: the API answers a call only when it ends, and
requests to it are never duplicated. A call never answered ends by its
deadline at the latest. One row per operation: calls of one operation never
overlap, so the last is the only one that may still run; the row goes when
the permit comes back, so the table holds only operations still running.
"""

from __future__ import annotations

import sqlite3
from typing import Final

TABLE: Final = "semsim_api_calls"


class CallLog:
    """The last call per operation: its deadline and whether it was answered."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} ("
            " operation TEXT PRIMARY KEY,"
            " deadline_at INTEGER NOT NULL,"
            " answered INTEGER NOT NULL CHECK (answered IN (0, 1)))"
        )

    def running_until(self, operation: str, now_ms: int) -> int | None:
        """The last moment the operation's last call may still run, if that is ``now_ms`` or later.

        The API cuts a call at its deadline and refuses a request that arrives
        at or after it, so from ``deadline_at + 1`` the call is over.
        """
        row = self._conn.execute(
            f"SELECT deadline_at, answered FROM {TABLE} WHERE operation = ?", (operation,)
        ).fetchone()
        if row is None or row[1] or row[0] < now_ms:
            return None
        return int(row[0])

    def unanswered(self) -> list[tuple[str, int]]:
        """Every operation whose last call was never answered, with its deadline, by operation id."""
        rows = self._conn.execute(
            f"SELECT operation, deadline_at FROM {TABLE} WHERE answered = 0 ORDER BY operation"
        ).fetchall()
        return [(str(operation), int(deadline_at)) for operation, deadline_at in rows]

    def sent(self, operation: str, deadline_at: int, now_ms: int) -> None:
        """Log a call about to be sent (committed before the request leaves)."""
        assert self.running_until(operation, now_ms) is None, f"{operation}: a call may still run"
        self._conn.execute(
            f"INSERT OR REPLACE INTO {TABLE} (operation, deadline_at, answered) VALUES (?, ?, 0)",
            (operation, deadline_at),
        )

    def answered(self, operation: str, deadline_at: int) -> None:
        """The API answered the call sent with ``deadline_at``: it is over (an older call's late
        answer, were there one, changes nothing)."""
        self._conn.execute(
            f"UPDATE {TABLE} SET answered = 1 WHERE operation = ? AND deadline_at = ?",
            (operation, deadline_at),
        )

    def forget(self, operation: str) -> None:
        """The operation's permit came back: it makes no more calls."""
        self._conn.execute(f"DELETE FROM {TABLE} WHERE operation = ?", (operation,))
