"""The port's seams around the reference's async code: the platform's staged alarm, the shell's
hooks, and the calls that must run in (or outside) a step.

What the oracle differential cannot drive: a fallback re-arm while another
transaction is open, a shell hook that throws, and the shell calling the
engine at the wrong moment.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from semaphore_core.durability import (
    AlarmInfo,
    Attempt,
    Durability,
    DurabilityOptions,
    Engine,
    RetryOptions,
    SchedulerOptions,
    SqliteAlarm,
)
from semaphore_core.durability.engine import Join
from semaphore_core.durability.microtasks import JsPromise, run_async
from semaphore_core.durability.platform import PlatformStorage, TransactionAlarm


def _storage() -> tuple[Engine, PlatformStorage, SqliteAlarm]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    alarm = SqliteAlarm(conn)
    engine = Engine(conn, alarm)
    return engine, PlatformStorage(engine.tasks, conn, alarm), alarm


def test_a_transaction_applies_its_staged_alarm_as_it_commits() -> None:
    """The stand-in stages the closure's alarm and writes it after COMMIT: an alarm set outside the
    transaction while it is open (the fallback re-arm) is overwritten by the commit."""
    engine, storage, alarm = _storage()

    async def closure(txn: TransactionAlarm) -> None:
        await txn.set_alarm(100)
        assert await txn.get_alarm() == 100  # the closure reads its own write
        assert alarm.get_alarm() is None  # not yet written
        await storage.set_alarm(500)  # from outside, meanwhile

    def begin() -> None:
        storage.transaction(lambda txn: run_async(engine.tasks, closure(txn)))

    engine.run_step(0, begin)
    assert alarm.get_alarm() == 100


def test_a_transaction_that_rolls_back_leaves_the_alarm_as_it_was() -> None:
    engine, storage, alarm = _storage()
    alarm.set_alarm(7)
    outcome: list[JsPromise] = []

    async def closure(txn: TransactionAlarm) -> None:
        await txn.delete_alarm()
        raise OSError("the write failed")

    engine.run_step(
        0, lambda: outcome.append(storage.transaction(lambda txn: run_async(engine.tasks, closure(txn))))
    )
    assert outcome[0].state == "rejected"
    assert alarm.get_alarm() == 7


def test_a_second_transaction_waits_for_the_first() -> None:
    """``storage.transaction`` runs one at a time: the second's writes come after the first commits."""
    engine, storage, _alarm = _storage()
    order: list[str] = []

    def start(name: str) -> JsPromise:
        async def closure(txn: TransactionAlarm) -> None:
            order.append(f"{name} begins")
            await txn.get_alarm()
            order.append(f"{name} ends")

        return storage.transaction(lambda txn: run_async(engine.tasks, closure(txn)))

    def begin() -> None:
        start("first")
        start("second")

    engine.run_step(0, begin)
    assert order == ["first begins", "first ends", "second begins", "second ends"]


OPTIONS = DurabilityOptions(
    handlers={"op": None}, attempt_timeout_ms=1_000, retries=RetryOptions(max_attempts=3)
)


def _operations(**hooks: Any) -> tuple[Engine, Durability]:
    conn = sqlite3.connect(":memory:")
    engine = Engine(conn, SqliteAlarm(conn), SchedulerOptions(alarm_concurrency=1), **hooks)
    ids = iter(range(1, 100))
    return engine, Durability(engine, OPTIONS, new_id=lambda: f"gen-{next(ids)}")


def test_an_abort_listener_that_throws_is_reported_and_the_abort_goes_on() -> None:
    """``controller.abort`` dispatches to listeners; one that throws is reported, not propagated."""
    engine: Engine

    def on_abort(attempt: Attempt, reason: BaseException) -> None:
        engine.fail(attempt, reason, engine.now_ms)
        raise RuntimeError("the shell's listener broke")

    engine, jobs = _operations(on_abort=on_abort)
    jobs.register("op", "a", {}, 0)
    step = engine.advance(1_000)
    assert [f.label for f in step.failures] == ["durability.abort_listener.failed"]
    assert [(e.to_wire()["type"], e.to_wire().get("outcome")) for e in step.events] == [
        ("attempt_settled", "retry_scheduled")
    ]
    assert engine.available_permits == 1  # the permit came back: nothing is stuck


