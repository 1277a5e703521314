"""Durable operations, one test per behaviour of seed 002 (``durability.ts`` and the attempt lifecycle).

Line numbers are seed 002's. The shell is ``tests/durability_shell.py``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from semaphore_core.durability import (
    AttemptSettled,
    AttemptStarted,
    CallRejected,
    Completed,
    DuplicateDurableCallError,
    DuplicateDurablePayloadError,
    Failed,
    NonRetryableError,
    NotFound,
    Pending,
    Registered,
    Step,
    Terminal,
    UnknownAttemptError,
    operations,
)
from semaphore_core.durability.calls import read_call
from tests.durability_shell import Shell


def kinds(step: Step) -> list[str]:
    return [event.type for event in step.events]


def settled(step: Step) -> list[tuple[int, str]]:
    return [(e.attempt, e.outcome) for e in step.events if isinstance(e, AttemptSettled)]


# --- registration ------------------------------------------------------------------


def test_registration_writes_the_row_and_arms_the_alarm_in_one_transaction() -> None:
    """Lines 643-676 (the insert) inside ``transaction`` (1205-1217), which reconciles (1284-1319)."""
    shell = Shell(alarm_concurrency=1)
    shell.register("hold", now=0)  # takes the only permit, so the next one is not started
    shell.register("a", {"x": 1}, now=500)
    row = shell.row("a")
    assert (row.status, row.attempt, row.next_attempt_at, row.created_at) == ("pending", 0, 500, 500)
    assert row.payload == '{"x":1}'
    # The earliest pending row is due now: the alarm is no sooner than alarmMinDelayMs away.
    assert shell.alarm.get_alarm() == 15_000


def test_a_registration_whose_alarm_cannot_be_set_writes_nothing() -> None:
    """ "A row cannot commit without its alarm" (walkthrough, line 1912)."""
    shell = Shell()

    def broken(at_ms: int) -> None:
        raise OSError("storage")

    shell.alarm.set_alarm = broken  # type: ignore[method-assign]
    with pytest.raises(CallRejected) as rejected:
        shell.register("a", now=0)
    assert isinstance(rejected.value.error, OSError)
    assert str(rejected.value.error) == "storage"
    assert rejected.value.step.events == ()  # nothing else happened in its step
    assert shell.rows() == []


def test_a_repeated_id_with_the_same_payload_is_a_no_op() -> None:
    """Lines 667-685: not inserted, so no event and no start; key order does not matter (line 2003)."""
    shell = Shell()
    first = shell.durability.register("run", "a", {"x": 1, "y": [1, 2]}, 0)
    assert first.inserted
    again = shell.durability.register("run", "a", {"y": [1, 2.0], "x": 1}, 10)
    assert not again.inserted
    assert again.step.events == ()
    assert again.step.started == ()
    assert shell.row("a").created_at == 0


def test_a_repeated_id_with_another_payload_raises_and_changes_nothing() -> None:
    """Lines 671-675: ``DuplicateDurablePayloadError``; array order counts (line 2003)."""
    shell = Shell()
    shell.durability.register("run", "a", {"x": [1, 2]}, 0)
    before = shell.rows()
    with pytest.raises(CallRejected) as rejected:
        shell.durability.register("run", "a", {"x": [2, 1]}, 10)
    assert isinstance(rejected.value.error, DuplicateDurablePayloadError)
    assert rejected.value.__cause__ is rejected.value.error
    assert shell.rows() == before


def test_a_repeated_id_under_another_operation_raises_duplicate_call() -> None:
    """``assertOperation`` (lines 384-396, 666) runs before the payload check."""
    shell = Shell(handlers=("run", "other"))
    shell.durability.register("run", "a", {"x": 1}, 0)
    with pytest.raises(CallRejected) as rejected:
        shell.durability.register("other", "a", {"x": 1}, 10)
    assert isinstance(rejected.value.error, DuplicateDurableCallError)
    with pytest.raises(DuplicateDurableCallError):
        shell.durability.get_result("other", "a")


def test_registration_emits_registered_with_attempt_zero() -> None:
    """Lines 677-682."""
    step = Shell().register("a", now=7)
    assert isinstance(step.events[0], Registered)
    assert step.events[0].to_wire() == {
        "entityKind": "operation",
        "operation": "run",
        "id": "a",
        "generation": "gen-1",
        "type": "registered",
        "timestamp": 7,
        "attempt": 0,
    }


# --- eager start and the claim ----------------------------------------------------------


def test_eager_start_only_while_a_permit_is_free() -> None:
    """Lines 683-687: ``tryAcquirePermit``; otherwise the alarm picks the row up."""
    shell = Shell(alarm_concurrency=1)
    first = shell.register("a", now=0)
    second = shell.register("b", now=1)
    assert [a.id for a in first.started] == ["a"]
    assert second.started == ()
    assert shell.row("b").attempt == 0
    assert shell.engine.available_permits == 0


def test_an_eager_start_that_fails_before_its_claim_gives_its_permit_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``#execute``'s ``finally`` (lines 731-738): a permit not yet handed to ``#start`` is released whatever
    threw; the rejection is reported once (lines 688-696)."""
    shell = Shell(alarm_concurrency=1)
    reads = [0]

    def flaky(conn: Any, id: str) -> Any:
        reads[0] += 1
        if reads[0] == 2:  # the first read is the registration's; the second, #execute's lookup
            raise OSError("read failed")
        return read_call(conn, id)

    monkeypatch.setattr(operations, "read_call", flaky)
    step = shell.register("a", now=0)
    assert step.started == ()
    assert [f.label for f in step.failures] == ["durability.background_execution.failed"]
    assert shell.engine.available_permits == 1
    [started] = shell.register("b", now=1).started
    assert started.id == "b"


