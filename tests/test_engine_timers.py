"""``engine_timers``: the hand-off comes exactly ``alarmHandoffMs`` after a pass starts, and the
early timer is what ``scheduleEarlyAlarm`` leaves (docs/INVARIANTS.md).

The rule is shown on its edges, the check on the real engine in worlds that
reach both timers: it holds on the reference, judges something there, and
fails on a one-line change to either timer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
from semaphore_core.durability import SchedulerOptions, Step
from semsim.check.engine_timers import EngineTimers, early_timer
from semsim.harness.run import WorldRun, run_world
from semsim.world.faults import FaultPlan
from tests.durability_shell import Shell
from tests.operation_worlds import every_attempt_fails, handoff_world

MIN_DELAY_MS = 15_000


@pytest.mark.parametrize(
    ("asked_ms", "now_ms", "live", "expected"),
    [
        (None, 1_000, False, (None, None)),
        (1_000 + MIN_DELAY_MS - 1, 1_000, False, (1_000 + MIN_DELAY_MS - 1, 1_000 + MIN_DELAY_MS - 1)),
        (1_000 + MIN_DELAY_MS, 1_000, False, (None, None)),  # the physical alarm can be set that far
        (400, 1_000, False, (400, 1_000)),  # already due: fires now
        (1_000 + MIN_DELAY_MS, 1_000, True, (1_000 + MIN_DELAY_MS, 1_000 + MIN_DELAY_MS)),
        (1_000 + 2**31, 1_000, True, (None, None)),  # beyond setTimeout's reach
        (1_000 + 2**31 - 1, 1_000, True, (1_000 + 2**31 - 1, 1_000 + 2**31 - 1)),
    ],
)
def test_the_early_timer_rule(
    asked_ms: int | None, now_ms: int, live: bool, expected: tuple[int | None, int | None]
) -> None:
    options = SchedulerOptions(alarm_min_delay_ms=MIN_DELAY_MS, live_timers=live)
    assert early_timer(asked_ms, now_ms, options) == expected


Seen = dict[str, int]


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """What the check judged in the runs of the test: hand-offs, other pass ends, timers set."""
    counts = {"handed_off": 0, "returned": 0, "early_set": 0, "early_none": 0}
    judge = EngineTimers.on_step

    def counting(self: EngineTimers, object: str, step: Step, options: SchedulerOptions) -> None:
        for end in step.alarm_ends:
            counts["handed_off" if end.outcome == "handed_off" else "returned"] += 1
        for timer in step.early_timers:
            counts["early_set" if timer.due_ms is not None else "early_none"] += 1
        judge(self, object, step, options)

    monkeypatch.setattr(EngineTimers, "on_step", counting)
    return counts


def _retries() -> WorldRun:
    """Every attempt of one job fails: retries due within the alarm's minimum delay. The job comes
    at 60 s, so each retry's time is past ``alarmMinDelayMs`` as a number too."""
    config, faults = every_attempt_fails()
    [arrival] = config.workload.script
    workload = attrs.evolve(config.workload, script=(attrs.evolve(arrival, at_ms=60_000),))
    return run_world(attrs.evolve(config, workload=workload), faults, seed=1)


def _handoffs() -> WorldRun:
    """A 30 s call run by passes that hand off after 5 s."""
    return run_world(handoff_world(), FaultPlan(), seed=1)


@pytest.mark.parametrize("world", [_retries, _handoffs])
def test_the_reference_holds_and_is_judged(world: Callable[[], WorldRun], seen: Seen) -> None:
    run = world()
    assert run.result.outcome == "completed", run.result
    assert seen["early_set"] > 0, seen
    assert seen["early_none"] > 0, seen
    assert seen["handed_off" if world is _handoffs else "returned"] > 0, seen


def _planted_timer(kind: str, change: Callable[[int], int]) -> Callable[..., Any]:
    """``setTimeout`` with the delay of timers of ``kind`` changed: a bug in how that timer is set."""
    original = engine_module.Engine._set_timeout

    def planted(self: engine_module.Engine, delay_ms: int, timer_kind: Any, *args: Any, **kwargs: Any) -> int:
        delay_ms = change(delay_ms) if timer_kind == kind else delay_ms
        return original(self, delay_ms, timer_kind, *args, **kwargs)

    return planted


def _run_planted(monkeypatch: pytest.MonkeyPatch, world: Callable[[], WorldRun], **patches: Any) -> WorldRun:
    for name, value in patches.items():
        monkeypatch.setattr(engine_module.Engine, name, value)
    return world()


def test_a_handoff_a_millisecond_late_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_planted(monkeypatch, _handoffs, _set_timeout=_planted_timer("handoff", lambda ms: ms + 1))
    assert run.result.invariant == "engine_timers", run.result
    assert "handed off" in run.result.detail
    assert "5001 ms later" in run.result.detail


def test_a_handoff_timed_by_the_minimum_delay_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass hands off after ``alarmMinDelayMs`` (15 s here) instead of ``alarmHandoffMs`` (5 s)."""
    run = _run_planted(monkeypatch, _handoffs, _set_timeout=_planted_timer("handoff", lambda ms: ms + 10_000))
    assert run.result.invariant == "engine_timers", run.result


def test_an_early_timer_that_fires_late_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_planted(monkeypatch, _retries, _set_timeout=_planted_timer("early_alarm", lambda ms: ms + 1))
    assert run.result.invariant == "engine_timers", run.result
    assert "reconcile asked for an early timer" in run.result.detail


def test_an_early_timer_tested_against_the_timestamp_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """``timestamp >= alarmMinDelayMs`` where the reference tests the delay: never set, so retries
    wait for the physical alarm."""
    original = engine_module.Engine._schedule_early_alarm

    def planted(self: engine_module.Engine, timestamp: int | None) -> None:
        if timestamp is not None and timestamp >= self.options.alarm_min_delay_ms:
            original(self, None)  # clears the old one, as the reference's early return would not
            return
        original(self, timestamp)

    run = _run_planted(monkeypatch, _retries, _schedule_early_alarm=planted)
    assert run.result.invariant == "engine_timers", run.result


def test_a_stale_early_timer_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing asked for (no work pending) but the old timer kept."""
    original = engine_module.Engine._schedule_early_alarm

    def planted(self: engine_module.Engine, timestamp: int | None) -> None:
        if timestamp is not None:
            original(self, timestamp)

    run = _run_planted(monkeypatch, _retries, _schedule_early_alarm=planted)
    assert run.result.invariant == "engine_timers", run.result


def test_each_reconcile_records_its_early_timer_and_a_retired_engine_records_none() -> None:
    shell = Shell(delay=lambda attempt: 5_000)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.fail(attempt, RuntimeError("x"), 100)
    # The failure's own transaction and the reconcile after it: both leave the retry's timer.
    assert [(t.asked_ms, t.now_ms, t.due_ms, t.fires_ms) for t in step.early_timers] == [
        (5_100, 100, 5_100, 5_100)
    ] * 2
    shell.engine.retire()  # sets no timers from now on, so it records no decision to judge
    assert shell.engine.refresh(200).early_timers == ()
