"""``replies_applied``: a client's storage follows each reply it applies.

Seed 000's replies (lines 964-976 for a sync, the round's reply beside it)
echo every lease the client reported or was issued: a live echo carries the
lease's refreshed expiry (reports heartbeat a lease), an echo at or before
now stops it, and a stopped lease the holder has heard fully settled is
gone. Seed 001 (line 117) adds what a client does on ``contended``: it
returns the undrawn permits of its leases in groups where it has nothing
queued. The literal model judges what the holder sends; this judges what
the client makes of it, so a client that drops a sync's echoes, keeps
drawing on a stopped lease or keeps an idle lease while others wait is
caught when it happens, not when (if ever) a ceiling notices.

Judged after a client applied a reply (its claims and admissions done),
against the reply as it came off the wire (the dict, parsed here apart
from the client's own parser) and the client's storage then:

- a live echo (``expiresAt`` after now): the client holds that lease, with
  that expiry;
- a stopping echo: the client holds no such lease, or holds it retired;
- with ``contended: true``: no lease of the key is live with undrawn
  permits in a group where nothing is queued.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from semsim.check.checker import Checker, Fail
from semsim.check.reads import select

#: One lease of the client: ``(retired, expires_at)``, or no row.
LEASE: Final = "SELECT retired, expires_at FROM durability_semaphore_queue_leases WHERE lease_id = ?"
#: Live leases of key ``?`` with undrawn permits in a group where nothing of the key is queued.
IDLE: Final = (
    "SELECT lease_id, grp FROM durability_semaphore_queue_leases l WHERE l.key = ? AND "
    "l.retired = 0 AND l.drawn < l.permits AND NOT EXISTS (SELECT 1 FROM "
    "durability_semaphore_queue_items i WHERE i.key = l.key AND i.grp = l.grp AND i.status = 'queued') "
    "ORDER BY lease_id"
)


class RepliesApplied(Checker):
    """Reads the applying client's leases after each reply (built in: the world reports to it alone)."""

    name = "replies_applied"
    description = "a client's leases follow each reply's echoes, and it returns idle leases when contended"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_reply_applied(
        self, t_ms: int, client: str, key: str, reply: Any, conn: sqlite3.Connection
    ) -> None:
        if not isinstance(reply, dict):
            return
        echoes = reply.get("leases")
        for echo in echoes if isinstance(echoes, list) else ():
            if not isinstance(echo, dict) or not isinstance(echo.get("expiresAt"), int):
                continue  # not a lease echo: the client's parser refuses the reply
            lease_id, expires_at = echo.get("leaseId"), echo["expiresAt"]
            rows = select(conn, LEASE, (lease_id,))
            if expires_at > t_ms:
                if not rows or rows[0][1] != expires_at:
                    held = rows[0][1] if rows else None
                    self.fail(
                        self.name,
                        f"{client}: {key}: the reply echoed lease {lease_id} live until {expires_at}, but "
                        f"the client holds it {'not at all' if held is None else f'until {held}'}",
                    )
            elif rows and not rows[0][0]:
                self.fail(
                    self.name,
                    f"{client}: {key}: the reply stopped lease {lease_id} (expiresAt {expires_at}) at "
                    f"{t_ms}, but the client still draws on it (until {rows[0][1]})",
                )
        if reply.get("contended") is True:
            idle = select(conn, IDLE, (key,))
            if idle:
                lease_id, group = idle[0]
                self.fail(
                    self.name,
                    f"{client}: {key}: the reply said contended, but the client keeps undrawn permits of "
                    f"lease {lease_id} in {group}, where nothing is queued",
                )