def test_a_rejected_eager_execution_is_reported_once_and_skips_the_refresh() -> None:
    """Lines 694-696: ``#execute(...).then(() => scheduleNextAlarm()).catch(onError)``. When the execution
    rejects (here ``settleFailure``'s transaction, lines 1790-1806, cannot read the alarm), the refresh is
    skipped and ``onError`` reports the rejection once; the permit is back (lines 1724-1727)."""
    shell = Shell()
    [attempt] = shell.register("a", now=0).started
    reads = [0]

    def broken() -> int | None:
        reads[0] += 1
        raise OSError("alarm read failed")

    shell.alarm.get_alarm = broken  # type: ignore[method-assign]
    step = shell.engine.fail(attempt, RuntimeError("503"), 100)
    assert step.events == ()
    assert [(f.label, str(f.error)) for f in step.failures] == [
        ("durability.background_execution.failed", "alarm read failed")
    ]
    assert reads[0] == 1
    assert shell.engine.available_permits == 10
    row = shell.row("a")
    assert (row.status, row.attempt, row.last_error) == ("pending", 1, None)  # rolled back


def test_the_attempt_is_claimed_and_counted_before_the_handler_runs() -> None:
    """Lines 1655-1671: ``claimAttempt`` then ``attempt_started``; the row says attempt 1 while it runs."""
    shell = Shell()
    step = shell.register("a", now=0)
    [attempt] = step.started
    assert attempt.attempt == 1
    assert kinds(step) == ["registered", "attempt_started"]
    row = shell.row("a")
    assert (row.status, row.attempt, row.next_attempt_at) == ("pending", 1, 0)
    assert attempt.payload == {"id": "a"}
    assert attempt.timeout_at_ms == 60_000


def test_success_completes_the_row_and_emits_attempt_settled_completed() -> None:
    """Lines 1697-1715 and the ``complete`` callback (788-806)."""
    shell = Shell(include_results=True)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.complete(attempt, {"url": "u"}, 250)
    [event] = step.events
    assert isinstance(event, AttemptSettled)
    assert event.to_wire()["outcome"] == "completed"
    assert event.to_wire()["result"] == {"url": "u"}
    assert event.duration_ms == 250
    row = shell.row("a")
    assert (row.status, row.result, row.completed_at) == ("completed", '{"url":"u"}', 250)
    assert shell.durability.get_result("run", "a") == Completed(result={"url": "u"})
    assert shell.engine.available_permits == 10
    # The eager path refreshes the alarm after the execution: nothing pending, no alarm.
    assert shell.alarm.get_alarm() is None


