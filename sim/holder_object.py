"""The holder Durable Object: ``AccountLimit`` of the reference example, around ``Holder``.

``handle`` parks requests in memory and runs a round no sooner than
``round_wait_ms`` after the first waiting request and no closer than
``round_period_ms`` after the last round, never two at once; requests that
arrive during a round join the next (``#scheduleRound``). Syncs are answered
at once. ``alarm`` delegates to the engine, whose due work is the holder's
reclaim pass. The limit comes from the deployment (``Env``, which survives
eviction); group limits live in a map on the instance, as the walkthrough's
``workflowLimits`` does, so eviction resets them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from semaphore_core import Event, Holder, HolderConfig, LeaseOptions, Usage
from semaphore_core.protocol import PermitRequest, PermitSync, parse_request
from sim.durable import ObjectContext
from sim.engine import MAX_ALARM_DELAY_MS, Engine
from sim.faults import InputFault
from sim.holder_inputs import PlannedInputFailure, holder_inputs
from sim.network import RemoteError
from sim.timers import Signal

if TYPE_CHECKING:
    from sim.invariants import Monitor


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
    #: This holder's misbehaving callbacks (the fault plan's ``input_faults``; see ``sim.holder_inputs``).
    input_faults: tuple[InputFault, ...] = ()


@attrs.define
class _Pending:
    request: PermitRequest
    done: Signal
    reply: dict[str, Any] | None = None
    error: RemoteError | None = None


class _Reclaim:
    """The holder's participation in the engine: grants with unclaimed permits, and reclaim."""

    def __init__(self, holder: Holder, engine: Engine) -> None:
        self._holder = holder
        self._engine = engine

    def next_pending_at(self, conn: Any) -> int | None:
        return self._holder.next_alarm_at()

    def run_due(self, now_ms: int) -> None:
        self._holder.reclaim_expired(now_ms)
        self._engine.after_commit()


class HolderObject:
    """One live instance of a holder object; the next one is built on the same storage."""

    def __init__(self, ctx: ObjectContext, env: Env, key: str = "", monitor: Monitor | None = None) -> None:
        self.ctx = ctx
        self.env = env
        self.key = key
        # In memory on purpose: limitWorkflow() caps are gone after eviction.
        self.group_limits: dict[str, int] = {}
        self.engine = Engine(
            ctx,
            env.alarm_min_delay_ms,
            fallback=env.engine_fallback,
            alarm_failure=env.alarm_failure,
        )
        self.inputs = inputs = holder_inputs(
            lambda: self.env.limit, self.group_limits, env.input_faults, ctx.sim.now
        )
        self.holder = Holder(
            ctx.storage,
            HolderConfig(
                limit=inputs.limit,
                group_limit=inputs.group_limit,
                can_grant=inputs.can_grant,
                round_wait_ms=env.round_wait_ms,
                round_period_ms=env.round_period_ms,
                grant_timeout_ms=env.grant_timeout_ms,
                leases=env.leases,
                fixes=env.fixes,
                on_event=self._lifecycle,
            ),
            new_id=lambda: ctx.sim.next_id(f"{ctx.name}/g"),
            before_commit=self.engine.reconcile,
        )
        self.engine.register(_Reclaim(self.holder, self.engine))
        self.engine.faults_until_ms = env.faults_until_ms
        self.monitor = monitor
        if monitor is not None:
            self.engine.on_commit = lambda: monitor.committed(key, self)
        self._pending: list[_Pending] = []
        self._timer_armed = False
        self._round_running = False
        self._last_round_at: int | None = None

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

    async def handle(self, method: str, payload: Any) -> Any:
        if method == "permits":
            message = parse_request(payload)
            if isinstance(message, PermitSync):
                try:
                    reply = self.holder.sync_message(message, self.ctx.sim.now())
                except (PlannedInputFailure, ValueError) as error:
                    # Fix F3 resolves the limit for a sync too: a failing limit fails the call.
                    raise RemoteError("error", f"sync failed: {type(error).__name__}: {error}") from None
                self.engine.after_commit()
                return reply.to_wire()
            return await self._await_round(message)
        if method == "limit_workflow":
            group, limit = payload["group"], payload["limit"]
            self.group_limits[group] = limit
            self.ctx.sim.event("group_limit", holder=self.ctx.name, group=group, limit=limit)
            return None
        if method == "usage":
            try:
                return self.holder.usage(self.ctx.sim.now()).to_wire()
            except (PlannedInputFailure, ValueError) as error:  # usage() resolves the limit too
                raise RemoteError("error", f"usage failed: {type(error).__name__}: {error}") from None
        raise RemoteError("protocol", f"unknown method {method!r}")

    async def alarm(self) -> None:
        await self.engine.alarm()

    # --- rounds ------------------------------------------------------------------

    async def _await_round(self, request: PermitRequest) -> dict[str, Any]:
        pending = _Pending(request, self.ctx.sim.signal())
        self._pending.append(pending)
        self._schedule_round()
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    def _schedule_round(self) -> None:
        # Rounds never overlap: a request arriving mid-round joins the next one,
        # which is scheduled once the current round settles.
        if self._timer_armed or self._round_running:
            return
        now = self.ctx.sim.now()
        earliest = now if self._last_round_at is None else self._last_round_at + self.env.round_period_ms
        delay = max(self.env.round_wait_ms, earliest - now)
        self._timer_armed = True

        async def timer() -> None:
            await self.ctx.sim.sleep(delay)
            self._timer_armed = False
            self._round_running = True
            try:
                self._run_round()
            finally:
                self._round_running = False
                if self._pending:
                    self._schedule_round()

        self.ctx.start_task(timer, "round_timer")

    def _run_round(self) -> None:
        pending, self._pending = self._pending, []
        now = self.ctx.sim.now()
        self._last_round_at = now
        try:
            outcome = self.holder.round([p.request for p in pending], now)
        except Exception as error:  # the round fails as a whole; every waiting call fails
            failure = RemoteError("error", f"round failed: {type(error).__name__}: {error}")
            self.ctx.sim.event("round_failed", holder=self.ctx.name, error=str(failure))
            for entry in pending:
                entry.error = failure
                entry.done.set()
            return
        self.engine.after_commit()
        if self.monitor is not None:
            self.monitor.round_served(self.key, [p.request for p in pending], outcome.replies)
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
