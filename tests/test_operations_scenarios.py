"""The account-concurrency scenarios' checks fail on the wrong story (the stories themselves run in
tests/test_scenarios.py with every other scenario)."""

from __future__ import annotations

from typing import Any

import attrs

from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
from semsim.harness.run import run_world
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.world.faults import FaultPlan
from semsim.world.operations import OperationsSpec


def _unmet(name: str, **changes: Any) -> list[str]:
    scenario = SCENARIOS[name]
    result = run_scenario(attrs.evolve(scenario, **changes))
    return list(result.failures)


def test_with_an_attempt_timeout_longer_than_the_call_there_is_no_zombie() -> None:
    scenario = SCENARIOS["zombie-call-over-the-limit"]
    operations = scenario.config.operations
    assert isinstance(operations, OperationsSpec)
    config = attrs.evolve(scenario.config, operations=attrs.evolve(operations, attempt_timeout_ms=60_000))
    unmet = _unmet("zombie-call-over-the-limit", config=config)
    assert any("external_ceiling broke" in line for line in unmet), unmet
    assert any("two calls in flight" in line for line in unmet), unmet


def test_without_the_eviction_one_attempt_does_it() -> None:
    unmet = _unmet("eviction-mid-attempt", faults=FaultPlan())
    assert any("attempt 2 ran after the eviction" in line for line in unmet), unmet
    assert any("stored alarm brought it back" in line for line in unmet), unmet


def test_without_the_lost_reply_nothing_is_replayed() -> None:
    unmet = _unmet("lost-completion-replayed", faults=FaultPlan())
    assert any("attempt 1 timed out waiting" in line for line in unmet), unmet
    assert any("answered from the stored outcome" in line for line in unmet), unmet


def test_when_the_api_answers_the_hook_returns_the_permit_not_finished() -> None:
    unmet = _unmet("failed-last-attempt-returns-by-finished", faults=FaultPlan())
    assert any("three attempts, the last failed" in line for line in unmet), unmet
    assert any("through finished, not the hook" in line for line in unmet), unmet


def test_without_the_eviction_the_last_attempt_completes_and_nothing_overlaps() -> None:
    unmet = _unmet("last-attempt-evicted-terminal", faults=FaultPlan())
    assert any("ended terminal at the stored alarm" in line for line in unmet), unmet
    assert any("external_ceiling broke" in line for line in unmet), unmet


def test_without_the_api_errors_one_attempt_completes() -> None:
    unmet = _unmet("api-error-retried-under-one-permit", faults=FaultPlan())
    assert any("attempt 1 failed and was retried" in line for line in unmet), unmet


def test_without_leases_nothing_is_drawn() -> None:
    scenario = SCENARIOS["lease-drawn-operations"]
    config = attrs.evolve(scenario.config, holder=attrs.evolve(scenario.config.holder, leases=None))
    unmet = _unmet("lease-drawn-operations", config=config)
    assert any("drawn from the lease" in line for line in unmet), unmet


def test_with_a_quick_first_job_nothing_is_refused_or_overlapping() -> None:
    scenario = SCENARIOS["conflicts-exhaust-while-the-call-runs"]
    workload = attrs.evolve(
        scenario.config.workload,
        script=tuple(attrs.evolve(arrival, duration_ms=2_000) for arrival in scenario.config.workload.script),
    )
    unmet = _unmet(
        "conflicts-exhaust-while-the-call-runs", config=attrs.evolve(scenario.config, workload=workload)
    )
    assert any("refused while the call ran" in line for line in unmet), unmet
    assert any("external_ceiling" in line for line in unmet), unmet


def test_the_f5_stories_hold_every_invariant_with_f5s_fix_and_break_without_it() -> None:
    """F5's three stories (a timeout, an eviction then ``terminal``, conflicts then ``finished``)
    break ``external_ceiling`` on the reference and hold every invariant with its fix, on their
    own seed and three others."""
    stories = [s for s in SCENARIOS.values() if "F5" in s.tolerated]
    assert len(stories) == 3, [s.name for s in stories]
    for scenario in stories:
        fixed = attrs.evolve(
            scenario.config,
            holder=attrs.evolve(scenario.config.holder, fixes=(CALLS_END_WITHIN_THEIR_PERMIT,)),
        )
        for seed in (scenario.seed, 2, 3, 11):
            reference = run_world(scenario.config, scenario.faults, seed)
            assert (reference.result.invariant, reference.result.finding) == ("external_ceiling", "F5")
            run = run_world(fixed, scenario.faults, seed)
            assert run.result.outcome == "completed", (scenario.name, seed, run.result)
            assert not run.monitor.violations, (scenario.name, seed, run.monitor.violations)
