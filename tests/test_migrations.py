"""Schema migrations: up, down, partial, upgrade with rows, and bad targets."""

from __future__ import annotations

import sqlite3

import pytest

from semaphore_core import LATEST, migrate, schema_version
from semaphore_core.migrations import SEMAPHORE_MIGRATIONS
from tests.helpers import holder, request


def objects(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()


def test_migrate_creates_the_reference_tables_and_none_removes_everything() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    result = migrate(conn)
    assert result.applied == tuple(m.name for m in SEMAPHORE_MIGRATIONS)
    assert schema_version(conn) == LATEST
    columns = [r[1] for r in conn.execute("PRAGMA table_info(durability_semaphore_grants)")]
    assert columns == [
        "grant_id",
        "client_id",
        "grp",
        "permits",
        "claimed",
        "released",
        "created_at",
        "expires_at",
    ]
    columns = [r[1] for r in conn.execute("PRAGMA table_info(durability_semaphore_leases)")]
    assert columns == [
        "lease_id",
        "client_id",
        "grp",
        "permits",
        "released",
        "created_at",
        "expires_at",
        "retired",
    ]
    removed = migrate(conn, None)
    assert removed.current is None
    assert objects(conn) == []
    assert schema_version(conn) is None


def test_migrate_is_idempotent() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    assert migrate(conn).applied == ()


def test_upgrading_a_populated_0001_schema_backfills_the_totals() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, "0001_grants_and_leases")
    conn.execute(
        "INSERT INTO durability_semaphore_grants VALUES ('g1', 'a', 'x', 5, 2, 1, 0, 10000), "
        "('g2', 'b', 'x', 3, 0, 0, 0, 10000), ('g3', 'b', 'y', 2, 2, 0, 0, 10000)"
    )
    conn.execute("INSERT INTO durability_semaphore_leases VALUES ('l1', 'a', 'x', 6, 2, 0, 99999, 0)")
    h = holder(conn, limit=20)  # migrates to latest on construction
    usage = h.usage(0)
    assert (usage.granted, usage.leased) == (4 + 3 + 2, 4)
    [reply] = h.run_round([request("c", [("x", 20, 0)])], now=1)
    assert reply["grants"][0]["permits"] == 20 - 9  # no leases configured: footprint not shared


def test_downgrading_to_0001_keeps_rows_and_drops_semsims_additions() -> None:
    conn = sqlite3.connect(":memory:")
    h = holder(conn, limit=5)
    h.run_round([request("a", [("g", 2, 0)])], now=0)
    migrate(conn, "0001_grants_and_leases")
    assert schema_version(conn) == "0001_grants_and_leases"
    assert [name for _, name in objects(conn) if "totals" in name] == []
    assert conn.execute("SELECT count(*) FROM durability_semaphore_grants").fetchone() == (1,)


def test_an_unknown_target_is_rejected_without_changes() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, "0001_grants_and_leases")
    before = objects(conn)
    with pytest.raises(ValueError, match="unknown semaphore migration 'bogus'"):
        migrate(conn, "bogus")
    assert objects(conn) == before


def test_an_unknown_recorded_version_is_rejected_without_changes() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute("UPDATE durability_migrations SET version = '9999_future'")
    before = objects(conn)
    with pytest.raises(ValueError, match="9999_future"):
        migrate(conn)
    assert objects(conn) == before


def test_totals_stay_exact_through_every_write_path() -> None:
    conn = sqlite3.connect(":memory:")
    h = holder(conn, limit=50, grant_timeout_ms=100)
    replies = h.run_round([request(c, [("g", 5, i), ("h", 3, i)]) for i, c in enumerate("abcd")], now=0)
    for client, reply in zip("abcd", replies, strict=True):
        grant = reply["grants"][0]["grantId"]
        h.sync(
            {
                "type": "sync",
                "v": 1,
                "clientId": client,
                "grants": [{"grantId": grant, "claimed": 3, "released": 1}],
            },
            10,
        )
    h.reclaim_expired(now=100)
    stored = dict(
        conn.execute(
            "SELECT grp, sum(permits - released) FROM durability_semaphore_grants GROUP BY grp"
        ).fetchall()
    )
    totals = {grp: total for grp, (_, total) in h.store.grant_totals().items()}
    assert totals == stored


# --- up, down and up again equal a fresh schema, at every version ------------------------------

VERSIONS = [m.name for m in SEMAPHORE_MIGRATIONS]


def schema(conn: sqlite3.Connection) -> list[tuple[str, str, str, str | None]]:
    """Every schema object with its table and SQL text (what a rebuilt schema must reproduce)."""
    return conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()


def state(conn: sqlite3.Connection) -> dict[str, object]:
    """The schema, each table's columns (``PRAGMA table_info``), indexes and every row."""
    tables = [name for kind, name, _, _ in schema(conn) if kind == "table"]
    return {
        "schema": schema(conn),
        "columns": {t: conn.execute(f"PRAGMA table_info({t})").fetchall() for t in tables},
        "indexes": {t: conn.execute(f"PRAGMA index_list({t})").fetchall() for t in tables},
        "rows": {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables},
        "version": schema_version(conn),
    }


def fresh(target: str | None) -> dict[str, object]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, target)
    return state(conn)


@pytest.mark.parametrize("down_to", [None, *VERSIONS])
@pytest.mark.parametrize("up_to", VERSIONS)
def test_up_down_and_up_again_equals_a_fresh_schema(up_to: str, down_to: str | None) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, up_to)
    assert state(conn) == fresh(up_to)
    migrate(conn, down_to)
    assert state(conn) == fresh(down_to)
    migrate(conn, up_to)
    assert state(conn) == fresh(up_to)
    migrate(conn)
    assert state(conn) == fresh(LATEST)


def test_down_and_up_again_with_rows_keeps_the_rows_and_rebuilds_exact_totals() -> None:
    conn = sqlite3.connect(":memory:")
    h = holder(conn, limit=20, grant_timeout_ms=100)
    [first, _] = h.run_round([request("a", [("x", 3, 0)]), request("b", [("y", 2, 1)])], now=0)
    h.sync(
        {
            "type": "sync",
            "v": 1,
            "clientId": "a",
            "grants": [{"grantId": first["grants"][0]["grantId"], "claimed": 2, "released": 1}],
        },
        now=10,
    )
    before = state(conn)
    for version in reversed(VERSIONS[:-1]):  # down to None drops the tables and their rows
        migrate(conn, version)
        migrate(conn)
        assert state(conn) == before, version
