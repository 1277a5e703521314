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
