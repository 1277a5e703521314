"""``HolderStore``: the grant and lease rows, and the queries a round needs.

Rows are the reference's columns as frozen attrs classes. Where the
reference lists every row and filters in JavaScript, the store asks SQLite
for just the rows that can change (an indexed claim deadline, live leases
by expiry or group) and reads sums from the trigger-maintained totals of
migration ``0002``. Whenever the reference relies on list order, the query
orders by ``created_at`` and then by ``rowid``: insertion order, which is
what SQLite's sort gives the reference's ``ORDER BY created_at`` on ties.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

import attrs

GRANTS = "durability_semaphore_grants"
LEASES = "durability_semaphore_leases"
GRANT_TOTALS = "durability_semaphore_grant_totals"
LEASE_TOTALS = "durability_semaphore_lease_totals"

_GRANT_COLUMNS = "grant_id, client_id, grp, permits, claimed, released, created_at, expires_at"
_LEASE_COLUMNS = "lease_id, client_id, grp, permits, released, created_at, expires_at, retired, rowid"


@attrs.frozen
class GrantRow:
    """``GrantRow``: permits for one (client, group); unclaimed ones are reclaimed at ``expires_at``."""

    grant_id: str
    client_id: str
    grp: str
    permits: int
    claimed: int
    released: int
    created_at: int
    expires_at: int


@attrs.frozen
class LeaseRow:
    """``LeaseRow``: permits a client may draw locally. ``seq`` is the storage rowid, for tie-breaks."""

    lease_id: str
    client_id: str
    grp: str
    permits: int
    released: int
    created_at: int
    expires_at: int
    retired: int
    seq: int = attrs.field(default=0, eq=False)


def effective_permits(grant: GrantRow, now: int) -> int:
    """Unclaimed permits are reclaimed once the claim window passes."""
    return grant.claimed if now >= grant.expires_at else grant.permits


def outstanding(grant: GrantRow, now: int) -> int:
    """Permits of a grant still charged against the limit."""
    return max(0, effective_permits(grant, now) - grant.released)


def lease_footprint(lease: LeaseRow) -> int:
    """Lease permits not yet released: drawn or drawable, so charged."""
    return max(0, lease.permits - lease.released)


class HolderStore:
    """Typed access to the holder's tables on one connection (the schema must be migrated)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # --- grants ---------------------------------------------------------------

    def get(self, grant_id: str) -> GrantRow | None:
        row = self._conn.execute(
            f"SELECT {_GRANT_COLUMNS} FROM {GRANTS} WHERE grant_id = ?", (grant_id,)
        ).fetchone()
        return None if row is None else GrantRow(*row)

    def list_grants(self) -> list[GrantRow]:
        """Every grant, oldest first (the reference's ``list()``; tests and snapshots only)."""
        rows = self._conn.execute(
            f"SELECT {_GRANT_COLUMNS} FROM {GRANTS} ORDER BY created_at, rowid"
        ).fetchall()
        return [GrantRow(*row) for row in rows]

    def insert(self, row: GrantRow) -> bool:
        """Insert unless the id exists (``ON CONFLICT DO NOTHING``); True if inserted."""
        cursor = self._conn.execute(
            f"INSERT INTO {GRANTS} ({_GRANT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (grant_id) DO NOTHING",
            (
                row.grant_id,
                row.client_id,
                row.grp,
                row.permits,
                row.claimed,
                row.released,
                row.created_at,
                row.expires_at,
            ),
        )
        return cursor.rowcount > 0

    def update(self, grant_id: str, permits: int, claimed: int, released: int) -> None:
        """Set a grant's counts (its claim deadline never changes)."""
        self._conn.execute(
            f"UPDATE {GRANTS} SET permits = ?, claimed = ?, released = ? WHERE grant_id = ?",
            (permits, claimed, released, grant_id),
        )

    def remove(self, grant_id: str) -> None:
        self._conn.execute(f"DELETE FROM {GRANTS} WHERE grant_id = ?", (grant_id,))

    def expired_unclaimed(self, now: int) -> list[GrantRow]:
        """Grants the reclaim pass shrinks: past the deadline with unclaimed permits, oldest first."""
        rows = self._conn.execute(
            f"SELECT {_GRANT_COLUMNS} FROM {GRANTS} "
            "WHERE claimed < permits AND expires_at <= ? ORDER BY created_at, rowid",
            (now,),
        ).fetchall()
        return [GrantRow(*row) for row in rows]

    def next_pending_at(self) -> int | None:
        """Earliest claim deadline of a grant with unclaimed permits."""
        row = self._conn.execute(f"SELECT min(expires_at) FROM {GRANTS} WHERE claimed < permits").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def claimed_in_use(self) -> int:
        """Permits claimed and not yet released, over every grant (fix F3 only: O(grants))."""
        row = self._conn.execute(f"SELECT coalesce(sum(claimed - released), 0) FROM {GRANTS}").fetchone()
        return int(row[0])

    def grant_totals(self) -> dict[str, tuple[int, int]]:
        """``{group: (rows, permits - released summed)}`` for every group with a grant row."""
        rows = self._conn.execute(
            f"SELECT grp, rows, outstanding FROM {GRANT_TOTALS} ORDER BY grp"
        ).fetchall()
        return {grp: (count, total) for grp, count, total in rows}

    def unreclaimed_by_group(self, now: int) -> dict[str, int]:
        """Unclaimed permits past their deadline not yet reclaimed, per group.

        The totals count them; ``outstanding(grant, now)`` does not.
        """
        rows = self._conn.execute(
            f"SELECT grp, sum(permits - claimed) FROM {GRANTS} "
            "WHERE claimed < permits AND expires_at <= ? GROUP BY grp",
            (now,),
        ).fetchall()
        return {grp: int(total) for grp, total in rows}

    # --- leases ---------------------------------------------------------------

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        row = self._conn.execute(
            f"SELECT {_LEASE_COLUMNS} FROM {LEASES} WHERE lease_id = ?", (lease_id,)
        ).fetchone()
        return None if row is None else LeaseRow(*row)

    def list_leases(self) -> list[LeaseRow]:
        """Every lease, oldest first (the reference's ``listLeases()``)."""
        rows = self._conn.execute(
            f"SELECT {_LEASE_COLUMNS} FROM {LEASES} ORDER BY created_at, rowid"
        ).fetchall()
        return [LeaseRow(*row) for row in rows]

    def insert_lease(self, row: LeaseRow) -> LeaseRow | None:
        """Insert unless the id exists; the stored row (with its ``seq``), or None."""
        cursor = self._conn.execute(
            f"INSERT INTO {LEASES} (lease_id, client_id, grp, permits, released, created_at, "
            "expires_at, retired) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (lease_id) DO NOTHING",
            (
                row.lease_id,
                row.client_id,
                row.grp,
                row.permits,
                row.released,
                row.created_at,
                row.expires_at,
                row.retired,
            ),
        )
        if cursor.rowcount <= 0:
            return None
        assert cursor.lastrowid is not None
        return attrs.evolve(row, seq=cursor.lastrowid)

    def update_lease(self, lease_id: str, permits: int, released: int, expires_at: int, retired: int) -> None:
        self._conn.execute(
            f"UPDATE {LEASES} SET permits = ?, released = ?, expires_at = ?, retired = ? WHERE lease_id = ?",
            (permits, released, expires_at, retired, lease_id),
        )

    def retire_lease(self, lease_id: str) -> None:
        """Stop draws; the footprint is untouched."""
        self._conn.execute(f"UPDATE {LEASES} SET retired = 1 WHERE lease_id = ?", (lease_id,))

    def remove_lease(self, lease_id: str) -> None:
        self._conn.execute(f"DELETE FROM {LEASES} WHERE lease_id = ?", (lease_id,))

    def live_leases_to_retire(self, now: int, ineligible: Iterable[str]) -> list[LeaseRow]:
        """Live leases that expired or whose group lost eligibility, oldest first."""
        groups = list(ineligible)
        if not groups:
            rows = self._conn.execute(
                f"SELECT {_LEASE_COLUMNS} FROM {LEASES} "
                "WHERE retired = 0 AND expires_at <= ? ORDER BY created_at, rowid",
                (now,),
            ).fetchall()
        else:
            marks = ", ".join("?" * len(groups))
            rows = self._conn.execute(
                f"SELECT {_LEASE_COLUMNS} FROM {LEASES} "
                f"WHERE retired = 0 AND (expires_at <= ? OR grp IN ({marks})) "
                "ORDER BY created_at, rowid",
                (now, *groups),
            ).fetchall()
        return [LeaseRow(*row) for row in rows]

    def lease_totals(self) -> dict[str, tuple[int, int]]:
        """``{group: (rows, footprint)}`` for every group with a lease row."""
        rows = self._conn.execute(f"SELECT grp, rows, footprint FROM {LEASE_TOTALS} ORDER BY grp").fetchall()
        return {grp: (count, total) for grp, count, total in rows}

    def leased_footprint(self) -> int:
        row = self._conn.execute(f"SELECT total(footprint) FROM {LEASE_TOTALS}").fetchone()
        return int(row[0])
