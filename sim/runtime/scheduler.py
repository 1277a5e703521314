"""An object's ``DurabilityScheduler``: the imperative shell around ``semaphore_core.durability``.

Seed 000's objects each build one ``DurabilityScheduler`` on their context
and attach everything that needs the alarm to it: the durable operations,
the semaphore's queue. The pure ``Engine`` and ``Durability`` (seed 002's
scheduler and durable operations, ported in ``semaphore_core/durability``)
decide everything and do nothing: every call returns a ``Step`` saying what
to do. This module does it, inside one live instance of a
:class:`~sim.runtime.durable.DurableObject`:

- **The engine's alarm is the object's one alarm.** The engine writes it
  through :class:`_ObjectAlarm` inside its own SQLite transactions, so it
  commits with the rows it serves; after every step the platform's timer is
  pointed at it (``ObjectContext.alarm_written``). The object's ``alarm()``
  delegates to :meth:`DurabilityScheduler.alarm`, which lasts until the pass it
  started ends, and throws when the engine says the pass ``failed`` (its
  fallback could not be armed), so the platform retries, as in the
  reference.
- **The engine's in-memory timers** (the early alarm, attempt timeouts,
  alarm hand-offs) are one instance timer at the earliest of them, set
  again after every step. They die with the instance.
- **Every attempt the engine starts runs as a task of the instance**: the
  injected handler is awaited and its outcome reported with ``complete`` or
  ``fail``, to the engine that started it. An aborted attempt (its
  ``attemptTimeoutMs`` came, or a purge) has its handler cancelled, as
  ``fetch`` rejects when its ``AbortSignal`` fires; that rejection is
  reported too (the engine drops the outcome, and frees the permit the
  handler held). What the handler started outside the object goes on: a
  call in flight at an external API keeps running there, the zombie the
  reference's docs warn about.
- **Eviction** cancels the tasks and the timer with the instance; the next
  instance builds a new scheduler on the same storage, and the stored
  alarm brings pending work back.
- **Lifecycle events** go to the injected hook in emission order, after
  the step that committed them, and into the trace.

It knows nothing of semaphores, APIs or invariants: the participants, the
handler and the hook are the object's.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from semaphore_core.durability import (
    AlarmEnd,
    Attempt,
    Durability,
    DurabilityOptions,
    Engine,
    Event,
    NonRetryableError,
    Participant,
    SchedulerOptions,
    Step,
)
from sim.runtime.durable import HandlerFailure, ObjectContext, ObjectTimer
from sim.runtime.network import RpcError
from sim.runtime.timers import Signal

#: What a handler may fail with: the attempt fails (and may be retried). Anything else is a bug
#: in the object's model and ends the run as a crash, not a retry.
HANDLER_FAILURES: Final = (RpcError, HandlerFailure, NonRetryableError)

Handler = Callable[[Attempt], Awaitable[Any]]
#: ``alarm_handoff``'s mark of an early pass (absent for the platform's, so older traces keep their bytes).
_EARLY: Final = {"early": True}


class AttemptAborted(Exception):
    """The handler's wait ended because the attempt's ``AbortSignal`` fired (``AbortError``)."""


class AlarmPassFailed(HandlerFailure):
    """The engine's alarm pass threw and it could not arm its own fallback: the platform retries."""


class _ObjectAlarm:
    """The object's one alarm as the engine's ``StorageAlarm``: written in the engine's transactions."""

    def __init__(self, ctx: ObjectContext) -> None:
        self._ctx = ctx

    def get_alarm(self) -> int | None:
        return self._ctx.get_alarm()

    def set_alarm(self, at_ms: int) -> None:
        self._ctx.set_alarm(at_ms)

    def delete_alarm(self) -> None:
        self._ctx.delete_alarm()


