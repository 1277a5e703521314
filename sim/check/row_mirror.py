"""A holder's grant and lease rows, kept in step from the rows each commit changed.

The checkers used to judge every holder commit by reading every row of the
holder's two tables, and the literal model's ``usage()`` lists every row
after every operation: a cost per commit that grows with the clients a key
serves. A :class:`RowMirror` keeps those rows in memory and rereads only
the rows a transaction inserted, updated or deleted. Temporary triggers
record their ids in a temporary table. Temporary objects belong to the
connection, not to the database: the object never sees them, they never
reach its durable storage, and they survive eviction as the connection
does.

A schema change drops triggers with their table (the holder's first
migration creates the tables; a migration down recreates them). The mirror
notices through ``PRAGMA schema_version``, reinstalls the triggers and
rereads everything (the triggers are made again then, so none is left on a
renamed table).

The mirror also keeps the totals the reference's ``usage()`` sums over the
rows (outstanding grant permits per group, the lease footprint) as running
sums. A grant's outstanding permits change with time alone, at its claim
deadline, so the grants whose deadline is still ahead wait in a heap.
The debug mode (:mod:`semsim.check.cross_checks`) and the lockstep's full
mode recompute all of it from SQL and assert both agree.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections import Counter
from collections.abc import Container
from typing import Any, Final

import attrs

from semsim.check.reads import select

#: Per table name (``grants``, ``leases``), each row by id, as ``SELECT *`` returns it.
Rows = dict[str, dict[str, tuple[Any, ...]]]

GRANTS: Final = "durability_semaphore_grants"
LEASES: Final = "durability_semaphore_leases"
#: (the name the checkers use, the SQL table, its id column).
TABLES: Final = (("grants", GRANTS, "grant_id"), ("leases", LEASES, "lease_id"))
_CHANGES: Final = "semsim_row_changes"
#: Ids per ``IN (...)`` list: far below SQLite's bound on parameters.
_CHUNK: Final = 500
#: Grant row columns (``SELECT *``): grp, permits, claimed, released, expires_at.
_G_GROUP, _G_PERMITS, _G_CLAIMED, _G_RELEASED, _G_EXPIRES = 2, 3, 4, 5, 7
#: Lease row columns: permits, released.
_L_PERMITS, _L_RELEASED = 3, 4


def read_rows(conn: sqlite3.Connection) -> Rows:
    """Every grant and lease row (none for a table that does not exist yet), in rowid order."""
    return {name: _select_all(conn, table) for name, table, _ in TABLES}


def _select_all(conn: sqlite3.Connection, table: str) -> dict[str, tuple[Any, ...]]:
    return {row[0]: tuple(row) for row in select(conn, f"SELECT * FROM {table}")}


def grant_outstanding(row: tuple[Any, ...], now: int) -> int:
    """The reference's ``outstanding(grant, now)``: unclaimed permits stop counting at the deadline."""
    effective = row[_G_CLAIMED] if now >= row[_G_EXPIRES] else row[_G_PERMITS]
    return max(0, int(effective) - int(row[_G_RELEASED]))


def lease_footprint(row: tuple[Any, ...]) -> int:
    return max(0, int(row[_L_PERMITS]) - int(row[_L_RELEASED]))


@attrs.frozen
class Delta:
    """What one refresh saw: the rows before and after, and which ids changed (deleted ones too)."""

    before: Rows
    after: Rows
    #: Per table, the changed ids: those still present in rowid order, then the deleted ones.
    changed: dict[str, list[str]]
    #: Grants whose claim deadline came since the last refresh (their unclaimed permits stop counting).
    deadlines: list[str]


@attrs.frozen
class Totals:
    """What ``usage()`` sums over the rows at one moment."""

    granted: int
    leased: int
    #: Outstanding grant permits for every group that has a grant row, by group name.
    groups: dict[str, int]


