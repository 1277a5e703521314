"""The account-concurrency scenarios' checks fail on the wrong story (the stories themselves run in
tests/test_scenarios.py with every other scenario)."""

from __future__ import annotations

from typing import Any

import attrs

from scenarios import SCENARIOS, run_scenario
from sim.world.faults import FaultPlan
from sim.world.operations import OperationsSpec


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