def test_results_stay_out_of_events_unless_asked() -> None:
    """``includeResults`` is off by default (lines 364-369)."""
    shell = Shell()
    [attempt] = shell.register("a", now=0).started
    [event] = shell.engine.complete(attempt, 5, 1).events
    assert "result" not in event.to_wire()


# --- retries -----------------------------------------------------------------------


def test_retries_follow_max_attempts_and_the_backoff() -> None:
    """``decideRetry`` (lines 1034-1080): retry_scheduled at now + delay(attempt), until maxAttempts."""
    shell = Shell(max_attempts=3)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.fail(attempt, RuntimeError("503"), 100)
    [event] = step.events
    assert isinstance(event, AttemptSettled)
    assert (event.outcome, event.next_attempt_at) == ("retry_scheduled", 1_100)  # 1 s
    assert (event.timestamp, event.duration_ms) == (100, 100)
    assert shell.durability.get_result("run", "a") == Pending(
        attempt=1, next_attempt_at=1_100, last_error="503"
    )
    [second] = shell.engine.advance(1_100).started
    assert second.attempt == 2
    [event] = shell.engine.fail(second, RuntimeError("503"), 1_200).events
    assert isinstance(event, AttemptSettled)
    assert event.next_attempt_at == 3_200  # 2 s: the delay doubles
    assert (event.timestamp, event.duration_ms) == (1_200, 100)  # from the attempt's start (line 1818)


def test_a_failed_last_attempt_emits_attempt_settled_failed_not_terminal() -> None:
    """Lines 1038-1046 and 1811-1830: the last attempt's failure is ``attempt_settled``/``failed``."""
    shell = Shell(max_attempts=1)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.fail(attempt, RuntimeError("boom"), 10)
    assert settled(step) == [(1, "failed")]
    assert not any(isinstance(e, Terminal) for e in step.events)
    assert shell.durability.get_result("run", "a") == Failed(
        attempt=1, error_name="RuntimeError", error_message="boom"
    )
    assert shell.row("a").next_attempt_at == 10  # a terminal decision writes nextAttemptAt = now (1041-1045)


def test_a_non_retryable_error_fails_at_once() -> None:
    """``isNonRetryable`` (line 1040)."""
    shell = Shell(max_attempts=5)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.fail(attempt, NonRetryableError("bad width"), 10)
    assert settled(step) == [(1, "failed")]
    assert shell.row("a").last_error_name == "NonRetryableError"


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf, 2.0**60, "5"])
def test_an_invalid_retry_delay_fails_the_operation_with_a_policy_error(delay: Any) -> None:
    """Lines 1048-1079: an invalid delay is a terminal ``DurableRetryPolicyError``."""
    shell = Shell(delay=lambda attempt: delay)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.fail(attempt, RuntimeError("503"), 10)
    assert settled(step) == [(1, "failed")]
    assert shell.row("a").last_error_name == "DurableRetryPolicyError"


def test_a_delay_is_rounded_as_math_round_does() -> None:
    """``Math.round(rawDelay)`` (line 1053): halves go up."""
    shell = Shell(delay=lambda attempt: 2.5)
    [attempt] = shell.register("a", now=0).started
    [event] = shell.engine.fail(attempt, RuntimeError("x"), 10).events
    assert isinstance(event, AttemptSettled)
    assert event.next_attempt_at == 13


def test_an_unserialisable_result_is_a_terminal_failure() -> None:
    """Lines 788-795 and ``isTerminal`` (808-809)."""
    shell = Shell(max_attempts=5)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.complete(attempt, {1, 2}, 10)
    assert settled(step) == [(1, "failed")]
    assert shell.row("a").last_error_name == "DurableResultSerializationError"


