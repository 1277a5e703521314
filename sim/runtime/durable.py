"""Simulated Durable Objects: storage that survives eviction, one alarm, a live instance.

What survives an eviction is exactly what the platform keeps: the SQLite
database and the one alarm, which lives in that same database so it commits
(or rolls back) with the rows it serves. What does not survive is the live
instance: the object built by ``factory``, its in-memory state, its timers
and background tasks, and every call it is handling (each fails with an
``evicted`` error). The next call or alarm builds a fresh instance on the
same storage.

Alarm delivery is the platform's: when the stored alarm time comes (read
again at that moment: only an alarm still stored is delivered), the row is
cleared and ``alarm()`` runs on the instance (built if needed). If it
throws, the platform retries a few times with backoff and then drops the
alarm, unless the object stored a new one itself (the reference engine arms
its own fallback for exactly this reason).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import trio

from semaphore_core import SemaphoreProtocolError
from semsim.runtime.kernel import Sim
from semsim.runtime.network import Later, RemoteError
from semsim.runtime.timers import Entry

#: The platform retries a failing alarm this many times, with doubling backoff, then drops it.
ALARM_RETRIES: Final = 6
ALARM_FIRST_BACKOFF_MS: Final = 2_000

_ALARM_TABLE = "semsim_alarm"


class HandlerFailure(Exception):
    """A failure a handler throws on purpose (a fault plan's), which the caller sees as an error.

    Only these, protocol errors and ``RemoteError`` become error replies: any
    other exception out of a handler is a bug and ends the run as a crash.
    """


class Instance(Protocol):
    """A live object: what ``factory`` builds on a context."""

    def handle(self, method: str, payload: Any) -> Any:
        """Handle a call at once: the answer, or a :class:`~semsim.runtime.network.Later` to wait on."""
        ...

    async def alarm(self) -> None: ...


class DurableMonitor(Protocol):
    """What a checker is told about an object's life (``semsim.check.invariants.Monitor`` is one)."""

    def evicting(self, obj: DurableObject) -> None: ...

    def rebuilt(self, obj: DurableObject) -> None: ...

    def alarm_dropped(self, name: str) -> None: ...


class ObjectTimer:
    """A callback an instance set for later (``ObjectContext.call_at``); ``cancel()`` stops it."""

    __slots__ = ("_entry", "_key", "_timers")

    def __init__(self, timers: dict[int, ObjectTimer], key: int, entry: Entry) -> None:
        self._timers = timers
        self._key = key
        self._entry = entry

    def cancel(self) -> None:
        self._entry.cancelled = True
        self._timers.pop(self._key, None)


class ObjectContext:
    """What an instance gets: its object's storage, clock, trace, and ways to run work later.

    Tasks started and timers set here die with the instance (on eviction).
    """

    def __init__(self, obj: DurableObject, generation: int) -> None:
        self.object = obj
        self.sim = obj.sim
        self.name = obj.name
        self.storage = obj.storage
        self.generation = generation
        self._scopes: dict[int, trio.CancelScope] = {}
        self._timers: dict[int, ObjectTimer] = {}
        self._next_scope = 0

    @property
    def alive(self) -> bool:
        return self.object.generation == self.generation

    def start_task(self, fn: Callable[[], Awaitable[None]], name: str) -> trio.CancelScope:
        """Run ``fn`` until it returns or the instance is evicted; returns its cancel scope.

        Started by an instance already evicted, or evicted before the task
        first runs, ``fn`` never runs: a dead instance does no more work.
        """
        scope = trio.CancelScope()
        if not self.alive:
            scope.cancel()
            return scope
        key = self._next_scope
        self._next_scope += 1
        self._scopes[key] = scope

        async def body() -> None:
            try:
                with scope:
                    await trio.lowlevel.checkpoint_if_cancelled()  # evicted before it started
                    await fn()
            finally:
                self._scopes.pop(key, None)

        self.object.nursery.start_soon(body, name=f"{self.name}.{name}")
        return scope

    def wait_until(self, fn: Callable[[], Awaitable[None]], name: str = "wait_until") -> trio.CancelScope:
        """``ctx.waitUntil``: keep work going after the call that started it returned."""
        return self.start_task(fn, name)

    def call_at(self, t_ms: int, action: Callable[[], None]) -> ObjectTimer:
        """Run the plain callback ``action`` at ``t_ms`` unless the instance is evicted first.

        A timer whose work is synchronous (a round, an early alarm) needs no
        task: it is one entry in the runtime's heap, served when Trio's run loop goes idle.
        """
        key = self._next_scope
        self._next_scope += 1
        if not self.alive:  # set by an instance already evicted: it never fires
            timer = ObjectTimer(self._timers, key, Entry(action))
            timer.cancel()
            return timer

        def fire() -> None:
            del self._timers[key]
            action()

        timer = self._timers[key] = ObjectTimer(self._timers, key, self.sim.call_at(t_ms, fire))
        return timer

    def cancel_all(self) -> None:
        for scope in list(self._scopes.values()):
            scope.cancel()
        for timer in list(self._timers.values()):
            timer.cancel()

    # --- the one alarm, in this object's storage -------------------------------

    def get_alarm(self) -> int | None:
        return self.object.get_alarm()

    def set_alarm(self, at_ms: int) -> None:
        """Store the alarm; call inside the transaction whose rows it serves."""
        self.object.storage.execute(
            f"INSERT INTO {_ALARM_TABLE} (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = ?",
            (at_ms, at_ms),
        )

    def delete_alarm(self) -> None:
        self.object.storage.execute(f"DELETE FROM {_ALARM_TABLE}")

    def alarm_written(self) -> None:
        """After a commit that may have changed the alarm: point the platform's timer at it."""
        self.object.alarm_changed()


Factory = Callable[[ObjectContext], Instance]

#: What a handler may throw that the caller sees as an error reply (``RemoteError`` passes as it is).
#: Anything else out of a handler is a bug in semsim's models (or an input that validation let
#: through), not protocol behaviour: it ends the run as a crash rather than becoming an error
#: reply that a client would retry for ever, and a run in which nothing could happen would
#: report green.
_REPLIED = (SemaphoreProtocolError, HandlerFailure)


def _error_reply(error: Exception) -> RemoteError:
    if isinstance(error, SemaphoreProtocolError):
        # A malformed message: the reference's handler throws, the caller sees an error.
        return RemoteError("protocol", str(error))
    return RemoteError("error", f"{type(error).__name__}: {error}")  # a failure the fault plan injected


class DurableObject:
    """One named object: persistent storage and alarm, and at most one live instance."""

    def __init__(
        self, sim: Sim, name: str, factory: Factory, nursery: trio.Nursery, alarm_retries: int = ALARM_RETRIES
    ) -> None:
        assert 0 <= alarm_retries <= ALARM_RETRIES, alarm_retries
        self.sim = sim
        self.name = name
        #: How often the platform retries a throwing ``alarm()`` before dropping it.
        self.alarm_retries = alarm_retries
        self.nursery = nursery
        self._factory = factory
        self.storage = sqlite3.connect(":memory:", isolation_level=None)
        self.storage.execute(
            f"CREATE TABLE {_ALARM_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL)"
        )
        self.generation = 0
        self._context: ObjectContext | None = None
        self._instance: Instance | None = None
        self._calls: dict[int, trio.CancelScope] = {}
        self._next_call = 0
        #: The platform's timer for the stored alarm: ``(time, entry)``, or None.
        self._alarm_timer: tuple[int, Entry] | None = None
        self._alarm_running = False
        #: Told of evictions and rebuilt instances (the ``durable`` invariant).
        self.monitor: DurableMonitor | None = None
        #: A second database a checker keeps beside this object's own (the literal model of
        #: ``exact_accounting``): it survives eviction as the storage does; the object never reads it.
        self.shadow_storage: sqlite3.Connection | None = None
        #: A checker's model of this object's durable state, kept beside it (the literal queue
        #: model of ``exact_queue``): it survives eviction as the storage does; the object never
        #: reads it.
        self.shadow_model: Any = None
        #: What a checker read from this object's storage, kept while the storage is unchanged
        #: (``semsim.check.invariants``; None: not kept). The object never reads it.
        self.checker_reads: dict[Any, Any] | None = None
        #: The checker's debug mode: each kept reading is asked of storage again and compared.
        self.checker_reads_checked = False

    # --- the instance -------------------------------------------------------------

    @property
    def live(self) -> bool:
        return self._instance is not None

    @property
    def live_instance(self) -> Instance | None:
        """The live instance, or None (a reader's view: unlike :meth:`instance`, it builds none)."""
        return self._instance

    def instance(self) -> Instance:
        if self._instance is None:
            self._context = ObjectContext(self, self.generation)
            self.sim.event("instance", object=self.name, generation=self.generation)
            if self.monitor is not None:
                self.monitor.rebuilt(self)
            self._instance = self._factory(self._context)
        return self._instance

    def evict(self) -> None:
        """Drop the live instance: its calls fail, its timers and memory vanish."""
        self.sim.event("evict", object=self.name, calls=len(self._calls), live=self.live)
        if self.monitor is not None:
            self.monitor.evicting(self)
        for scope in list(self._calls.values()):
            scope.cancel()
        if self._context is not None:
            self._context.cancel_all()
        self._context = None
        self._instance = None
        self.generation += 1

    def dispatch(self, method: str, payload: Any) -> Any:
        """Handle one delivered call on the live instance: the answer, or a ``Later``.

        A handler that answers at once runs to its end here, with nothing for
        an eviction to interrupt. One that waits gets a cancel scope, which an
        eviction cancels: its ``Later`` then fails with ``evicted``.
        """
        instance = self.instance()
        if method == "alarm":
            answer: Any = Later(instance.alarm)
        else:
            try:
                answer = instance.handle(method, payload)
            except _REPLIED as error:
                raise _error_reply(error) from None
            if not isinstance(answer, Later):
                return answer
        key = self._next_call
        self._next_call += 1
        scope = self._calls[key] = trio.CancelScope()
        return Later(functools.partial(self._finish, answer, scope, key, method))

    async def call(self, method: str, payload: Any) -> Any:
        """``dispatch`` and wait for the answer (the platform's own calls: the alarm)."""
        answer = self.dispatch(method, payload)
        return await answer.wait() if isinstance(answer, Later) else answer

    async def _finish(self, later: Later, scope: trio.CancelScope, key: int, method: str) -> Any:
        result: Any = None
        try:
            with scope:
                # Cancelled already if the instance was evicted since the call arrived: a
                # cancelled scope only acts at a checkpoint, and ``wait()`` may have none.
                await trio.lowlevel.checkpoint_if_cancelled()
                try:
                    result = await later.wait()
                except _REPLIED as error:
                    raise _error_reply(error) from None
        finally:
            self._calls.pop(key, None)
        if scope.cancelled_caught:
            raise RemoteError("evicted", f"{self.name} was evicted while handling {method}")
        return result

    # --- the alarm ------------------------------------------------------------------

    def get_alarm(self) -> int | None:
        row = self.storage.execute(f"SELECT at FROM {_ALARM_TABLE}").fetchone()
        return None if row is None else int(row[0])

    def alarm_changed(self) -> None:
        """After a commit that may have changed the stored alarm: point the platform's timer at it.

        The time the timer is set for is only a hint: when it comes, the
        stored alarm is read again and only an alarm still stored and due is
        delivered. A real platform fires the alarm it stores, not a time it
        once read, so an alarm deleted or moved without a call here (a bug
        that loses the stored alarm) does not fire at the old time either.
        While an alarm runs, nothing is set: the run looks again when it ends.
        """
        if self._alarm_running:
            return
        at = self.get_alarm()
        timer = self._alarm_timer
        if timer is not None:
            if timer[0] == at:
                return
            timer[1].cancelled = True
            self._alarm_timer = None
        if at is not None:
            self._alarm_timer = (at, self.sim.call_at(at, self._alarm_due))

    def _alarm_due(self) -> None:
        self._alarm_timer = None
        if self.nursery.cancel_scope.cancel_called:
            return  # the world is shutting down: no more deliveries
        self._alarm_running = True
        self.nursery.start_soon(self._deliver_alarm, name=f"{self.name}.platform_alarm")

    async def _deliver_alarm(self) -> None:
        """Read the stored alarm again, clear it and run ``alarm()``, with nothing in between."""
        try:
            stored = self.get_alarm()
            # Deleted or moved later behind the platform's back: not due.
            if stored is not None and stored <= self.sim.now():
                self.storage.execute(f"DELETE FROM {_ALARM_TABLE}")
                await self._run_alarm(stored)
        finally:
            self._alarm_running = False
        self.alarm_changed()

    async def _run_alarm(self, scheduled_ms: int) -> None:
        sim = self.sim
        backoff = ALARM_FIRST_BACKOFF_MS
        for attempt in range(self.alarm_retries + 1):
            sim.event("alarm", object=self.name, scheduled=scheduled_ms, attempt=attempt)
            try:
                await self.call("alarm", None)
                return
            except RemoteError as failure:
                sim.event("alarm_failed", object=self.name, attempt=attempt, error=failure.kind)
            if self.get_alarm() is not None:
                return  # the object re-armed its own alarm: the platform does not retry
            if attempt < self.alarm_retries:
                await sim.sleep(backoff)
                backoff *= 2
        sim.event("alarm_dropped", object=self.name, scheduled=scheduled_ms)
        if self.monitor is not None:
            self.monitor.alarm_dropped(self.name)
