"""Schema migrations for the holder's tables.

``0001`` creates the reference's two tables with the reference's columns.
``0002`` is semsim's: indexes on the claim deadline and on live leases, and
per-group totals kept by triggers, so a round reads outstanding permits and
lease footprint without listing every row (the reference lists every grant
in every round). It backfills from existing rows, so it also upgrades a
database written at ``0001``.

``migrate(conn, None)`` removes the schema, as
``DurabilitySemaphore.migrate(ctx, null)`` does.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import attrs

from semaphore_core.transaction import transaction

CAPABILITY: Final = "semaphore"
MIGRATIONS_TABLE: Final = "durability_migrations"


@attrs.frozen
class Migration:
    name: str
    up: tuple[str, ...]
    down: tuple[str, ...]


@attrs.frozen
class MigrationResult:
    """Where the schema was, where it is now, and the steps taken (``-name`` for a rollback)."""

    previous: str | None
    current: str | None
    applied: tuple[str, ...]


_GRANTS_V1 = """
CREATE TABLE durability_semaphore_grants (
    grant_id   TEXT    NOT NULL PRIMARY KEY,
    client_id  TEXT    NOT NULL,
    grp        TEXT    NOT NULL,
    permits    INTEGER NOT NULL CHECK (permits >= 0),
    claimed    INTEGER NOT NULL CHECK (claimed >= 0),
    released   INTEGER NOT NULL CHECK (released >= 0),
    created_at INTEGER NOT NULL CHECK (created_at >= 0),
    expires_at INTEGER NOT NULL CHECK (expires_at >= 0)
)"""

_LEASES_V1 = """
CREATE TABLE durability_semaphore_leases (
    lease_id   TEXT    NOT NULL PRIMARY KEY,
    client_id  TEXT    NOT NULL,
    grp        TEXT    NOT NULL,
    permits    INTEGER NOT NULL CHECK (permits >= 0),
    released   INTEGER NOT NULL CHECK (released >= 0),
    created_at INTEGER NOT NULL CHECK (created_at >= 0),
    expires_at INTEGER NOT NULL CHECK (expires_at >= 0),
    retired    INTEGER NOT NULL CHECK (retired IN (0, 1))
)"""

# A row's contribution to its group's totals. Grants: permits not yet
# released (the round reclaims expired unclaimed permits before it reads the
# totals; usage() corrects for those it has not reclaimed yet). Leases:
# leaseFootprint, max(0, permits - released).
_GRANT_TOTAL_TRIGGERS = (
    """
CREATE TABLE durability_semaphore_grant_totals (
    grp         TEXT    NOT NULL PRIMARY KEY,
    rows        INTEGER NOT NULL,
    outstanding INTEGER NOT NULL
)""",
    """
CREATE TRIGGER durability_semaphore_grants_total_insert
AFTER INSERT ON durability_semaphore_grants BEGIN
    INSERT OR IGNORE INTO durability_semaphore_grant_totals (grp, rows, outstanding)
        VALUES (NEW.grp, 0, 0);
    UPDATE durability_semaphore_grant_totals
        SET rows = rows + 1, outstanding = outstanding + max(0, NEW.permits - NEW.released)
        WHERE grp = NEW.grp;
END""",
    """
CREATE TRIGGER durability_semaphore_grants_total_update
AFTER UPDATE OF permits, released ON durability_semaphore_grants BEGIN
    UPDATE durability_semaphore_grant_totals
        SET outstanding = outstanding - max(0, OLD.permits - OLD.released)
                                      + max(0, NEW.permits - NEW.released)
        WHERE grp = NEW.grp;
END""",
    """
CREATE TRIGGER durability_semaphore_grants_total_delete
AFTER DELETE ON durability_semaphore_grants BEGIN
    UPDATE durability_semaphore_grant_totals
        SET rows = rows - 1, outstanding = outstanding - max(0, OLD.permits - OLD.released)
        WHERE grp = OLD.grp;
    DELETE FROM durability_semaphore_grant_totals WHERE grp = OLD.grp AND rows = 0;
END""",
    """
INSERT INTO durability_semaphore_grant_totals (grp, rows, outstanding)
    SELECT grp, count(*), sum(max(0, permits - released))
    FROM durability_semaphore_grants GROUP BY grp""",
)

_LEASE_TOTAL_TRIGGERS = (
    """
CREATE TABLE durability_semaphore_lease_totals (
    grp       TEXT    NOT NULL PRIMARY KEY,
    rows      INTEGER NOT NULL,
    footprint INTEGER NOT NULL
)""",
    """
CREATE TRIGGER durability_semaphore_leases_total_insert
AFTER INSERT ON durability_semaphore_leases BEGIN
    INSERT OR IGNORE INTO durability_semaphore_lease_totals (grp, rows, footprint)
        VALUES (NEW.grp, 0, 0);
    UPDATE durability_semaphore_lease_totals
        SET rows = rows + 1, footprint = footprint + max(0, NEW.permits - NEW.released)
        WHERE grp = NEW.grp;
END""",
    """
CREATE TRIGGER durability_semaphore_leases_total_update
AFTER UPDATE OF permits, released ON durability_semaphore_leases BEGIN
    UPDATE durability_semaphore_lease_totals
        SET footprint = footprint - max(0, OLD.permits - OLD.released)
                                  + max(0, NEW.permits - NEW.released)
        WHERE grp = NEW.grp;
