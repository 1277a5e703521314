"""``engine_timers``: the hand-off comes exactly ``alarmHandoffMs`` after a pass starts, and the
early timer is what ``scheduleEarlyAlarm`` leaves, asked for the earliest work the rows hold
(docs/INVARIANTS.md).

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
from semaphore_core.durability.microtasks import js_async
from semsim.check.engine_timers import EngineTimers, early_timer
from semsim.harness.run import WorldRun, run_world
from semsim.runtime.pending_rows import TargetsRead, rows_targets
from semsim.world.faults import FaultPlan
from tests.durability_shell import Shell
from tests.operation_worlds import every_attempt_fails, handoff_world, heads_by_creation

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


def test_a_reconcile_that_asks_for_nothing_when_it_keeps_the_alarm_is_caught(
    monkeypatch: pytest.MonkeyPatch, seen: Seen
) -> None:
    """Seed 002's last ``return`` (line 1318) placed inside the branch that writes the alarm: a
    reconcile that keeps the stored alarm returns nothing, and the early timer is cleared. The
    timer then matches what it was asked for, and the reading matches the rows: only the reading
    against what reconcile returned tells."""
    assert _retries().result.outcome == "completed"
    kept = seen["early_set"]
    assert kept > 0, seen

    async def reconcile(self: engine_module.Engine, txn: Any) -> int | None:
        self.reconciles += 1
        physical_next_at, timer_next_at = self._targets()
        if self.targets_observer is not None:
            self.targets_observer(physical_next_at, timer_next_at)
        current = await txn.get_alarm()
        if physical_next_at is None:
            if current is not None:
                await txn.delete_alarm()
            return None
        target = self._alarm_target(physical_next_at, current)
        if target is not None:
            await txn.set_alarm(target)
            return timer_next_at
        return None

    def reconcile_now(self: engine_module.Engine) -> int | None:
        self.reconciles += 1
        physical_next_at, timer_next_at = self._targets()
        if self.targets_observer is not None:
            self.targets_observer(physical_next_at, timer_next_at)
        current = self._alarm.get_alarm()
        if physical_next_at is None:
            if current is not None:
                self._alarm.delete_alarm()
            return None
        target = self._alarm_target(physical_next_at, current)
        if target is not None:
            self._alarm.set_alarm(target)
            return timer_next_at
        return None

    planted = js_async(reconcile)
    run = _run_planted(monkeypatch, _retries, _reconcile=planted, _reconcile_now=reconcile_now)
    assert run.result.invariant == "engine_timers", run.result
    assert "and asked for an early timer for None, not" in run.result.detail, run.result.detail


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


def _two_jobs_retrying() -> WorldRun:
    """Two jobs half a second apart, every call failing: their retries (seconds off, within the
    client's 15 s alarm floor, so the early timer's) fall due out of the order they were made."""
    config, faults = every_attempt_fails()
    config = attrs.evolve(config, holder=attrs.evolve(config.holder, limit=2))
    [arrival] = config.workload.script
    jobs = (attrs.evolve(arrival, duration_ms=1_000), attrs.evolve(arrival, at_ms=1_500, duration_ms=1_000))
    workload = attrs.evolve(config.workload, script=jobs)
    return run_world(attrs.evolve(config, workload=workload), faults, seed=1)


def test_reconcile_is_judged_against_the_rows_and_a_head_read_by_creation_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The early timer is asked for the earliest due row; read in creation order it is asked for
    an older row's later retry, a delay no alarm check sees (within ``alarmMinDelayMs``)."""
    reads: list[TargetsRead] = []
    judge = EngineTimers.on_targets

    def counting(self: EngineTimers, object: str, targets: Any) -> None:
        reads.extend(targets)
        judge(self, object, targets)

    monkeypatch.setattr(EngineTimers, "on_targets", counting)
    assert _two_jobs_retrying().result.outcome == "completed"
    assert any(read.rows_timer_ms is not None for read in reads), reads
    monkeypatch.setattr(engine_module, "pending_heads", heads_by_creation)
    run = _two_jobs_retrying()
    assert run.result.invariant == "engine_timers", run.result
    assert "reconcile read the earliest pending work as" in run.result.detail


def test_a_reading_that_disagrees_with_the_rows_fails() -> None:
    failed: list[str] = []
    check = EngineTimers(lambda name, detail, *args, **kwargs: failed.append(detail))
    agree = TargetsRead(5, physical_ms=10, timer_ms=None, rows_physical_ms=10, rows_timer_ms=None)
    check.on_targets("client-0", [agree])
    assert failed == []
    check.on_targets("client-0", [attrs.evolve(agree, timer_ms=10)])
    check.on_targets("client-0", [attrs.evolve(agree, physical_ms=12)])
    assert len(failed) == 2
    assert "the rows say 10 and None" in failed[0]


@pytest.mark.parametrize("live", [False, True])
def test_the_rows_reading_is_the_engines_on_the_reference(live: bool) -> None:
    """Every ``reconcile`` of a shell with retries pending and attempts executing reads what the
    rows say, with live timers (the timer skips keys executing) and without."""
    shell = Shell(delay=lambda attempt: 5_000 * attempt, live_timers=live, alarm_concurrency=1)
    seen: list[tuple[tuple[int | None, int | None], tuple[int | None, int | None]]] = []
    shell.engine.targets_observer = lambda physical, timer: seen.append(
        ((physical, timer), rows_targets(shell.engine))
    )
    [first] = shell.register("a", now=0).started
    shell.register("b", now=10)  # waits for the pool's one permit
    step = shell.engine.fail(first, RuntimeError("x"), 100)
    for attempt in step.started:
        shell.engine.fail(attempt, RuntimeError("x"), 200)
    shell.engine.refresh(300)
    assert len(seen) >= 4
    assert all(engine == rows for engine, rows in seen), seen
    assert any(rows[1] is not None for _, rows in seen), seen
    # With live timers a key executing is skipped by the timer, not by the alarm.
    assert any(rows[0] != rows[1] for _, rows in seen) == live, seen
