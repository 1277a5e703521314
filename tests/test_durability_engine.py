"""The scheduler ``Engine``: the alarm, the early timer, passes, hand-off, fallback, pool, liveTimers.

One test per behaviour of seed 002's ``scheduler.ts``; line numbers are seed 002's.
"""

from __future__ import annotations

import sqlite3

import pytest

from semaphore_core.durability import (
    AlarmInfo,
    DurableTable,
    Engine,
    Participant,
    SchedulerOptions,
    SqliteAlarm,
    Step,
)
from semaphore_core.durability.engine import Join
from tests.durability_shell import Shell


def test_reconcile_sets_the_alarm_no_sooner_than_the_minimum_delay() -> None:
    """Lines 1309-1317: ``target = max(physicalNextAt, now + alarmMinDelayMs)``."""
    shell = Shell(alarm_concurrency=1, alarm_min_delay_ms=2_000)
    shell.register("hold", now=0)
    assert shell.alarm.get_alarm() == 2_000
    shell.register("b", now=1_000)
    # An alarm inside [earliest pending, target] is kept, so frequent writes cannot push it later.
    assert shell.alarm.get_alarm() == 2_000


def test_reconcile_moves_an_alarm_that_is_later_than_the_target() -> None:
    """Lines 1311-1317: ``currentAlarm > target`` re-arms."""
    shell = Shell(alarm_concurrency=1)
    shell.register("hold", now=0)
    shell.alarm.set_alarm(99_999)
    shell.register("b", now=100)
    assert shell.alarm.get_alarm() == 15_100


def test_reconcile_deletes_the_alarm_when_nothing_is_pending() -> None:
    """Lines 1302-1306."""
    shell = Shell()
    [attempt] = shell.register("a", now=0).started
    assert shell.alarm.get_alarm() == 15_000
    shell.engine.complete(attempt, None, 10)
    assert shell.alarm.get_alarm() is None


def test_completion_alone_does_not_reconcile_the_alarm() -> None:
    """Lines 1697-1705: completion is ``transactionSync`` (1196-1199), which leaves the alarm alone;
    the pass's closing ``scheduleNextAlarm`` (line 1600) reconciles it. Mid-pass, the platform has
    consumed the alarm."""
    shell = Shell()
    shell.register("a", now=0)
    shell.register("b", now=0)
    shell.evict()  # both rows stay pending at attempt 1
    a, b = shell.platform_alarm(15_000).started
    assert shell.alarm.get_alarm() is None
    shell.engine.complete(a, None, 15_100)
    assert shell.alarm.get_alarm() is None  # b still pending, but a completion does not re-arm
    step = shell.engine.complete(b, None, 15_200)
    assert [end.outcome for end in step.alarm_ends] == ["completed"]
    assert shell.alarm.get_alarm() is None


def test_the_early_timer_is_kept_when_reconcile_returns_the_same_time() -> None:
    """Lines 1322-1324: ``earlyAlarm?.timestamp === timestamp`` keeps the armed timer and its firing time."""
    shell = Shell(alarm_concurrency=1)
    shell.register("hold", now=0)
    [before] = [t for t in shell.engine.timers() if t.kind == "early_alarm"]
    shell.register("b", now=5)  # reconciles again: the earliest pending row is still "hold", due at 0
    [after] = [t for t in shell.engine.timers() if t.kind == "early_alarm"]
    assert (after.at_ms, after.seq) == (before.at_ms, before.seq) == (0, before.seq)


def test_the_early_timer_covers_work_due_before_the_alarm() -> None:
    """``scheduleEarlyAlarm`` (lines 1321-1363): only for delays under alarmMinDelayMs without liveTimers."""
    shell = Shell(delay=lambda attempt: 5_000)
    [attempt] = shell.register("a", now=0).started
    shell.engine.fail(attempt, RuntimeError("x"), 100)
    early = [t for t in shell.engine.timers() if t.kind == "early_alarm"]
    assert [t.at_ms for t in early] == [5_100]
    [second] = shell.engine.advance(5_100).started
    assert second.attempt == 2


def test_no_early_timer_for_work_due_after_the_minimum_delay() -> None:
    shell = Shell(delay=lambda attempt: 20_000)
    [attempt] = shell.register("a", now=0).started
    shell.engine.fail(attempt, RuntimeError("x"), 100)
    assert [t for t in shell.engine.timers() if t.kind == "early_alarm"] == []
    assert shell.alarm.get_alarm() == 20_100
    assert shell.platform_alarm(20_100).started[0].attempt == 2


def test_live_timers_fire_at_the_exact_due_time_beyond_the_minimum_delay() -> None:
    """``liveTimers`` (lines 915-921, 1338-1344)."""
    shell = Shell(delay=lambda attempt: 20_000, live_timers=True)
    [attempt] = shell.register("a", now=0).started
    shell.engine.fail(attempt, RuntimeError("x"), 100)
    early = [t for t in shell.engine.timers() if t.kind == "early_alarm"]
    assert [t.at_ms for t in early] == [20_100]


