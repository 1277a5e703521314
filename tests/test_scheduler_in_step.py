"""The simulator's shell (``semsim.runtime.scheduler``) in step with the pure port (issue 25, item 3).

The same operations, with the same handler behaviour, run twice: through
``DurabilityScheduler`` inside a simulated object (handlers are trio tasks
that sleep, then return or throw; an aborted attempt's task is cancelled),
and through the pure ``Engine`` and ``Durability`` driven by hand (a
handler is a timer of its own; an abort rejects it at once). Both must
emit the same lifecycle events, in the same order and at the same times,
and leave the same rows. The pure side reports outcomes where the
reference's handlers would settle them (``on_invoke``, ``on_abort``), so
a shell that reported an abort a step late, or handlers' outcomes batched,
would differ here.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest
import trio

from semaphore_core.durability import (
    Attempt,
    Durability,
    DurabilityOptions,
    Engine,
    Event,
    RetryOptions,
    SchedulerOptions,
    SqliteAlarm,
    Step,
)
from semsim.runtime.durable import DurableObject, HandlerFailure, ObjectContext
from semsim.runtime.kernel import Sim, run
from semsim.runtime.scheduler import DurabilityScheduler
from semsim.runtime.trace import Trace

Job = tuple[str, int, int, bool]
#: (id, registered at ms, handler ms, fails): handlers that succeed, fail, outlive their timeout.
JOBS: tuple[Job, ...] = (
    ("slow", 0, 2_500, False),  # times out at 1 s, twice: aborted while others wait for the permit
    ("quick", 10, 300, False),
    ("flaky", 20, 150, True),
    ("late", 1_510, 70, False),
)
OPTIONS = DurabilityOptions(
    handlers={"job": None}, attempt_timeout_ms=1_000, retries=RetryOptions(max_attempts=2)
)
END_MS = 60_000


class HandlerFailed(HandlerFailure):
    """The scripted handler's failure (retryable)."""


def _scheduler_options(concurrency: int, live_timers: bool) -> SchedulerOptions:
    return SchedulerOptions(alarm_concurrency=concurrency, alarm_min_delay_ms=1_000, live_timers=live_timers)


def _event(event: Event) -> tuple[Any, ...]:
    wire = event.to_wire()
    return (wire["type"], wire.get("id"), wire.get("attempt"), wire.get("outcome"), wire["timestamp"])


def _rows(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, status, attempt, next_attempt_at, last_error_name, result"
        " FROM durability_calls ORDER BY id"
    ).fetchall()


# --- through the shell -------------------------------------------------------------------------


class Worker:
    def __init__(self, ctx: ObjectContext, scheduler: SchedulerOptions, events: list[Event]) -> None:
        self.ctx = ctx
        self.scheduler = DurabilityScheduler(ctx, scheduler, on_event=events.append)
        self.jobs = self.scheduler.operations(OPTIONS, self._job)

    async def _job(self, attempt: Attempt) -> Any:
        await self.ctx.sim.sleep(attempt.payload["ms"])
        if attempt.payload["fails"]:
            raise HandlerFailed("scripted failure")
        return f"{attempt.id}#{attempt.attempt}"

    def handle(self, method: str, payload: Any) -> Any:
        return self.scheduler.register("job", payload["id"], payload)

    async def alarm(self) -> None:
        await self.scheduler.alarm()


