"""The holder Durable Object: ``AccountLimit`` of the reference example, around ``Holder``.

``handle`` parks requests in memory and runs a round no sooner than
``round_wait_ms`` after the first waiting request and no closer than
``round_period_ms`` after the last round, never two at once; requests that
arrive during a round join the next (``#scheduleRound``). Syncs are answered
at once. ``alarm`` delegates to the engine, whose due work is the holder's
reclaim pass. The limit comes from the deployment (``Env``, which survives
eviction); group limits live in a map on the instance, as the walkthrough's
``workflowLimits`` does, so eviction resets them.

Every instance watched by a monitor also runs a model in lockstep, which
the monitor supplies (``sim/check/lockstep.py``: the literal model of the
reference on the same wire messages, times, ids and callbacks; any
difference ends the run as ``exact_accounting``). This module knows it only
as :class:`ModelInLockstep`, and the monitor only as :class:`HolderMonitor`:
the world does not import its checkers. The ``limit``, ``group_limit`` and
``can_grant`` callbacks are built alike for both, each its own set
(``semsim.world.holder_inputs``), and called as the reference calls them;
the judge's own reads (``ModelInLockstep.state``) only peek, so a run's
callbacks answer the same with or without a model beside the holder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import attrs

from semaphore_core import Event, Holder, HolderConfig, LeaseOptions, SemaphoreProtocolError, Usage
from semaphore_core.durability import AlarmInfo, Participant, SchedulerOptions, Step
from semaphore_core.durability.engine import MAX_ALARM_DELAY_MS
from semaphore_core.durability.storage import DurableTable
from semaphore_core.protocol import PermitGrant, PermitRequest, PermitSync, parse_request
from semsim.runtime.durable import DurableObject, ObjectContext
from semsim.runtime.network import Later, RemoteError
from semsim.runtime.scheduler import AlarmFaults, DurabilityScheduler, EngineReading
from semsim.runtime.timers import Signal
from semsim.world.faults import InputFault
from semsim.world.holder_inputs import PlannedInputFailure, holder_inputs
from semsim.world.variant import REFERENCE, Variant


@attrs.define
class Env:
    """A holder's deployment settings: they outlive every instance (``env.ACCOUNT_CONCURRENCY``)."""

    limit: int
    round_wait_ms: int = 1_000
    round_period_ms: int = 2_000
    grant_timeout_ms: int = 10_000
    leases: LeaseOptions | None = None
    fixes: frozenset[str] = frozenset()
    alarm_min_delay_ms: int = MAX_ALARM_DELAY_MS
    #: The reference engine re-arms its own alarm when alarm() fails; False hands failures to the platform.
    engine_fallback: bool = True
    #: Probability one alarm() run throws (a fault plan's alarm_failure).
    alarm_failure: float = 0.0
    #: Injected alarm failures stop here (the fault plan's quiet point).
    faults_until_ms: int | None = None
    #: This holder's misbehaving callbacks (the fault plan's ``input_faults``).
    #: See ``semsim.world.holder_inputs``.
    input_faults: tuple[InputFault, ...] = ()


@attrs.define
class _Pending:
    request: PermitRequest
    done: Signal
    #: The message as it arrived, for the literal model to parse itself.
    payload: Any = None
    reply: dict[str, Any] | None = None
    error: RemoteError | None = None


class ModelInLockstep(Protocol):
    """A model the holder is run beside, fed what the holder is fed (``semsim.check.lockstep.Lockstep``).

    The holder tells it each operation as it happens; it judges nothing the
    run would not, draws nothing and records nothing.
    """

    def drew(self, new_id: str) -> str: ...

    def begin(self) -> None: ...

    def parsed(self, payload: Any, core_error: SemaphoreProtocolError | None) -> None: ...

    def arrived(self, payload: Any, now: int) -> None: ...

    def round(
        self, payloads: Sequence[Any], now: int, replies: Sequence[Any], events: Sequence[Any]
    ) -> None: ...

    def round_failed(self, payloads: Sequence[Any], now: int, error: Exception) -> None: ...

    def sync_failed(self, payload: Any, now: int, error: Exception) -> None: ...

    def sync(self, payload: Any, now: int, reply: dict[str, Any]) -> None: ...

    def reclaimed(self, now: int, events: Sequence[Any]) -> None: ...

    def usage(self, now: int, reply: dict[str, Any]) -> None: ...

    def usage_failed(self, now: int, error: Exception) -> None: ...

    def state(self, holder: Holder, now: int) -> None: ...


class HolderMonitor(Protocol):
    """What a checker is told by a holder (``semsim.check.invariants.Monitor`` is one).

    ``lockstep`` gives the model to run beside this instance (``exact_accounting``), or None when
    the run's variant is judged by the invariants alone.
    """

    def lockstep(self, obj: DurableObject, config: HolderConfig, key: str) -> ModelInLockstep | None: ...

    def committed(self, key: str, holder: HolderObject) -> None: ...

    def round_served(
        self, key: str, requests: Sequence[PermitRequest], replies: Sequence[PermitGrant]
    ) -> None: ...

    def reconciled(
        self, object: str, alarm_ms: int | None, pending_at: Callable[[], int | None], min_delay_ms: int
    ) -> None:
        """A step of the holder's scheduler reconciled its alarm: the alarm the step left, and a
        read of the earliest pending work's time."""
        ...

    def engine_step(self, object: str, step: Step, reading: EngineReading) -> None:
        """A step of the holder's scheduler, and a reading of the engine as it left it."""
        ...


