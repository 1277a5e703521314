"""The scheduler ``Engine`` of seed 002 (``scheduler.ts``, lines 871-1890), pure and synchronous outside.

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

Theory of operation. The reference is asynchronous TypeScript, and which
continuation runs first decides which operation takes a freed permit and in
which order events are emitted. So its ``async`` functions are ported as
Python coroutines on a microtask queue with JavaScript's rules
(``microtasks.py``), line by line: every ``await``, ``.then`` and
``.finally`` is where the reference has one, and the platform's awaits are
``platform.py``'s. From outside the engine stays synchronous: each public
call opens a *step* at ``now_ms``, does what the reference does
synchronously, and drains the queue before it returns a ``Step``. Where
the reference calls ``setTimeout``, a ``Timer`` is listed for the shell to
fire; where it calls a handler, the attempt is handed to the shell
(``Step.started``, or at that very microtask through ``on_invoke``), whose
outcome settles the handler's promise.

Durable state is SQLite rows plus the ``StorageAlarm``; a new ``Engine``
on the same connection is a rebuilt instance with every permit free, no
timers and no running attempts.
"""

from __future__ import annotations

import heapq
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
    UnknownAttemptError,
    is_non_retryable,
    serialize_error,
)
from semaphore_core.durability.events import (
    AttemptSettled,
    AttemptStarted,
    Event,
    OperationEntity,
    Terminal,
)
from semaphore_core.durability.fixes import ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION, KNOWN_FIXES
from semaphore_core.durability.memos import delete_memos, delete_stale_memos
from semaphore_core.durability.microtasks import JsPromise, Microtasks, js_async, run_async
from semaphore_core.durability.platform import PlatformStorage, TransactionAlarm
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
    EarlyTimerSet,
    Outbox,
    ReportedFailure,
    Step,
    Timer,
    TimerKind,
)
from semaphore_core.durability.storage import (
    DurableTable,
    Fence,
    claim_attempt,
    exhaust_attempts,
    least_pending_at,
    pending_heads,
    purge_created_before,
    update_attempt,
)
from semaphore_core.transaction import transaction

T = TypeVar("T")

#: ``alarmMinDelayMs`` must lie within these (lines 957-958).
MIN_ALARM_DELAY_MS: Final = 1_000
MAX_ALARM_DELAY_MS: Final = 15_000
#: Timers ``advance`` may fire in one call before it calls the run a timer loop.
MAX_TIMERS_PER_ADVANCE: Final = 100_000
#: ``runAlarm``'s ``Symbol('alarm handoff')``.
_HANDOFF: Final = object()


@attrs.frozen
class SchedulerOptions:
    """``DurabilitySchedulerOptions`` (lines 909-931), checked as the constructor checks them (1109-1136)."""

    alarm_concurrency: int = 10
    alarm_min_delay_ms: int = 15_000
    alarm_handoff_ms: int = 14 * 60_000
    live_timers: bool = False
    #: Opt-in fixes of findings (``fixes.py``); empty is the faithful reference.
    fixes: frozenset[str] = frozenset()
    #: ``onAlarmRetry``: called with what ``Step.alarm_retries`` holds when a pass threw and the
    #: fallback alarm was armed. A throw, or a returned ``JsPromise`` that rejects, is only
    #: reported (``durability.alarm.retry_hook_failed``): it never changes scheduling.
    on_alarm_retry: Callable[[AlarmRetry], object] | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.on_alarm_retry is not None and not callable(self.on_alarm_retry):
            raise TypeError("onAlarmRetry must be a function")
        assert_positive_integer("alarmConcurrency", self.alarm_concurrency)
        assert_positive_integer("alarmMinDelayMs", self.alarm_min_delay_ms)
        if not MIN_ALARM_DELAY_MS <= self.alarm_min_delay_ms <= MAX_ALARM_DELAY_MS:
            raise ValueError(f"alarmMinDelayMs must be between {MIN_ALARM_DELAY_MS} and {MAX_ALARM_DELAY_MS}")
        assert_positive_integer("alarmHandoffMs", self.alarm_handoff_ms)
        unknown = sorted(set(self.fixes) - set(KNOWN_FIXES))
        if unknown:
            raise ValueError(f"unknown fixes: {unknown}")


class Join:
    """A participant's due work still under way: a promise it settles with ``resolve`` or ``reject``.

    What a synchronous participant returns from ``run_due`` for work that
    ends later (the reference's ``runDue`` returns a ``Promise``).
    """

    __slots__ = ("_engine", "_reject", "_resolve", "promise")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.promise = JsPromise(engine.tasks)
        self._resolve, self._reject = self.promise.resolving_functions()

    def resolve(self) -> None:
        """Settle inside a step (``engine.run_step(now_ms, join.resolve)``): its continuations run there."""
        self._in_step()
        self._resolve(None)

    def reject(self, error: BaseException) -> None:
        self._in_step()
        self._reject(error)

    def _in_step(self) -> None:
        if not self._engine.in_step:
            raise RuntimeError("settle a Join inside a step: engine.run_step(now_ms, join.resolve)")

    @property
    def done(self) -> bool:
        return self.promise.state != "pending"

    @property
    def error(self) -> BaseException | None:
        return self.promise.value if self.promise.state == "rejected" else None


