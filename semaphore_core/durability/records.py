"""What the engine hands the shell and hears back: attempts, timers, and the result of a step.

Sans-I/O in the h11 sense (STYLE.md, "Functional core, imperative shell"):
the engine never runs a handler, never sleeps and never reads a clock.
Every call takes ``now_ms`` and returns a ``Step``: the lifecycle events it
emitted, the attempts the shell must now run (``started``), the attempts
whose signal it aborted, alarm invocations that ended, and the failures the
reference would only log. Timers the live instance would hold (the early
alarm, attempt timeouts, alarm hand-offs) are listed by ``Engine.timers()``
and fired by the shell with ``Engine.fire`` or ``Engine.advance``.

Only records; no decisions here.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from semaphore_core.durability.errors import SerializedError
from semaphore_core.durability.events import Event


@attrs.frozen
class Attempt:
    """One claimed attempt for the shell to run: ``DurableCall`` plus its fence and deadline.

    Report its outcome to the engine that started it: ``complete``, ``fail``,
    or ``time_out`` at ``timeout_at_ms``. ``id`` is the stable idempotency key
    (seed 002 lines 209-211: "key any external deduplication ... by ``id``,
    never by ``attempt``").
    """

    table: str
    id: str
    operation: str
    generation: str
    attempt: int
    payload: Any = attrs.field(eq=False)
    started_at_ms: int
    timeout_at_ms: int

    @property
    def fence(self) -> tuple[str, str, str, int]:
        return (self.table, self.id, self.generation, self.attempt)


@attrs.frozen
class Abort:
    """The attempt's ``AbortSignal`` fired (timeout or purge): a cooperative handler should stop."""

    attempt: Attempt
    reason: SerializedError


TimerKind: TypeAlias = Literal["early_alarm", "attempt_timeout", "handoff"]


@attrs.frozen
class Timer:
    """An in-memory timer of the live instance (lost on eviction); ``seq`` breaks ties in creation order."""

    at_ms: int
    seq: int
    kind: TimerKind
    attempt: Attempt | None = None
    pass_id: int | None = None


@attrs.frozen
class AlarmInfo:
    """``AlarmInvocationInfo``: what the platform says about this alarm delivery."""

    retry_count: int = 0
    is_retry: bool = False


AlarmOutcome: TypeAlias = Literal["completed", "handed_off", "retrying", "failed"]


@attrs.frozen
class AlarmEnd:
    """An alarm pass returned.

    ``completed``: its due work finished and the alarm was reconciled.
    ``handed_off``: ``alarmHandoffMs`` passed first; a new alarm is armed and
    the work goes on in this instance. ``retrying``: it threw and the engine
    armed its own fallback alarm (``error`` says why). ``failed``: it threw
    and the fallback could not be armed either, so ``alarm()`` rejects and the
    platform's retry takes over (for an early-timer pass: only reported).
    """

    pass_id: int
    early: bool
    outcome: AlarmOutcome
    error: BaseException | None = None
    #: When the pass was invoked and when it returned (the engine's clock): a checker holds a
    #: hand-off to ``alarmHandoffMs`` after the start.
    started_ms: int = attrs.field(kw_only=True)
    ended_ms: int = attrs.field(kw_only=True)


@attrs.frozen
class EarlyTimerSet:
    """``scheduleEarlyAlarm`` ran: the time it was asked to cover and the early timer it left.

    Recorded by the engine's callers after each call, for a checker that
    holds the result to the reference's rule (``asked_ms`` sooner than
    ``alarmMinDelayMs`` from ``now_ms`` gets a timer due then, firing at
    ``max(asked_ms, now_ms)``; otherwise none, unless live timers are on).
    """

    #: The earliest time a timer should cover, as ``reconcile`` read it (None: nothing).
    asked_ms: int | None
    now_ms: int
    #: The early timer left: the time it covers and when it fires (None: no early timer).
    due_ms: int | None
    fires_ms: int | None
    #: What ``reconcile`` read before it returned ``asked_ms``, ``(physical, timer)``: it returns
    #: the timer time, or nothing when there is no physical time (lines 1300-1318). None: not
    #: recorded (a reconcile that took no reading, or more than one).
    read: tuple[int | None, int | None] | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class DueRun:
    """A table's ``runDue`` ran its ``runConcurrent`` to its end: the rows it read as due and how
    many of them it handed to ``#execute`` (recorded for a checker: ``runConcurrent``, lines
    1484-1504, hands every item to a worker before it resolves)."""

    now_ms: int
    table: str
    listed: int
    handed: int


@attrs.frozen
class AlarmRetry:
    """``AlarmRetryInfo``, what ``onAlarmRetry`` would receive."""

    error: SerializedError
    retry_in_ms: int
    retry_count: int | None = None
    is_retry: bool | None = None


@attrs.frozen
class ReportedFailure:
    """A failure the reference only passes to ``reportFailure`` (logged, never thrown)."""

    label: str
    error: BaseException
    #: The context the reference passes beside the error (``{operation, id}``, ``{retryInMs}``, ...).
    context: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(hash=False)
class Step:
    """Everything one call did, in order."""

    now_ms: int
    events: tuple[Event, ...] = ()
    started: tuple[Attempt, ...] = ()
    aborted: tuple[Abort, ...] = ()
    passes_started: tuple[int, ...] = ()
    alarm_ends: tuple[AlarmEnd, ...] = ()
    alarm_retries: tuple[AlarmRetry, ...] = ()
    failures: tuple[ReportedFailure, ...] = ()
    early_timers: tuple[EarlyTimerSet, ...] = ()
    due_runs: tuple[DueRun, ...] = ()


@attrs.define
class Outbox:
    """A step's results while the step runs (mutable; frozen into a ``Step`` at its end)."""

    events: list[Event] = attrs.Factory(list)
    started: list[Attempt] = attrs.Factory(list)
    aborted: list[Abort] = attrs.Factory(list)
    passes_started: list[int] = attrs.Factory(list)
    alarm_ends: list[AlarmEnd] = attrs.Factory(list)
    alarm_retries: list[AlarmRetry] = attrs.Factory(list)
    failures: list[ReportedFailure] = attrs.Factory(list)
    early_timers: list[EarlyTimerSet] = attrs.Factory(list)
    due_runs: list[DueRun] = attrs.Factory(list)

    def freeze(self, now_ms: int) -> Step:
        return Step(
            now_ms=now_ms,
            events=tuple(self.events),
            started=tuple(self.started),
            aborted=tuple(self.aborted),
            passes_started=tuple(self.passes_started),
            alarm_ends=tuple(self.alarm_ends),
            alarm_retries=tuple(self.alarm_retries),
            failures=tuple(self.failures),
            early_timers=tuple(self.early_timers),
            due_runs=tuple(self.due_runs),
        )


class CallRejected(Exception):
    """A call's promise rejected (``Durability.register``, ``Durability.purge_before``), and its step
    still happened: ``step`` is everything the step did, to be applied like any other step, and
    ``error`` the rejection, the reference's ``await`` would throw (also ``__cause__``).

    In the reference a rejected call does not undo what the same drain did beside it: a purge
    whose transaction fails has already aborted its handlers, and their settlements are emitted
    (docs/DURABILITY.md, M4). Raising the bare error would drop that step.
    """

    def __init__(self, error: BaseException, step: Step) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.step = step
