"""The scheduler ``Engine`` of seed 002 (``scheduler.ts``, lines 871-1890), pure and synchronous.

What this module owns: everything the reference's ``Engine`` keeps on the
live instance and every decision it makes. That is the concurrency pool of
``alarmConcurrency`` permits and its FIFO waiters; the running attempts and
their lifecycle (claim before the handler runs, race against
``attemptTimeoutMs``, fenced settlement, retry or terminal decision,
permit held until the handler really settles); the alarm: ``reconcile``
inside every write's transaction, the early in-memory timer published after
commit, the alarm pass over every participant, the hand-off after
``alarmHandoffMs``, the fallback alarm when a pass throws; ``liveTimers``.
What it must not know: any table's meaning (participants bring that, see
``operations.py``), a clock (``now_ms`` is passed in), how handlers run
(the shell runs each ``Attempt`` and reports back).

Theory of operation. The reference is asynchronous: an attempt's outcome,
a freed permit, the end of an alarm pass arrive later as promise
continuations. Here each public call opens a *step* at ``now_ms``, does
the synchronous part of the reference's code, and queues the continuations
the reference would run as microtasks (``defer``); the step drains that
queue in FIFO order before returning a ``Step``. A ``Join`` stands for a
promise others await (an execution's outcome, its full settlement, a
pass's work). Where the reference awaits, this code registers a callback
on a ``Join``; where it ``setTimeout``s, it creates a ``Timer`` the shell
fires. The order of continuations follows the reference's where it is
observable (a freed permit goes to the oldest waiter, which claims before
the freeing worker takes its next item); docs/DURABILITY.md lists where a
microtask hop is not reproduced.

Durable state is SQLite rows plus the ``StorageAlarm``; a new ``Engine``
on the same connection is a rebuilt instance with every permit free, no
timers and no running attempts.
"""

from __future__ import annotations

import math
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeAlias, TypeVar

import attrs

from semaphore_core.durability.alarm import StorageAlarm
from semaphore_core.durability.errors import (
    DurableRetryPolicyError,
    SerializedError,
    UnknownAttemptError,
    is_non_retryable,
    serialize_error,
)
from semaphore_core.durability.events import AttemptSettled, AttemptStarted, OperationEntity, Terminal
from semaphore_core.durability.fixes import ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION, KNOWN_FIXES
from semaphore_core.durability.policy import (
    MAX_SAFE_INTEGER,
    MAX_TIMER_MS,
    AttemptPolicy,
    assert_positive_integer,
)
from semaphore_core.durability.records import (
    Abort,
    AlarmEnd,
    AlarmInfo,
    AlarmOutcome,
    AlarmRetry,
    Attempt,
    Outbox,
    ReportedFailure,
    Step,
    Timer,
)
from semaphore_core.durability.storage import (
    DurableTable,
    Fence,
    claim_attempt,
    exhaust_attempts,
    pending_heads,
    update_attempt,
)
from semaphore_core.transaction import transaction

T = TypeVar("T")

#: ``alarmMinDelayMs`` must lie within these (lines 957-958).
MIN_ALARM_DELAY_MS: Final = 1_000
MAX_ALARM_DELAY_MS: Final = 15_000
#: Continuations one step may run: a bound, not a tuning knob (an assertion if exceeded).
MAX_TASKS_PER_STEP: Final = 1_000_000
#: Timers ``advance`` may fire in one call before it calls the run a timer loop.
MAX_TIMERS_PER_ADVANCE: Final = 100_000


@attrs.frozen
class SchedulerOptions:
    """``DurabilitySchedulerOptions`` (lines 909-931), checked as the constructor checks them (1109-1136)."""

    alarm_concurrency: int = 10
    alarm_min_delay_ms: int = 15_000
    alarm_handoff_ms: int = 14 * 60_000
    live_timers: bool = False
    #: Opt-in fixes of findings (``fixes.py``); empty is the faithful reference.
    fixes: frozenset[str] = frozenset()

    def __attrs_post_init__(self) -> None:
        assert_positive_integer("alarmConcurrency", self.alarm_concurrency)
        assert_positive_integer("alarmMinDelayMs", self.alarm_min_delay_ms)
        if not MIN_ALARM_DELAY_MS <= self.alarm_min_delay_ms <= MAX_ALARM_DELAY_MS:
            raise ValueError(f"alarmMinDelayMs must be between {MIN_ALARM_DELAY_MS} and {MAX_ALARM_DELAY_MS}")
        assert_positive_integer("alarmHandoffMs", self.alarm_handoff_ms)
        unknown = sorted(set(self.fixes) - set(KNOWN_FIXES))
        if unknown:
            raise ValueError(f"unknown fixes: {unknown}")