def test_a_handler_that_throws_as_it_is_called_fails_its_attempt() -> None:
    """``on_invoke`` raising is the handler throwing synchronously: its promise rejects."""

    def on_invoke(attempt: Attempt) -> None:
        raise ValueError("bad payload")

    engine, jobs = _operations(on_invoke=on_invoke)
    step = jobs.register("op", "a", {}, 0).step
    assert [e.to_wire().get("outcome") for e in step.events if e.to_wire()["type"] == "attempt_settled"] == [
        "retry_scheduled"
    ]
    assert engine.running() == []
    assert engine.available_permits == 1


def test_a_join_is_settled_inside_a_step() -> None:
    engine, _jobs = _operations()
    join = Join(engine)
    with pytest.raises(RuntimeError, match="inside a step"):
        join.resolve()
    engine.run_step(0, join.resolve)
    assert join.done


def test_register_and_purge_refuse_to_run_inside_a_step() -> None:
    engine, jobs = _operations()
    with engine.step(0):
        with pytest.raises(RuntimeError, match="outside the engine's steps"):
            jobs.register("op", "a", {}, 0)
        with pytest.raises(RuntimeError, match="outside the engine's steps"):
            jobs.purge_before(1, 0)


def test_refresh_inside_a_step_reports_nothing_of_the_open_step() -> None:
    """Its continuations belong to the open step, whose ``Step`` reports them."""
    engine, jobs = _operations()
    jobs.register("op", "a", {}, 0)  # holds the one permit
    with engine.step(0) as out:
        assert engine.refresh(0).started == ()
    assert out.started == []


