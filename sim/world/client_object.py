"""A client Durable Object: ``JobShard`` of the reference example, around ``QueueClient``.

The queue (items, grants, leases, per-key ``nextRequestAt``) is in the
object's storage, so eviction loses in-flight calls and the timers of the
live instance, never the queue. A loop on the instance decides what to send:

- a request for each key with queued items whose ``nextRequestAt`` passed
  (one in flight per key; after a failed call, the key waits ``retry_ms``);
- a sync right after new grants were claimed (admission waits on it), and
  otherwise ``report_delay_ms`` after the first unreported change;
- a heartbeat sync when a lease with permits in use is at half its lifetime;
- at a lease's expiry, its retirement (the core's ``retire_expired``), which
  is then reported like any other change, until the holder settles it;
- a ``finished`` check for items running longer than ``finished_check_ms``,
  which releases items whose completion notice was lost.

The object keeps its alarm at its next wakeup, so after an eviction the
platform rebuilds it and the loop resumes. The alarm is the object's
``DurabilityScheduler``'s (``semsim.runtime.scheduler``), as in seed 000,
where the queue attaches to the scheduler the object builds: the queue is
one participant, whose pending time is the loop's next wakeup, and the
scheduler's engine arms the alarm from it by the reference's rule.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol

import attrs

from semaphore_core.durability import (
    AlarmInfo,
    Attempt,
    Durability,
    Event,
    Participant,
    SchedulerOptions,
)
from semaphore_core.durability import Step as EngineStep
from semaphore_core.durability.engine import Join
from semaphore_core.durability.errors import DuplicateDurablePayloadError
from semaphore_core.durability.storage import DurableTable
from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT, RETRIES_WAIT_THEIR_TIME, RETURN_IDLE_LEASES
from semaphore_core.numbers import MAX_DELAY_MS
from semaphore_core.protocol import PermitGrant, PermitRequest, PermitSync, PermitSyncResult, parse_response
from semaphore_core.queue import Admission, QueueClient, QueueItem, Step
from semaphore_core.queue_reads import NEXT_REQUEST_AFTER, QUEUED_NEWEST_FIRST
from semsim.inputs.validation import boolean, integer, js_int
from semsim.runtime.durable import ObjectContext
from semsim.runtime.network import Network, RemoteError, RpcError
from semsim.runtime.scheduler import NO_ALARM_FAULTS, AlarmFaults, DurabilityScheduler, EngineReading
from semsim.world.call_log import CallLog
from semsim.world.external_api import NAME as API
from semsim.world.jobs import Jobs
from semsim.world.operations import (
    CALL_TIMEOUT_MS,
    OPERATION,
    OperationsSpec,
    api_request,
    job_payload,
    releases_permit,
)

#: The client's durable alarm is never sooner than this (the engine's alarmMinDelayMs).
ALARM_FLOOR_MS: Final = 15_000
#: The queue as a participant of the object's scheduler (its pending time comes from the loop).
QUEUE_TABLE: Final = DurableTable(name="durability_semaphore_queue_items", key="id")


@attrs.frozen
class ClientSettings:
    rpc_timeout_ms: int = attrs.field(default=5_000, converter=js_int, validator=integer(1, MAX_DELAY_MS))
    retry_ms: int = attrs.field(default=1_000, converter=js_int, validator=integer(1, MAX_DELAY_MS))
    report_delay_ms: int = attrs.field(default=500, converter=js_int, validator=integer(1, MAX_DELAY_MS))
    finished_check_ms: int = attrs.field(default=60_000, converter=js_int, validator=integer(1, MAX_DELAY_MS))
    #: A plain client sends no ``leases`` key, so it is never leased.
    lease_capable: bool = attrs.field(default=True, validator=boolean)


class ClientQueue(Protocol):
    """What the object asks of its queue: ``QueueClient``, or one with a model beside it."""

    def enqueue(self, items: Iterable[QueueItem], now: int) -> int: ...
    def release(self, item_id: str) -> tuple[str, str] | None: ...
    def cancel(self, item_id: str) -> bool: ...
    def status(self, item_id: str) -> str | None: ...
    def running(self) -> list[tuple[str, int]]: ...
    def newest_queued(self, count: int) -> list[str]: ...
    def draw_leases(self, now: int) -> list[Admission]: ...
    def retire_expired(self, now: int) -> list[tuple[str, str]]: ...
    def heartbeat_keys(self, now: int) -> list[str]: ...
    def keys_due(self, now: int) -> list[str]: ...
    def dirty_keys(self) -> list[str]: ...
    def next_wakeup(self) -> tuple[int | None, int | None, int | None, int | None]: ...
    def build_request(self, key: str, now: int) -> PermitRequest: ...
    def build_sync(self, key: str, now: int) -> PermitSync: ...
    def sent(self, key: str, now: int) -> int: ...
    def acked(self, key: str, changes: int) -> None: ...
    def on_grant(self, key: str, reply: PermitGrant, now: int) -> Step: ...
    def on_synced(self, key: str, reply: PermitSyncResult, now: int) -> Step: ...


class QueueInLockstep(ClientQueue, Protocol):
    """A queue with a model beside it (``exact_queue``), which reads each reply off the wire."""

    def heard(self, reply: Any) -> None:
        """The holder's reply as the wire carried it, before ``on_grant`` or ``on_synced``."""
        ...