def test_a_row_whose_operation_has_no_handler_fails_non_retryably_after_its_claim() -> None:
    """``invoke`` throws ``NonRetryableError`` (lines 769-774): claimed, started, then failed."""
    shell = Shell(handlers=("run", "gone"))
    shell.register("a", now=0, operation="gone")  # runs eagerly; its failure schedules a retry
    [attempt] = shell.engine.running()
    shell.engine.fail(attempt, RuntimeError("x"), 10)
    shell.options = type(shell.options)(handlers={"run": None})  # a deployment without "gone"
    shell.evict()
    step = shell.engine.advance(1_010)
    assert step.events == ()  # the early timer died with the instance
    step = shell.platform_alarm(15_010)
    assert kinds(step) == ["attempt_started", "attempt_settled"]
    assert settled(step) == [(2, "failed")]
    assert step.started == ()
    assert shell.row("a").last_error_name == "NonRetryableError"


# --- timeouts -----------------------------------------------------------------------


def test_attempt_timeout_aborts_and_schedules_a_retry() -> None:
    """Lines 1689-1695: the timeout aborts the signal and rejects the race."""
    shell = Shell(attempt_timeout_ms=5_000)
    [attempt] = shell.register("a", now=0).started
    step = shell.engine.advance(5_000)
    assert [abort.attempt for abort in step.aborted] == [attempt]
    assert step.aborted[0].reason.name == "DurableAttemptTimeoutError"
    assert settled(step) == [(1, "retry_scheduled")]
    assert shell.row("a").last_error_name == "DurableAttemptTimeoutError"


def test_a_timed_out_handler_keeps_its_permit_until_it_settles_and_its_result_is_dropped() -> None:
    """Lines 1641-1651, 1684-1687 and line 1941: "a handler that ignores its signal holds the live
    permit until it actually settles"."""
    shell = Shell(attempt_timeout_ms=5_000, alarm_concurrency=1)
    [attempt] = shell.register("a", now=0).started
    shell.engine.advance(5_000)
    assert shell.engine.is_zombie(attempt)
    assert shell.engine.available_permits == 0
    step = shell.engine.complete(attempt, "late", 9_000)
    assert step.events == ()
    assert shell.row("a").status == "pending"  # the late success is not recorded
    assert shell.engine.available_permits == 1


def test_a_zombie_blocks_its_own_retry_in_its_instance() -> None:
    """``#execute`` (lines 716-721): the same generation running means wait for it, then return."""
    shell = Shell(attempt_timeout_ms=5_000)
    [attempt] = shell.register("a", now=0).started
    shell.engine.advance(5_000)  # times out: retry due at 6 000
    step = shell.engine.advance(6_000)
    assert step.started == ()
    # The early pass of the registration (t=0) and the one for the retry (t=6 000) both wait on it.
    assert [(p.early, p.started_at) for p in shell.engine.open_passes] == [(True, 0), (True, 6_000)]
    step = shell.engine.complete(attempt, "late", 7_000)  # the zombie settles; the passes end
    assert [end.outcome for end in step.alarm_ends] == ["completed", "completed"]
    assert step.started == ()  # it did not start the retry: the next pass does
    [second] = shell.engine.advance(7_000).started
    assert second.attempt == 2


# --- fencing and eviction -------------------------------------------------------------


def test_eviction_mid_attempt_leaves_the_row_pending_and_the_next_attempt_runs_under_the_same_id() -> None:
    """Walkthrough "Evict the object mid-attempt" (lines 1918-1924)."""
    shell = Shell()
    [first] = shell.register("resize:1", {"w": 512}, now=0).started
    shell.evict()
    row = shell.row("resize:1")
    assert (row.status, row.attempt) == ("pending", 1)
    assert shell.alarm.get_alarm() == 15_000
    step = shell.platform_alarm(15_000)
    [second] = step.started
    assert (second.id, second.attempt, second.payload) == ("resize:1", 2, {"w": 512})
    assert second.generation == first.generation