END""",
    """
CREATE TRIGGER durability_semaphore_leases_total_delete
AFTER DELETE ON durability_semaphore_leases BEGIN
    UPDATE durability_semaphore_lease_totals
        SET rows = rows - 1, footprint = footprint - max(0, OLD.permits - OLD.released)
        WHERE grp = OLD.grp;
    DELETE FROM durability_semaphore_lease_totals WHERE grp = OLD.grp AND rows = 0;
END""",
    """
INSERT INTO durability_semaphore_lease_totals (grp, rows, footprint)
    SELECT grp, count(*), sum(max(0, permits - released))
    FROM durability_semaphore_leases GROUP BY grp""",
)

SEMAPHORE_MIGRATIONS: Final = (
    Migration(
        name="0001_grants_and_leases",
        up=(_GRANTS_V1, _LEASES_V1),
        down=(
            "DROP TABLE durability_semaphore_leases",
            "DROP TABLE durability_semaphore_grants",
        ),
    ),
    Migration(
        name="0002_indexes_and_totals",
        up=(
            # The alarm's target and the reclaim pass: unclaimed grants by deadline.
            """CREATE INDEX durability_semaphore_grants_claim_deadline
               ON durability_semaphore_grants (expires_at) WHERE claimed < permits""",
            # The lease pass retires live leases that expired or lost eligibility.
            """CREATE INDEX durability_semaphore_leases_live_expiry
               ON durability_semaphore_leases (expires_at) WHERE retired = 0""",
            """CREATE INDEX durability_semaphore_leases_live_group
               ON durability_semaphore_leases (grp) WHERE retired = 0""",
            *_GRANT_TOTAL_TRIGGERS,
            *_LEASE_TOTAL_TRIGGERS,
        ),
        down=(
            "DROP TRIGGER durability_semaphore_leases_total_delete",
            "DROP TRIGGER durability_semaphore_leases_total_update",
            "DROP TRIGGER durability_semaphore_leases_total_insert",
            "DROP TABLE durability_semaphore_lease_totals",
            "DROP TRIGGER durability_semaphore_grants_total_delete",
            "DROP TRIGGER durability_semaphore_grants_total_update",
            "DROP TRIGGER durability_semaphore_grants_total_insert",
            "DROP TABLE durability_semaphore_grant_totals",
            "DROP INDEX durability_semaphore_leases_live_group",
            "DROP INDEX durability_semaphore_leases_live_expiry",
            "DROP INDEX durability_semaphore_grants_claim_deadline",
        ),
    ),
)
LATEST: Final = SEMAPHORE_MIGRATIONS[-1].name
_NAMES: Final = tuple(m.name for m in SEMAPHORE_MIGRATIONS)


class _Latest:
    def __repr__(self) -> str:
        return "LATEST"


#: Default target of :func:`migrate`: the newest migration.
TO_LATEST: Final = _Latest()


def schema_version(conn: sqlite3.Connection) -> str | None:
    """The semaphore schema's current migration name, or None when absent."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if exists is None:
        return None
    row = conn.execute(
        f"SELECT version FROM {MIGRATIONS_TABLE} WHERE capability = ?", (CAPABILITY,)
    ).fetchone()
    return None if row is None else str(row[0])


def migrate(conn: sqlite3.Connection, target: str | _Latest | None = TO_LATEST) -> MigrationResult:
    """Move the schema to ``target`` (a migration name; None removes it) in one transaction."""
    if target is TO_LATEST:
        target = LATEST
    if target is not None and target not in _NAMES:
        raise ValueError(f"unknown semaphore migration {target!r}; known: {', '.join(_NAMES)}")
    with transaction(conn):
        previous = schema_version(conn)
        if previous is not None and previous not in _NAMES:
            raise ValueError(
                f"semaphore schema is at {previous!r}, which this version does not know; "
                f"known: {', '.join(_NAMES)}"
            )
        here = -1 if previous is None else _NAMES.index(previous)
        there = -1 if target is None else _NAMES.index(str(target))
        applied: list[str] = []
        for index in range(here + 1, there + 1):
            for statement in SEMAPHORE_MIGRATIONS[index].up:
                conn.execute(statement)
            applied.append(SEMAPHORE_MIGRATIONS[index].name)
        for index in range(here, there, -1):
            for statement in SEMAPHORE_MIGRATIONS[index].down:
                conn.execute(statement)
            applied.append("-" + SEMAPHORE_MIGRATIONS[index].name)
        _record(conn, None if target is None else str(target))
    return MigrationResult(previous=previous, current=target, applied=tuple(applied))


def _record(conn: sqlite3.Connection, version: str | None) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
        "(capability TEXT NOT NULL PRIMARY KEY, version TEXT NOT NULL)"
    )
    if version is None:
        conn.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE capability = ?", (CAPABILITY,))
        if conn.execute(f"SELECT 1 FROM {MIGRATIONS_TABLE} LIMIT 1").fetchone() is None:
            conn.execute(f"DROP TABLE {MIGRATIONS_TABLE}")
    else:
        conn.execute(
            f"INSERT INTO {MIGRATIONS_TABLE} (capability, version) VALUES (?, ?) "
            "ON CONFLICT (capability) DO UPDATE SET version = excluded.version",
            (CAPABILITY, version),
        )
