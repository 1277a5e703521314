"""``exact_accounting`` holds the holder object's rounds to the reference's timer (``#scheduleRound``)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from semsim.harness.run import run_world
from semsim.scenarios import SCENARIOS
from semsim.world.holder_object import HolderObject

STORY = "reports-duplicated"  # requests close enough that the period binds too


def _run() -> Any:
    story = SCENARIOS[STORY]
    return run_world(story.config, story.faults, story.seed, tolerated=story.tolerated)


def test_the_faithful_holder_runs_its_rounds_when_the_reference_would() -> None:
    run = _run()
    assert run.result.outcome == "completed", run.result
    assert run.trace.of_kind("grant"), "no round served anything: nothing was compared"


def _schedule(rule: str) -> Any:
    """The real ``_schedule_round``, fed a mistaken reading: no wait window, no period, or the
    period counted from now (the last round taken to be this instant)."""
    schedule = HolderObject._schedule_round

    def schedule_round(self: HolderObject) -> None:
        env, last = self.env, self._last_round_at
        if rule == "no wait window":
            self.env = attrs.evolve(env, round_wait_ms=0)
        elif rule == "no period":
            self.env = attrs.evolve(env, round_period_ms=0)
        else:
            self._last_round_at = self.ctx.sim.now()
        try:
            schedule(self)
        finally:
            self.env, self._last_round_at = env, last

    return schedule_round


@pytest.mark.parametrize("rule", ["no wait window", "no period", "period from now"])
def test_a_round_timer_other_than_the_references_is_a_difference(
    rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HolderObject, "_schedule_round", _schedule(rule))
    run = _run()
    assert run.result.invariant == "exact_accounting", run.result
    assert "round time" in run.result.detail