class DurabilityScheduler:
    """One live instance's engine: its alarm, its timers, and the attempts of its operations."""

    def __init__(
        self,
        ctx: ObjectContext,
        options: SchedulerOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.engine = Engine(ctx.storage, _ObjectAlarm(ctx), options)
        self.durability: Durability | None = None
        self._handler: Handler | None = None
        self._on_event = on_event
        self._timer: tuple[int, ObjectTimer] | None = None
        #: Per running attempt (its fence), the scope an abort cancels.
        self._aborts: dict[tuple[str, str, str, int], trio.CancelScope] = {}
        self._pass_ends: dict[int, AlarmEnd] = {}
        self._pass_waiters: dict[int, Signal] = {}

    def operations(self, options: DurabilityOptions, handler: Handler) -> Durability:
        """Attach durable operations (``new Durability({scheduler, handlers})``), run by ``handler``."""
        assert self.durability is None, "one Durability per scheduler here"
        # Generation ids are drawn in order from the run's ids: stable for a seed.
        self.durability = Durability(
            self.engine, options, new_id=lambda: self.ctx.sim.next_id(f"{self.ctx.name}/gen")
        )
        self._handler = handler
        return self.durability

    def attach(self, participant: Participant) -> None:
        """Another participant of the object's alarm (the semaphore's queue, say)."""
        self.engine.register(participant)

    # --- what the object calls ----------------------------------------------------------

    def register(self, operation: str, id: str, payload: Any) -> bool:
        """``run({id, payload})``: durable once this returns; whether a new row was written."""
        assert self.durability is not None, "no operations attached"
        registration = self.durability.register(operation, id, payload, self.ctx.sim.now())
        self.apply(registration.step)
        return registration.inserted

    def refresh(self) -> None:
        """``scheduleNextAlarm``: reconcile the alarm with what the participants have pending."""
        self.apply(self.engine.refresh(self.ctx.sim.now()))

    async def alarm(self) -> None:
        """The object's ``alarm()``: one pass over every participant's due work, until it ends."""
        step = self.engine.alarm(self.ctx.sim.now())
        assert len(step.passes_started) == 1, step
        pass_id = step.passes_started[0]
        self.apply(step)
        if pass_id not in self._pass_ends:  # its work goes on: wait for the pass to end
            signal = self._pass_waiters[pass_id] = self.ctx.sim.signal()
            await signal.wait()
            del self._pass_waiters[pass_id]
        end = self._pass_ends.pop(pass_id)
        if end.outcome == "failed":
            raise AlarmPassFailed(f"the alarm pass failed and could not arm its fallback: {end.error!r}")

    # --- doing what a step says -----------------------------------------------------------

    def apply(self, step: Step) -> None:
        """Do what ``step`` says: trace and hand on its events, run and abort attempts, re-arm."""
        ctx = self.ctx
        ctx.alarm_written()
        for event in step.events:
            ctx.sim.event("operation", object=ctx.name, **event.to_wire())
        for abort in step.aborted:
            scope = self._aborts.get(abort.attempt.fence)
            if scope is not None:
                scope.cancel()
        for attempt in step.started:
            ctx.start_task(functools.partial(self._run, attempt), f"attempt:{attempt.id}")
        for failure in step.failures:
            ctx.sim.event(
                "operation_failure", object=ctx.name, label=failure.label, error=repr(failure.error)
            )
        for end in step.alarm_ends:
            if end.outcome == "handed_off":
                # The pass ran ``alarmHandoffMs``: its work goes on under a fresh alarm. An early
                # pass (the in-memory timer's: retries, mostly) races the hand-off too.
                ctx.sim.event("alarm_handoff", object=ctx.name, **_EARLY if end.early else {})
            if end.early:
                if end.outcome == "failed":
                    ctx.sim.event("alarm_failed", object=ctx.name, early=True, error=repr(end.error))
                continue
            self._pass_ends[end.pass_id] = end
            waiter = self._pass_waiters.get(end.pass_id)
            if waiter is not None:
                waiter.set()
        self._rearm()
        if self._on_event is not None:
            for event in step.events:
                self._on_event(event)

    async def _run(self, attempt: Attempt) -> None:
        """One attempt's handler, from start to reported outcome (unless the instance dies first)."""
        outcome: Any = None
        error: BaseException | None = None
        handler = self._handler
        assert handler is not None, "an attempt with no operations attached"
        with trio.CancelScope() as scope:
            self._aborts[attempt.fence] = scope
            try:
                outcome = await handler(attempt)
            except HANDLER_FAILURES as failure:
                error = failure
            finally:
                del self._aborts[attempt.fence]
        if scope.cancelled_caught:
            error = AttemptAborted("the attempt's signal was aborted")
        now = self.ctx.sim.now()
        if error is None:
            self.apply(self.engine.complete(attempt, outcome, now))
        else:
            self.apply(self.engine.fail(attempt, error, now))

    def _rearm(self) -> None:
        """One instance timer at the engine's earliest in-memory timer."""
        at = self.engine.next_timer_at()
        current = self._timer
        if current is not None and current[0] == at:
            return
        if current is not None:
            current[1].cancel()
            self._timer = None
        if at is not None:
            self._timer = (at, self.ctx.call_at(max(at, self.ctx.sim.now()), self._fire))

    def _fire(self) -> None:
        self._timer = None
        self.apply(self.engine.advance(self.ctx.sim.now()))