def through_the_shell(
    scheduler: SchedulerOptions, jobs: tuple[Job, ...]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    events: list[Event] = []
    rows: list[list[tuple[Any, ...]]] = []

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            worker = DurableObject(sim, "worker", lambda ctx: Worker(ctx, scheduler, events), nursery)
            for id, at, ms, fails in jobs:
                await sim.sleep_until(at)
                worker.dispatch("submit", {"id": id, "ms": ms, "fails": fails})
            await sim.sleep_until(END_MS)
            rows.append(_rows(worker.storage))
            nursery.cancel_scope.cancel()

    result = run(1, main, Trace(1, {}, {}))
    assert result.outcome == "completed", result
    return [_event(event) for event in events], rows[0]


# --- through the pure port, by hand ------------------------------------------------------------


class ByHand:
    """The pure port with handlers as timers and the platform's alarm delivered at its time."""

    def __init__(self, scheduler: SchedulerOptions) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.alarm = SqliteAlarm(self.conn)
        self.engine = Engine(
            self.conn, self.alarm, scheduler, on_invoke=self._invoked, on_abort=self._aborted
        )
        ids = iter(range(1, 1_000))
        self.jobs = Durability(self.engine, OPTIONS, new_id=lambda: f"gen-{next(ids)}")
        self.events: list[Event] = []
        #: (at, seq, attempt): a handler's sleep ending.
        self.handlers: list[tuple[int, int, Attempt]] = []

    def _invoked(self, attempt: Attempt) -> None:
        at = self.engine.now_ms + attempt.payload["ms"]
        self.handlers.append((at, self.engine.timer_seq(), attempt))

    def _aborted(self, attempt: Attempt, reason: BaseException) -> None:
        self.handlers = [h for h in self.handlers if h[2] != attempt]
        self.engine.fail(attempt, HandlerFailed("aborted"), self.engine.now_ms)

    def take(self, step: Step) -> None:
        self.events.extend(step.events)

    def run_until(self, end_ms: int) -> None:
        for _ in range(10_000):
            now = self.engine.now_ms
            candidates: list[tuple[int, int, str]] = []
            at = self.engine.next_timer_at()
            if at is not None:
                candidates.append((max(at, now), 0, "timer"))
            if self.handlers:
                first = min(self.handlers)
                candidates.append((first[0], 1, "handler"))
            stored = self.alarm.get_alarm()
            if stored is not None:
                candidates.append((max(stored, now), 2, "alarm"))
            if not candidates or min(candidates)[0] > end_ms:
                return
            when, _, kind = min(candidates)
            if kind == "timer":
                self.take(self.engine.advance(when))
            elif kind == "handler":
                done = min(self.handlers)
                self.handlers.remove(done)
                attempt = done[2]
                if attempt.payload["fails"]:
                    self.take(self.engine.fail(attempt, HandlerFailed("scripted failure"), when))
                else:
                    self.take(self.engine.complete(attempt, f"{attempt.id}#{attempt.attempt}", when))
            else:
                self.alarm.delete_alarm()
                self.take(self.engine.alarm(when))
        raise AssertionError("the driver did not settle")


def by_hand(
    scheduler: SchedulerOptions, jobs: tuple[Job, ...]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    port = ByHand(scheduler)
    for id, at, ms, fails in jobs:
        port.run_until(at)
        registration = port.jobs.register("job", id, {"id": id, "ms": ms, "fails": fails}, at)
        port.take(registration.step)
    port.run_until(END_MS)
    return [_event(event) for event in port.events], _rows(port.conn)


@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.parametrize("live_timers", [False, True])
def test_the_shell_emits_what_the_pure_port_emits(concurrency: int, live_timers: bool) -> None:
    scheduler = _scheduler_options(concurrency, live_timers)
    shell_events, shell_rows = through_the_shell(scheduler, JOBS)
    port_events, port_rows = by_hand(scheduler, JOBS)
    assert shell_events == port_events
    assert shell_rows == port_rows
    # The sequence reaches what it is for: timeouts (aborts), retries and completions.
    outcomes = {event[3] for event in port_events if event[0] == "attempt_settled"}
    assert {"completed", "retry_scheduled", "failed"} <= outcomes


def _drawn(seed: int) -> tuple[SchedulerOptions, tuple[Job, ...]]:
    """A few jobs at distinct times: handlers that finish, fail, or outlive their 1 s timeout.

    Durations differ, so two handlers seldom end on the same millisecond
    (which of two trio tasks due together runs first is the simulator's
    choice, not the engine's)."""
    draw = random.Random(seed)
    scheduler = _scheduler_options(draw.choice([1, 1, 2, 3]), draw.random() < 0.5)
    durations = draw.sample([37, 151, 409, 733, 1_303, 2_711, 4_001], draw.randint(3, 7))
    at = 0
    jobs = []
    for n, ms in enumerate(durations):
        jobs.append((f"j{n}", at, ms, draw.random() < 0.3))
        at += draw.choice([3, 97, 613, 1_217])
    return scheduler, tuple(jobs)


@pytest.mark.parametrize("seed", range(60))
def test_drawn_jobs_run_the_same_through_the_shell(seed: int) -> None:
    scheduler, jobs = _drawn(seed)
    assert through_the_shell(scheduler, jobs) == by_hand(scheduler, jobs)
