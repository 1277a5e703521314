"""Schema rollbacks (``FaultPlan.rollbacks``): a holder's deploy rolled back one migration and forward
again. The rows survive, what the newer schema keeps beside them is rebuilt, and a down path that
leaves something behind is caught."""

from __future__ import annotations

import sqlite3

import attrs
import pytest

from semaphore_core import migrations
from semaphore_core.store import HolderStore
from semsim.check.invariants import SEMAPHORE_FINDINGS
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import run_case
from semsim.harness.run import WorldConfig, check_plan, run_world
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.world.design import DesignSpec
from semsim.world.faults import FaultPlan, Rollback
from semsim.world.mutant_catalog import mutant
from semsim.world.workload import Workload

CONFIG = WorldConfig(workload=Workload(clients=3, items_per_minute=30.0), duration_ms=120_000)
#: Two rollbacks while grants and leases are live.
ROLLED_BACK = FaultPlan(rollbacks=(Rollback("acct", 20_000), Rollback("acct", 50_000)))


def test_a_rollback_keeps_the_rows_and_rebuilds_the_totals() -> None:
    # The reference's own findings (F4's idle lease headroom, on other seeds) are not the rollback's.
    run = run_world(CONFIG, ROLLED_BACK, seed=3, tolerated=SEMAPHORE_FINDINGS)
    assert run.result.outcome == "completed", run.result
    faults = [(e["t"], e["fault"], e["to"]) for e in run.trace.of_kind("fault")]
    assert faults == [
        (20_000, "rollback", "0001_grants_and_leases"),
        (50_000, "rollback", "0001_grants_and_leases"),
    ]
    # Evicted and built again at once, in the same millisecond.
    assert [e["t"] for e in run.trace.of_kind("evict")] == [20_000, 50_000]
    assert [e["t"] for e in run.trace.of_kind("instance") if e["object"] == "holder:acct"][-2:] == [
        20_000,
        50_000,
    ]
    storage = run.world.holders["acct"].storage
    assert migrations.schema_version(storage) == migrations.LATEST
    store = HolderStore(storage)
    totals, lease_totals = store.grant_totals(), store.lease_totals()
    # Rebuilt from scratch, the totals say the same as those kept since.
    migrations.migrate(storage, "0001_grants_and_leases")
    migrations.migrate(storage)
    assert (store.grant_totals(), store.lease_totals()) == (totals, lease_totals)


def test_a_down_path_that_leaves_an_index_behind_is_caught() -> None:
    """migration-down-keeps-claim-index survives every run that rolls nothing back; a planned
    rollback catches it."""
    with (
        mutant("migration-down-keeps-claim-index").patch(),
        pytest.RaisesGroup(
            pytest.RaisesExc(sqlite3.OperationalError, match="grants_claim_deadline already exists"),
            flatten_subgroups=True,
        ),
    ):
        run_world(CONFIG, ROLLED_BACK, seed=3)


def test_a_holder_never_built_has_no_schema_to_roll_back() -> None:
    run = run_world(CONFIG, FaultPlan(rollbacks=(Rollback("acct", 0),)), seed=3)
    skipped = [(e["t"], e["target"], e["reason"]) for e in run.trace.of_kind("fault_skipped")]
    assert skipped == [(0, "holder:acct", "no schema to roll back yet")]
    assert not list(run.trace.of_kind("evict"))


@pytest.mark.parametrize(
    ("config", "plan", "message"),
    [
        (
            CONFIG,
            FaultPlan(rollbacks=(Rollback("other", 1_000),)),
            r"rollbacks\[0\]\.key 'other' names nothing",
        ),
        (CONFIG, FaultPlan(rollbacks=(Rollback("acct", 120_000),)), r"rollbacks\[0\]\.at_ms \(120000\)"),
        (
            attrs.evolve(CONFIG, design=DesignSpec(name="gate")),
            ROLLED_BACK,
            "faults.rollbacks is a fault of design semaphore",
        ),
    ],
)
def test_a_rollback_the_world_cannot_have_is_refused(
    config: WorldConfig, plan: FaultPlan, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_plan(config, plan)


def test_a_plan_without_rollbacks_reads_as_it_always_has() -> None:
    assert "rollbacks" not in FaultPlan().to_dict()
    assert list(ROLLED_BACK.to_dict()["rollbacks"]) == [
        {"key": "acct", "at_ms": 20_000},
        {"key": "acct", "at_ms": 50_000},
    ]
    assert FaultPlan.from_dict(ROLLED_BACK.to_dict()) == ROLLED_BACK
    with pytest.raises(ValueError, match=r"faults\.rollbacks\[0\]\.at_ms"):
        FaultPlan.from_dict({"rollbacks": [{"key": "acct", "at_ms": -1}]})


def test_the_deploy_rolled_back_scenario_is_the_fuzz_s_first_rollback() -> None:
    """The scenario worlds run first in every campaign: this one puts a rollback in each, so the
    fuzz kills a down path that leaves something behind even when no drawn run rolls back (a
    drawn holder eviction at an odd ms does, since 2026-12-04: a few runs in a hundred)."""
    scenario = SCENARIOS["deploy-rolled-back"]
    example = next(case for case in fuzz_examples() if case.faults == scenario.faults)
    assert example.faults.rollbacks
    mutated = attrs.evolve(example, variant="mutant/migration-down-keeps-claim-index")
    report, _ = run_case(mutated, frozenset())
    assert report.failure_name == "crash"
    assert "grants_claim_deadline already exists" in report.detail


def test_the_deploy_rolled_back_scenario_s_check_needs_its_rollbacks() -> None:
    scenario = SCENARIOS["deploy-rolled-back"]
    assert run_scenario(scenario).passed
    unrolled = run_scenario(attrs.evolve(scenario, faults=FaultPlan()))
    assert any("rolled back to 0001_grants_and_leases" in line for line in unrolled.failures)
    assert any("new holder instance was built" in line for line in unrolled.failures)
