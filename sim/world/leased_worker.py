"""The leased workflow workers (seed 004's ``WorkflowWorker`` over ``LeasedWorker``) on the runtime.

Seed 004 shows ``WorkflowWorker``: it builds a ``LeasedWorker`` with
``concurrency``, ``pollInterval``, ``leaseDuration``, ``heartbeatInterval``
and ``shutdownTimeout``, and gives it ``claim(lease, limit)``,
``renew(claimed, until)`` and ``execute(claimed, run)``. ``LeasedWorker``
itself is not in the seed; this module is the least its caller needs
(docs/DESIGNS.md lists each choice):

- **Intake** (a modelling choice: the seed's clients write to the store
  themselves). Items reach a worker as they reach the semaphore's clients,
  into its own storage at once, and it creates their instances in the
  store, retrying every ``OUTBOX_RETRY_MS`` until the store has taken them.
- **Poll.** Every ``poll_interval_ms`` a worker with room claims up to
  ``concurrency`` minus what it runs, under a fresh token, until ``now +
  lease_ms``. A claim whose reply is lost leaves its instances leased to a
  token nobody holds, until that lease runs out.
- **Heartbeat.** Every ``heartbeat_interval_ms`` each running execution's
  lease is renewed to ``now + lease_ms``, each renewal on its own. A renewal
  answered ``ok: false`` means the lease is gone (``renew`` returns
  ``flags !== null``): the execution's lease is lost. A renewal that is lost
  changes nothing; the next beat tries again.
- **Execute.** An execution is one step: the call to the external API, with
  the instance id as its idempotency key. Then the fenced write of its end
  (``completed``, or ``failed`` when the call failed), releasing the lease.
  An execution whose lease was lost writes nothing ("Lost the lease ...
  Nothing from this execution after that point was recorded"), but its call
  to the API has run. A write that is lost or refused leaves the instance
  to be "retried when its lease expires".
- **Die silently.** An eviction of the worker's object is its process
  dying: executions stop, their calls run on, their leases run out. Its
  supervisor starts it again within ``restart_ms`` (its alarm).
- **Shut down** (``faults.shutdowns``). It stops claiming and waits up to
  ``shutdown_timeout_ms`` for its executions; those that end are recorded
  as usual ("A run that finished cleanly during shutdown is still
  recorded"). A step here is a call already sent, which does not stop when
  asked, so none is cut short to be handed back: the rest "keep their lease
  until it expires, because their step may still be running". Then the
  process exits, and its supervisor starts it again.
- **Pause** (``faults.pauses``): each step waits for the pause's end; calls
  already sent run on and leases run out on the store's clock.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, Final

import attrs

from semsim.runtime.durable import ObjectContext
from semsim.runtime.network import Network, RemoteError, RpcError
from semsim.world.design import CALLS_END_WITH_THEIR_FETCH, LeasedSpec
from semsim.world.external_api import NAME as API
from semsim.world.faults import Pause
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.pauses import awake
from semsim.world.submitted import MAX_BATCH, parse_items

#: How long a worker waits for the store's answer (a database round trip; the seed shows none).
STORE_TIMEOUT_MS: Final = 5_000
#: How often a shutting-down worker looks whether its executions have ended.
SHUTDOWN_POLL_MS: Final = 100
#: How soon a worker tries again to hand its intake to the store, after a failure.
OUTBOX_RETRY_MS: Final = 1_000

_OUTBOX: Final = """CREATE TABLE IF NOT EXISTS outbox (
    id      TEXT    NOT NULL PRIMARY KEY,
    account TEXT    NOT NULL,
    grp     TEXT    NOT NULL,
    work_ms INTEGER NOT NULL,
    seq     INTEGER NOT NULL
)"""


@attrs.define
class Execution:
    """One claimed instance running in this worker, under the claim's token."""

    id: str
    token: str
    account: str
    work_ms: int
    lease_lost: bool = False