#: The holder as a participant of its object's scheduler: grants with unclaimed permits.
GRANTS_TABLE: Final = DurableTable(name="durability_semaphore_grants", key="grant_id")


class HolderObject:
    """One live instance of a holder object; the next one is built on the same storage."""

    def __init__(
        self,
        ctx: ObjectContext,
        env: Env,
        key: str = "",
        monitor: HolderMonitor | None = None,
        variant: Variant = REFERENCE,
    ) -> None:
        self.ctx = ctx
        self.env = env
        self.key = key
        # In memory on purpose: limitWorkflow() caps are gone after eviction.
        self.group_limits: dict[str, int] = {}
        self.monitor = monitor
        # As seed 000's AccountLimit builds it: one DurabilityScheduler on the object, the
        # semaphore attached to it. Every commit is judged once its step is done.
        self.scheduler = DurabilityScheduler(
            ctx,
            SchedulerOptions(alarm_min_delay_ms=env.alarm_min_delay_ms),
            fallback=env.engine_fallback,
            on_applied=None if monitor is None else lambda: monitor.committed(key, self),
            on_reconciled=None
            if monitor is None
            else lambda alarm_ms, pending_at: monitor.reconciled(
                ctx.name, alarm_ms, pending_at, env.alarm_min_delay_ms
            ),
            on_step=None if monitor is None else functools.partial(monitor.engine_step, ctx.name),
        )
        #: Set while the platform's alarm() runs: a pass that starts otherwise is the early timer's.
        self._platform_alarm = False
        self.inputs = inputs = holder_inputs(
            lambda: self.env.limit, self.group_limits, env.input_faults, ctx.sim.now
        )
        config = HolderConfig(
            limit=inputs.limit,
            group_limit=inputs.group_limit,
            can_grant=inputs.can_grant,
            round_wait_ms=env.round_wait_ms,
            round_period_ms=env.round_period_ms,
            grant_timeout_ms=env.grant_timeout_ms,
            leases=env.leases,
            fixes=env.fixes,
            on_event=self._lifecycle,
        )
        #: The model in lockstep (exact_accounting), when a monitor judges the run and the
        #: variant has one. It is handed callbacks built alike, so a planned failing input fails
        #: both; a set of its own, so a flapping one alternates on each side's own calls.
        self.lockstep = None
        if monitor is not None:
            twin = holder_inputs(
                lambda: self.env.limit, self.group_limits, env.input_faults, ctx.sim.now, inputs
            )
            model_config = attrs.evolve(
                config, limit=twin.limit, group_limit=twin.group_limit, can_grant=twin.can_grant
            )
            self.lockstep = monitor.lockstep(ctx.object, model_config, key)
        lockstep = self.lockstep
        self.holder = variant.build(
            ctx.storage,
            config,
            (
                (lambda: ctx.sim.next_id(f"{ctx.name}/g"))
                if lockstep is None
                else (lambda: lockstep.drew(ctx.sim.next_id(f"{ctx.name}/g")))
            ),
        )
        self.scheduler.attach(
            Participant(
                table=GRANTS_TABLE,
                run_due=self._reclaim_due,
                next_pending_at=lambda _conn: self.holder.next_alarm_at(),
            )
        )
        self._pending: list[_Pending] = []
        self._timer_armed = False
        self._round_running = False
        self._last_round_at: int | None = None

    def _judge_state(self, lockstep: ModelInLockstep, now: int) -> None:
        """The model's comparison after an operation. Its reads of the callbacks only peek, so
        judging never changes what the holder's own next call of a flapping one answers."""
        with self.inputs.peeking_only():
            lockstep.state(self.holder, now)

    def judged_usage(self, now: int) -> Usage:
        """``usage()`` as the checkers read it: with the callbacks behaving (a planned failing
        limit fails the holder's rounds, not the judge)."""
        with self.inputs.behaving():
            return self.holder.usage(now)

    def _lifecycle(self, event: Event) -> None:
        fields = event.to_wire()
        del fields["entityKind"], fields["timestamp"]
        kind = fields.pop("type")
        self.ctx.sim.event(kind, holder=self.ctx.name, **fields)

    # --- RPC ---------------------------------------------------------------------

    def handle(self, method: str, payload: Any) -> Any:
        if method == "permits":
            lockstep = self.lockstep
            try:
                message = parse_request(payload)
            except SemaphoreProtocolError as error:
                if lockstep is not None:
                    lockstep.parsed(payload, error)
                raise
            if lockstep is not None:
                lockstep.parsed(payload, None)
            if isinstance(message, PermitSync):
                now = self.ctx.sim.now()
                if lockstep is not None:
                    lockstep.begin()
                try:
                    reply = self.scheduler.transaction(
                        lambda _conn: self.holder.sync_message(message, now).to_wire()
                    )
                except (PlannedInputFailure, ValueError) as error:
                    # Fix F3 resolves the limit for a sync too: a failing limit fails the call.
                    if lockstep is not None:
                        lockstep.sync_failed(payload, now, error)
                    raise RemoteError("error", f"sync failed: {type(error).__name__}: {error}") from None
                if lockstep is not None:
                    lockstep.sync(payload, now, reply)
                    self._judge_state(lockstep, now)
                return reply
            return self._await_round(message, payload)
        if method == "limit_workflow":
            group, limit = payload["group"], payload["limit"]
            self.group_limits[group] = limit
            self.ctx.sim.event("group_limit", holder=self.ctx.name, group=group, limit=limit)
            return None
        if method == "usage":
            now = self.ctx.sim.now()
            lockstep = self.lockstep
            if lockstep is not None:
                self._judge_state(lockstep, now)
            try:
                reply = self.holder.usage(now).to_wire()
            except (PlannedInputFailure, ValueError) as error:  # usage() resolves the limit too
                if lockstep is not None:
                    lockstep.usage_failed(now, error)
                raise RemoteError("error", f"usage failed: {type(error).__name__}: {error}") from None
            if lockstep is not None:
                lockstep.usage(now, reply)
            return reply
        raise RemoteError("protocol", f"unknown method {method!r}")

    async def alarm(self) -> None:
        self._platform_alarm = True
        try:
            await self.scheduler.alarm()
        finally:
            self._platform_alarm = False

    def _reclaim_due(self, now_ms: int, info: AlarmInfo | None) -> None:
        """The holder's due work in an alarm pass: reclaim what passed its claim deadline."""
        ctx = self.ctx
        if not self._platform_alarm:
            ctx.sim.event("early_alarm", object=ctx.name, scheduled=self.scheduler.early_due_at)
        AlarmFaults(self.env.alarm_failure, self.env.faults_until_ms).throw(ctx, now_ms)
        lockstep = self.lockstep
        if lockstep is not None:
            lockstep.begin()
        events = self.scheduler.transaction(lambda _conn: self.holder.reclaim_expired(now_ms))
        if self.monitor is not None:
            self.monitor.committed(self.key, self)
        if lockstep is not None:
            lockstep.reclaimed(now_ms, events)
            self._judge_state(lockstep, now_ms)

    # --- rounds ------------------------------------------------------------------

    def _await_round(self, request: PermitRequest, payload: Any) -> Later:
        """Park the request for the next round; the answer comes when that round settles."""
        pending = _Pending(request, self.ctx.sim.signal(), payload)
        self._pending.append(pending)
        if self.lockstep is not None:
            self.lockstep.arrived(payload, self.ctx.sim.now())
        self._schedule_round()

        async def answer() -> dict[str, Any]:
            await pending.done.wait()
            if pending.error is not None:
                raise pending.error
            assert pending.reply is not None
            return pending.reply

        return Later(answer)

    def _schedule_round(self) -> None:
        # Rounds never overlap: a request arriving mid-round joins the next one,
        # which is scheduled once the current round settles.
        if self._timer_armed or self._round_running:
            return
        now = self.ctx.sim.now()
        earliest = now if self._last_round_at is None else self._last_round_at + self.env.round_period_ms
        delay = max(self.env.round_wait_ms, earliest - now)
        self._timer_armed = True

        def timer() -> None:
            self._timer_armed = False
            self._round_running = True
            try:
                self._run_round()
            finally:
                self._round_running = False
                if self._pending:
                    self._schedule_round()

        self.ctx.call_at(now + delay, timer)

    def _run_round(self) -> None:
        pending, self._pending = self._pending, []
        now = self.ctx.sim.now()
        self._last_round_at = now
        lockstep = self.lockstep
        if lockstep is not None:
            lockstep.begin()
        try:
            outcome = self.scheduler.transaction(
                lambda _conn: self.holder.round([p.request for p in pending], now)
            )
        except Exception as error:  # the round fails as a whole; every waiting call fails
            if lockstep is not None:
                lockstep.round_failed([p.payload for p in pending], now, error)
            failure = RemoteError("error", f"round failed: {type(error).__name__}: {error}")
            self.ctx.sim.event("round_failed", holder=self.ctx.name, error=str(failure))
            for entry in pending:
                entry.error = failure
                entry.done.set()
            return
        if self.monitor is not None:
            self.monitor.round_served(self.key, [p.request for p in pending], outcome.replies)
        # After the other checkers of this step (the commit's, then the round's order): a
        # difference they explain is reported under their name.
        if lockstep is not None:
            lockstep.round([p.payload for p in pending], now, outcome.replies, outcome.events)
            self._judge_state(lockstep, now)
        for entry, reply in zip(pending, outcome.replies, strict=True):
            for grant in reply.grants:
                self.ctx.sim.event(
                    "grant",
                    holder=self.ctx.name,
                    client=entry.request.client_id,
                    grant=grant.grant_id,
                    group=grant.group,
                    permits=grant.permits,
                )
            entry.reply = reply.to_wire()
            entry.done.set()