class Join:
    """A promise others await: callbacks run as deferred continuations once it settles.

    It settles once, resolved or rejected (``error`` set); ``then`` callbacks
    run either way, and a continuation the reference chains with ``.then``
    (skipped on a rejection) checks ``error`` itself.
    """

    __slots__ = ("_callbacks", "_engine", "done", "error")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._callbacks: list[Callable[[], None]] = []
        self.done = False
        self.error: BaseException | None = None

    def then(self, callback: Callable[[], None]) -> None:
        if self.done:
            self._engine.defer(callback)
        else:
            self._callbacks.append(callback)

    def resolve(self) -> None:
        self._settle(None)

    def reject(self, error: BaseException) -> None:
        self._settle(error)

    def _settle(self, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._engine.defer(callback)


#: A participant's due work at ``now_ms``: None when it finished at once, else a ``Join`` for when it does
#: (rejected if the work failed). Raising is a rejection at once.
RunDue: TypeAlias = Callable[[int, AlarmInfo | None], Join | None]


@attrs.frozen(eq=False)
class Participant:
    """``Participant`` (lines 974-987): a record table attached to the engine."""

    table: DurableTable
    run_due: RunDue
    #: Earliest due time, for tables without ``status`` and ``next_attempt_at`` columns.
    next_pending_at: Callable[[sqlite3.Connection], int | None] | None = None
    #: True while the participant runs its own due work from an alarm it keeps open.
    holding: Callable[[], bool] | None = None


@attrs.frozen(eq=False)
class ExecutionSpec:
    """``ExecutionSpec`` (lines 1003-1026): what differs between kinds of durable work."""

    table: DurableTable
    key: str
    operation: str
    generation: str
    created_at: int
    label: str
    entity: OperationEntity
    active: dict[str, Execution]
    policy: AttemptPolicy
    include_result: bool
    exhausted_error: Callable[[], Exception]
    timeout_error: Callable[[], Exception]
    #: The call's payload for the handler; raises when no handler exists (the handler "throws").
    invoke: Callable[[int], Any]
    #: Persist a success; the settlement time, or None when the fence did not match. May raise.
    complete: Callable[[Any, int, int], int | None]
    is_terminal: Callable[[BaseException], bool]


@attrs.define(eq=False)
class Execution:
    """``ActiveExecution`` plus the flags of ``startExecution``'s closure (lines 1628-1747)."""

    spec: ExecutionSpec
    #: Resolves when the attempt's outcome is persisted (what ``startExecution`` returns).
    outcome: Join
    #: Resolves when the permit is released: the outcome is persisted *and* the handler settled.
    settled: Join
    permit: bool = False
    attempt: Attempt | None = None
    timeout_seq: int | None = None
    handler_started: bool = False
    handler_settled: bool = False
    policy_settled: bool = False
    released: bool = False
    aborted: bool = False


@attrs.define(eq=False)
class AlarmPass:
    """One invocation of ``alarm()`` (platform or early timer) while it has not returned."""

    id: int
    early: bool
    started_at: int
    info: AlarmInfo | None
    handoff_at: int
    handoff_seq: int
    open: bool = True


@attrs.frozen
class EarlyTimer:
    """``earlyAlarm``: the in-memory timer for work due before the physical alarm."""

    due_at: int
    fires_at: int
    seq: int


@attrs.frozen
class _Decision:
    error: BaseException
    terminal: bool
    timestamp: int
    next_attempt_at: int


def _js_round(value: float) -> float:
    """``Math.round``: halves go towards +infinity."""
    return math.floor(value + 0.5)


class Engine:
    """Shared machinery of one Durable Object: transactions, the alarm, the pool, attempts."""

    def __init__(
        self, conn: sqlite3.Connection, alarm: StorageAlarm, options: SchedulerOptions | None = None
    ) -> None:
        options = SchedulerOptions() if options is None else options
        if not isinstance(options, SchedulerOptions):
            raise TypeError(f"options must be SchedulerOptions, got {options!r}")
        # Transactions are explicit (SAVEPOINTs); the driver must not open its own.
        conn.isolation_level = None
        self.conn = conn
        self.options = options
        self.live_timers = options.live_timers
        self._alarm = alarm
        self._participants: list[Participant] = []
        self._migrated: set[str] = set()
        self._available_permits = options.alarm_concurrency
        self._permit_waiters: deque[Execution] = deque()
        self._early: EarlyTimer | None = None
        # Keys whose attempt is executing, per table (lines 1105-1107).
        self._active_by_table: dict[str, set[str]] = {}
        self._running: dict[tuple[str, str, str, int], Execution] = {}
        self._passes: dict[int, AlarmPass] = {}
        self._seq = 0
        self._pass_ids = 0
        self._tasks: deque[Callable[[], None]] = deque()
        self._out: Outbox | None = None
        self._now = 0
        self._retired = False

    # --- steps ----------------------------------------------------------------------

    @contextmanager
    def step(self, now_ms: int) -> Iterator[Outbox]:
        """Open a step at ``now_ms`` (or join the open one); drain continuations before it closes."""
        if self._out is not None:
            self._set_now(now_ms)
            yield self._out
            return
        self._set_now(now_ms)
        self._out = Outbox()
        try:
            yield self._out
            self._drain()
        finally:
            self._tasks.clear()
            self._out = None

    def run_step(self, now_ms: int, body: Callable[[], None]) -> Step:
        with self.step(now_ms) as out:
            body()
        return out.freeze(self._now)

    def _set_now(self, now_ms: int) -> None:
        if isinstance(now_ms, bool) or not isinstance(now_ms, int) or not 0 <= now_ms <= MAX_SAFE_INTEGER:
            raise ValueError(f"now_ms must be a non-negative safe integer, got {now_ms!r}")
        if now_ms < self._now:
            raise ValueError(f"time went backwards: {now_ms} < {self._now}")
        self._now = now_ms

    @property
    def in_step(self) -> bool:
        """Whether a step is open (work inside it joins it)."""
        return self._out is not None

    @property
    def now_ms(self) -> int:
        return self._now

    def defer(self, task: Callable[[], None]) -> None:
        self._tasks.append(task)

    def _drain(self) -> None:
        for _ in range(MAX_TASKS_PER_STEP):
            if not self._tasks:
                return
            self._tasks.popleft()()
        raise AssertionError("a step ran more continuations than MAX_TASKS_PER_STEP")

    @property
    def out(self) -> Outbox:
        assert self._out is not None, "engine work outside a step"
        return self._out

    def report(self, label: str, error: BaseException) -> None:
        self.out.failures.append(ReportedFailure(label=label, error=error))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def retire(self) -> None:
        """The platform evicted this instance: its timers, waiters and passes are gone.

        A shell that models handlers still in flight from an evicted instance
        (their fenced writes may still land) keeps reporting their outcomes
        here; a retired engine starts nothing new: no claim, no pass, no
        timer. The reference has no such call: an evicted instance simply
        stops, and the worst it can leave behind is exactly this.
        """
        self._retired = True
        self._permit_waiters.clear()
        self._early = None
        for alarm_pass in self._passes.values():
            alarm_pass.open = False
        self._passes.clear()

    @property
    def retired(self) -> bool:
        return self._retired

    # --- participants and schema ------------------------------------------------------

    def register(self, participant: Participant) -> None:
        """``register`` (lines 1138-1144)."""
        name = participant.table.name
        if any(p.table.name == name for p in self._participants):
            raise ValueError(f"A {name} helper is already attached to this scheduler")
        self._participants.append(participant)

    def migrate_schema(self, capability: str, migrate: Callable[[sqlite3.Connection], None]) -> None:
        """``migrateSchema`` (lines 1180-1194): once per capability per engine."""
        if capability in self._migrated:
            return
        with transaction(self.conn):
            migrate(self.conn)
        self._migrated.add(capability)

    # --- transactions and the alarm -------------------------------------------------------

    def transaction_sync(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """``transactionSync``: atomic writes that leave the physical alarm alone."""
        with transaction(self.conn):
            return write(self.conn)

    def transaction(self, write: Callable[[sqlite3.Connection], T], now_ms: int | None = None) -> T:
        """``transaction`` (lines 1205-1217): the writes and ``reconcile`` commit together; then the timer.

        Inside a step ``now_ms`` may be omitted; outside one it opens its own.
        """
        if self._out is None:
            if now_ms is None:
                raise ValueError("transaction outside a step needs now_ms")
            with self.step(now_ms):
                return self.transaction(write)
        if now_ms is not None:
            self._set_now(now_ms)
        with transaction(self.conn):
            value = write(self.conn)
            next_timer_at = self._reconcile()
        self._schedule_early_alarm(next_timer_at)
        return value

    def _track_active(self, table: str, key: str) -> None:
        self._active_by_table.setdefault(table, set()).add(key)

    def _release_active(self, table: str, key: str) -> None:
        keys = self._active_by_table.get(table)
        if keys is None:
            return
        keys.discard(key)
        if not keys:
            del self._active_by_table[table]

    def _pending_times(self, participant: Participant) -> tuple[int | None, int | None]:
        """``pendingTimes`` (lines 1242-1278): ``(physical, timer)``."""
        if participant.next_pending_at is not None:
            at = participant.next_pending_at(self.conn)
            if at is None:
                return None, None
            holding = participant.holding is not None and participant.holding()
            return at, (None if holding else at)
        active = self._active_by_table.get(participant.table.name)
        limit = len(active or ()) + 1 if self.live_timers else 1
        rows = pending_heads(self.conn, participant.table, limit)
        physical = rows[0][1] if rows else None
        if not self.live_timers:
            return physical, physical
        eligible = next((at for key, at in rows if active is None or key not in active), None)
        return physical, eligible

    def _reconcile(self) -> int | None:
        """``reconcile`` (lines 1284-1319): arm the physical alarm; return the early timer's time."""
        physical_times: list[int] = []
        timer_times: list[int] = []
        for participant in self._participants:
            physical, timer = self._pending_times(participant)
            if physical is not None:
                physical_times.append(physical)
            if timer is not None:
                timer_times.append(timer)
        physical_next_at = min(physical_times) if physical_times else None
        current = self._alarm.get_alarm()
        if physical_next_at is None:
            if current is not None:
                self._alarm.delete_alarm()
            return None
        target = max(physical_next_at, self._now + self.options.alarm_min_delay_ms)
        # Preserve a fallback inside this range so frequent reconciliation cannot push it later.
        if current is None or current < physical_next_at or current > target:
            self._alarm.set_alarm(target)
        return min(timer_times) if timer_times else None

    def _schedule_early_alarm(self, timestamp: int | None) -> None:
        """``scheduleEarlyAlarm`` (lines 1321-1363)."""
        if self._early is not None and self._early.due_at == timestamp:
            return
        self._early = None
        if timestamp is None:
            return
        delay = timestamp - self._now
        if not self.live_timers and delay >= self.options.alarm_min_delay_ms:
            return
        if delay > MAX_TIMER_MS:
            return
        self._early = EarlyTimer(due_at=timestamp, fires_at=self._now + max(delay, 0), seq=self._next_seq())

    def schedule_next_alarm(self) -> None:
        """``scheduleNextAlarm`` (lines 1366-1375): a transaction that only reconciles.

        The reference coalesces concurrent calls into one transaction; a
        synchronous step has nothing to coalesce.
        """
        self.transaction(lambda _conn: None)

    def refresh(self, now_ms: int) -> Step:
        """``scheduleNextAlarm`` as a step of its own.

        Reconciling emits no event and defers no continuation, so outside a
        step this is the transaction and the early timer alone (a shell calls
        it after every write it makes outside the engine: it must be cheap).
        """
        if self._out is not None:
            return self.run_step(now_ms, self.schedule_next_alarm)
        self._set_now(now_ms)
        with transaction(self.conn):
            next_timer_at = self._reconcile()
        self._schedule_early_alarm(next_timer_at)
        assert not self._tasks, "reconciling deferred a continuation"
        return Step(now_ms=self._now)

    # --- the pool ---------------------------------------------------------------------

    @property
    def available_permits(self) -> int:
        return self._available_permits

    @property
    def permits_held(self) -> int:
        """Permits out of the pool: attempts running (zombies included) and eager starts in hand."""
        return self.options.alarm_concurrency - self._available_permits

    def try_acquire_permit(self) -> bool:
        """``tryAcquirePermit`` (lines 1450-1456)."""
        if self._available_permits == 0 or self._retired:
            return False
        self._available_permits -= 1
        return True

    def release_permit(self) -> None:
        """A permit's release (``createRelease``, lines 1468-1482): to the oldest waiter, else the pool."""
        if self._permit_waiters and not self._retired:
            waiter = self._permit_waiters.popleft()
            waiter.permit = True
            self.defer(lambda: self._claim(waiter))
        else:
            self._available_permits += 1
        assert 0 <= self._available_permits <= self.options.alarm_concurrency

    def run_concurrent(self, items: Sequence[T], worker: Callable[[T], Join | None]) -> Join:
        """``runConcurrent`` (lines 1484-1504): ``min(alarmConcurrency, n)`` workers over ``items``.

        A worker whose item rejects takes the next item: this is ``#runDue``'s
        worker, which catches (lines 614-620); the reference's pool itself
        would reject, and no participant here relies on that.
        """
        done = Join(self)
        if not items:
            done.resolve()
            return done
        cursor = [0]
        live = [min(self.options.alarm_concurrency, len(items))]

        def run_worker() -> None:
            while cursor[0] < len(items):
                item = items[cursor[0]]
                cursor[0] += 1
                waited = worker(item)
                if waited is not None and not waited.done:
                    waited.then(run_worker)
                    return
            live[0] -= 1
            if live[0] == 0:
                done.resolve()

        for _ in range(live[0]):
            run_worker()
        return done

    # --- alarm passes ----------------------------------------------------------------------

    def alarm(self, now_ms: int, info: AlarmInfo | None = None) -> Step:
        """``alarm`` (lines 1510-1528): what the object's ``alarm()`` delegates to."""
        return self.run_step(now_ms, lambda: self._start_pass(info, early=False))

    def _start_pass(self, info: AlarmInfo | None, *, early: bool) -> None:
        """``runAlarm`` (lines 1570-1601): every participant's due work, raced against the hand-off."""
        assert not self._retired, "a retired instance runs no alarm"
        self._pass_ids += 1
        started_at = self._now
        alarm_pass = AlarmPass(
            id=self._pass_ids,
            early=early,
            started_at=started_at,
            info=info,
            handoff_at=started_at + self.options.alarm_handoff_ms,
            handoff_seq=self._next_seq(),
        )
        self._passes[alarm_pass.id] = alarm_pass
        self.out.passes_started.append(alarm_pass.id)
        joins: list[Join] = []
        failure: BaseException | None = None
        for participant in self._participants:
            try:
                joined = participant.run_due(started_at, info)
            except Exception as error:
                failure = failure or error
                continue
            if joined is not None:
                joins.append(joined)
        if failure is not None:
            # Promise.all rejects: the race rejects, the alarm's catch arms the fallback.
            self._pass_failed(alarm_pass, failure)
            return
        remaining = [len(joins)]

        def one_done(joined: Join) -> None:
            if joined.error is not None:
                # Promise.all rejects at the first rejection; after a hand-off nobody awaits it.
                if alarm_pass.open:
                    self._pass_failed(alarm_pass, joined.error)
                return
            remaining[0] -= 1
            if remaining[0] == 0:
                self._pass_work_done(alarm_pass)

        def on_done(joined: Join) -> Callable[[], None]:
            return lambda: one_done(joined)

        if not joins:
            self.defer(lambda: self._pass_work_done(alarm_pass))
        for joined in joins:
            joined.then(on_done(joined))

    def _pass_work_done(self, alarm_pass: AlarmPass) -> None:
        if not alarm_pass.open:
            return  # handed off (or failed) already: nobody awaits this work any more
        alarm_pass.open = False
        try:
            self.schedule_next_alarm()
        except Exception as error:
            self._pass_failed(alarm_pass, error)
            return
        self._end_pass(alarm_pass, "completed")

    def _handoff(self, alarm_pass: AlarmPass) -> None:
        """The hand-off won the race: ``armForHandoff`` (lines 1613-1621) and return."""
        if not alarm_pass.open:
            return
        alarm_pass.open = False
        try:
            with transaction(self.conn):
                current = self._alarm.get_alarm()
                target = max(self._now, self._now + self.options.alarm_min_delay_ms)
                if current is None or current > target:
                    self._alarm.set_alarm(target)
        except Exception as error:
            self._pass_failed(alarm_pass, error)
            return
        self._end_pass(alarm_pass, "handed_off")

    def _pass_failed(self, alarm_pass: AlarmPass, error: BaseException) -> None:
        """The catch of ``alarm`` (lines 1510-1528): arm our own fallback, or let the failure out."""
        alarm_pass.open = False
        if not self._arm_fallback_alarm():
            if alarm_pass.early:
                self.report("durability.background_execution.failed", error)
            self._end_pass(alarm_pass, "failed", error)
            return
        self.report("durability.alarm.failed", error)
        info = alarm_pass.info
        self.out.alarm_retries.append(
            AlarmRetry(
                error=serialize_error(error),
                retry_in_ms=self.options.alarm_min_delay_ms,
                retry_count=None if info is None else info.retry_count,
                is_retry=None if info is None else info.is_retry,
            )
        )
        self._end_pass(alarm_pass, "retrying", error)

    def _arm_fallback_alarm(self) -> bool:
        """``armFallbackAlarm`` (lines 1604-1611): outside any transaction; the next run reconciles."""
        try:
            self._alarm.set_alarm(self._now + self.options.alarm_min_delay_ms)
        except Exception:
            return False
        return True

    def _end_pass(
        self, alarm_pass: AlarmPass, outcome: AlarmOutcome, error: BaseException | None = None
    ) -> None:
        del self._passes[alarm_pass.id]
        self.out.alarm_ends.append(AlarmEnd(alarm_pass.id, alarm_pass.early, outcome, error))

    @property
    def open_passes(self) -> tuple[AlarmPass, ...]:
        return tuple(self._passes.values())

    # --- timers ------------------------------------------------------------------------

    def timers(self) -> list[Timer]:
        """The instance's in-memory timers, in firing order (time, then creation)."""
        found: list[Timer] = []
        if self._retired:
            return found
        if self._early is not None:
            found.append(Timer(at_ms=self._early.fires_at, seq=self._early.seq, kind="early_alarm"))
        for execution in self._running.values():
            if execution.timeout_seq is not None and execution.attempt is not None:
                found.append(
                    Timer(
                        at_ms=execution.attempt.timeout_at_ms,
                        seq=execution.timeout_seq,
                        kind="attempt_timeout",
                        attempt=execution.attempt,
                    )
                )
        for alarm_pass in self._passes.values():
            if alarm_pass.open:
                found.append(
                    Timer(
                        at_ms=alarm_pass.handoff_at,
                        seq=alarm_pass.handoff_seq,
                        kind="handoff",
                        pass_id=alarm_pass.id,
                    )
                )
        found.sort(key=lambda timer: (timer.at_ms, timer.seq))
        return found

    @property
    def early_due_at(self) -> int | None:
        """When the work the early timer is set for falls due (it fires then, or now if that passed)."""
        return None if self._early is None else self._early.due_at

    def next_timer_at(self) -> int | None:
        first = self._first_timer()
        return None if first is None else first.at_ms

    def _first_timer(self) -> Timer | None:
        """``timers()[0]``, without building the others: a shell asks after every step.

        Sequence numbers are unique across kinds, so ``(at_ms, seq)`` orders
        exactly as ``timers()`` sorts.
        """
        if self._retired:
            return None
        best: tuple[int, int] | None = None
        early = self._early
        if early is not None:
            best = (early.fires_at, early.seq)
        first_execution: Execution | None = None
        for execution in self._running.values():
            attempt, seq = execution.attempt, execution.timeout_seq
            if seq is None or attempt is None:
                continue
            if best is None or (attempt.timeout_at_ms, seq) < best:
                best, first_execution = (attempt.timeout_at_ms, seq), execution
        first_pass: AlarmPass | None = None
        for alarm_pass in self._passes.values():
            at = (alarm_pass.handoff_at, alarm_pass.handoff_seq)
            if alarm_pass.open and (best is None or at < best):
                best, first_pass, first_execution = at, alarm_pass, None
        if best is None:
            return None
        if first_pass is not None:
            return Timer(at_ms=best[0], seq=best[1], kind="handoff", pass_id=first_pass.id)
        if first_execution is not None:
            return Timer(at_ms=best[0], seq=best[1], kind="attempt_timeout", attempt=first_execution.attempt)
        return Timer(at_ms=best[0], seq=best[1], kind="early_alarm")

    def fire(self, timer: Timer, now_ms: int) -> Step:
        """Fire one timer from ``timers()``; a timer cleared since is a no-op."""
        return self.run_step(now_ms, lambda: self._fire(timer))

    def advance(self, now_ms: int) -> Step:
        """Fire every timer due by ``now_ms``, each at its own time, in order; one merged ``Step``."""

        if now_ms < self._now:
            raise ValueError(f"time went backwards: {now_ms} < {self._now}")

        def body() -> None:
            for _ in range(MAX_TIMERS_PER_ADVANCE):
                first = self._first_timer()
                if first is None or first.at_ms > now_ms:
                    self._set_now(now_ms)
                    return
                self._set_now(max(self._now, first.at_ms))
                self._fire(first)
                self._drain()
            raise RuntimeError(f"more than {MAX_TIMERS_PER_ADVANCE} timers fired by {now_ms}: a timer loop")

        return self.run_step(self._now, body)

    def _fire(self, timer: Timer) -> None:
        if timer.kind == "early_alarm":
            early = self._early
            if early is None or early.seq != timer.seq:
                return
            self._early = None
            self._start_pass(None, early=True)
        elif timer.kind == "attempt_timeout":
            assert timer.attempt is not None
            execution = self._running.get(timer.attempt.fence)
            if execution is not None and execution.timeout_seq == timer.seq:
                self._time_out(execution)
        else:
            assert timer.pass_id is not None
            alarm_pass = self._passes.get(timer.pass_id)
            if alarm_pass is not None and alarm_pass.handoff_seq == timer.seq:
                self._handoff(alarm_pass)

    # --- executions --------------------------------------------------------------------

    def start_execution(self, spec: ExecutionSpec, eager_permit: bool) -> Execution:
        """``startExecution`` (lines 1628-1747): register as active now; claim once a permit is held."""
        execution = Execution(spec=spec, outcome=Join(self), settled=Join(self))
        if self._retired:
            return execution  # never starts: a dead instance claims nothing
        spec.active[spec.key] = execution
        self._track_active(spec.table.name, spec.key)
        # ``void settled.finally(...)``: registered first, so it runs before anyone awaiting ``settled``.
        execution.settled.then(lambda: self._after_settled(execution))
        if eager_permit or self.try_acquire_permit():
            execution.permit = True
            self._claim(execution)
        else:
            self._permit_waiters.append(execution)
        return execution

    def _claim(self, execution: Execution) -> None:
        """Count the attempt before the handler runs; fail the row if none is left (lines 1655-1671)."""
        spec = execution.spec
        try:
            number = claim_attempt(self.conn, spec.table, spec.key, spec.generation, spec.policy.max_attempts)
            if number is None:
                self._fail_exhausted(spec)
        except Exception as error:
            self.report("durability.background_execution.failed", error)
            self._policy_settle(execution, error)
            return
        if number is None:
            self._policy_settle(execution)
            return
        started_at = self._now
        self.out.events.append(AttemptStarted(entity=spec.entity, timestamp=started_at, attempt=number))
        execution.handler_started = True
        try:
            payload = spec.invoke(number)
            invoke_error: Exception | None = None
        except Exception as error:
            payload, invoke_error = None, error
        attempt = Attempt(
            table=spec.table.name,
            id=spec.key,
            operation=spec.operation,
            generation=spec.generation,
            attempt=number,
            payload=payload,
            started_at_ms=started_at,
            timeout_at_ms=started_at + spec.policy.attempt_timeout_ms,
        )
        execution.attempt = attempt
        execution.timeout_seq = self._next_seq()
        assert attempt.fence not in self._running, attempt
        self._running[attempt.fence] = execution
        if invoke_error is not None:
            # The handler "threw" before the shell could run it: settle on the next turn.
            error_ = invoke_error
            self.defer(lambda: self._handler_settled(execution, failure=error_))
            return
        self.out.started.append(attempt)

    def _execution_for(self, attempt: Attempt) -> Execution:
        if not isinstance(attempt, Attempt):
            raise TypeError(f"expected an Attempt, got {attempt!r}")
        execution = self._running.get(attempt.fence)
        if execution is None:
            raise UnknownAttemptError(
                f"attempt {attempt.attempt} of {attempt.id!r} is not running in this instance"
                " (already settled, or started by another instance)"
            )
        return execution

    def complete(self, attempt: Attempt, result: Any, now_ms: int) -> Step:
        """The handler returned ``result``."""
        execution = self._execution_for(attempt)
        return self.run_step(now_ms, lambda: self._handler_settled(execution, result=result))

    def fail(self, attempt: Attempt, error: BaseException, now_ms: int) -> Step:
        """The handler threw ``error`` (``NonRetryableError`` to stop retrying)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"error must be an exception, got {error!r}")
        execution = self._execution_for(attempt)
        return self.run_step(now_ms, lambda: self._handler_settled(execution, failure=error))

    def time_out(self, attempt: Attempt, now_ms: int) -> Step:
        """The attempt's timeout timer fired (equivalently: ``fire`` its ``attempt_timeout`` timer)."""
        execution = self._execution_for(attempt)
        if now_ms < attempt.timeout_at_ms:
            raise ValueError(f"attempt times out at {attempt.timeout_at_ms}, not {now_ms}")
        return self.run_step(now_ms, lambda: self._time_out(execution) if execution.timeout_seq else None)

    def _handler_settled(
        self, execution: Execution, result: Any = None, failure: BaseException | None = None
    ) -> None:
        if execution.handler_settled:
            raise UnknownAttemptError(f"attempt {execution.attempt} already reported its outcome")
        execution.handler_settled = True
        if execution.policy_settled:
            # A zombie settles: its result is dropped; only now does it give its permit back.
            self._release_if_settled(execution)
            return
        rejection: BaseException | None = None
        try:
            if failure is None:
                self._persist_success(execution, result)
            else:
                self._settle_failure(execution, failure)
        except Exception as error:
            self.report("durability.background_execution.failed", error)
            rejection = error
        self._policy_settle(execution, rejection)

    def _time_out(self, execution: Execution) -> None:
        """The timeout rejects the race and aborts the signal; the handler may keep running."""
        attempt = execution.attempt
        assert attempt is not None
        assert not execution.policy_settled
        error = execution.spec.timeout_error()
        self._abort(execution, error)
        rejection: BaseException | None = None
        try:
            self._settle_failure(execution, error)
        except Exception as caught:
            self.report("durability.background_execution.failed", caught)
            rejection = caught
        self._policy_settle(execution, rejection)

    def _abort(self, execution: Execution, reason: BaseException) -> None:
        """``controller.abort(reason)``: tell the shell; a no-op before the claim or when already aborted."""
        if execution.attempt is None or execution.aborted:
            return
        execution.aborted = True
        self.out.aborted.append(Abort(attempt=execution.attempt, reason=serialize_error(reason)))

    def abort_created_before(self, active: dict[str, Execution], before: int, reason: BaseException) -> None:
        """``purge``'s first loop (lines 1390-1394)."""
        for execution in list(active.values()):
            if execution.spec.created_at < before:
                self._abort(execution, reason)

    def _persist_success(self, execution: Execution, result: Any) -> None:
        """Lines 1697-1715: completion in one synchronous transaction, no alarm reconcile."""
        spec = execution.spec
        attempt = execution.attempt
        assert attempt is not None
        try:
            timestamp = self.transaction_sync(lambda _conn: spec.complete(result, attempt.attempt, self._now))
        except Exception as caught:
            self._settle_failure(execution, caught)
            return
        if timestamp is None:
            return
        self.out.events.append(
            AttemptSettled(
                entity=spec.entity,
                timestamp=timestamp,
                attempt=attempt.attempt,
                duration_ms=max(0, timestamp - attempt.started_at_ms),
                outcome="completed",
                result=result if spec.include_result else None,
                result_included=spec.include_result,
            )
        )

    def _policy_settle(self, execution: Execution, rejection: BaseException | None = None) -> None:
        """The execution's ``finally`` (lines 1724-1727); then its promise settles, rejected if it threw."""
        execution.policy_settled = True
        execution.timeout_seq = None  # clearTimeout
        self._release_if_settled(execution)
        if rejection is None:
            execution.outcome.resolve()
        else:
            execution.outcome.reject(rejection)

    def _release_if_settled(self, execution: Execution) -> None:
        """``releaseIfSettled`` (lines 1646-1651): the permit returns once the handler settled too."""
        if execution.released or not execution.policy_settled:
            return
        if execution.handler_started and not execution.handler_settled:
            return
        execution.released = True
        if execution.attempt is not None:
            self._running.pop(execution.attempt.fence, None)
        if execution.permit:
            execution.permit = False
            self.release_permit()
        execution.settled.resolve()

    def _after_settled(self, execution: Execution) -> None:
        """``settled.finally`` (lines 1729-1745)."""
        spec = execution.spec
        if spec.active.get(spec.key) is execution:
            del spec.active[spec.key]
        # The reference releases the key unconditionally (finding D1 in docs/FINDINGS.md).
        if ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION not in self.options.fixes or spec.key not in spec.active:
            self._release_active(spec.table.name, spec.key)
        if self.live_timers:
            try:
                self.schedule_next_alarm()
            except Exception as error:
                self.report("durability.scheduler.refresh_failed", error)

    def _fail_exhausted(self, spec: ExecutionSpec) -> None:
        """``failExhausted`` (lines 1749-1779)."""
        exhausted = serialize_error(spec.exhausted_error())
        attempt = self.transaction(
            lambda conn: exhaust_attempts(
                conn, spec.table, spec.key, spec.generation, spec.policy.max_attempts, exhausted
            )
        )
        if attempt is None:
            return
        self.out.events.append(
            Terminal(entity=spec.entity, timestamp=self._now, attempt=attempt, error=exhausted)
        )

    def _decide_retry(self, spec: ExecutionSpec, attempt: int, error: BaseException) -> _Decision:
        """``decideRetry`` (lines 1034-1080)."""
        terminal = is_non_retryable(error) or attempt >= spec.policy.max_attempts or spec.is_terminal(error)
        if terminal:
            return _Decision(error, True, self._now, self._now)
        try:
            raw = spec.policy.delay(attempt)
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
                raise DurableRetryPolicyError(spec.label)
            delay = _js_round(raw)
            timestamp = self._now
            if delay > MAX_SAFE_INTEGER or timestamp + delay > MAX_SAFE_INTEGER:
                raise DurableRetryPolicyError(spec.label)
            return _Decision(error, False, timestamp, timestamp + int(delay))
        except Exception as policy_error:
            wrapped = (
                policy_error
                if isinstance(policy_error, DurableRetryPolicyError)
                else DurableRetryPolicyError(spec.label, policy_error)
            )
            return _Decision(wrapped, True, self._now, self._now)

    def _settle_failure(self, execution: Execution, caught: BaseException) -> None:
        """``settleFailure`` (lines 1781-1831): retry or fail, fenced, with the alarm reconciled."""
        spec = execution.spec
        attempt = execution.attempt
        assert attempt is not None
        decision = self._decide_retry(spec, attempt.attempt, caught)
        error: SerializedError = serialize_error(decision.error)
        fence = Fence(key=spec.key, generation=spec.generation, attempt=attempt.attempt)
        owned = self.transaction(
            lambda conn: update_attempt(
                conn,
                spec.table,
                fence,
                "status = ?, next_attempt_at = ?, last_error = ?, last_error_name = ?",
                "failed" if decision.terminal else "pending",
                decision.next_attempt_at,
                error.message,
                error.name,
            )
        )
        if not owned:
            return
        self.out.events.append(
            AttemptSettled(
                entity=spec.entity,
                timestamp=decision.timestamp,
                attempt=attempt.attempt,
                duration_ms=max(0, decision.timestamp - attempt.started_at_ms),
                outcome="failed" if decision.terminal else "retry_scheduled",
                error=error,
                next_attempt_at=None if decision.terminal else decision.next_attempt_at,
            )
        )

    # --- reading -------------------------------------------------------------------------

    def running(self) -> list[Attempt]:
        """Attempts whose handler has not settled (zombies included), in claim order."""
        return [execution.attempt for execution in self._running.values() if execution.attempt is not None]

    def is_zombie(self, attempt: Attempt) -> bool:
        """True once the attempt's outcome is recorded (timed out) while its handler still runs."""
        execution = self._running.get(attempt.fence)
        return execution is not None and execution.policy_settled

    @property
    def alarm_accessor(self) -> StorageAlarm:
        return self._alarm
