"""RPC between simulated objects, with faults drawn per message.

A call is a request and a reply, each a message with its own fate: lost,
delayed, held back (so it can overtake or be overtaken), or duplicated.
The callee handles a delivered request wherever the network delivers it,
so a lost *reply* means the callee already did the work (committed a
round, say) and the caller never hears of it. The caller gives up after
its timeout (the reference composes ``timeout`` around every semaphore
call); the callee may still finish and commit.

Every message sent, delivered, dropped or duplicated is a trace event.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import attrs
import trio

from sim.faults import FaultPlan
from sim.runtime import Sim

DEFAULT_LATENCY_MS: Final = 5
DEFAULT_TIMEOUT_MS: Final = 5_000


class RpcError(Exception):
    """A call did not produce a reply."""


class RpcTimeout(RpcError):
    """The caller gave up waiting; the callee may still have done the work."""


class RemoteError(RpcError):
    """The callee failed; ``kind`` says how (``evicted``, ``protocol``, ``error``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class Endpoint(Protocol):
    async def dispatch(self, method: str, payload: Any) -> Any: ...


@attrs.define
class _Reply:
    event: trio.Event = attrs.Factory(trio.Event)
    value: Any = None
    error: RemoteError | None = None


@attrs.frozen
class _Fate:
    lost: bool
    delay_ms: int
    duplicate_delay_ms: int | None


class Network:
    """Routes calls between named endpoints under a fault plan."""

    def __init__(
        self,
        sim: Sim,
        plan: FaultPlan,
        nursery: trio.Nursery,
        latency_ms: int = DEFAULT_LATENCY_MS,
    ) -> None:
        self._sim = sim
        self._plan = plan
        self._nursery = nursery
        self._latency_ms = latency_ms
        self._rng = sim.rng("network")
        self._endpoints: dict[str, Endpoint] = {}
        #: Extra reply-side loss hook (jobs' completion notices), by method name.
        self.extra_loss: dict[str, float] = {}

    def register(self, name: str, endpoint: Endpoint) -> None:
        if name in self._endpoints:
            raise ValueError(f"an endpoint named {name!r} already exists")
        self._endpoints[name] = endpoint

    def _fate(self, loss: float) -> _Fate:
        plan, rng = self._plan, self._rng
        delay = self._latency_ms + (rng.randint(0, plan.delay_ms) if plan.delay_ms else 0)
        if plan.reorder and rng.random() < plan.reorder:
            delay += rng.randint(0, plan.reorder_ms)
        lost = bool(loss) and rng.random() < loss
        duplicate = None
        if plan.duplicate and rng.random() < plan.duplicate:
            duplicate = self._latency_ms + rng.randint(0, max(plan.delay_ms, plan.reorder_ms, 1))
        return _Fate(lost=lost, delay_ms=delay, duplicate_delay_ms=duplicate)

    def _loss(self, lost: bool, leg: str, src: str, dst: str, method: str, sender: str) -> str | None:
        """Why this leg is lost as it leaves ``sender``, or None."""
        now = self._sim.now()
        if self._plan.dropped(leg, src, dst, method, now):
            return "dropped"
        if self._plan.partitioned(sender, now):
            return "partitioned"
        return "lost" if lost else None

    async def call(
        self,
        src: str,
        dst: str,
        method: str,
        payload: Any,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> Any:
        """Send ``payload`` to ``dst.method`` and wait for the reply, at most ``timeout_ms``."""
        sim = self._sim
        msg = sim.next_id("msg")
        sim.event("send", msg=msg, src=src, dst=dst, method=method, body=payload)
        reply = _Reply()
        fate = self._fate(self._plan.request_loss + self.extra_loss.get(method, 0.0))
        reason = self._loss(fate.lost, "request", src, dst, method, src)
        if reason is not None:
            sim.event("drop", msg=msg, leg="request", reason=reason)
        else:
            self._nursery.start_soon(self._deliver, msg, src, dst, method, payload, fate.delay_ms, reply)
            if fate.duplicate_delay_ms is not None:
                sim.event("duplicate", msg=msg, leg="request")
                self._nursery.start_soon(
                    self._deliver, msg, src, dst, method, payload, fate.duplicate_delay_ms, reply
                )
        with trio.move_on_after(timeout_ms):
            await reply.event.wait()
        if not reply.event.is_set():
            sim.event("timeout", msg=msg, src=src, dst=dst, method=method)
            raise RpcTimeout(f"{src} -> {dst}.{method}: no reply within {timeout_ms} ms")
        if reply.error is not None:
            raise reply.error
        return reply.value

    async def _deliver(
        self, msg: str, src: str, dst: str, method: str, payload: Any, delay_ms: int, reply: _Reply
    ) -> None:
        sim = self._sim
        await sim.sleep(delay_ms)
        if self._plan.partitioned(dst, sim.now()):
            sim.event("drop", msg=msg, leg="request", reason="partitioned")
            return
        endpoint = self._endpoints.get(dst)
        if endpoint is None:
            sim.event("drop", msg=msg, leg="request", reason="no such endpoint")
            return
        sim.event("deliver", msg=msg, dst=dst, method=method)
        value: Any = None
        error: RemoteError | None = None
        try:
            value = await endpoint.dispatch(method, payload)
        except RemoteError as failure:
            error = failure
        fate = self._fate(self._plan.reply_loss)
        reason = self._loss(fate.lost, "reply", src, dst, method, dst)
        if reason is not None:
            sim.event("drop", msg=msg, leg="reply", reason=reason)
            return
        await sim.sleep(fate.delay_ms)
        if self._plan.partitioned(src, sim.now()):
            sim.event("drop", msg=msg, leg="reply", reason="partitioned")
            return
        if reply.event.is_set():
            sim.event("reply", msg=msg, ignored=True)
            return
        if error is not None:
            sim.event("reply", msg=msg, error=error.kind)
        else:
            sim.event("reply", msg=msg, body=value)
        reply.value, reply.error = value, error
        reply.event.set()