def test_a_failed_alarm_pass_is_reported_with_the_references_context_and_retry_info() -> None:
    """``alarm`` (lines 1510-1566): the pass threw, the fallback is armed, ``reportFailure`` gets
    ``durability.alarm.failed`` with ``{retryInMs}``, and ``onAlarmRetry`` the delivery's retry info.
    The platform's failure is modelled by wrapping ``Engine.storage``, as the oracle's adapter does."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    alarm = SqliteAlarm(conn)
    engine = Engine(conn, alarm, SchedulerOptions(alarm_min_delay_ms=5_000))
    fault = RuntimeError("storage unavailable")
    engine.storage.transaction = lambda closure: JsPromise.rejected(engine.tasks, fault)  # type: ignore[method-assign]

    step = engine.alarm(1_000, AlarmInfo(retry_count=2, is_retry=True))

    [failure] = step.failures
    assert (failure.label, failure.error, failure.context) == (
        "durability.alarm.failed",
        fault,
        {"retryInMs": 5_000},
    )
    [retry] = step.alarm_retries
    assert (retry.error.name, retry.retry_in_ms, retry.retry_count, retry.is_retry) == (
        "RuntimeError",
        5_000,
        2,
        True,
    )
    assert alarm.get_alarm() == 6_000  # the fallback: now + alarmMinDelayMs
    [end] = step.alarm_ends
    assert end.outcome == "retrying"


# --- lifecycle() hooks and onAlarmRetry ---------------------------------------------------


def _hooked_operations(options: SchedulerOptions | None = None) -> tuple[Engine, Durability]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    engine = Engine(conn, SqliteAlarm(conn), options)
    ids = iter(range(1, 100))
    durability = Durability(
        engine, DurabilityOptions(handlers={"run": None}), new_id=lambda: f"gen-{next(ids)}"
    )
    return engine, durability


def test_lifecycle_hooks_run_at_emission_in_the_order_they_were_added() -> None:
    """``lifecycle(hook)`` (lines 536-544): each event goes to the step and to every hook, at the
    moment it is emitted (the row is as the event says); detaching stops a hook, and the same hook
    added twice is called twice."""
    engine, durability = _hooked_operations()
    seen: list[tuple[str, str, str | None]] = []

    def first(event: Any) -> None:
        status = engine.conn.execute("SELECT status FROM durability_calls WHERE id = 'a'").fetchone()
        seen.append(("first", event.type, status[0] if status else None))

    def second(event: Any) -> None:
        seen.append(("second", event.type, None))

    durability.lifecycle(first)
    detach = durability.lifecycle(second)
    durability.lifecycle(second)
    step = durability.register("run", "a", 1, 0).step
    [attempt] = step.started
    assert [event.type for event in step.events] == ["registered", "attempt_started"]
    assert seen == [
        ("first", "registered", "pending"),
        ("second", "registered", None),
        ("second", "registered", None),
        ("first", "attempt_started", "pending"),
        ("second", "attempt_started", None),
        ("second", "attempt_started", None),
    ]
    seen.clear()
    detach()
    detach()  # twice is harmless
    engine.complete(attempt, "done", 5)
    assert seen == [("first", "attempt_settled", "completed"), ("second", "attempt_settled", None)]


def test_a_hook_detached_during_an_emission_still_gets_that_event() -> None:
    """The emitters are a snapshot per event (``[...emitters]``, the stand-in's guess)."""
    _engine, durability = _hooked_operations()
    seen: list[str] = []
    detach_second: list[Any] = []

    def first(event: Any) -> None:
        seen.append(f"first {event.type}")
        detach_second[0]()

    durability.lifecycle(first)
    detach_second.append(durability.lifecycle(lambda event: seen.append(f"second {event.type}")))
    durability.register("run", "a", 1, 0)
    assert seen == ["first registered", "second registered", "first attempt_started"]


@pytest.mark.parametrize("how", ["throws", "rejects"])
def test_a_failing_lifecycle_hook_is_reported_and_changes_nothing(how: str) -> None:
    """``createEmitter``: a throw or a rejected promise is reported (label and context are the
    stand-in's guess), never rethrown; the other hooks and the step's events go on."""
    engine, durability = _hooked_operations()
    error = RuntimeError("hook failed")
    after: list[str] = []

    def failing(event: Any) -> object:
        if how == "throws":
            raise error
        return JsPromise.rejected(engine.tasks, error)

    durability.lifecycle(failing)
    durability.lifecycle(lambda event: after.append(event.type))
    step = durability.register("run", "a", 1, 0).step
    assert [event.type for event in step.events] == ["registered", "attempt_started"]
    assert after == ["registered", "attempt_started"]
    assert [(f.label, f.context, f.error) for f in step.failures] == [
        ("durability.lifecycle_hook.failed", {"type": "registered"}, error),
        ("durability.lifecycle_hook.failed", {"type": "attempt_started"}, error),
    ]
    assert len(step.started) == 1


@pytest.mark.parametrize("how", ["throws", "rejects"])
def test_a_failing_on_alarm_retry_is_reported_after_the_pass_failure(how: str) -> None:
    """``notifyAlarmRetry`` (lines 1529-1565): the hook gets the retry info; its throw or rejection
    is reported as ``durability.alarm.retry_hook_failed`` with ``{retryInMs}`` and the fallback
    alarm stands."""
    calls: list[Any] = []
    hook_error = ValueError("hook failed")
    engine_box: list[Engine] = []

    def hook(retry: Any) -> object:
        calls.append(retry)
        if how == "throws":
            raise hook_error
        return JsPromise.rejected(engine_box[0].tasks, hook_error)

    conn = sqlite3.connect(":memory:", isolation_level=None)
    alarm = SqliteAlarm(conn)
    engine = Engine(conn, alarm, SchedulerOptions(alarm_min_delay_ms=5_000, on_alarm_retry=hook))
    engine_box.append(engine)
    fault = RuntimeError("storage unavailable")
    engine.storage.transaction = lambda closure: JsPromise.rejected(engine.tasks, fault)  # type: ignore[method-assign]

    step = engine.alarm(1_000, AlarmInfo(retry_count=1, is_retry=True))

    assert len(calls) == 1
    assert calls == list(step.alarm_retries)
    assert [(f.label, f.context, f.error) for f in step.failures] == [
        ("durability.alarm.failed", {"retryInMs": 5_000}, fault),
        ("durability.alarm.retry_hook_failed", {"retryInMs": 5_000}, hook_error),
    ]
    assert alarm.get_alarm() == 6_000
    assert [end.outcome for end in step.alarm_ends] == ["retrying"]


def test_on_alarm_retry_must_be_callable() -> None:
    """Lines 1118-1123."""
    with pytest.raises(TypeError, match="onAlarmRetry must be a function"):
        SchedulerOptions(on_alarm_retry=5)  # type: ignore[arg-type]