#: A participant's due work at ``now_ms``: None when it finished at once, else a ``Join`` (or a
#: ``JsPromise``) for when it does (rejected if the work failed). Raising is a rejection at once.
RunDue: TypeAlias = Callable[[int, AlarmInfo | None], "Join | JsPromise | None"]


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
    #: ``spec.emit``: the owner's lifecycle emitter (the step's events, then its hooks).
    emit: Callable[[Event], None]


class Release:
    """``createRelease``'s closure (lines 1468-1482): gives one permit back, once."""

    __slots__ = ("_engine", "released")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.released = False

    def __call__(self) -> None:
        if self.released:
            return
        self.released = True
        self._engine._give_back()


@attrs.define(eq=False)
class Execution:
    """``ActiveExecution`` plus the variables of ``startExecution``'s closure (lines 1628-1747)."""

    spec: ExecutionSpec
    #: Resolves when the permit is released: the outcome is persisted *and* the handler settled.
    settled: JsPromise
    #: What ``startExecution`` returns: settles when the attempt's outcome is persisted.
    outcome: JsPromise | None = None
    #: ``releasePermit``.
    permit: Release | None = None
    #: The claimed attempt (its payload filled in when the handler is invoked).
    attempt: Attempt | None = None
    #: ``activeExecution.controller`` exists (set at the claim) and whether it aborted.
    controller: bool = False
    aborted: bool = False
    #: The handler's promise, settled by the shell's report.
    handler: JsPromise | None = None
    handler_started: bool = False
    handler_settled: bool = False
    policy_settled: bool = False
    timeout_seq: int | None = None


@attrs.define(eq=False)
class AlarmPass:
    """One invocation of ``alarm()`` (platform or early timer) while it has not returned."""

    id: int
    early: bool
    started_at: int
    info: AlarmInfo | None
    #: How it returned, when not by completing its work (``handed_off``, ``retrying``).
    outcome: AlarmOutcome | None = None
    error: BaseException | None = None


@attrs.frozen
class EarlyTimer:
    """``earlyAlarm``: the in-memory timer for work due before the physical alarm."""

    due_at: int
    seq: int


@attrs.define(eq=False)
class _PendingTimer:
    """A ``setTimeout`` not yet fired or cleared."""

    at_ms: int
    seq: int
    kind: TimerKind
    callback: Callable[[], None]
    execution: Execution | None = None
    pass_id: int | None = None


@attrs.frozen
class _Decision:
    error: BaseException
    terminal: bool
    timestamp: int
    next_attempt_at: int


def _js_round(value: float) -> float:
    """``Math.round``: halves go towards +infinity."""
    return math.floor(value + 0.5)


#: ``on_invoke``: the handler of an attempt is called now (the shell may report its outcome at once).
OnInvoke: TypeAlias = Callable[[Attempt], None]
#: ``on_abort``: the attempt's ``AbortSignal`` fires now (a handler that listens may reject at once).
OnAbort: TypeAlias = Callable[[Attempt, BaseException], None]


