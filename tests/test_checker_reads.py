"""A checker query that fails stops the run: only storage never built reads as empty.

The checkers once turned every SQLite error into "no rows", so a mistyped
column or a renamed table made an invariant judge nothing and pass (issue 23).
"""

from __future__ import annotations

import sqlite3

import pytest

import semsim.check.across_clients
from semaphore_core.queue import QueueClient
from semsim.check.reads import CheckerReadError, never_built, select
from semsim.harness.run import HolderSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload
from tests.helpers import holder

WAITING = "SELECT grp, count(*) FROM durability_semaphore_queue_items GROUP BY grp"


def queue_storage() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    QueueClient(conn, "client-0")
    return conn


def test_storage_never_built_reads_as_empty() -> None:
    conn = sqlite3.connect(":memory:")
    assert never_built(conn, "durability_semaphore_queue_items")
    assert select(conn, WAITING) == []


def test_a_schema_not_built_reads_as_empty_beside_another_that_is() -> None:
    """A client's storage holds the queue's tables and never the holder's."""
    conn = queue_storage()
    assert select(conn, "SELECT * FROM durability_semaphore_grants") == []
    assert select(conn, WAITING) == []


def test_a_renamed_column_is_an_error_not_an_empty_answer() -> None:
    conn = queue_storage()
    conn.execute("ALTER TABLE durability_semaphore_queue_items RENAME COLUMN grp TO group_name")
    with pytest.raises(CheckerReadError, match="no such column: grp"):
        select(conn, WAITING)


def test_a_renamed_table_beside_the_rest_of_its_schema_is_an_error() -> None:
    conn = sqlite3.connect(":memory:")
    holder(conn)
    conn.execute("ALTER TABLE durability_semaphore_grants RENAME TO grants_v2")
    with pytest.raises(CheckerReadError, match="no such table: durability_semaphore_grants"):
        select(conn, "SELECT * FROM durability_semaphore_grants")


def test_a_checker_query_naming_a_column_that_does_not_exist_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``progress`` reads from every client, with its group column misnamed."""
    broken = semsim.check.across_clients.WAITING_BY_KEY_AND_GROUP.replace("grp", "group_name")
    monkeypatch.setattr(semsim.check.across_clients, "WAITING_BY_KEY_AND_GROUP", broken)
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None), workload=Workload(clients=2), duration_ms=30_000
    )
    run = run_world(config, FaultPlan(), seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", "checker"), run.result
    assert "no such column: group_name" in run.result.detail
