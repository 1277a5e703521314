"""``released_at_end``: an operation's permit comes back in the step its operation ends
(docs/INVARIANTS.md).

Held on the reference in a world where one operation fails for good (its last
attempt lost with an evicted instance: ``terminal``) and in one where
operations complete; failing on a hook that reads only one of the two events.
Not judged under F5's fix, whose release waits for the operation's calls.
"""

from __future__ import annotations

import attrs
import pytest

import semsim.world.client_object as client_object_module
from semaphore_core.durability import AttemptSettled, Event, Step, Terminal
from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
from semsim.check.released_at_end import ReleasedAtEnd
from semsim.harness.run import WorldRun, run_world
from semsim.scenarios import SCENARIOS
from semsim.scenarios.operations import one_job
from semsim.world.faults import FaultPlan
from semsim.world.operations import releases_permit


def _terminal() -> WorldRun:
    """The scenario's world: job 1 ends terminal at 16.005 s (F5 follows, tolerated as there)."""
    scenario = SCENARIOS["last-attempt-evicted-terminal"]
    return run_world(scenario.config, scenario.faults, scenario.seed, tolerated=scenario.tolerated)


def _completed(fixes: tuple[str, ...] = ()) -> WorldRun:
    config = one_job(2_000, limit=2, count=3)
    config = attrs.evolve(config, holder=attrs.evolve(config.holder, fixes=fixes))
    return run_world(config, FaultPlan(), seed=1)


def _without(kind: type) -> object:
    def hook(event: Event) -> str | None:
        return None if isinstance(event, kind) else releases_permit(event)

    return hook


def test_the_reference_holds_where_operations_end_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    ended: list[str] = []
    judge = ReleasedAtEnd.on_step

    def seeing(self: ReleasedAtEnd, object: str, step: Step) -> None:
        ended.extend(event.type for event in step.events if isinstance(event, Terminal | AttemptSettled))
        judge(self, object, step)

    monkeypatch.setattr(ReleasedAtEnd, "on_step", seeing)
    for run in (_terminal(), _completed()):
        assert run.result.outcome == "completed", run.result
    assert "terminal" in ended
    assert "attempt_settled" in ended


def test_a_hook_that_ignores_terminal_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_object_module, "releases_permit", _without(Terminal))
    run = _terminal()
    assert run.result.invariant == "released_at_end", run.result
    assert "ended (terminal)" in run.result.detail


def test_a_hook_that_ignores_completions_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_object_module, "releases_permit", _without(AttemptSettled))
    run = _completed()
    assert run.result.invariant == "released_at_end", run.result
    assert "ended (attempt_settled)" in run.result.detail


def test_under_f5_s_fix_the_release_may_wait_and_is_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_object_module, "releases_permit", _without(AttemptSettled))
    run = _completed((CALLS_END_WITHIN_THEIR_PERMIT,))
    assert run.result.invariant != "released_at_end", run.result