def test_live_timers_skip_active_rows_so_a_pass_does_not_wait_on_them() -> None:
    """``#runDue`` (lines 611-613) and ``pendingTimes`` (1255-1277) under liveTimers."""
    shell = Shell(live_timers=True)
    shell.register("a", now=0)
    # Registration reconciled before the eager start, so its early timer is set; its pass skips the
    # now-active row and returns at once, and the refresh that follows arms no timer for it.
    step = shell.engine.advance(0)
    assert [end.outcome for end in step.alarm_ends] == ["completed"]
    assert [t.kind for t in shell.engine.timers()] == ["attempt_timeout"]
    assert [end.outcome for end in shell.engine.alarm(10).alarm_ends] == ["completed"]


def test_live_timers_re_arm_the_timer_when_a_skipped_row_settles() -> None:
    """``settled.finally`` (lines 1729-1745): under liveTimers a settling execution refreshes the alarm,
    so the retry the timer skipped while its zombie ran is picked up at its exact time."""
    shell = Shell(live_timers=True, attempt_timeout_ms=5_000)
    [attempt] = shell.register("a", now=0).started
    shell.engine.advance(5_000)  # times out: retry due at 6 000, but "a" is active, so no timer for it
    assert [t.kind for t in shell.engine.timers()] == []
    shell.engine.complete(attempt, "late", 9_000)  # the zombie settles
    assert [(t.kind, t.at_ms) for t in shell.engine.timers()] == [("early_alarm", 9_000)]
    [second] = shell.engine.advance(9_000).started
    assert second.attempt == 2


def test_live_timers_look_past_running_rows_for_the_timer() -> None:
    """``pendingTimes`` (lines 1259-1279): ``LIMIT active.size + 1`` rows, the first that is not active."""
    shell = Shell(alarm_concurrency=1, live_timers=True)
    shell.register("a", now=0)  # runs, still due at 0
    shell.register("b", now=100)  # no permit: waits, due at 100
    assert [(t.kind, t.at_ms) for t in shell.engine.timers()][:1] == [("early_alarm", 100)]


def test_live_timers_leave_work_beyond_the_timer_range_to_the_alarm() -> None:
    """``delay > maxTimerMs`` (lines 961, 1340-1342) arms no timer, even under liveTimers."""
    shell = Shell(live_timers=True, delay=lambda attempt: 2**31)
    [attempt] = shell.register("a", now=0).started
    shell.engine.fail(attempt, RuntimeError("x"), 100)
    assert [t.kind for t in shell.engine.timers()] == []
    assert shell.alarm.get_alarm() == 100 + 2**31


def test_without_live_timers_a_pass_waits_for_a_running_row() -> None:
    """``#execute`` awaits ``running.settled`` (lines 716-721); the pass returns when it settles."""
    shell = Shell()
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.alarm(10)
    assert step.alarm_ends == ()
    step = shell.engine.complete(attempt, None, 20)
    assert [end.outcome for end in step.alarm_ends] == ["completed"]


def test_a_pass_runs_due_rows_earliest_first_within_alarm_concurrency() -> None:
    """``#runDue`` (lines 594-621) and ``runConcurrent`` (1484-1504)."""
    shell = Shell(alarm_concurrency=2)
    shell.register("hold-1", now=0)
    shell.register("hold-2", now=0)
    shell.register("c", now=3)
    shell.register("b", now=5)
    shell.conn.execute("UPDATE durability_calls SET next_attempt_at = 2 WHERE id = 'b'")
    for attempt in shell.engine.running():
        shell.engine.complete(attempt, None, 10)
    step = shell.platform_alarm(15_000)
    assert [a.id for a in step.started] == ["b", "c"]


def test_a_freed_permit_goes_to_the_oldest_waiter() -> None:
    """``createRelease`` (lines 1468-1482): ``permitWaiters.shift()``, FIFO. Under liveTimers the pass
    skips the two running rows (lines 611-613), so both its workers wait for a permit: "a", then "b"."""
    shell = Shell(alarm_concurrency=2, live_timers=True)
    [hold, _] = [*shell.register("hold-1", now=0).started, *shell.register("hold-2", now=0).started]
    shell.register("a", now=1)
    shell.register("b", now=2)
    assert shell.engine.alarm(10).started == ()  # both workers wait for a permit
    step = shell.engine.complete(hold, None, 20)
    assert [a.id for a in step.started] == ["a"]
    assert shell.engine.permits_held == 2