class ClientMonitor(Protocol):
    """What a checker is told by a client (``semsim.check.invariants.Monitor`` is one)."""

    def requesting(self, client: str, key: str, request: PermitRequest, conn: Any, wire: Any = None) -> None:
        """The client sends ``request`` for ``key`` (``wire``: as serialised); ``conn``: its storage."""
        ...

    def admitted(
        self, key: str, group: str, *, client: str, item: str, grant: str | None, lease: str | None
    ) -> None: ...

    def released(self, key: str, group: str, *, client: str, item: str) -> None: ...

    def lease_expired(self, key: str, client: str = "") -> None: ...

    def operation_event(self, client: str, event: Event) -> None:
        """A lifecycle event of one of the client's durable operations, in emission order."""
        ...

    def handed_off(
        self, client: str, alarm_ms: int | None, pending_ms: int | None, min_delay_ms: int
    ) -> None:
        """An alarm pass of the client's scheduler handed its work off: the alarm the step left."""
        ...

    def registration_refused(self, client: str, id: str, payload: Any, storage: Any, error: str) -> None:
        """Registering operation ``id`` with ``payload`` was refused with ``error``."""
        ...

    def reconciled(
        self, object: str, alarm_ms: int | None, pending_at: Callable[[], int | None], min_delay_ms: int
    ) -> None:
        """A step of the client's scheduler reconciled its alarm: the alarm the step left, and a
        read of the earliest pending work's time."""
        ...

    def engine_step(self, object: str, step: EngineStep, reading: EngineReading) -> None:
        """A step of the client's scheduler, and a reading of the engine as it left it."""
        ...

    def reply_applied(self, client: str, key: str, reply: Any, conn: Any) -> None:
        """The client applied the holder's ``reply`` (the wire's dict); ``conn``: its storage now."""
        ...

    def queue_in_lockstep(
        self, obj: Any, queue: QueueClient, return_idle_leases: bool
    ) -> QueueInLockstep | None:
        """``queue`` with a model beside it, for the object ``obj`` (None: the queue is not modelled)."""
        ...


