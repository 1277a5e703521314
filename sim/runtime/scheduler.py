"""An object's ``DurabilityScheduler``: the imperative shell around ``semaphore_core.durability``.

Seed 000's objects each build one ``DurabilityScheduler`` on their context
and attach everything that needs the alarm to it: the durable operations,
the semaphore's queue. The pure ``Engine`` and ``Durability`` (seed 002's
scheduler and durable operations, ported in ``semaphore_core/durability``)
decide everything and do nothing: every call returns a ``Step`` saying what
to do. This module does it, inside one live instance of a
:class:`~semsim.runtime.durable.DurableObject`:

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
  ``fail``, to the engine that started it, in a step of its own (a
  handler's call settles in a later turn of the event loop, as a
  ``fetch`` does). An aborted attempt (its ``attemptTimeoutMs`` came, or a
  purge) rejects at the microtask its ``AbortSignal`` fires, as ``fetch``
  rejects when its signal aborts: the engine's ``on_abort`` reports it
  inside the step that aborted it, so the permit comes back in the order
  the reference's continuations would return it, and the handler's task is
  cancelled. What the handler started outside the object goes on: a call
  in flight at an external API keeps running there, the zombie the
  reference's docs warn about.
- **Eviction** cancels the tasks and the timer with the instance; the next
  instance builds a new scheduler on the same storage, and the stored
  alarm brings pending work back.
- **Lifecycle events** go to the injected hook in emission order, after
  the step that committed them, and into the trace. A hook that must run
  at the very emission, as the reference's do, goes on
  ``scheduler.durability.lifecycle(hook)``.
- **Memos**: a handler awaits :meth:`DurabilityScheduler.memoize`, the
  reference's ``memoize(key, fn)``.

It knows nothing of semaphores, APIs or invariants: the participants, the
handler and the hook are the object's.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, cast

import attrs
import trio

from semaphore_core.durability import (
    AlarmEnd,
    Attempt,
    CallRejected,
    Durability,
    DurabilityOptions,
    Engine,
    Event,
    NonRetryableError,
    Participant,
    SchedulerOptions,
    Step,
)
from semsim.runtime.durable import HandlerFailure, ObjectContext, ObjectTimer
from semsim.runtime.network import RpcError
from semsim.runtime.pending_rows import DueRead, TargetsRead, reads_tables, rows_due, rows_targets
from semsim.runtime.timers import Signal

#: What a handler may fail with: the attempt fails (and may be retried). Anything else is a bug
#: in the object's model and ends the run as a crash, not a retry.
HANDLER_FAILURES: Final = (RpcError, HandlerFailure, NonRetryableError)

Handler = Callable[[Attempt], Awaitable[Any]]
T = TypeVar("T")
#: ``alarm_handoff``'s mark of an early pass (absent for the platform's, so older traces keep their bytes).
_EARLY: Final = {"early": True}


class AttemptAborted(Exception):
    """The handler's wait ended because the attempt's ``AbortSignal`` fired (``AbortError``)."""


class InjectedAlarmFailure(HandlerFailure):
    """A fault plan's ``alarm_failure``: an object's due work threw (think: a storage hiccup)."""


@attrs.frozen
class AlarmFaults:
    """A fault plan's ``alarm_failure`` as one object sees it: its due work throws with
    ``probability`` per alarm pass, until ``until_ms`` (the plan's quiet point; None: always)."""

    probability: float = 0.0
    until_ms: int | None = None

    def throw(self, ctx: ObjectContext, now_ms: int) -> None:
        """Raise :class:`InjectedAlarmFailure` if this pass's due work is to throw (a draw from
        the object's own stream, so other objects' draws do not move)."""
        if not self.probability or (self.until_ms is not None and now_ms >= self.until_ms):
            return
        if ctx.sim.rng(f"alarm:{ctx.name}").random() < self.probability:
            raise InjectedAlarmFailure("injected: due work threw")


#: An object whose alarm passes never throw.
NO_ALARM_FAULTS: Final = AlarmFaults()


class AlarmPassFailed(HandlerFailure):
    """The engine's alarm pass threw and it could not arm its own fallback: the platform retries."""


class FallbackRefused(Exception):
    """The fault of a fallback re-arm that fails (``fallback=False``): ``armFallbackAlarm`` returns false."""


class _ObjectAlarm:
    """The object's one alarm as the engine's ``StorageAlarm``: written in the engine's transactions.

    With ``fallback=False`` a write outside any transaction fails. The engine
    writes the alarm inside its transactions, except for ``armFallbackAlarm``
    after a failed pass (seed 002: "outside any transaction; the next run
    reconciles"), so exactly the fallback re-arm fails, and the pass's
    failure goes to the platform.
    """

    def __init__(self, ctx: ObjectContext, fallback: bool) -> None:
        self._ctx = ctx
        self._fallback = fallback

    def get_alarm(self) -> int | None:
        return self._ctx.get_alarm()

    def set_alarm(self, at_ms: int) -> None:
        if not self._fallback and not self._ctx.storage.in_transaction:
            raise FallbackRefused("injected: the fallback alarm could not be written")
        self._ctx.set_alarm(at_ms)

    def delete_alarm(self) -> None:
        self._ctx.delete_alarm()


@attrs.frozen
class EngineReading:
    """An engine as a step left it, for checkers: its options, the permits out of its pool, and
    the attempt handlers running (handed an attempt, outcome not yet reported)."""

    options: SchedulerOptions
    permits_held: int
    handlers_running: int
    #: Each ``reconcile`` of the step, its reading beside the rows' own (only for an engine with a
    #: durable table among its participants: otherwise the two are the same calls).
    targets: tuple[TargetsRead, ...] = ()
    #: Each ``#runDue`` of the step, the rows it read beside the rows due then.
    due_reads: tuple[DueRead, ...] = ()


class DurabilityScheduler:
    """One live instance's engine: its alarm, its timers, and the attempts of its operations."""

    def __init__(
        self,
        ctx: ObjectContext,
        options: SchedulerOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
        *,
        fallback: bool = True,
        on_applied: Callable[[], None] | None = None,
        on_handoff: Callable[[int | None, int | None], None] | None = None,
        on_reconciled: Callable[[int | None, Callable[[], int | None]], None] | None = None,
        on_step: Callable[[Step, EngineReading], None] | None = None,
    ) -> None:
        """``fallback=False``: the engine's fallback re-arm fails (see :class:`_ObjectAlarm`).
        ``on_applied``: called after every step is done (a checker of the object's commits).
        ``on_handoff``: called after a step in which an alarm pass handed off, with the stored
        alarm and the earliest pending work's time (a checker of ``armForHandoff``).
        ``on_reconciled``: after a step in which ``reconcile`` ran, with the stored alarm and a
        read of the earliest pending work's time (a checker of ``reconcile``; the read costs a
        query per participant, so it is the checker's to make only when it needs it).
        ``on_step``: after every step, with the step and a reading of the engine as the step left
        it (a checker of the engine's timers and permits)."""
        self.ctx = ctx
        self.engine = Engine(ctx.storage, _ObjectAlarm(ctx, fallback), options, on_abort=self._on_abort)
        self._on_applied = on_applied
        self._on_handoff = on_handoff
        self._on_reconciled = on_reconciled
        self._on_step = on_step
        #: The step's ``reconcile`` readings beside the rows' own (``engine_timers``).
        self._targets: list[TargetsRead] = []
        self._due_reads: list[DueRead] = []
        if on_step is not None:
            self.engine.targets_observer = self._targets_read
            self.engine.due_observer = self._due_read
        #: The attempts handed to a handler whose outcome is not yet reported (their fences): each
        #: holds one of the engine's permits until then (``engine_permits``).
        self._handlers: set[tuple[str, str, str, int]] = set()
        self._reconciles_seen = 0
        self.durability: Durability | None = None
        self._handler: Handler | None = None
        self._on_event = on_event
        self._timer: tuple[int, ObjectTimer] | None = None
        #: Per running attempt (its fence), the scope an abort cancels.
        self._aborts: dict[tuple[str, str, str, int], trio.CancelScope] = {}
        self._pass_ends: dict[int, AlarmEnd] = {}
        self._pass_waiters: dict[int, Signal] = {}
        #: When the work the early timer was set for fell due, as its timer fires (the holder
        #: traces it with the pass it starts).
        self.early_due_at: int | None = None

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
        try:
            registration = self.durability.register(operation, id, payload, self.ctx.sim.now())
        except CallRejected as rejected:
            self.apply(rejected.step)  # what the step did beside the rejection still happened
            raise rejected.error from None
        self.apply(registration.step)
        return registration.inserted

    async def memoize(self, attempt: Attempt, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        """The attempt's ``memoize(key, fn)`` (seed 002, lines 781-785), for handlers to await.

        The value an earlier attempt of the same generation stored under
        ``key``; else ``compute()``'s, stored for the attempts after this
        one. A call's memos go with its terminal write. If the attempt is
        aborted or the instance dies while ``compute`` runs, nothing is
        stored: the handler's task is cancelled there. As in the reference,
        a stored value comes back through JSON (a tuple as a list), while
        the attempt that computed it gets ``compute()``'s object itself.
        """
        assert self.durability is not None, "no operations attached"
        memo = self.durability.memoize(attempt)
        found = memo.lookup(key)
        if found is not None:
            return cast(T, found.value)
        value = await compute()
        memo.store(key, value)
        return value

    def transaction(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """``scheduler.transaction``: ``write`` and the alarm's reconcile commit together.

        What the semaphore's holder runs every round, sync and reclaim in, so
        a committed row always has its alarm. Inside an alarm pass (a
        participant's due work) it joins the pass's step; otherwise it is a
        step of its own, done here. If ``write`` throws, nothing commits and
        the error goes to the caller.
        """
        engine = self.engine
        if engine.in_step:
            return engine.transaction(write)
        result: list[T] = []
        self.apply(engine.run_step(self.ctx.sim.now(), lambda: result.append(engine.transaction(write))))
        return result[0]

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
        for attempt in step.started:
            if self.engine.awaits_report(attempt):  # not already aborted, and reported, in this step
                self._handlers.add(attempt.fence)
                ctx.start_task(functools.partial(self._run, attempt), f"attempt:{attempt.id}")
        passes_failed = [end.error for end in step.alarm_ends if end.error is not None]
        for failure in step.failures:
            if any(failure.error is error for error in passes_failed):
                continue  # a pass's failure: traced below as ``alarm_retry`` or ``alarm_failed``
            ctx.sim.event(
                "operation_failure", object=ctx.name, label=failure.label, error=repr(failure.error)
            )
        for end in step.alarm_ends:
            if end.outcome == "retrying":
                # The pass threw and the engine armed its own fallback alarm.
                ctx.sim.event(
                    "alarm_retry",
                    object=ctx.name,
                    retry_at=ctx.sim.now() + self.engine.options.alarm_min_delay_ms,
                    error=repr(end.error),
                )
            elif end.outcome == "handed_off":
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
        if self._on_step is not None:
            engine = self.engine
            targets, self._targets = tuple(self._targets), []
            due_reads, self._due_reads = tuple(self._due_reads), []
            self._on_step(
                step,
                EngineReading(engine.options, engine.permits_held, len(self._handlers), targets, due_reads),
            )
        if self._on_handoff is not None and any(end.outcome == "handed_off" for end in step.alarm_ends):
            self._on_handoff(ctx.get_alarm(), self.engine.pending_at())
        # A pass that threw and could not re-arm committed nothing, and the platform's retry
        # comes next: there is no commit to judge.
        if any(end.outcome == "failed" for end in step.alarm_ends):
            # Nor is its reconcile (if any) judged later, by a step that runs none of its own.
            self._reconciles_seen = self.engine.reconciles
            return
        if self._on_applied is not None:
            self._on_applied()
        # A pass that completed refreshed the alarm on its way out (``scheduleNextAlarm``, line
        # 1578): its step is judged even if that refresh reconciled nothing.
        if self._on_reconciled is not None and (
            self.engine.reconciles != self._reconciles_seen
            or any(end.outcome == "completed" for end in step.alarm_ends)
        ):
            self._reconciles_seen = self.engine.reconciles
            self._on_reconciled(ctx.get_alarm(), self.engine.pending_at)

    def _targets_read(self, physical_ms: int | None, timer_ms: int | None) -> None:
        """The engine's ``reconcile`` read its targets: read them from the rows too, at once."""
        engine = self.engine
        if not reads_tables(engine):
            return
        rows_physical_ms, rows_timer_ms = rows_targets(engine)
        self._targets.append(
            TargetsRead(engine.now_ms, physical_ms, timer_ms, rows_physical_ms, rows_timer_ms)
        )

    def _due_read(self, table: str, now_ms: int, read: tuple[str, ...]) -> None:
        """An alarm pass's ``#runDue`` read its due rows: read them from the table too, at once."""
        self._due_reads.append(DueRead(now_ms, table, read, rows_due(self.engine, table, now_ms)))

    def _on_abort(self, attempt: Attempt, reason: BaseException) -> None:
        """The attempt's signal fires: its handler rejects now (``fetch`` rejects on abort), inside
        the engine's step, and its task stops waiting."""
        scope = self._aborts.get(attempt.fence)
        if scope is not None:
            scope.cancel()
        self._handlers.discard(attempt.fence)
        self.engine.fail(attempt, AttemptAborted("the attempt's signal was aborted"), self.engine.now_ms)

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
        self._handlers.discard(attempt.fence)  # settled: reported below, or when its signal fired
        if scope.cancelled_caught or not self.engine.awaits_report(attempt):
            return  # aborted: reported when its signal fired
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
        self.early_due_at = self.engine.early_due_at
        self.apply(self.engine.advance(self.ctx.sim.now()))