class Engine:
    """Shared machinery of one Durable Object: transactions, the alarm, the pool, attempts.

    ``on_invoke`` and ``on_abort`` let a shell whose handlers settle at once
    (a handler that returns a settled promise, or rejects as soon as its
    signal aborts) report the outcome at the very microtask the reference's
    handler would settle, by calling ``complete`` or ``fail`` from the hook.
    Without them the shell runs ``Step.started`` after the step, as a handler
    that settles later.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        alarm: StorageAlarm,
        options: SchedulerOptions | None = None,
        *,
        on_invoke: OnInvoke | None = None,
        on_abort: OnAbort | None = None,
    ) -> None:
        options = SchedulerOptions() if options is None else options
        if not isinstance(options, SchedulerOptions):
            raise TypeError(f"options must be SchedulerOptions, got {options!r}")
        # Transactions are explicit (SAVEPOINTs); the driver must not open its own.
        conn.isolation_level = None
        self.conn = conn
        self.options = options
        self.live_timers = options.live_timers
        self.on_invoke = on_invoke
        self.on_abort = on_abort
        #: The instance's microtask queue (an attribute: every ``async`` call reads it).
        self.tasks = Microtasks()
        self._alarm = alarm
        self._storage = PlatformStorage(self.tasks, conn, alarm)
        self._participants: list[Participant] = []
        #: Told ``reconcile``'s reading, ``(physical, timer)``, the moment it is taken (a checker's
        #: observation point: it may read the rows then; it must not write). None: nobody listens.
        self.targets_observer: Callable[[int | None, int | None], None] | None = None
        #: Told each ``#runDue``'s read, ``(table, now_ms, ids)``, the moment it reads its due rows
        #: (the same kind of observation point). None: nobody listens.
        self.due_observer: Callable[[str, int, tuple[str, ...]], None] | None = None
        #: Per ``reconcile`` under way, innermost last, the readings it took (``_targets``): what
        #: each caller hands ``_early_alarm`` beside the time ``reconcile`` returned, so a checker
        #: holds the one to the other. A synchronous transaction within an asynchronous one's hop
        #: opens and closes its own frame, so each reading lands in its own reconcile's.
        self._readings: list[list[tuple[int | None, int | None]]] = []
        self._migrated: set[str] = set()
        self._available_permits = options.alarm_concurrency
        self._permit_waiters: deque[Callable[[Any], None]] = deque()
        self._early: EarlyTimer | None = None
        self._alarm_refresh: JsPromise | None = None
        # Keys whose attempt is executing, per table (lines 1105-1107).
        self._active_by_table: dict[str, set[str]] = {}
        # Attempts whose handler the shell has not reported yet (the port's index, by fence).
        self._running: dict[tuple[str, str, str, int], Execution] = {}
        self._timers: dict[int, _PendingTimer] = {}
        # ``(at_ms, seq)`` of every timer set, cleared ones included until they reach the top.
        self._timer_heap: list[tuple[int, int]] = []
        self._passes: dict[int, AlarmPass] = {}
        self._seq = 0
        self._pass_ids = 0
        self._out: Outbox | None = None
        self._now = 0
        #: How many times ``reconcile`` ran on this instance: a read, for checkers (a step that
        #: moved it left the alarm as reconcile decided).
        self.reconciles = 0
        self._retired = False

    # --- steps ----------------------------------------------------------------------

    @contextmanager
    def step(self, now_ms: int) -> Iterator[Outbox]:
        """Open a step at ``now_ms`` (or join the open one); drain the microtasks before it closes."""
        if self._out is not None:
            self._set_now(now_ms)
            yield self._out
            return
        self._set_now(now_ms)
        self._out = Outbox()
        try:
            yield self._out
            self.tasks.drain()
        finally:
            self.tasks.clear()
            self._out = None

    def run_step(self, now_ms: int, body: Callable[[], None]) -> Step:
        """``body`` in a step (``step`` without the generator: this is on every call's path)."""
        out = self._out
        if out is not None:
            self._set_now(now_ms)
            body()
            return out.freeze(self._now)
        self._set_now(now_ms)
        out = self._out = Outbox()
        try:
            body()
            self.tasks.drain()
        finally:
            self.tasks.clear()
            self._out = None
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

    @property
    def storage(self) -> PlatformStorage:
        """The platform storage this engine awaits (``ctx.storage``): a shell may wrap its
        ``transaction`` and ``set_alarm`` to model the platform's failures."""
        return self._storage

    @property
    def out(self) -> Outbox:
        assert self._out is not None, "engine work outside a step"
        return self._out

    def emit(self, event: Event) -> None:
        """``spec.emit`` / ``#emit``: a lifecycle event, in emission order."""
        self.out.events.append(event)

    def report(self, label: str, error: BaseException, context: dict[str, Any] | None = None) -> None:
        """``reportFailure(label, context, error)``: logged by the reference, handed to the shell here."""
        self.out.failures.append(ReportedFailure(label=label, error=error, context=dict(context or {})))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def timer_seq(self) -> int:
        """A creation number in the engine's timer order, for a shell timer created now
        (the reference's timers, handlers' included, share one clock and its order)."""
        return self._next_seq()

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
        self._timers.clear()
        self._timer_heap.clear()
        self._passes.clear()

    @property
    def retired(self) -> bool:
        return self._retired

    # --- participants and schema ------------------------------------------------------

    @property
    def participants(self) -> tuple[Participant, ...]:
        """The participants attached, in registration order (a read, for checkers)."""
        return tuple(self._participants)

    def active_keys(self, table: str) -> frozenset[str]:
        """The keys of ``table`` whose attempt is executing on this instance (a read, for checkers)."""
        return frozenset(self._active_by_table.get(table, ()))

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

    @js_async
    async def transaction_async(self, write: Callable[[sqlite3.Connection], Any]) -> Any:
        """``transaction`` (lines 1205-1217): the writes and ``reconcile`` commit together; then the timer."""
        next_pending_at: list[int | None] = [None]

        read: list[tuple[int | None, int | None]] = []

        async def closure(txn: TransactionAlarm) -> Any:
            value = write(self.conn)
            self._readings.append(read)
            try:
                next_pending_at[0] = await self._reconcile(txn)
            finally:
                assert self._readings[-1] is read, "a reconcile's frame outlived its transaction"
                self._readings.pop()
            return value

        result = await self._storage.transaction(lambda txn: run_async(self.tasks, closure(txn)))
        self._early_alarm(next_pending_at[0], self.out.early_timers, read)
        return result

    def transaction(self, write: Callable[[sqlite3.Connection], T], now_ms: int | None = None) -> T:
        """The reference's ``transaction`` for a synchronous caller: writes, reconcile, timer, at once.

        What a shell's own writes use (the semaphore's rounds in the
        simulator): the same transaction as ``transaction_async`` with no
        hop in between, which is what it is when nothing else is queued.
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
            next_timer_at, read = self._reconcile_read()
        self._early_alarm(next_timer_at, self.out.early_timers, read)
        return value

    def _reconcile_read(self) -> tuple[int | None, list[tuple[int | None, int | None]]]:
        """``_reconcile_now``, and the readings it took (see ``_readings``)."""
        read: list[tuple[int | None, int | None]] = []
        self._readings.append(read)
        try:
            return self._reconcile_now(), read
        finally:
            self._readings.pop()

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

    def _targets(self) -> tuple[int | None, int | None]:
        """``reconcile``'s reading (lines 1287-1300): the earliest physical and timer times.

        Also kept in the innermost reconcile's frame (``_readings``), for ``_early_alarm``.
        """
        reading = self._read_targets()
        if self._readings:
            self._readings[-1].append(reading)
        return reading

    def _read_targets(self) -> tuple[int | None, int | None]:
        physical_times: list[int] = []
        timer_times: list[int] = []
        for participant in self._participants:
            physical, timer = self._pending_times(participant)
            if physical is not None:
                physical_times.append(physical)
            if timer is not None:
                timer_times.append(timer)
        return (
            min(physical_times) if physical_times else None,
            min(timer_times) if timer_times else None,
        )

    def pending_at(self) -> int | None:
        """The earliest time any participant has work pending (what ``reconcile`` should arm the
        physical alarm from), or None; a read, for checkers.

        Each participant's own pending time, the minimum taken apart from
        ``reconcile``'s reading (``_targets``): a checker that holds the alarm
        against it judges that reading and the alarm decision, not what a
        participant reports of itself. A durable table's time is read from
        its rows here (the least ``next_attempt_at`` of its pending rows), not
        through ``pendingTimes``' query (``pending_heads``), so a head read in
        the wrong order or from the wrong rows is judged too.
        """
        times: list[int] = []
        for participant in self._participants:
            if participant.next_pending_at is not None:
                at = participant.next_pending_at(self.conn)
            else:
                at = least_pending_at(self.conn, participant.table)
            if at is not None:
                times.append(at)
        return min(times, default=None)

    def _alarm_target(self, physical_next_at: int, current: int | None) -> int | None:
        """The alarm ``reconcile`` writes, or None to leave ``current`` (lines 1309-1317)."""
        target = max(physical_next_at, self._now + self.options.alarm_min_delay_ms)
        # Preserve a fallback inside this range so frequent reconciliation cannot push it later.
        if current is None or current < physical_next_at or current > target:
            return target
        return None

    @js_async
    async def _reconcile(self, txn: TransactionAlarm) -> int | None:
        """``reconcile`` (lines 1284-1319): arm the physical alarm; return the early timer's time."""
        self.reconciles += 1
        physical_next_at, timer_next_at = self._targets()
        if self.targets_observer is not None:
            self.targets_observer(physical_next_at, timer_next_at)
        current = await txn.get_alarm()
        if physical_next_at is None:
            if current is not None:
                await txn.delete_alarm()
            return None
        target = self._alarm_target(physical_next_at, current)
        if target is not None:
            await txn.set_alarm(target)
        return timer_next_at

    def _reconcile_now(self) -> int | None:
        """``reconcile`` with no hop between its awaits (``transaction``'s synchronous form)."""
        self.reconciles += 1
        physical_next_at, timer_next_at = self._targets()
        if self.targets_observer is not None:
            self.targets_observer(physical_next_at, timer_next_at)
        current = self._alarm.get_alarm()
        if physical_next_at is None:
            if current is not None:
                self._alarm.delete_alarm()
            return None
        target = self._alarm_target(physical_next_at, current)
        if target is not None:
            self._alarm.set_alarm(target)
        return timer_next_at

    def _early_alarm(
        self,
        timestamp: int | None,
        recorded: list[EarlyTimerSet],
        read: list[tuple[int | None, int | None]],
    ) -> None:
        """``scheduleEarlyAlarm(timestamp)``, and what it left added to ``recorded``, for a checker
        (``Step.early_timers``), with the reading ``reconcile`` took when it returned ``timestamp``
        (``read``: its readings, one unless ``reconcile`` was replaced); a retired instance sets
        no timers, and records nothing."""
        self._schedule_early_alarm(timestamp)
        if self._retired:
            return
        early = self._early
        pending = None if early is None else self._timers.get(early.seq)
        recorded.append(
            EarlyTimerSet(
                read=read[0] if len(read) == 1 else None,
                asked_ms=timestamp,
                now_ms=self._now,
                due_ms=None if early is None else early.due_at,
                fires_ms=None if pending is None else pending.at_ms,
            )
        )

    def _schedule_early_alarm(self, timestamp: int | None) -> None:
        """``scheduleEarlyAlarm`` (lines 1321-1363); a retired instance has no timers to set."""
        if self._retired:
            return
        early = self._early
        if early is not None and early.due_at == timestamp:
            return
        if early is not None:
            self._clear_timeout(early.seq)
            self._early = None
        if timestamp is None:
            return
        delay = timestamp - self._now
        if not self.live_timers and delay >= self.options.alarm_min_delay_ms:
            return
        if delay > MAX_TIMER_MS:
            return
        seq = [0]

        def fire() -> None:
            current = self._early
            if current is None or current.seq != seq[0]:
                return
            self._early = None
            execution = self._start_pass(None, early=True)
            execution.catch(
                lambda error: self.report(
                    "durability.background_execution.failed", error, {"scheduledTime": timestamp}
                )
            )

        seq[0] = self._set_timeout(max(delay, 0), "early_alarm", fire)
        self._early = EarlyTimer(due_at=timestamp, seq=seq[0])

    def schedule_next_alarm(self) -> JsPromise:
        """``scheduleNextAlarm`` (lines 1366-1375): one reconciling transaction for concurrent calls."""
        if self._alarm_refresh is not None:
            return self._alarm_refresh

        def done() -> None:
            self._alarm_refresh = None

        self._alarm_refresh = self.transaction_async(lambda _conn: None).finally_(done)
        return self._alarm_refresh

    def refresh(self, now_ms: int) -> Step:
        """``scheduleNextAlarm`` as a step of its own.

        Outside a step nothing is queued, so the coalesced transaction runs
        to its end with no other continuation in between: this does it at
        once (a shell calls it after every write it makes outside the
        engine: it must be cheap).
        """
        if self._out is not None:
            # Inside a step: its continuations are the open step's, reported when it closes.
            self._set_now(now_ms)
            self.schedule_next_alarm()
            return Step(now_ms=self._now)
        self._set_now(now_ms)
        with transaction(self.conn):
            next_timer_at, read = self._reconcile_read()
        recorded: list[EarlyTimerSet] = []
        self._early_alarm(next_timer_at, recorded, read)
        return Step(now_ms=self._now, early_timers=tuple(recorded))

    @js_async
    async def purge(
        self, table: DurableTable, before: int, active: dict[str, Execution], reason: BaseException
    ) -> int:
        """``purge`` (lines 1380-1408): abort matching handlers, delete older records, reconcile."""
        if isinstance(before, bool) or not isinstance(before, int) or not 0 <= before <= MAX_SAFE_INTEGER:
            raise ValueError("timestamp must be a non-negative safe integer")
        for running in list(active.values()):
            if running.spec.created_at < before:
                self._abort(running, reason)

        def write(conn: sqlite3.Connection) -> int:
            count = purge_created_before(conn, table, before)
            delete_stale_memos(conn, table)
            return count

        removed: int = await self.transaction_async(write)
        return removed

    # --- the pool ---------------------------------------------------------------------

    @property
    def available_permits(self) -> int:
        return self._available_permits

    @property
    def permits_held(self) -> int:
        """Permits out of the pool: attempts running (zombies included) and eager starts in hand."""
        return self.options.alarm_concurrency - self._available_permits

    def try_acquire_permit(self) -> Release | None:
        """``tryAcquirePermit`` (lines 1450-1456): a release, or None when the pool is empty."""
        if self._available_permits == 0 or self._retired:
            return None
        self._available_permits -= 1
        return Release(self)

    def acquire_permit(self) -> JsPromise:
        """``acquirePermit`` (lines 1458-1466): a release now, or when a waiter's turn comes."""
        release = self.try_acquire_permit()
        if release is not None:
            return JsPromise.resolve(self.tasks, release)
        waiting = JsPromise(self.tasks)
        resolve, _ = waiting.resolving_functions()
        self._permit_waiters.append(resolve)
        return waiting

    def _give_back(self) -> None:
        """A release's body (lines 1474-1480): the permit goes to the oldest waiter, else the pool."""
        if self._permit_waiters and not self._retired:
            waiter = self._permit_waiters.popleft()
            waiter(Release(self))
        else:
            self._available_permits += 1
        assert 0 <= self._available_permits <= self.options.alarm_concurrency

    @js_async
    async def run_concurrent(self, items: Sequence[T], worker: Callable[[T], JsPromise]) -> None:
        """``runConcurrent`` (lines 1484-1504): ``min(alarmConcurrency, n)`` lanes over ``items``."""
        next_index = [0]

        async def lane() -> None:
            while next_index[0] < len(items):
                item = items[next_index[0]]
                next_index[0] += 1
                await worker(item)

        count = min(self.options.alarm_concurrency, len(items))
        await JsPromise.all(self.tasks, [run_async(self.tasks, lane()) for _ in range(count)])

    # --- alarm passes ----------------------------------------------------------------------

    def alarm(self, now_ms: int, info: AlarmInfo | None = None) -> Step:
        """``DurabilityScheduler.alarm``: what the object's ``alarm()`` delegates to."""
        return self.run_step(now_ms, lambda: self._platform_pass(info))

    def _platform_pass(self, info: AlarmInfo | None) -> None:
        self._start_pass(info, early=False)

    def _start_pass(self, info: AlarmInfo | None, *, early: bool) -> JsPromise:
        """Call ``alarm(info)`` and note, for the shell, when and how it returns."""
        assert not self._retired, "a retired instance runs no alarm"
        self._pass_ids += 1
        alarm_pass = AlarmPass(id=self._pass_ids, early=early, started_at=self.now_ms, info=info)
        self._passes[alarm_pass.id] = alarm_pass
        self.out.passes_started.append(alarm_pass.id)
        execution = self._alarm_invocation(info, alarm_pass)
        execution.then(
            lambda _: self._end_pass(alarm_pass, alarm_pass.outcome or "completed", alarm_pass.error),
            lambda error: self._end_pass(alarm_pass, "failed", error),
        )
        return execution

    @js_async
    async def _alarm_invocation(self, info: AlarmInfo | None, alarm_pass: AlarmPass) -> None:
        """``alarm`` (lines 1510-1528)."""
        try:
            await self._run_alarm(info, alarm_pass)
        except Exception as error:
            # Throwing lets the platform retry, but it gives up after a few failures; our own
            # alarm turns the failure into a retry we control.
            if not await self._arm_fallback_alarm():
                raise
            self.report("durability.alarm.failed", error, {"retryInMs": self.options.alarm_min_delay_ms})
            alarm_pass.outcome, alarm_pass.error = "retrying", error
            self._notify_alarm_retry(error, info)

    def _notify_alarm_retry(self, failure: BaseException, info: AlarmInfo | None) -> None:
        """``notifyAlarmRetry`` (lines 1529-1565): what ``onAlarmRetry`` gets, then the hook itself."""
        retry = AlarmRetry(
            error=serialize_error(failure),
            retry_in_ms=self.options.alarm_min_delay_ms,
            retry_count=None if info is None else info.retry_count,
            is_retry=None if info is None else info.is_retry,
        )
        self.out.alarm_retries.append(retry)
        hook = self.options.on_alarm_retry
        if hook is None:
            return

        def report(hook_error: BaseException) -> None:
            self.report("durability.alarm.retry_hook_failed", hook_error, {"retryInMs": retry.retry_in_ms})

        self.call_hook(hook, retry, report)

    def call_hook(
        self, hook: Callable[[Any], object], value: Any, report: Callable[[BaseException], None]
    ) -> None:
        """A best-effort hook, as the reference calls one: a throw is reported, never rethrown; a
        returned ``JsPromise`` is left running (``waitUntil``) and reported if it rejects."""
        try:
            result = hook(value)
        except Exception as error:
            report(error)
            return
        if isinstance(result, JsPromise):
            JsPromise.resolve(self.tasks, result).catch(report)

    @js_async
    async def _run_alarm(self, info: AlarmInfo | None, alarm_pass: AlarmPass) -> None:
        """``runAlarm`` (lines 1570-1601): every participant's due work, raced against the hand-off."""
        started_at = self._now
        work: list[Any] = []
        for participant in self._participants:
            # An ``async`` runDue that throws rejects; the others still run.
            try:
                due = participant.run_due(started_at, info)
            except Exception as error:
                due = JsPromise.rejected(self.tasks, error)
            work.append(due.promise if isinstance(due, Join) else due)
        execution = JsPromise.all(self.tasks, work).then(lambda _: None)
        execution.catch(lambda _: None)
        remaining = self.options.alarm_handoff_ms - (self._now - started_at)
        timeout: list[int | None] = [None]

        def arm(resolve: Callable[[Any], None], _reject: Callable[[Any], None]) -> None:
            timeout[0] = self._set_timeout(
                max(remaining, 0), "handoff", lambda: resolve(_HANDOFF), pass_id=alarm_pass.id
            )

        try:
            result = await JsPromise.race(self.tasks, [execution, JsPromise(self.tasks, arm)])
        finally:
            if timeout[0] is not None:
                self._clear_timeout(timeout[0])
        if result is _HANDOFF:
            alarm_pass.outcome = "handed_off"
            await self._arm_for_handoff(self._now)
            return
        await self.schedule_next_alarm()

    @js_async
    async def _arm_fallback_alarm(self) -> bool:
        """``armFallbackAlarm`` (lines 1604-1611): outside any transaction; the next run reconciles."""
        try:
            await self._storage.set_alarm(self._now + self.options.alarm_min_delay_ms)
        except Exception:
            return False
        return True

    def _arm_for_handoff(self, timestamp: int) -> JsPromise:
        """``armForHandoff`` (lines 1613-1621)."""

        async def closure(txn: TransactionAlarm) -> None:
            current = await txn.get_alarm()
            target = max(timestamp, self._now + self.options.alarm_min_delay_ms)
            if current is None or current > target:
                await txn.set_alarm(target)

        return self._storage.transaction(lambda txn: run_async(self.tasks, closure(txn)))

    def _end_pass(self, alarm_pass: AlarmPass, outcome: AlarmOutcome, error: BaseException | None) -> None:
        if self._passes.pop(alarm_pass.id, None) is None:
            return  # the instance was retired meanwhile
        self.out.alarm_ends.append(
            AlarmEnd(
                alarm_pass.id,
                alarm_pass.early,
                outcome,
                error,
                started_ms=alarm_pass.started_at,
                ended_ms=self._now,
            )
        )

    @property
    def open_passes(self) -> tuple[AlarmPass, ...]:
        """Alarm invocations that have not returned."""
        return tuple(self._passes.values())

    # --- timers ------------------------------------------------------------------------

    def _set_timeout(
        self,
        delay_ms: int,
        kind: TimerKind,
        callback: Callable[[], None],
        *,
        execution: Execution | None = None,
        pass_id: int | None = None,
    ) -> int:
        """``setTimeout``: the shell fires it (``fire``, ``advance``) at ``now + delay_ms``."""
        seq = self._next_seq()
        at_ms = self._now + delay_ms
        self._timers[seq] = _PendingTimer(at_ms, seq, kind, callback, execution, pass_id)
        heapq.heappush(self._timer_heap, (at_ms, seq))
        return seq

    def _clear_timeout(self, seq: int) -> None:
        self._timers.pop(seq, None)

    def _timer(self, pending: _PendingTimer) -> Timer:
        attempt = None if pending.execution is None else pending.execution.attempt
        return Timer(pending.at_ms, pending.seq, pending.kind, attempt=attempt, pass_id=pending.pass_id)

    def timers(self) -> list[Timer]:
        """The instance's in-memory timers, in firing order (time, then creation)."""
        if self._retired:
            return []
        pending = sorted(self._timers.values(), key=lambda timer: (timer.at_ms, timer.seq))
        return [self._timer(timer) for timer in pending]

    @property
    def early_due_at(self) -> int | None:
        """When the work the early timer is set for falls due (it fires then, or now if that passed)."""
        return None if self._early is None else self._early.due_at

    def next_timer_at(self) -> int | None:
        first = self._first_timer()
        return None if first is None else first.at_ms

    def _first_timer(self) -> _PendingTimer | None:
        """``timers()[0]``, without building the others: a shell asks after every step.

        A heap, cleared timers dropped as they reach its top: every open
        alarm pass holds a hand-off timer, and passes pile up while the
        early timer keeps firing over running operations.
        """
        if self._retired:
            return None
        heap, timers = self._timer_heap, self._timers
        while heap:
            pending = timers.get(heap[0][1])
            if pending is not None:
                return pending
            heapq.heappop(heap)
        return None

    def fire(self, timer: Timer, now_ms: int) -> Step:
        """Fire one timer from ``timers()``; a timer cleared since is a no-op."""
        return self.run_step(now_ms, lambda: self._fire(timer.seq))

    def _fire(self, seq: int) -> None:
        if self._retired:
            return
        pending = self._timers.pop(seq, None)
        if pending is not None:
            pending.callback()

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
                self._fire(first.seq)
                self.tasks.drain()
            raise RuntimeError(f"more than {MAX_TIMERS_PER_ADVANCE} timers fired by {now_ms}: a timer loop")

        return self.run_step(self._now, body)

    # --- executions --------------------------------------------------------------------

    def start_execution(self, spec: ExecutionSpec, eager_permit: Release | None = None) -> Execution:
        """``startExecution`` (lines 1628-1747): active now; claims and runs one attempt in the background.

        ``Execution.outcome`` settles when the attempt's outcome is persisted,
        not when a timed-out handler settles; ``Execution.settled`` when the
        permit is back.
        """
        tasks = self.tasks
        settled = JsPromise(tasks)
        settle_active, _ = settled.resolving_functions()
        execution = Execution(spec=spec, settled=settled, permit=eager_permit)
        if self._retired:
            execution.outcome = JsPromise(tasks)  # never starts: a dead instance claims nothing
            return execution
        key = spec.key
        spec.active[key] = execution
        self._track_active(spec.table.name, key)

        def release_if_settled() -> None:
            if execution.policy_settled and (not execution.handler_started or execution.handler_settled):
                if execution.permit is not None:
                    execution.permit()
                settle_active(None)

        def handler_done() -> None:
            execution.handler_settled = True
            release_if_settled()

        def policy_done() -> None:
            execution.policy_settled = True
            release_if_settled()

        async def body() -> None:
            if execution.permit is None:
                execution.permit = await self.acquire_permit()
            attempt = claim_attempt(self.conn, spec.table, key, spec.generation, spec.policy.max_attempts)
            if attempt is None:
                await self._fail_exhausted(spec)
                return
            started_at = self._now
            spec.emit(AttemptStarted(entity=spec.entity, timestamp=started_at, attempt=attempt))
            execution.controller = True
            execution.attempt = Attempt(
                table=spec.table.name,
                id=key,
                operation=spec.operation,
                generation=spec.generation,
                attempt=attempt,
                payload=None,
                started_at_ms=started_at,
                timeout_at_ms=started_at + spec.policy.attempt_timeout_ms,
            )
            try:
                execution.handler_started = True
                handler_result = JsPromise.resolve(tasks).then(lambda _: self._invoke(execution))
                handler_result.finally_(handler_done).catch(lambda _: None)

                def arm(_resolve: Callable[[Any], None], reject: Callable[[Any], None]) -> None:
                    def time_out() -> None:
                        error = spec.timeout_error()
                        self._abort(execution, error)
                        reject(error)

                    execution.timeout_seq = self._set_timeout(
                        spec.policy.attempt_timeout_ms, "attempt_timeout", time_out, execution=execution
                    )

                timeout_result = JsPromise(tasks, arm)
                result = await JsPromise.race(tasks, [handler_result, timeout_result])

                # One transaction: a failed memo cleanup must undo the completion, not orphan the memos.
                def completion(conn: sqlite3.Connection) -> int | None:
                    completed_at = spec.complete(result, attempt, self._now)
                    if completed_at is not None:
                        delete_memos(conn, spec.table, key)
                    return completed_at

                timestamp = self.transaction_sync(completion)
                if timestamp is not None:
                    spec.emit(
                        AttemptSettled(
                            entity=spec.entity,
                            timestamp=timestamp,
                            attempt=attempt,
                            duration_ms=max(0, timestamp - started_at),
                            outcome="completed",
                            result=result if spec.include_result else None,
                            result_included=spec.include_result,
                        )
                    )
            except Exception as caught:
                await self._settle_failure(spec, attempt, started_at, caught)
            finally:
                if execution.timeout_seq is not None:
                    self._clear_timeout(execution.timeout_seq)
                    execution.timeout_seq = None

        execution.outcome = run_async(tasks, body()).finally_(policy_done)
        settled.finally_(lambda: self._after_settled(execution))
        return execution

    def _invoke(self, execution: Execution) -> JsPromise:
        """``spec.invoke(attempt, controller.signal)``: hand the attempt to the shell; its promise."""
        attempt = execution.attempt
        assert attempt is not None
        payload = execution.spec.invoke(attempt.attempt)  # raises: no handler (the promise rejects)
        attempt = attrs.evolve(attempt, payload=payload)
        execution.attempt = attempt
        handler = execution.handler = JsPromise(self.tasks)
        assert attempt.fence not in self._running, attempt
        self._running[attempt.fence] = execution
        self.out.started.append(attempt)
        if self.on_invoke is not None:
            try:
                self.on_invoke(attempt)
            except Exception:
                # The handler threw as it was called: its promise rejects; nothing left to report.
                self._running.pop(attempt.fence, None)
                raise
        return handler

    def _after_settled(self, execution: Execution) -> None:
        """``settled.finally`` (lines 1729-1745)."""
        spec = execution.spec
        if spec.active.get(spec.key) is execution:
            del spec.active[spec.key]
        # The reference releases the key unconditionally (finding D1 in docs/FINDINGS.md).
        if ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION not in self.options.fixes or spec.key not in spec.active:
            self._release_active(spec.table.name, spec.key)
        # Re-arm the in-memory timer now that this key is eligible again.
        if self.live_timers:
            self.schedule_next_alarm().catch(
                lambda error: self.report(
                    "durability.scheduler.refresh_failed", error, {"table": spec.table.name, "key": spec.key}
                )
            )

    def _abort(self, execution: Execution, reason: BaseException) -> None:
        """``controller.abort(reason)``: a no-op before the claim or when already aborted."""
        if not execution.controller or execution.aborted:
            return
        execution.aborted = True
        attempt = execution.attempt
        assert attempt is not None
        self.out.aborted.append(Abort(attempt=attempt, reason=serialize_error(reason)))
        if self.on_abort is not None and self._running.get(attempt.fence) is execution:
            # An abort listener that throws is reported; the abort goes on (EventTarget dispatch).
            try:
                self.on_abort(attempt, reason)
            except Exception as error:
                self.report("durability.abort_listener.failed", error)

    # --- what the shell reports ----------------------------------------------------------

    def _execution_for(self, attempt: Attempt) -> Execution:
        if not isinstance(attempt, Attempt):
            raise TypeError(f"expected an Attempt, got {attempt!r}")
        execution = self._running.get(attempt.fence)
        if execution is None:
            raise UnknownAttemptError(
                f"attempt {attempt.attempt} of {attempt.id!r} is not running in this instance"
                " (already reported, or started by another instance)"
            )
        return execution

    def complete(self, attempt: Attempt, result: Any, now_ms: int) -> Step:
        """The handler returned ``result``."""
        execution = self._execution_for(attempt)
        return self.run_step(now_ms, lambda: self._handler_reported(execution, result, None))

    def fail(self, attempt: Attempt, error: BaseException, now_ms: int) -> Step:
        """The handler threw ``error`` (``NonRetryableError`` to stop retrying)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"error must be an exception, got {error!r}")
        execution = self._execution_for(attempt)
        return self.run_step(now_ms, lambda: self._handler_reported(execution, None, error))

    def time_out(self, attempt: Attempt, now_ms: int) -> Step:
        """The attempt's timeout timer fired (equivalently: ``fire`` its ``attempt_timeout`` timer)."""
        execution = self._execution_for(attempt)
        if now_ms < attempt.timeout_at_ms:
            raise ValueError(f"attempt times out at {attempt.timeout_at_ms}, not {now_ms}")
        seq = execution.timeout_seq
        return self.run_step(now_ms, lambda: None if seq is None else self._fire(seq))

    def _handler_reported(self, execution: Execution, result: Any, failure: BaseException | None) -> None:
        attempt = execution.attempt
        assert attempt is not None
        assert execution.handler is not None
        del self._running[attempt.fence]
        resolve, reject = execution.handler.resolving_functions()
        if failure is None:
            resolve(result)
        else:
            reject(failure)

    # --- settling ------------------------------------------------------------------------

    @js_async
    async def _fail_exhausted(self, spec: ExecutionSpec) -> None:
        """``failExhausted`` (lines 1749-1779)."""
        exhausted = serialize_error(spec.exhausted_error())

        def exhaust(conn: sqlite3.Connection) -> int | None:
            exhausted_attempt = exhaust_attempts(
                conn, spec.table, spec.key, spec.generation, spec.policy.max_attempts, exhausted
            )
            if exhausted_attempt is not None:
                delete_memos(conn, spec.table, spec.key)
            return exhausted_attempt

        attempt = await self.transaction_async(exhaust)
        if attempt is None:
            return
        spec.emit(Terminal(entity=spec.entity, timestamp=self._now, attempt=attempt, error=exhausted))

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

    @js_async
    async def _settle_failure(
        self, spec: ExecutionSpec, attempt: int, started_at: int, caught: BaseException
    ) -> None:
        """``settleFailure`` (lines 1781-1831): retry or fail, fenced, with the alarm reconciled."""
        decision = self._decide_retry(spec, attempt, caught)
        error = serialize_error(decision.error)
        fence = Fence(key=spec.key, generation=spec.generation, attempt=attempt)

        def write(conn: sqlite3.Connection) -> bool:
            owned = update_attempt(
                conn,
                spec.table,
                fence,
                "status = ?, next_attempt_at = ?, last_error = ?, last_error_name = ?",
                "failed" if decision.terminal else "pending",
                decision.next_attempt_at,
                error.message,
                error.name,
            )
            if owned and decision.terminal:
                delete_memos(conn, spec.table, spec.key)
            return owned

        updated = await self.transaction_async(write)
        if not updated:
            return
        spec.emit(
            AttemptSettled(
                entity=spec.entity,
                timestamp=decision.timestamp,
                attempt=attempt,
                duration_ms=max(0, decision.timestamp - started_at),
                outcome="failed" if decision.terminal else "retry_scheduled",
                error=error,
                next_attempt_at=None if decision.terminal else decision.next_attempt_at,
            )
        )

    # --- reading -------------------------------------------------------------------------

    def running(self) -> list[Attempt]:
        """Attempts whose handler the shell has not reported (zombies included), in invocation order."""
        return [execution.attempt for execution in self._running.values() if execution.attempt is not None]

    def awaits_report(self, attempt: Attempt) -> bool:
        """Whether this engine still waits for the shell to report ``attempt``'s handler."""
        return attempt.fence in self._running

    def is_zombie(self, attempt: Attempt) -> bool:
        """True once the attempt's outcome is recorded (timed out) while its handler still runs."""
        execution = self._running.get(attempt.fence)
        return execution is not None and execution.policy_settled

    @property
    def alarm_accessor(self) -> StorageAlarm:
        return self._alarm