class ClientObject:
    """One live instance of a client object."""

    def __init__(
        self,
        ctx: ObjectContext,
        settings: ClientSettings,
        network: Network,
        jobs: Jobs,
        holder_for: Callable[[str], str],
        monitor: ClientMonitor | None = None,
        fixes: frozenset[str] = frozenset(),
        operations: OperationsSpec | None = None,
        alarm_faults: AlarmFaults = NO_ALARM_FAULTS,
        attempt_starting: Callable[[str], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.sim = ctx.sim
        self.settings = settings
        self.network = network
        self.jobs = jobs
        self.holder_for = holder_for
        self.monitor = monitor
        queue = QueueClient(ctx.storage, ctx.name, return_idle_leases=RETURN_IDLE_LEASES in fixes)
        #: The queue with its model beside it (``exact_queue``), when the monitor models it.
        self._modelled = (
            None
            if monitor is None
            else monitor.queue_in_lockstep(ctx.object, queue, RETURN_IDLE_LEASES in fixes)
        )
        self.queue: ClientQueue = queue if self._modelled is None else self._modelled
        self._wake = ctx.sim.signal()
        self._in_flight: dict[str, str] = {}
        self._retry_at: dict[str, int] = {}
        self._dirty_since: dict[str, int] = {}
        self._sync_now: dict[str, bool] = {}
        self._checking = False
        self._next_check_at = 0
        #: Told as each attempt starts, by client name (what an eviction ``in_attempt`` waits for).
        self._attempt_starting = attempt_starting
        #: The account-concurrency world: admitted items run as durable operations (seed 000).
        self.operations = operations
        self._alarm_faults = alarm_faults
        #: F5's fix: each operation's last call, so neither its next call nor its permit's
        #: return comes while that call may still run at the API.
        self.call_log = (
            CallLog(ctx.storage)
            if operations is not None and CALLS_END_WITHIN_THEIR_PERMIT in fixes
            else None
        )
        #: Items whose operation is over but whose last call may still run: released then.
        #: A new instance rebuilds it from the call log (below); the ``finished`` check backs it up.
        self._release_at: dict[str, int] = {}
        self.scheduler = DurabilityScheduler(
            ctx,
            SchedulerOptions(alarm_min_delay_ms=ALARM_FLOOR_MS)
            if operations is None
            else operations.scheduler_options(ALARM_FLOOR_MS),
            on_event=self._lifecycle,
            on_handoff=None if monitor is None else self._handed_off,
            on_reconciled=None if monitor is None else self._reconciled,
            on_step=None if monitor is None else functools.partial(monitor.engine_step, ctx.name),
        )
        # As seed 000's JobShard builds them: the operations first, then the queue.
        self.jobs_run: Durability | None = (
            None
            if operations is None
            else self.scheduler.operations(
                operations.durability_options(execute_only_due=RETRIES_WAIT_THEIR_TIME in fixes), self._job
            )
        )
        #: The loop's next wakeup as last armed: the queue participant's pending time.
        self._wakeup: int | None = None
        self._armed = False
        self.scheduler.attach(
            Participant(
                table=QUEUE_TABLE,
                run_due=self._run_due,
                next_pending_at=lambda _conn: self._wakeup,
                # The live loop keeps its own timers: the engine's early timer is not needed.
                holding=lambda: True,
            )
        )
        if self.call_log is not None:
            self._rebuild_release_waits()
        ctx.start_task(self._loop, "loop")

    def _rebuild_release_waits(self) -> None:
        """After an eviction: the permits of finished operations whose last call may still run
        come back at that call's deadline, as the lost instance would have returned them."""
        assert self.call_log is not None
        assert self.jobs_run is not None
        for item, deadline_at in self.call_log.unanswered():
            finished = self.jobs_run.get_result(OPERATION, item).status != "pending"
            if finished and self.queue.status(item) == "running":
                self._release_at[item] = deadline_at + 1

    # --- calls into the object ----------------------------------------------------------

    def handle(self, method: str, payload: Any) -> Any:
        if method == "submit":
            items = [QueueItem(**item) for item in payload]
            added = self.queue.enqueue(items, self.sim.now())
            for item in items:
                self.sim.event("enqueue", client=self.ctx.name, item=item.id, key=item.key, group=item.group)
            self._after_call()
            return added
        if method == "release":
            self._release(payload)
            self._after_call()
            return None
        raise RemoteError("protocol", f"unknown method {method!r}")

    def cancel(self, item_id: str) -> bool:
        """The user withdraws a queued item (``QueueClient.cancel``); returns whether it was queued."""
        cancelled = self.queue.cancel(item_id)
        if cancelled:
            self.sim.event("cancel", client=self.ctx.name, item=item_id)
        return cancelled

    @property
    def in_flight(self) -> Mapping[str, str]:
        """The call out for each key (``request`` or ``sync``): at most one per key. Read-only."""
        return MappingProxyType(self._in_flight)

    @property
    def retry_at(self) -> Mapping[str, int]:
        """When each key whose last call failed may be asked for again. Read-only."""
        return MappingProxyType(self._retry_at)

    def asking(self) -> bool:
        """Whether a request is on its way to a round.

        What a cancel aims at: see ``semsim.world.faults.Cancel``.
        """
        return "request" in self._in_flight.values()

    def cancel_newest(self, count: int) -> list[str]:
        """Cancel the newest ``count`` queued items; returns those cancelled."""
        return [item for item in self.queue.newest_queued(count) if self.cancel(item)]

    def cancel_in_part(self, count: int) -> list[str] | None:
        """Cancel up to ``count`` of the newest queued items of one group whose request is on its
        way, always leaving that group's oldest; returns those cancelled, or None (nothing
        cancelled) while no request is out for a group with two or more items queued.

        The group with the most items queued is taken (ties by key, then group). What is left
        queued is then fewer than the request asked for, so the grant answering it is claimed
        in part unless the round grants no more than is left (``Cancel.in_part``).
        """
        asking = {key for key, kind in self._in_flight.items() if kind == "request"}
        if not asking:
            return None
        newest: dict[tuple[str, str], list[str]] = {}
        for key, group, item_id in self.ctx.storage.execute(QUEUED_NEWEST_FIRST):
            if key in asking:
                newest.setdefault((key, group), []).append(item_id)
        groups = sorted((-len(ids), key_group) for key_group, ids in newest.items() if len(ids) >= 2)
        if not groups:
            return None
        ids = newest[groups[0][1]]
        return [item for item in ids[: min(count, len(ids) - 1)] if self.cancel(item)]

    async def alarm(self) -> None:
        await self.scheduler.alarm()

    def _run_due(self, now: int, info: AlarmInfo | None) -> Join | None:
        """The queue's due work in an alarm pass: the loop does it, woken here.

        A plan's ``alarm_failure`` makes it throw (account-concurrency worlds
        only): the pass fails and the engine arms its fallback alarm, while
        the operations' attempts it claimed run on.
        """
        self._alarm_faults.throw(self.ctx, now)
        self._poke()
        return None

    def _poke(self) -> None:
        self._wake.set()

    def _after_call(self) -> None:
        """Arm the alarm for what the call changed, then wake the loop.

        The reference's queue runs on the scheduler, whose reconcile arms the
        alarm in the transaction of every write, enqueue included. Arming it
        here, before the call returns, is the same: nothing can come between
        (the handler is synchronous). Left to the loop, an eviction before the
        loop's next step would leave queued items with no alarm to bring the
        object back.
        """
        self._arm_alarm(self._next_wakeup(self.sim.now(), due_now=True))
        self._poke()

    def _release(self, item: str) -> None:
        released = self.queue.release(item)
        if released is not None:
            self.sim.event("release", client=self.ctx.name, item=item)
            if self.monitor is not None:
                self.monitor.released(*released, client=self.ctx.name, item=item)
            self._poke()

    # --- the loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            now = self.sim.now()
            self._act(now)
            wakeup = self._next_wakeup(now)
            self._arm_alarm(wakeup)
            wake = self._wake
            if await wake.wait(wakeup):
                self._wake = self.sim.signal()

    def _act(self, now: int) -> None:
        if self.settings.lease_capable:
            # A lease whose expiry came is reported retired through the dirty keys below.
            for key, lease in self.queue.retire_expired(now):
                self.sim.event("lease_expired", client=self.ctx.name, key=key, lease=lease)
                if self.monitor is not None:
                    self.monitor.lease_expired(key, client=self.ctx.name)
            for admission in self.queue.draw_leases(now):
                self._admit(admission, now)
        for key in self.queue.keys_due(now):
            if key not in self._in_flight and self._retry_at.get(key, 0) <= now:
                self._send(key, "request")
        for key in self.queue.dirty_keys():
            since = self._dirty_since.setdefault(key, now)
            due = self._sync_now.get(key) or now >= since + self.settings.report_delay_ms
            if due and key not in self._in_flight and self._retry_at.get(key, 0) <= now:
                self._send(key, "sync")
        for key in self.queue.heartbeat_keys(now):
            if key not in self._in_flight:
                self._send(key, "sync")
        if self._release_at:
            for item, at in list(self._release_at.items()):
                if at <= now:
                    del self._release_at[item]
                    self._release_when_calls_end(item, now)
        if not self._checking and now >= self._next_check_at:
            stale = [item for item, at in self.queue.running() if at + self.settings.finished_check_ms <= now]
            if stale and self.jobs_run is not None:
                self._finished_locally(stale)
            elif stale:
                self._checking = True
                self.ctx.start_task(lambda: self._finished_check(stale), "finished_check")
            self._next_check_at = now + self.settings.finished_check_ms

    def _next_wakeup(self, now: int, due_now: bool = False) -> int | None:
        """When the loop must next act: the earliest time after ``now``; with ``due_now``, work
        already due counts as due at ``now`` (a call has just changed what there is to do)."""
        next_request, heartbeat, oldest_running, lease_expiry = self.queue.next_wakeup()
        times = [t for t in (next_request, heartbeat, lease_expiry) if t is not None]
        if next_request is not None and next_request <= now:
            # The earliest key is due, so its call is out or waits its retry (``_act`` sent the
            # rest): another key's later nextRequestAt, which the minimum hides, is due too.
            (later,) = self.ctx.storage.execute(NEXT_REQUEST_AFTER, (now,)).fetchone()
            if later is not None:
                times.append(later)
        times += [t for t in self._retry_at.values() if t > now]
        times += [since + self.settings.report_delay_ms for since in self._dirty_since.values()]
        times += self._release_at.values()
        if self._in_flight:
            # If this instance dies with the call, the alarm must bring the object back.
            times.append(now + self.settings.rpc_timeout_ms)
        if oldest_running is not None:
            times.append(self._next_check_at)
        if due_now:
            return max(min(times), now) if times else None
        future = [t for t in times if t > now]
        return min(future) if future else None

    def _arm_alarm(self, wakeup: int | None) -> None:
        """The durable fallback that rebuilds the object after an eviction.

        The scheduler's engine arms it from the queue's pending time, as the
        reference's reconcile does (the queue runs on the same scheduler):
        never sooner than ``ALARM_FLOOR_MS`` out, and an alarm already within
        ``[wakeup, floor]`` is kept, so the loop's frequent wakeups do not
        keep rewriting it; the live loop handles sooner ones. An unchanged
        wakeup changes nothing the engine would decide (an alarm that fired
        was reconciled by its pass), so it is not reconciled again.
        """
        if self._armed and wakeup == self._wakeup:
            return
        self._wakeup = wakeup
        self._armed = True
        self.scheduler.refresh()

    # --- messages ------------------------------------------------------------------------

    def _send(self, key: str, kind: str) -> None:
        self._in_flight[key] = kind
        self._sync_now.pop(key, None)
        self.ctx.start_task(lambda: self._exchange(key, kind), f"{kind}:{key}")

    async def _exchange(self, key: str, kind: str) -> None:
        now = self.sim.now()
        message = self.queue.build_request(key, now) if kind == "request" else self.queue.build_sync(key, now)
        wire = message.to_wire()
        if not self.settings.lease_capable:
            wire.pop("leases", None)
        if self.monitor is not None and isinstance(message, PermitRequest):
            self.monitor.requesting(self.ctx.name, key, message, self.ctx.storage, wire)
        changes = self.queue.sent(key, now)
        try:
            reply = await self.network.call(
                self.ctx.name, self.holder_for(key), "permits", wire, self.settings.rpc_timeout_ms
            )
            parsed = parse_response(reply)
        except RpcError as failure:
            self.sim.event("call_failed", client=self.ctx.name, key=key, call=kind, error=str(failure))
            self._retry_at[key] = self.sim.now() + self.settings.retry_ms
            return
        finally:
            self._in_flight.pop(key, None)
            self._poke()
        now = self.sim.now()
        if self._modelled is not None:
            self._modelled.heard(reply)
        if isinstance(parsed, PermitGrant):
            step = self.queue.on_grant(key, parsed, now)
        else:
            assert isinstance(parsed, PermitSyncResult)
            step = self.queue.on_synced(key, parsed, now)
        self.queue.acked(key, changes)
        if key not in self.queue.dirty_keys():
            self._dirty_since.pop(key, None)
        self._apply(key, step, now)
        if self.monitor is not None:
            self.monitor.reply_applied(self.ctx.name, key, reply, self.ctx.storage)

    def _apply(self, key: str, step: Step, now: int) -> None:
        for grant, count in step.claims:
            self.sim.event("claim", client=self.ctx.name, key=key, grant=grant, items=count)
        for admission in step.admitted:
            self._admit(admission, now)
        for item in step.requeued:
            self.sim.event("requeue", client=self.ctx.name, item=item, key=key)
        for lease in step.settled:
            self.sim.event("lease_settled", client=self.ctx.name, key=key, lease=lease)
        if step.needs_sync:
            self._sync_now[key] = True

    def _admit(self, admission: Admission, now: int) -> None:
        self.sim.event(
            "admit",
            client=self.ctx.name,
            item=admission.item_id,
            key=admission.key,
            group=admission.group,
            grant=admission.grant_id,
            lease=admission.lease_id,
        )
        if self.monitor is not None:
            self.monitor.admitted(
                admission.key,
                admission.group,
                client=self.ctx.name,
                item=admission.item_id,
                grant=admission.grant_id,
                lease=admission.lease_id,
            )
        duration = int(json.loads(admission.body)["duration_ms"]) if admission.body else 0
        if self.operations is not None:
            # ``admit``: jobs.run({id: item.id, payload: item.body}); a repeated admit is a no-op.
            self._register(admission.item_id, job_payload(admission.key, duration))
            if self.operations.repeat_registration:
                # The hook delivered again, the payload's keys in the other order: still a no-op.
                self._register(admission.item_id, job_payload(admission.key, duration, keys_reversed=True))
        else:
            self.jobs.start(admission.item_id, self.ctx.name, admission.key, admission.group, duration)

    # --- the account-concurrency world: admitted items as durable operations ----------------

    def _register(self, item: str, payload: Any) -> None:
        """``jobs.run({id, payload})``; a refusal goes to the monitor (``registration_idempotent``)."""
        try:
            self.scheduler.register(OPERATION, item, payload)
        except DuplicateDurablePayloadError as refused:
            if self.monitor is None:
                raise
            self.monitor.registration_refused(self.ctx.name, item, payload, self.ctx.storage, str(refused))

    async def _job(self, attempt: Attempt) -> Any:
        """Seed 000's handler: POST the job with its id as the idempotency key; not ok throws.

        With F5's fix (``semsim.world.call_log``) the call carries the attempt's
        deadline, logged before the request leaves, and waits first while the
        operation's previous call may still run.
        """
        if self._attempt_starting is not None:
            self._attempt_starting(self.ctx.name)
        log = self.call_log
        if log is None:
            request = api_request(attempt.id, attempt.payload, attempt.attempt)
            return await self.network.call(self.ctx.name, API, "run", request, CALL_TIMEOUT_MS)
        # The attempt's own deadline (claimed at + attemptTimeoutMs): the engine aborts it then.
        deadline_at = attempt.timeout_at_ms
        running_until = log.running_until(attempt.id, self.sim.now())
        if running_until is not None:
            self.sim.event("call_waits", client=self.ctx.name, item=attempt.id, until=running_until + 1)
            await self.sim.sleep_until(running_until + 1)
        log.sent(attempt.id, deadline_at, self.sim.now())
        request = api_request(attempt.id, attempt.payload, attempt.attempt, deadline_at)
        try:
            result = await self.network.call(self.ctx.name, API, "run", request, CALL_TIMEOUT_MS)
        except RemoteError:
            log.answered(attempt.id, deadline_at)
            raise
        log.answered(attempt.id, deadline_at)
        return result

    def _handed_off(self, alarm_ms: int | None, pending_ms: int | None) -> None:
        assert self.monitor is not None
        options = self.scheduler.engine.options
        self.monitor.handed_off(self.ctx.name, alarm_ms, pending_ms, options.alarm_min_delay_ms)

    def _reconciled(self, alarm_ms: int | None, pending_at: Callable[[], int | None]) -> None:
        assert self.monitor is not None
        options = self.scheduler.engine.options
        self.monitor.reconciled(self.ctx.name, alarm_ms, pending_at, options.alarm_min_delay_ms)

    def _lifecycle(self, event: Event) -> None:
        """Seed 000's ``onLifecycleEvent``: a finished operation gives its permit back."""
        if self.monitor is not None:
            self.monitor.operation_event(self.ctx.name, event)
        item = releases_permit(event)
        if item is not None:
            self._release_when_calls_end(item, self.sim.now())
            self._after_call()

    def _release_when_calls_end(self, item: str, now: int) -> None:
        """Release ``item``'s permit now, or (F5's fix) once its operation's last call is over."""
        log = self.call_log
        if log is not None:
            running_until = log.running_until(item, now)
            if running_until is not None:
                if item not in self._release_at:
                    self.sim.event("release_waits", client=self.ctx.name, item=item, until=running_until + 1)
                self._release_at[item] = running_until + 1
                return
            log.forget(item)
        self._release(item)

    def _finished_locally(self, items: list[str]) -> None:
        """Seed 000's ``finished``: an item whose operation is no longer pending is done."""
        assert self.jobs_run is not None
        for item in items:
            finished = self.jobs_run.get_result(OPERATION, item).status != "pending"
            if finished and self.queue.status(item) == "running" and item not in self._release_at:
                self.sim.event("reconciled", client=self.ctx.name, item=item)
                self._release_when_calls_end(item, self.sim.now())

    async def _finished_check(self, items: list[str]) -> None:
        try:
            done = await self.network.call(
                self.ctx.name, self.jobs.name, "finished", items, self.settings.rpc_timeout_ms
            )
        except RpcError:
            return
        finally:
            self._checking = False
        for item in done:
            if self.queue.status(item) == "running":
                self.sim.event("reconciled", client=self.ctx.name, item=item)
                self._release(item)
