"""Evictions aimed at an attempt (``Eviction.in_attempt``): they strike as an attempt's call leaves,
wait no longer than their aim allows, are refused where no attempt can run, and read back as written."""

from __future__ import annotations

import attrs
import pytest

from semsim.harness.run import WorldConfig, WorldRun, check_plan, run_world
from semsim.scenarios.operations import CLIENT, one_job
from semsim.world.faults import EVICT_AIM_MS, EVICT_INTO_ATTEMPT_MS, Eviction, FaultPlan
from semsim.world.mutant_catalog import mutant

F5 = frozenset({"F5"})


def _last_attempt_world() -> tuple[WorldConfig, FaultPlan]:
    """One attempt allowed, two 30 s jobs; the eviction is aimed from 0 ms, long before any attempt."""
    config = one_job(30_000, idempotent=False, count=2)
    assert config.operations is not None
    config = attrs.evolve(config, operations=attrs.evolve(config.operations, max_attempts=1))
    return config, FaultPlan(evictions=(Eviction(CLIENT, 0, in_attempt=True),))


def _api_starts(run: WorldRun) -> list[int]:
    return [e["t"] for e in run.trace.of_kind("api_start")]


def test_an_aimed_eviction_strikes_as_the_attempts_call_leaves() -> None:
    config, faults = _last_attempt_world()
    run = run_world(config, faults, seed=1, tolerated=F5)
    evictions = [e for e in run.trace.of_kind("fault") if e["fault"] == "evict"]
    assert [(e["target"], e["in_attempt"]) for e in evictions] == [(CLIENT, True)]
    first_call = _api_starts(run)[0]
    # The call left before the eviction, and the eviction came within the attempt's first ms.
    attempt_started = next(e["t"] for e in run.trace.of_kind("operation") if e["type"] == "attempt_started")
    assert attempt_started + EVICT_INTO_ATTEMPT_MS == evictions[0]["t"]
    # The call had left: it reached the API after the eviction, with nobody left to hear it.
    assert first_call > evictions[0]["t"]
    # The only attempt was lost: the stored alarm finds none left, and the operation ends terminal.
    assert [e["type"] for e in run.trace.of_kind("operation")].count("terminal") == 1


def test_at_a_random_time_the_same_eviction_finds_no_attempt() -> None:
    """What the aim buys: evicted at 0 ms, before any work, no attempt is lost and none ends terminal."""
    config, _ = _last_attempt_world()
    run = run_world(config, FaultPlan(evictions=(Eviction(CLIENT, 0),)), seed=1, tolerated=F5)
    assert "terminal" not in [e["type"] for e in run.trace.of_kind("operation")]


def test_an_attempt_claimed_once_too_often_is_caught_by_an_aimed_eviction() -> None:
    """claim-one-attempt-too-many survived every drawn run at random eviction times."""
    config, faults = _last_attempt_world()
    assert run_world(config, faults, seed=1, tolerated=F5).result.outcome == "completed"
    with mutant("claim-one-attempt-too-many").patch():
        broken = run_world(config, faults, seed=1, tolerated=F5)
    assert (broken.result.outcome, broken.result.invariant) == ("violation", "attempts_bounded")


def test_an_aim_that_finds_no_attempt_strikes_at_its_end() -> None:
    config, _ = _last_attempt_world()
    late = (attrs.evolve(config.workload.script[0], at_ms=100_000),)  # no work until after the aim
    quiet = attrs.evolve(config, workload=attrs.evolve(config.workload, script=late))
    run = run_world(quiet, FaultPlan(evictions=(Eviction(CLIENT, 5_000, in_attempt=True),)), seed=1)
    evictions = [(e["t"], e["in_attempt"]) for e in run.trace.of_kind("fault") if e["fault"] == "evict"]
    assert evictions == [(5_000 + EVICT_AIM_MS, False)]
    assert [e["t"] for e in run.trace.of_kind("evict")] == [5_000 + EVICT_AIM_MS]


def test_two_aims_at_one_client_both_strike() -> None:
    config, _ = _last_attempt_world()
    twice = FaultPlan(evictions=(Eviction(CLIENT, 0, in_attempt=True), Eviction(CLIENT, 0, in_attempt=True)))
    run = run_world(config, twice, seed=1, tolerated=F5)
    assert [e["in_attempt"] for e in run.trace.of_kind("fault") if e["fault"] == "evict"] == [True, True]


def test_the_quiet_period_begins_after_the_latest_an_aim_may_strike() -> None:
    aimed = FaultPlan(evictions=(Eviction(CLIENT, 1_000, in_attempt=True),))
    assert aimed.quiet_from_ms(180_000) == 1_000 + EVICT_AIM_MS + EVICT_INTO_ATTEMPT_MS
    assert FaultPlan(evictions=(Eviction(CLIENT, 1_000),)).quiet_from_ms(180_000) == 1_000


@pytest.mark.parametrize(
    ("eviction", "operations", "message"),
    [
        (Eviction("holder:acct", 0, in_attempt=True), True, "'holder:acct' is not a client"),
        (Eviction(CLIENT, 0, in_attempt=True), False, "only a semaphore world with config.operations"),
        (Eviction(CLIENT, 150_000, in_attempt=True), True, "may strike as late as 210001"),
    ],
)
def test_an_aim_where_no_attempt_can_be_struck_is_refused(
    eviction: Eviction, operations: bool, message: str
) -> None:
    config, _ = _last_attempt_world()
    if not operations:
        config = attrs.evolve(config, operations=None)
    with pytest.raises(ValueError, match=message):
        check_plan(config, FaultPlan(evictions=(eviction,)))


def test_an_eviction_at_its_time_reads_as_it_always_has() -> None:
    plain = FaultPlan(evictions=(Eviction(CLIENT, 5),))
    assert list(plain.to_dict()["evictions"]) == [{"target": CLIENT, "at_ms": 5}]
    aimed = FaultPlan(evictions=(Eviction(CLIENT, 5, in_attempt=True),))
    assert list(aimed.to_dict()["evictions"]) == [{"target": CLIENT, "at_ms": 5, "in_attempt": True}]
    assert FaultPlan.from_dict(aimed.to_dict()) == aimed
    assert FaultPlan.from_dict(plain.to_dict()) == plain
    with pytest.raises(ValueError, match=r"faults\.evictions\[0\]\.in_attempt"):
        FaultPlan.from_dict({"evictions": [{"target": CLIENT, "at_ms": 5, "in_attempt": "yes"}]})
