"""``exact_accounting`` holds the holder object's rounds to the reference's timer (``#scheduleRound``)."""

from __future__ import annotations

from typing import Any

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
    def schedule_round(self: HolderObject) -> None:
        if self._timer_armed or self._round_running:
            return
        now = self.ctx.sim.now()
        earliest = now if self._last_round_at is None else self._last_round_at + self.env.round_period_ms
        delay = {
            "no wait window": max(0, earliest - now),
            "no period": self.env.round_wait_ms,
            "period from now": max(self.env.round_wait_ms, self.env.round_period_ms),
        }[rule]
        self._timer_armed = True

        def timer() -> None:
            self._timer_armed = False
            self._round_running = True
            try:
                self._run_round()
            finally:
                self._round_running = False
                if self._pending:
                    self._schedule_round()

        self.ctx.call_at(now + delay, timer)

    return schedule_round


@pytest.mark.parametrize("rule", ["no wait window", "no period", "period from now"])
def test_a_round_timer_other_than_the_references_is_a_difference(
    rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HolderObject, "_schedule_round", _schedule(rule))
    run = _run()
    assert run.result.invariant == "exact_accounting", run.result
    assert "round time" in run.result.detail