class LeasedWorkerObject:
    """One live instance of a worker: its loops, and the executions it runs."""

    def __init__(
        self,
        ctx: ObjectContext,
        spec: LeasedSpec,
        network: Network,
        pauses: Sequence[Pause],
        fetch_timeout_ms: int,
    ) -> None:
        self.ctx = ctx
        self._spec = spec
        self._network = network
        self._pauses = tuple(pause for pause in pauses if pause.target == ctx.name)
        self._fetch_timeout_ms = fetch_timeout_ms
        #: The executions whose call to the API is out: (instance id, lease token). One worker may
        #: run two of one instance: its lease ran out, and the worker claimed it again.
        self.calling: set[tuple[str, str]] = set()
        #: Executions running here, by (instance id, token).
        self.running: dict[tuple[str, str], Execution] = {}
        self._started = False
        self._stopping = False
        self._forwarding = False
        ctx.storage.execute(_OUTBOX)

    # --- the process ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loops (once per life), and keep the supervisor's alarm armed."""
        if self.ctx.get_alarm() is None:
            self.ctx.set_alarm(self.ctx.sim.now() + self._spec.restart_ms)
            self.ctx.alarm_written()
        if self._started or self._stopping:
            return
        self._started = True
        self._forward_soon()
        self.ctx.start_task(self._poll, name=f"{self.ctx.name}.poll")
        self.ctx.start_task(self._heartbeat, name=f"{self.ctx.name}.heartbeat")

    def handle(self, method: str, payload: Any) -> Any:
        if method != "submit":
            raise RemoteError("protocol", f"{self.ctx.name}: unknown method {method!r}")
        items = parse_items(payload, self.ctx.name)
        storage = self.ctx.storage
        (seq,) = storage.execute("SELECT COUNT(*) FROM outbox").fetchone()
        for item in items:  # a retried submission replaces nothing; the store ignores ids it has
            seq += storage.execute(
                "INSERT OR IGNORE INTO outbox (id, account, grp, work_ms, seq) VALUES (?, ?, ?, ?, ?)",
                (item.id, item.account, item.group, item.work_ms, seq),
            ).rowcount
        self.start()
        self._forward_soon()
        return {"accepted": len(items)}

    def _forward_soon(self) -> None:
        if not self._forwarding:
            self._forwarding = True
            self.ctx.start_task(self._forward, name=f"{self.ctx.name}.outbox")

    async def _forward(self) -> None:
        """Hand the intake to the store, oldest first, until none is left."""
        sim, name, storage = self.ctx.sim, self.ctx.name, self.ctx.storage
        try:
            while True:
                rows = storage.execute(
                    "SELECT id, account, grp, work_ms FROM outbox ORDER BY seq LIMIT ?", (MAX_BATCH,)
                ).fetchall()
                if not rows:
                    return
                await awake(sim, self._pauses, name)
                batch = [
                    {"id": id, "key": account, "group": group, "body": json.dumps({"duration_ms": work_ms})}
                    for id, account, group, work_ms in rows
                ]
                try:
                    await self._network.call(name, STORE, "create", batch, STORE_TIMEOUT_MS)
                except RpcError:
                    await sim.sleep(OUTBOX_RETRY_MS)
                    continue
                storage.executemany("DELETE FROM outbox WHERE id = ?", [(row[0],) for row in rows])
        finally:
            self._forwarding = False

    async def alarm(self) -> None:
        """The supervisor: a worker that died or shut down is started again."""
        self.start()

    def shutdown(self) -> None:
        """``shutdown()``: stop claiming, wait up to ``shutdown_timeout_ms``, then exit."""
        if self._stopping:
            return
        self._stopping = True
        self.ctx.sim.event("worker_shutdown", worker=self.ctx.name, running=len(self.running))
        self.ctx.start_task(self._drain_then_exit, name=f"{self.ctx.name}.shutdown")

    async def _drain_then_exit(self) -> None:
        sim = self.ctx.sim
        deadline = sim.now() + self._spec.shutdown_timeout_ms
        while self.running and sim.now() < deadline:
            await sim.sleep(min(SHUTDOWN_POLL_MS, deadline - sim.now()))
        sim.event(
            "worker_exit", worker=self.ctx.name, still_running=sorted(e.id for e in self.running.values())
        )
        obj = self.ctx.object
        # The exit is the platform's to carry out, after this task: an object cannot evict itself
        # from inside one of its own tasks.
        sim.call_at(sim.now(), lambda: obj.evict() if obj.generation == self.ctx.generation else None)

    # --- the loops -------------------------------------------------------------------------

    async def _poll(self) -> None:
        sim, name, spec = self.ctx.sim, self.ctx.name, self._spec
        while not self._stopping:
            await awake(sim, self._pauses, name)
            free = spec.concurrency - len(self.running)
            if free > 0 and not self._stopping:
                await self._claim(free)
            await sim.sleep(spec.poll_interval_ms)

    async def _claim(self, limit: int) -> None:
        sim, name = self.ctx.sim, self.ctx.name
        token = sim.next_id("lease")
        now = sim.now()
        request = {
            "owner": name,
            "token": token,
            "now": now,
            "until": now + self._spec.lease_ms,
            "limit": limit,
        }
        try:
            claimed = await self._network.call(name, STORE, "claim", request, STORE_TIMEOUT_MS)
        except RpcError as error:
            sim.event("claim_failed", worker=name, token=token, error=type(error).__name__)
            return
        for entry in claimed:
            execution = Execution(entry["id"], token, entry["account"], entry["workMs"])
            self.running[execution.id, token] = execution
            self.ctx.start_task(functools.partial(self._execute, execution), name=f"{name}.{execution.id}")

    async def _heartbeat(self) -> None:
        sim, name, spec = self.ctx.sim, self.ctx.name, self._spec
        while True:
            await sim.sleep(spec.heartbeat_interval_ms)
            await awake(sim, self._pauses, name)
            for execution in list(self.running.values()):
                if not execution.lease_lost:
                    self.ctx.start_task(
                        functools.partial(self._renew, execution), name=f"{name}.renew.{execution.id}"
                    )

    async def _renew(self, execution: Execution) -> None:
        sim, name = self.ctx.sim, self.ctx.name
        request = {"id": execution.id, "token": execution.token, "until": sim.now() + self._spec.lease_ms}
        try:
            reply = await self._network.call(name, STORE, "renew", request, STORE_TIMEOUT_MS)
        except RpcError:
            return  # the next beat tries again
        if not reply.get("ok") and not execution.lease_lost:
            execution.lease_lost = True
            sim.event("lease_lost", worker=name, id=execution.id, token=execution.token)

    async def _execute(self, execution: Execution) -> None:
        sim, name = self.ctx.sim, self.ctx.name
        try:
            await awake(sim, self._pauses, name)
            request: dict[str, Any] = {
                "account": execution.account,
                "key": execution.id,
                "workMs": execution.work_ms,
            }
            if CALLS_END_WITH_THEIR_FETCH in self._spec.fixes:  # F7's fix: the call ends with its fetch
                request["deadlineAt"] = sim.now() + self._fetch_timeout_ms
            self.calling.add((execution.id, execution.token))
            try:
                await self._network.call(name, API, "run", request, self._fetch_timeout_ms)
                status = "completed"
            except RpcError:
                status = "failed"
            finally:
                self.calling.discard((execution.id, execution.token))
            await awake(sim, self._pauses, name)
            if execution.lease_lost:
                sim.event("write_skipped", worker=name, id=execution.id, reason="lease lost")
                return
            write = {"id": execution.id, "token": execution.token, "status": status}
            try:
                reply = await self._network.call(name, STORE, "write", write, STORE_TIMEOUT_MS)
            except RpcError:
                sim.event("write_failed", worker=name, id=execution.id)
                return
            if not reply.get("ok"):
                sim.event("write_fenced", worker=name, id=execution.id, token=execution.token)
        finally:
            self.running.pop((execution.id, execution.token), None)
