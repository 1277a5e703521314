"""The gate's callers (seed 003's handler): acquire, work, release in ``finally``, fail open.

Seed 003's acceptance: "hands out slot tokens up to MAX_IN_FLIGHT (6) and
sheds with 429 + retry-after: 10 past it; the handler rejects with
reason-logged reject reason=concurrency. get/fetch throw, or a non-ok
non-429 answer all proceed uncapped ... Only an explicit at-capacity answer
sheds." And: "finally on every path." Each item a caller runs is one such
handler:

1. acquire at its account's gate. A ``200`` gives a token. A ``429`` sheds
   the item, which is tried again after the answer's ``retryAfter``
   seconds (issue 26: "shed on 429 and retry after its retry-after"). A
   thrown call (lost, timed out, the gate evicted), a missing binding or any
   other answer proceeds uncapped, without a token;
2. call the external API with the item's id as idempotency key, waiting
   at most ``fetch_timeout_ms`` (the fetch layer's cap, which ``STALE_MS``
   is "generously above");
3. in ``finally``, release the token if it has one. A release that is lost
   is lost: the slot heals after ``STALE_MS``.

Modelling choices (docs/DESIGNS.md): items reach a caller as they reach the
semaphore's clients, and it keeps them in its storage until their handler
has run, so a caller that dies (an eviction: between acquire and release,
its slot leaks) runs its unfinished items again when it is back, within
``restart_ms`` (its alarm). An API error ends the item: a handler is not
retried. A pause (:mod:`semsim.world.pauses`) stalls each step but not the
calls already sent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Final

from semsim.runtime.durable import ObjectContext
from semsim.runtime.network import Network, RemoteError, RpcError
from semsim.world.design import CALLS_END_WITH_THEIR_FETCH, GateSpec
from semsim.world.external_api import NAME as API
from semsim.world.faults import Pause
from semsim.world.pauses import awake
from semsim.world.submitted import Submitted, parse_items

#: How long a caller waits for the gate's answer (a fetch to a DO; the seed shows no figure).
GATE_TIMEOUT_MS: Final = 5_000

_SCHEMA: Final = """CREATE TABLE IF NOT EXISTS gate_items (
    id      TEXT    NOT NULL PRIMARY KEY,
    account TEXT    NOT NULL,
    grp     TEXT    NOT NULL,
    work_ms INTEGER NOT NULL,
    done    INTEGER NOT NULL DEFAULT 0,
    seq     INTEGER NOT NULL
)"""


def unfinished(storage: Any) -> int:
    """How many items a caller's storage holds whose handler has not run to its end."""
    (count,) = storage.execute("SELECT COUNT(*) FROM gate_items WHERE done = 0").fetchone()
    return int(count)


