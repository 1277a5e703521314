"""RPC between simulated objects, with faults drawn per message.

A call is a request and a reply, each a message with its own fate: lost,
delayed, held back (so it can overtake or be overtaken), or duplicated.
The callee handles a delivered request wherever the network delivers it,
so a lost *reply* means the callee already did the work (committed a
round, say) and the caller never hears of it. The caller gives up after
its timeout (the reference composes ``timeout`` around every semaphore
call); the callee may still finish and commit.

Every message sent, delivered, dropped or duplicated is a trace event.

The network also knows what is *on the wire*: requests and replies sent and
not yet taken in (a duplicate is one more). A request is taken in when it
lands (its handler runs there and then); a reply when its caller's task
resumes with it, which may be after other tasks woken at the same
millisecond have run. A checker that judges "nothing more can happen" must
not judge while one is on the wire: a round's reply carrying a grant or a
lease, say, has been committed by the holder and not yet heard by its
client (:attr:`Network.on_wire`, :attr:`Network.lands_by_ms`).

A delivered request is handled at once, inside the delivery: most handlers
answer synchronously (a sync, a submit, a usage read), and such an answer
costs no task, no cancel scope and no scheduler pass; its reply leaves in
the same step. A handler that must wait (a permit request waits for its
round) answers with :class:`Later`, and only then does the request get a
task of its own, which awaits the answer and sends the reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Protocol

import attrs
import trio

from semsim.runtime.kernel import Sim
from semsim.runtime.timers import Signal

DEFAULT_LATENCY_MS: Final = 5
DEFAULT_TIMEOUT_MS: Final = 5_000
#: How late a duplicate may arrive after the original (at least), so stale copies are replayed.
DUPLICATE_LAG_MS: Final = 5_000


class RpcError(Exception):
    """A call did not produce a reply."""


class RpcTimeout(RpcError):
    """The caller gave up waiting; the callee may still have done the work."""


class RemoteError(RpcError):
    """The callee failed; ``kind`` says how (``evicted``, ``protocol``, ``error``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class MessageFaults(Protocol):
    """What may happen to a message: the network's part of a fault plan (``semsim.world.faults.FaultPlan``).

    Probabilities per message, extra delays, and scheduled faults by time:
    the network draws each decision from its own seeded stream.
    """

    @property
    def request_loss(self) -> float: ...
    @property
    def reply_loss(self) -> float: ...
    @property
    def duplicate(self) -> float: ...
    @property
    def delay_ms(self) -> int: ...
    @property
    def reorder(self) -> float: ...
    @property
    def reorder_ms(self) -> int: ...
    @property
    def delay_tick_ms(self) -> int: ...

    def active(self, t_ms: int) -> bool: ...

    def partitioned(self, name: str, t_ms: int) -> bool: ...

    def dropped(self, leg: str, src: str, dst: str, method: str, t_ms: int) -> bool: ...


class Later:
    """A handler's answer that is not ready yet: ``wait()`` returns it (or raises ``RemoteError``).

    Returned by ``Endpoint.dispatch`` when the answer must wait for something
    (a round, a timer); the network then awaits it in a task of its own.
    Everything the handler did before returning it happened at delivery.
    """

    __slots__ = ("wait",)

    def __init__(self, wait: Callable[[], Awaitable[Any]]) -> None:
        self.wait = wait


class Endpoint(Protocol):
    def dispatch(self, method: str, payload: Any) -> Any:
        """Handle a delivered request: the answer, a :class:`Later`, or ``RemoteError`` raised."""
        ...


class _Reply:
    """Where a call's answer lands; the first delivered reply wins."""

    __slots__ = ("error", "held", "signal", "value", "waiting")

    def __init__(self, signal: Signal, waiting: bool) -> None:
        self.signal = signal
        self.value: Any = None
        self.error: RemoteError | None = None
        #: A caller waits for it (a ``call``, not a ``notify``) and has not given up.
        self.waiting = waiting
        #: It landed and its caller has not resumed with it yet: still on the wire.
        self.held = False


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
        plan: MessageFaults,
        nursery: trio.Nursery,
        latency_ms: int = DEFAULT_LATENCY_MS,
    ) -> None:
        self._sim = sim
        self._plan = plan
        self._nursery = nursery
        self._latency_ms = latency_ms
        self._rng = sim.rng("network")
        self._endpoints: dict[str, Endpoint] = {}
        #: Endpoints reached over a connection that never duplicates a request (see ``register``).
        self._no_duplicates: set[str] = set()
        #: Extra reply-side loss hook (jobs' completion notices), by method name.
        self.extra_loss: dict[str, float] = {}
        self._on_wire = 0
        self._lands_by_ms = 0

    @property
    def on_wire(self) -> int:
        """How many messages are on the wire: sent and not yet taken in (see the module docstring).

        A request that was delivered and waits for its answer (a :class:`Later`)
        is not on the wire; its reply will be once the answer leaves, until its
        caller has resumed with it (or it was dropped or ignored).
        """
        return self._on_wire

    @property
    def lands_by_ms(self) -> int:
        """When the last message now on the wire lands (meaningful while :attr:`on_wire`)."""
        return self._lands_by_ms

    def _put_on_wire(self, at_ms: int, land: Callable[[], None]) -> None:
        """Schedule ``land`` (``_arrive`` or ``_answer``, which take the message off) at ``at_ms``."""
        self._lands_by_ms = max(self._lands_by_ms, at_ms) if self._on_wire else at_ms
        self._on_wire += 1
        self._sim.call_at(at_ms, land)

    def register(self, name: str, endpoint: Endpoint, *, duplicates: bool = True) -> None:
        """Route calls to ``name``; with ``duplicates=False`` its requests are never duplicated.

        An HTTP request over TCP is delivered once or not at all: the connection
        drops repeated segments, and what repeats a request is a caller's retry,
        which the model makes explicitly (an attempt). Such an endpoint still
        suffers loss, delay and reordering. The duplicate is still drawn, so the
        other messages' fates do not depend on which endpoints take duplicates.
        """
        if name in self._endpoints:
            raise ValueError(f"an endpoint named {name!r} already exists")
        self._endpoints[name] = endpoint
        if not duplicates:
            self._no_duplicates.add(name)

    def _fate(self, loss: float) -> _Fate:
        plan, rng = self._plan, self._rng
        if not plan.active(self._sim.now()):
            return _Fate(lost=False, delay_ms=self._latency_ms, duplicate_delay_ms=None)
        delay = self._latency_ms + (rng.randint(0, plan.delay_ms) if plan.delay_ms else 0)
        if plan.reorder and rng.random() < plan.reorder:
            delay += rng.randint(0, plan.reorder_ms)
        lost = bool(loss) and rng.random() < loss
        duplicate = None
        if plan.duplicate and rng.random() < plan.duplicate:
            # A duplicate may arrive much later than the original: a replayed, stale message.
            duplicate = self._latency_ms + rng.randint(
                0, max(plan.delay_ms, plan.reorder_ms, DUPLICATE_LAG_MS)
            )
        if plan.delay_tick_ms:  # after the draws: the tick draws nothing of its own
            delay = self._on_tick(delay, plan.delay_tick_ms)
            duplicate = None if duplicate is None else self._on_tick(duplicate, plan.delay_tick_ms)
        return _Fate(lost=lost, delay_ms=delay, duplicate_delay_ms=duplicate)

    def _on_tick(self, delay_ms: int, tick_ms: int) -> int:
        """``delay_ms`` stretched so the message lands on the next multiple of ``tick_ms``."""
        lands = self._sim.now() + delay_ms
        return delay_ms + (-lands) % tick_ms

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
        msg, reply = self._send(src, dst, method, payload, waiting=True)
        try:
            arrived = await reply.signal.wait(sim.now() + timeout_ms)
        finally:  # also when cancelled (an eviction): nobody will take the reply in after this
            reply.waiting = False
            if reply.held:
                reply.held = False
                self._on_wire -= 1
        if not arrived:
            sim.event("timeout", msg=msg, src=src, dst=dst, method=method)
            raise RpcTimeout(f"{src} -> {dst}.{method}: no reply within {timeout_ms} ms")
        if reply.error is not None:
            raise reply.error
        return reply.value

    def notify(self, src: str, dst: str, method: str, payload: Any) -> None:
        """A call nobody waits for: same faults, the reply (if any) is simply not awaited."""
        self._send(src, dst, method, payload)

    def _send(
        self, src: str, dst: str, method: str, payload: Any, waiting: bool = False
    ) -> tuple[str, _Reply]:
        sim = self._sim
        msg = sim.next_id("msg")
        sim.event("send", msg=msg, src=src, dst=dst, method=method, body=payload)
        reply = _Reply(sim.signal(), waiting)
        fate = self._fate(self._plan.request_loss + self.extra_loss.get(method, 0.0))
        reason = self._loss(fate.lost, "request", src, dst, method, src)
        if reason is not None:
            sim.event("drop", msg=msg, leg="request", reason=reason)
            return msg, reply
        now = sim.now()
        self._put_on_wire(now + fate.delay_ms, lambda: self._arrive(msg, src, dst, method, payload, reply))
        if fate.duplicate_delay_ms is not None and dst not in self._no_duplicates:
            sim.event("duplicate", msg=msg, leg="request")
            self._put_on_wire(
                now + fate.duplicate_delay_ms, lambda: self._arrive(msg, src, dst, method, payload, reply)
            )
        return msg, reply

    def _arrive(self, msg: str, src: str, dst: str, method: str, payload: Any, reply: _Reply) -> None:
        """A request reaches ``dst``: the endpoint handles it here and now (see the module docstring)."""
        sim = self._sim
        self._on_wire -= 1
        if self._plan.partitioned(dst, sim.now()):
            sim.event("drop", msg=msg, leg="request", reason="partitioned")
            return
        endpoint = self._endpoints.get(dst)
        if endpoint is None:
            sim.event("drop", msg=msg, leg="request", reason="no such endpoint")
            return
        sim.event("deliver", msg=msg, dst=dst, method=method)
        try:
            value = endpoint.dispatch(method, payload)
        except RemoteError as failure:
            self._respond(msg, src, dst, method, reply, None, failure)
            return
        if isinstance(value, Later):
            self._nursery.start_soon(self._respond_later, value, msg, src, dst, method, reply)
        elif isinstance(value, Coroutine):  # an ``async def`` handler: a bug, not an answer
            value.close()
            raise TypeError(f"{dst}.{method} answered with a coroutine: return the answer or a Later")
        else:
            self._respond(msg, src, dst, method, reply, value, None)

    async def _respond_later(
        self, later: Later, msg: str, src: str, dst: str, method: str, reply: _Reply
    ) -> None:
        value: Any = None
        error: RemoteError | None = None
        try:
            value = await later.wait()
        except RemoteError as failure:
            error = failure
        self._respond(msg, src, dst, method, reply, value, error)

    def _respond(
        self, msg: str, src: str, dst: str, method: str, reply: _Reply, value: Any, error: RemoteError | None
    ) -> None:
        """The callee's answer leaves ``dst``: under the reply leg's faults, it reaches the caller later."""
        sim = self._sim
        fate = self._fate(self._plan.reply_loss)
        reason = self._loss(fate.lost, "reply", src, dst, method, dst)
        if reason is not None:
            sim.event("drop", msg=msg, leg="reply", reason=reason)
            return
        self._put_on_wire(sim.now() + fate.delay_ms, lambda: self._answer(msg, src, reply, value, error))

    def _answer(self, msg: str, src: str, reply: _Reply, value: Any, error: RemoteError | None) -> None:
        """The reply reaches the caller (who may have given up already)."""
        sim = self._sim
        if self._plan.partitioned(src, sim.now()):
            self._on_wire -= 1
            sim.event("drop", msg=msg, leg="reply", reason="partitioned")
            return
        if reply.signal.is_set:
            self._on_wire -= 1
            sim.event("reply", msg=msg, ignored=True)
            return
        if error is not None:
            sim.event("reply", msg=msg, error=error.kind)
        else:
            sim.event("reply", msg=msg, body=value)
        reply.value, reply.error = value, error
        if reply.waiting:
            reply.held = True  # on the wire until the caller's task resumes with it
        else:
            self._on_wire -= 1  # nobody waits: a notify, or a caller that gave up
        reply.signal.set()