def test_a_stale_attempt_never_overwrites_a_newer_one() -> None:
    """``updateAttempt`` fences by generation and attempt (walkthrough line 1916)."""
    shell = Shell()
    [first] = shell.register("a", now=0).started
    stale = shell.evict()
    [second] = shell.platform_alarm(15_000).started
    assert stale.complete(first, "old", 16_000).events == ()  # the old instance's write matches nothing
    row = shell.row("a")
    assert (row.status, row.attempt, row.result) == ("pending", 2, None)
    [event] = shell.engine.complete(second, "new", 17_000).events
    assert isinstance(event, AttemptSettled)
    assert shell.row("a").result == '"new"'


def test_a_stale_failure_cannot_reschedule_a_newer_attempt() -> None:
    shell = Shell()
    [first] = shell.register("a", now=0).started
    stale = shell.evict()
    shell.platform_alarm(15_000)
    assert stale.fail(first, RuntimeError("old"), 16_000).events == ()
    assert shell.row("a").last_error is None


def test_an_outcome_reported_to_another_instance_is_refused() -> None:
    shell = Shell()
    [first] = shell.register("a", now=0).started
    shell.evict()
    with pytest.raises(UnknownAttemptError):
        shell.engine.complete(first, "x", 10)


def test_eviction_during_the_last_attempt_ends_in_terminal_attempts_exhausted() -> None:
    """``failExhausted`` (lines 1749-1779): the claim finds no attempt left; ``terminal`` is emitted."""
    shell = Shell(max_attempts=1)
    shell.register("a", now=0)
    shell.evict()
    step = shell.platform_alarm(15_000)
    [event] = step.events
    assert isinstance(event, Terminal)
    assert event.to_wire()["reason"] == "attempts_exhausted"
    assert event.error.name == "DurableAttemptsExhaustedError"
    row = shell.row("a")
    assert (row.status, row.attempt) == ("failed", 1)
    assert step.started == ()
    assert shell.engine.available_permits == 10


def test_a_completed_row_is_final() -> None:
    shell = Shell()
    [first] = shell.register("a", now=0).started
    shell.engine.complete(first, 1, 5)
    assert shell.durability.register("run", "a", {"id": "a"}, 10).inserted is False
    assert shell.engine.alarm(20).started == ()
    assert shell.row("a").status == "completed"


# --- reading and purging ----------------------------------------------------------------


def test_get_result_of_an_unknown_id_is_not_found() -> None:
    assert Shell().durability.get_result("run", "nope") == NotFound()


def test_purge_aborts_older_handlers_deletes_rows_and_a_new_generation_is_fenced_from_the_old() -> None:
    """``purgeBefore`` (lines 550-566) and ``purge`` (1380-1414); generations (walkthrough, line 1939)."""
    shell = Shell()
    [old] = shell.register("a", now=0).started
    step = shell.durability.purge_before(1, 10)
    assert [abort.attempt for abort in step.aborted] == [old]
    assert [e.to_wire() for e in step.events] == [
        {"type": "purged", "entityKind": "operation", "timestamp": 10, "before": 1, "count": 1}
    ]
    assert shell.rows() == []
    again = shell.durability.register("run", "a", {"id": "a"}, 20)
    [new] = again.step.started
    assert new.generation != old.generation
    assert new.attempt == 1
    assert shell.engine.fail(old, RuntimeError("aborted"), 30).events == ()  # fenced by generation
    row = read_call(shell.conn, "a")
    assert row is not None
    assert (row.status, row.generation_id, row.last_error) == ("pending", new.generation, None)


def test_purge_is_strictly_before() -> None:
    """``created_at < ?`` (lines 1390, 1399-1404): a record created at ``before`` stays, its handler runs."""
    shell = Shell()
    [old] = shell.register("a", now=0).started
    shell.register("b", now=5)
    step = shell.durability.purge_before(5, 10)
    assert [abort.attempt for abort in step.aborted] == [old]
    assert [e.to_wire()["count"] for e in step.events] == [1]
    assert [row.id for row in shell.rows()] == ["b"]


def test_started_event_carries_the_attempt() -> None:
    step = Shell().register("a", now=0)
    started = [e for e in step.events if isinstance(e, AttemptStarted)]
    assert [(e.attempt, e.timestamp) for e in started] == [(1, 0)]