class RowMirror:
    """The grant and lease rows of one connection, refreshed from the rows each transaction changed."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        #: ``PRAGMA schema_version`` when the triggers were installed (None: not installed).
        self._schema: int | None = None
        self.rows: Rows = {name: {} for name, _, _ in TABLES}
        # Running totals: each grant's outstanding permits as last computed, per group sums,
        # grant rows per group, the lease footprint, and the deadlines still ahead.
        self._outstanding: dict[str, int] = {}
        self._by_group: Counter[str] = Counter()
        self._rows_by_group: Counter[str] = Counter()
        self._leased = 0
        self._deadlines: list[tuple[int, str]] = []
        #: Grants whose deadline came since the last refresh.
        self._came: list[str] = []
        self._now = -1

    # --- refreshing ------------------------------------------------------------------------

    def refresh(self, now: int) -> Delta:
        """Bring the rows up to date with what was committed; ``now`` is the virtual time.

        Only between transactions: rows read inside one could still be rolled back.
        """
        if self._conn.in_transaction:
            raise RuntimeError("a row mirror refreshes between transactions, not inside one")
        self._advance(now)
        deadlines, self._came = self._came, []
        before = self.rows
        changed = self._take_changes()
        if changed is None:
            after = read_rows(self._conn)
            ids = {
                name: list(after[name]) + [i for i in before[name] if i not in after[name]] for name in after
            }
        else:
            after = dict(before)
            ids = {}
            for name, table, column in TABLES:
                wanted = changed.get(name)
                if not wanted:
                    ids[name] = []
                    continue
                fresh = self._select_ids(table, column, sorted(wanted))
                rows = after[name] = dict(before[name])
                for row_id in wanted:
                    if row_id not in fresh:
                        rows.pop(row_id, None)
                for row_id, row in fresh.items():
                    rows[row_id] = row
                ids[name] = list(fresh) + sorted(wanted - fresh.keys())
        self.rows = after
        self._update_totals(before, after, ids, now)
        return Delta(before, after, ids, deadlines)

    def _take_changes(self) -> dict[str, set[str]] | None:
        """Ids changed since the last call, per table; None when everything must be reread."""
        conn = self._conn
        schema = int(conn.execute("PRAGMA main.schema_version").fetchone()[0])
        if schema != self._schema:
            self._schema = schema if self._install() else None
            return None
        changed: dict[str, set[str]] = {}
        rows = conn.execute(f"SELECT tbl, id FROM temp.{_CHANGES}").fetchall()
        if rows:
            conn.execute(f"DELETE FROM temp.{_CHANGES}")
        for table, row_id in rows:
            changed.setdefault(table, set()).add(row_id)
        return changed

    def _install(self) -> bool:
        """Triggers on both tables, once both exist; whether they are installed."""
        conn = self._conn
        present = {
            name
            for (name,) in conn.execute(
                "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                (GRANTS, LEASES),
            )
        }
        if present != {GRANTS, LEASES}:
            return False
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_CHANGES} (tbl TEXT NOT NULL, id TEXT NOT NULL)")
        conn.execute(f"DELETE FROM temp.{_CHANGES}")
        for name, table, column in TABLES:
            for event, ids in (("INSERT", ("NEW",)), ("UPDATE", ("OLD", "NEW")), ("DELETE", ("OLD",))):
                inserts = " ".join(f"INSERT INTO {_CHANGES} VALUES ('{name}', {r}.{column});" for r in ids)
                # Dropped and made again: a trigger that followed its table through a rename
                # (a migration keeping the old table) would otherwise stand in for this one.
                conn.execute(f"DROP TRIGGER IF EXISTS temp.semsim_{name}_{event.lower()}")
                conn.execute(
                    f"CREATE TEMP TRIGGER semsim_{name}_{event.lower()} "
                    f"AFTER {event} ON main.{table} BEGIN {inserts} END"
                )
        return True

    def _select_ids(self, table: str, column: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        found: list[tuple[int, tuple[Any, ...]]] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            found.extend(
                (int(rowid), tuple(row))
                for rowid, *row in self._conn.execute(
                    f"SELECT rowid, * FROM {table} WHERE {column} IN ({marks})", chunk
                )
            )
        found.sort(key=lambda entry: entry[0])
        return {row[0]: row for _, row in found}

    # --- totals ------------------------------------------------------------------------------

    def unknown_footprint(self, known: Container[str]) -> int:
        """The footprint of the leases whose ids are not in ``known`` (no client knows them: the
        documented leak), from the mirrored rows as the last refresh left them."""
        return sum(
            lease_footprint(row) for lease_id, row in self.rows["leases"].items() if lease_id not in known
        )

    def totals(self, now: int) -> Totals:
        """Outstanding grant permits (all and per group) and the lease footprint at ``now``."""
        self._advance(now)
        groups = {group: self._by_group[group] for group in sorted(self._rows_by_group)}
        return Totals(sum(groups.values()), self._leased, groups)

    def _update_totals(self, before: Rows, after: Rows, ids: dict[str, list[str]], now: int) -> None:
        for grant_id in ids["grants"]:
            old, new = before["grants"].get(grant_id), after["grants"].get(grant_id)
            if old is not None:
                self._by_group[old[_G_GROUP]] -= self._outstanding.pop(grant_id)
                self._rows_by_group[old[_G_GROUP]] -= 1
                if not self._rows_by_group[old[_G_GROUP]]:
                    del self._rows_by_group[old[_G_GROUP]], self._by_group[old[_G_GROUP]]
            if new is not None:
                self._count_grant(grant_id, new, now)
                self._rows_by_group[new[_G_GROUP]] += 1
                if now < new[_G_EXPIRES] and new[_G_CLAIMED] != new[_G_PERMITS]:
                    heapq.heappush(self._deadlines, (int(new[_G_EXPIRES]), grant_id))
        for lease_id in ids["leases"]:
            old, new = before["leases"].get(lease_id), after["leases"].get(lease_id)
            self._leased += (0 if new is None else lease_footprint(new)) - (
                0 if old is None else lease_footprint(old)
            )

    def _count_grant(self, grant_id: str, row: tuple[Any, ...], now: int) -> None:
        outstanding = grant_outstanding(row, now)
        self._outstanding[grant_id] = outstanding
        self._by_group[row[_G_GROUP]] += outstanding

    def _advance(self, now: int) -> None:
        """Recount the grants whose claim deadline has come (virtual time never goes back)."""
        assert now >= self._now, (now, self._now)
        self._now = now
        deadlines, grants = self._deadlines, self.rows["grants"]
        while deadlines and deadlines[0][0] <= now:
            _, grant_id = heapq.heappop(deadlines)
            row = grants.get(grant_id)
            if row is None:
                continue  # deleted since its deadline was pushed
            # A row changed since (another deadline, say) is recounted from what it is now.
            self._by_group[row[_G_GROUP]] -= self._outstanding[grant_id]
            self._count_grant(grant_id, row, now)
            self._came.append(grant_id)