def test_a_pass_runs_at_most_alarm_concurrency_rows_at_once() -> None:
    """``runConcurrent`` (lines 1484-1504): ``min(alarmConcurrency, n)`` workers, so the third due row is not
    even looked up (not active) until a worker is free; under liveTimers the timer then still offers it."""
    shell = Shell(alarm_concurrency=2, live_timers=True)
    for id in ("a", "b", "c"):
        shell.conn.execute(
            "INSERT INTO durability_calls (id, operation, payload, status, attempt, next_attempt_at,"
            " created_at, generation_id) VALUES (?, 'run', '{}', 'pending', 0, 0, 0, ?)",
            (id, f"g-{id}"),
        )
    a, _ = shell.engine.alarm(0).started
    assert sorted(shell.durability.active) == ["a", "b"]
    shell.engine.refresh(1)
    assert [(t.kind, t.at_ms) for t in shell.engine.timers()][:1] == [("early_alarm", 1)]
    [c] = shell.engine.complete(a, None, 2).started  # the freed worker takes "c"
    assert c.id == "c"


def test_several_participants_share_one_engine_and_one_alarm() -> None:
    """``register`` (lines 1138-1144), ``reconcile`` over every participant, one pass runs them all."""
    shell = Shell()
    seen: list[int] = []
    due = [4_000]
    other = DurableTable(name="other_table", key="k")

    def run_due(now: int, info: AlarmInfo | None) -> None:
        seen.append(now)
        due.clear()  # its due work is done

    shell.engine.register(
        Participant(table=other, run_due=run_due, next_pending_at=lambda conn: due[0] if due else None)
    )
    shell.engine.refresh(0)
    assert shell.alarm.get_alarm() == 15_000
    assert [t.at_ms for t in shell.engine.timers()] == [4_000]
    shell.engine.advance(4_000)
    assert seen == [4_000]
    with pytest.raises(ValueError, match="already attached"):
        shell.engine.register(Participant(table=other, run_due=lambda now, info: None))


def test_a_holding_participant_arms_only_the_physical_alarm() -> None:
    """``holding`` (lines 980-985, 1246-1253)."""
    shell = Shell()
    shell.engine.register(
        Participant(
            table=DurableTable("held", "k"),
            run_due=lambda now, info: None,
            next_pending_at=lambda conn: 100,
            holding=lambda: True,
        )
    )
    shell.engine.refresh(0)
    assert shell.alarm.get_alarm() == 15_000
    assert shell.engine.timers() == []


def test_a_throwing_pass_arms_its_own_fallback_alarm() -> None:
    """``alarm`` (lines 1510-1528) and ``armFallbackAlarm`` (1604-1611); walkthrough line 1928."""
    shell = Shell()

    def broken(now: int, info: AlarmInfo | None) -> Join | None:
        raise OSError("storage hiccup")

    shell.engine.register(Participant(table=DurableTable("t", "k"), run_due=broken))
    step = shell.engine.alarm(1_000, AlarmInfo(retry_count=2, is_retry=True))
    [end] = step.alarm_ends
    assert end.outcome == "retrying"
    assert shell.alarm.get_alarm() == 16_000
    [retry] = step.alarm_retries
    assert (retry.retry_in_ms, retry.retry_count, retry.is_retry) == (15_000, 2, True)
    assert [f.label for f in step.failures] == ["durability.alarm.failed"]


def test_a_participant_whose_due_work_rejects_later_fails_the_pass() -> None:
    """``runAlarm`` (lines 1570-1601): the ``Promise.all`` over every participant's ``runDue`` rejects as soon
    as one rejects, whenever that is; ``alarm``'s catch then arms the fallback (lines 1510-1528)."""
    shell = Shell()
    work: list[Join] = []

    def run_due(now: int, info: AlarmInfo | None) -> Join:
        work.append(Join(shell.engine))
        return work[-1]

    shell.engine.register(Participant(table=DurableTable("t", "k"), run_due=run_due))
    assert shell.engine.alarm(1_000).alarm_ends == ()
    step = shell.engine.run_step(2_000, lambda: work[0].reject(OSError("late failure")))
    [end] = step.alarm_ends
    assert (end.outcome, str(end.error)) == ("retrying", "late failure")
    assert shell.alarm.get_alarm() == 17_000
    assert shell.engine.open_passes == ()


def test_when_the_fallback_cannot_be_armed_the_pass_fails_to_the_platform() -> None:
    """Line 1517: ``if (!(await this.armFallbackAlarm())) throw error``."""
    shell = Shell()

    def broken(now: int, info: AlarmInfo | None) -> Join | None:
        raise OSError("storage hiccup")

    def no_alarm(at_ms: int) -> None:
        raise OSError("alarm")

    shell.engine.register(Participant(table=DurableTable("t", "k"), run_due=broken))
    shell.alarm.set_alarm = no_alarm  # type: ignore[method-assign]
    [end] = shell.engine.alarm(1_000).alarm_ends
    assert (end.outcome, str(end.error)) == ("failed", "storage hiccup")


