"""``engine_timers``: the engine's in-memory timers are set as seed 002 sets them.

Two timers of the live instance decide when work runs, and nothing durable
records either, so the alarm checks (``alarm_follows_work``,
``handoff_alarm``) cannot see them:

- *The hand-off.* ``runAlarm`` (lines 1570-1601) races a pass's due work
  against a timer of ``alarmHandoffMs - (now - startedAt)``, set as the pass
  starts. So a pass that hands off does so exactly ``alarmHandoffMs`` after
  it started, and no pass returns later than that: its work either ended
  first or was handed to a fresh alarm. A hand-off that comes late keeps a
  platform invocation open past its budget; one that comes early hands work
  off that had time left.
- *The early timer.* ``scheduleEarlyAlarm`` (lines 1321-1363), after each
  reconcile, covers work due sooner than ``alarmMinDelayMs`` with an
  in-memory timer (the physical alarm cannot be set that close): asked for
  a time ``t`` at ``now``, it leaves a timer that covers ``t`` and fires at
  ``max(t, now)`` when ``t - now < alarmMinDelayMs`` (any delay, with live
  timers) and at most ``2**31 - 1`` ms off; otherwise, or with nothing
  asked, no early timer at all. A missing timer leaves a retry waiting for
  the physical alarm; a stale one runs a pass for work that is not due.

- *What ``reconcile`` returns.* It returns the timer time it read, or
  nothing when no participant has a physical time (lines 1300-1318), and
  the early timer is asked for what it returned. A return misplaced inside
  the branch that writes the alarm asks for nothing whenever the stored
  alarm is kept, and ``scheduleEarlyAlarm(undefined)`` then clears the
  timer: work due within ``alarmMinDelayMs`` waits for the physical alarm.
  Each call records the reading its ``reconcile`` took (``EarlyTimerSet.read``).

- *What ``reconcile`` asks for.* The early timer is asked for the earliest
  time a participant not holding its own alarm has work pending
  (``pendingTimes``, lines 1242-1278): for a durable table, its first
  pending row by ``next_attempt_at`` (with live timers, the first whose key
  is not executing). A head read in the wrong order, or from the wrong
  rows, leaves due retries waiting for a later row's time, a delay well
  within the physical alarm's slack (the client's ``alarmMinDelayMs`` is
  15 s, its retries' backoffs seconds). Each reading is held to the same
  reading taken from the rows at the same moment
  (:mod:`semsim.runtime.pending_rows`), the physical time too.

Judged from what each engine step records (``AlarmEnd``'s start and end,
``Step.early_timers``: the time ``reconcile`` asked for and the timer left)
and from the scheduler's reading of the rows beside each ``reconcile``
(``EngineReading.targets``); ``alarm_follows_work`` judges the alarm the
physical side of that reading leaves (docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from semaphore_core.durability import SchedulerOptions, Step
from semsim.check.checker import Checker, Fail
from semsim.runtime.pending_rows import TargetsRead

#: ``setTimeout``'s longest delay; a later early timer is not set (the reference's ``MAX_TIMER_MS``,
#: written again here: the checker keeps its own copy of the rule).
_MAX_TIMER_MS = 2**31 - 1


def early_timer(
    asked_ms: int | None, now_ms: int, options: SchedulerOptions
) -> tuple[int | None, int | None]:
    """The early timer ``scheduleEarlyAlarm(asked_ms)`` leaves at ``now_ms``: (covers, fires at)."""
    if asked_ms is None:
        return None, None
    delay_ms = asked_ms - now_ms
    if not options.live_timers and delay_ms >= options.alarm_min_delay_ms:
        return None, None
    if delay_ms > _MAX_TIMER_MS:
        return None, None
    return asked_ms, max(asked_ms, now_ms)


class EngineTimers(Checker):
    """Judges each engine step's alarm passes and early timers (a built-in check)."""

    name = "engine_timers"
    description = (
        "an alarm pass hands off exactly alarmHandoffMs after it started; early timers as reconcile asks"
    )

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_step(self, object: str, step: Step, options: SchedulerOptions) -> None:
        handoff_ms = options.alarm_handoff_ms
        for end in step.alarm_ends:
            ran_ms = end.ended_ms - end.started_ms
            if ran_ms > handoff_ms or (end.outcome == "handed_off" and ran_ms != handoff_ms):
                kind = "early" if end.early else "platform"
                self.fail(
                    self.name,
                    f"{object}: {kind} alarm pass {end.pass_id} started at {end.started_ms} and "
                    f"{end.outcome.replace('_', ' ')} at {end.ended_ms}, {ran_ms} ms later "
                    f"(alarmHandoffMs {handoff_ms}: it hands off then, and returns no later)",
                )
        for timer in step.early_timers:
            if timer.read is not None:
                physical_ms, timer_ms = timer.read
                returned = None if physical_ms is None else timer_ms
                if timer.asked_ms != returned:
                    self.fail(
                        self.name,
                        f"{object}: at {timer.now_ms} reconcile read the earliest pending work as"
                        f" {physical_ms} (alarm) and {timer_ms} (early timer), and asked for an early"
                        f" timer for {timer.asked_ms}, not {returned}",
                    )
            expected = early_timer(timer.asked_ms, timer.now_ms, options)
            if (timer.due_ms, timer.fires_ms) != expected:
                self.fail(
                    self.name,
                    f"{object}: at {timer.now_ms} reconcile asked for an early timer for "
                    f"{timer.asked_ms}; the engine left one covering {timer.due_ms} firing at "
                    f"{timer.fires_ms}, not {expected[0]} firing at {expected[1]} "
                    f"(alarmMinDelayMs {options.alarm_min_delay_ms})",
                )

    def on_targets(self, object: str, reads: Sequence[TargetsRead]) -> None:
        for read in reads:
            if (read.physical_ms, read.timer_ms) != (read.rows_physical_ms, read.rows_timer_ms):
                self.fail(
                    self.name,
                    f"{object}: at {read.now_ms} reconcile read the earliest pending work as"
                    f" {read.physical_ms} (alarm) and {read.timer_ms} (early timer); the rows say"
                    f" {read.rows_physical_ms} and {read.rows_timer_ms}",
                )