class GateCaller:
    """One live instance of a caller: the handlers of its unfinished items, one task each."""

    def __init__(
        self,
        ctx: ObjectContext,
        spec: GateSpec,
        network: Network,
        gate_of: Callable[[str], str],
        pauses: Sequence[Pause],
        fetch_timeout_ms: int,
    ) -> None:
        self.ctx = ctx
        self._spec = spec
        self._network = network
        self._gate_of = gate_of
        self._pauses = tuple(pause for pause in pauses if pause.target == ctx.name)
        self._fetch_timeout_ms = fetch_timeout_ms
        #: Items whose handler runs in this instance.
        self._running: set[str] = set()
        #: The slot each item's handler holds here, by item id: acquired, not yet released or given up.
        self.slots: dict[str, str] = {}
        #: The slots whose handler stopped waiting for its call (its fetch timed out): given back
        #: while the call may run on.
        self.gave_up: set[str] = set()
        ctx.storage.execute(_SCHEMA)

    @property
    def tokens(self) -> set[str]:
        """The slots this instance's handlers hold."""
        return set(self.slots.values())

    def handle(self, method: str, payload: Any) -> Any:
        if method != "submit":
            raise RemoteError("protocol", f"{self.ctx.name}: unknown method {method!r}")
        items = parse_items(payload, self.ctx.name)
        storage = self.ctx.storage
        (seq,) = storage.execute("SELECT COUNT(*) FROM gate_items").fetchone()
        for item in items:  # idempotent by id: a retried submission adds nothing
            seq += storage.execute(
                "INSERT OR IGNORE INTO gate_items (id, account, grp, work_ms, seq) VALUES (?, ?, ?, ?, ?)",
                (item.id, item.account, item.group, item.work_ms, seq),
            ).rowcount
        self._take_up()
        return {"accepted": len(items)}

    async def alarm(self) -> None:
        """The supervisor: a caller that died is running again, and takes up what it left."""
        self._take_up()

    def _take_up(self) -> None:
        """Start a handler for each unfinished item not running here; keep the alarm while any is left."""
        rows = self.ctx.storage.execute(
            "SELECT id, account, grp, work_ms FROM gate_items WHERE done = 0 ORDER BY seq"
        ).fetchall()
        for row in rows:
            item = Submitted(*row)
            if item.id not in self._running:
                self._running.add(item.id)
                self.ctx.start_task(functools.partial(self._handler, item), name=f"{self.ctx.name}.{item.id}")
        if rows and self.ctx.get_alarm() is None:
            self.ctx.set_alarm(self.ctx.sim.now() + self._spec.restart_ms)
            self.ctx.alarm_written()

    async def _handler(self, item: Submitted) -> None:
        sim, name = self.ctx.sim, self.ctx.name
        token = await self._acquire(item)
        try:
            await awake(sim, self._pauses, name)
            request: dict[str, Any] = {"account": item.account, "key": item.id, "workMs": item.work_ms}
            if CALLS_END_WITH_THEIR_FETCH in self._spec.fixes:  # F6's fix: the call ends with its fetch
                request["deadlineAt"] = sim.now() + self._fetch_timeout_ms
            try:
                await self._network.call(name, API, "run", request, self._fetch_timeout_ms)
                outcome = "ok"
            except RpcError as error:
                outcome = error.kind if isinstance(error, RemoteError) else "timeout"
                if token is not None and outcome == "timeout":
                    self.gave_up.add(token)
        finally:
            # A caller that died (evicted) runs no more code: its slot leaks, as the seed's
            # "a worker that died between acquire and release" does.
            if token is not None and self.ctx.alive:
                await self._release(item, token)
        self.ctx.storage.execute("UPDATE gate_items SET done = 1 WHERE id = ?", (item.id,))
        self._running.discard(item.id)
        sim.event("item_done", client=name, item=item.id, outcome=outcome, capped=token is not None)
        if unfinished(self.ctx.storage) == 0:
            self.ctx.delete_alarm()
            self.ctx.alarm_written()

    async def _acquire(self, item: Submitted) -> str | None:
        """The slot's token, or None to proceed uncapped (every answer but 200 and 429)."""
        sim, name = self.ctx.sim, self.ctx.name
        if not self._spec.binding:
            sim.event("fail_open", client=name, item=item.id, reason="no binding")
            return None
        while True:
            await awake(sim, self._pauses, name)
            try:
                reply = await self._network.call(
                    name, self._gate_of(item.account), "acquire", {}, GATE_TIMEOUT_MS
                )
            except RpcError as error:
                sim.event("fail_open", client=name, item=item.id, reason=f"threw: {type(error).__name__}")
                return None
            status = reply.get("status") if isinstance(reply, dict) else None
            if status == 200 and isinstance(reply.get("token"), str):
                self.slots[item.id] = reply["token"]
                return str(reply["token"])
            if status == 429:
                retry_after_s = reply.get("retryAfter")
                wait_s = retry_after_s if type(retry_after_s) is int and retry_after_s >= 0 else 0
                sim.event("shed", client=name, item=item.id, retry_after_s=wait_s)
                await sim.sleep(wait_s * 1_000)
                continue
            sim.event("fail_open", client=name, item=item.id, reason=f"answered {status}")
            return None

    async def _release(self, item: Submitted, token: str) -> None:
        sim, name = self.ctx.sim, self.ctx.name
        await awake(sim, self._pauses, name)
        try:
            await self._network.call(
                name, self._gate_of(item.account), "release", {"token": token}, GATE_TIMEOUT_MS
            )
        except RpcError:
            sim.event("release_lost", client=name, item=item.id, token=token)
        finally:
            self.slots.pop(item.id, None)