def test_an_early_pass_whose_fallback_cannot_be_armed_is_only_reported() -> None:
    """The early timer calls ``alarm()`` and only reports its rejection (lines 1346-1358)."""
    shell = Shell()

    def broken(now: int, info: AlarmInfo | None) -> Join | None:
        raise OSError("storage hiccup")

    shell.engine.register(
        Participant(table=DurableTable("t", "k"), run_due=broken, next_pending_at=lambda conn: 0)
    )
    shell.engine.refresh(0)  # arms the early timer at 0

    def no_alarm(at_ms: int) -> None:
        raise OSError("alarm")

    shell.alarm.set_alarm = no_alarm  # type: ignore[method-assign]
    step = shell.engine.advance(0)
    assert [(end.early, end.outcome) for end in step.alarm_ends] == [(True, "failed")]
    assert [f.label for f in step.failures] == ["durability.background_execution.failed"]
    assert step.alarm_retries == ()


def test_a_long_pass_hands_off_after_alarm_handoff_ms() -> None:
    """``runAlarm``'s race (lines 1570-1601) and ``armForHandoff`` (1613-1621); walkthrough line 1929."""
    shell = Shell(alarm_concurrency=1, alarm_handoff_ms=60_000, attempt_timeout_ms=600_000)
    shell.register("hold", now=0)
    shell.register("b", now=1)
    shell.engine.advance(1)  # the early timer's pass starts and waits behind "hold"
    shell.alarm.delete_alarm()  # the platform consumed it
    shell.engine.alarm(15_000)
    # Two passes wait behind "hold": the early timer's (t=0) and the platform's (t=15 000).
    step = shell.engine.advance(60_001)
    assert [(end.pass_id, end.outcome) for end in step.alarm_ends] == [(1, "handed_off")]
    assert shell.alarm.get_alarm() == 75_001
    step = shell.engine.advance(75_000)
    assert [(end.pass_id, end.outcome) for end in step.alarm_ends] == [(2, "handed_off")]
    assert shell.alarm.get_alarm() == 75_001  # kept: no later than now + alarmMinDelayMs
    assert shell.engine.open_passes == ()


def test_the_handoff_keeps_an_earlier_alarm() -> None:
    """``armForHandoff`` sets only when no alarm or a later one is stored."""
    shell = Shell(alarm_concurrency=1, alarm_handoff_ms=60_000, attempt_timeout_ms=600_000)
    shell.register("hold", now=0)
    shell.alarm.set_alarm(50_000)
    step = shell.engine.advance(60_000)  # the early pass of t=0 hands off
    assert [end.outcome for end in step.alarm_ends] == ["handed_off"]
    assert shell.alarm.get_alarm() == 50_000


def test_scheduler_options_are_checked_as_the_constructor_checks_them() -> None:
    """Lines 1109-1136."""
    with pytest.raises(ValueError, match="alarmConcurrency"):
        SchedulerOptions(alarm_concurrency=0)
    with pytest.raises(ValueError, match="between 1000 and 15000"):
        SchedulerOptions(alarm_min_delay_ms=999)
    with pytest.raises(ValueError, match="alarmHandoffMs"):
        SchedulerOptions(alarm_handoff_ms=-1)


def test_time_never_goes_backwards() -> None:
    shell = Shell()
    shell.register("a", now=100)
    with pytest.raises(ValueError, match="backwards"):
        shell.engine.alarm(99)


def script(shell: Shell) -> list[Step]:
    steps = [shell.register(f"op-{i}", {"n": i}, now=i * 10) for i in range(4)]
    for attempt in shell.engine.running()[:2]:
        steps.append(shell.engine.fail(attempt, RuntimeError("503"), 100))
    steps.append(shell.engine.advance(70_000))
    shell.evict()
    steps.append(shell.platform_alarm(90_000))
    return steps


def test_same_inputs_give_the_same_rows_and_events() -> None:
    first, second = Shell(alarm_concurrency=2), Shell(alarm_concurrency=2)
    one, two = script(first), script(second)
    assert [[e.to_wire() for e in s.events] for s in one] == [[e.to_wire() for e in s.events] for s in two]
    assert first.rows() == second.rows()
    assert first.alarm.get_alarm() == second.alarm.get_alarm()


def test_a_new_engine_on_the_same_connection_sees_the_committed_rows() -> None:
    conn = sqlite3.connect(":memory:")
    alarm = SqliteAlarm(conn)
    engine = Engine(conn, alarm)
    engine.transaction(lambda c: c.execute("CREATE TABLE x (v INTEGER)"), 0)
    engine.transaction(lambda c: c.execute("INSERT INTO x VALUES (1)"), 0)
    assert Engine(conn, alarm).conn.execute("SELECT v FROM x").fetchall() == [(1,)]
