"""JavaScript's promises and async functions, on a microtask queue of our own, synchronously.

The reference's engine is asynchronous TypeScript: which continuation runs
first decides which operation takes a freed permit and in which order
lifecycle events are emitted (issue 25). This module runs Python code under
the same rules, so a port can read line by line like the TypeScript and
still be driven synchronously from outside (sans-I/O: a step drains the
queue):

- :class:`Microtasks` is the job queue: FIFO, drained by :meth:`Microtasks.drain`.
- :class:`JsPromise` follows ECMAScript's Promise: reactions are queued in
  the order they were registered, when the promise settles (or at once, if
  it has); resolving with a promise costs the two jobs the specification's
  ``PromiseResolveThenableJob`` costs; ``then``, ``catch``, ``finally``,
  ``JsPromise.resolve``, ``JsPromise.all`` and ``JsPromise.race`` settle as
  Node's do.
- :func:`run_async` runs a coroutine as an ``async function``: it starts
  synchronously, each ``await`` of a value takes the microtask hops
  ``await`` takes (one for a settled native promise, since ES2019), and its
  return value resolves the function's promise as ``return`` does.

The orders are checked against Node itself: tests/test_microtasks.py holds
small programs written twice, in JavaScript and with this module, and the
order Node printed for each.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable
from functools import partial
from typing import Any, Concatenate, Final, Literal, ParamSpec, Protocol, TypeVar

State = Literal["pending", "fulfilled", "rejected"]
#: ``new Promise(executor)``'s executor: it is handed ``resolve`` and ``reject``.
Executor = Callable[[Callable[[Any], None], Callable[[Any], None]], None]
#: At most this many jobs in one drain: a promise loop that never ends is a bug, reported.
MAX_JOBS_PER_DRAIN: Final = 10_000_000


class Microtasks:
    """The microtask (job) queue: jobs run first in, first out, until none is left."""

    __slots__ = ("_jobs", "enqueue", "ran")

    def __init__(self) -> None:
        self._jobs: deque[Callable[[], None]] = deque()
        #: Queue a job (the deque's own ``append``: this is on every promise's path).
        self.enqueue: Callable[[Callable[[], None]], None] = self._jobs.append
        #: Jobs run so far (for tests and bounds).
        self.ran = 0

    def drain(self) -> None:
        """Run jobs until the queue is empty (a job may queue more)."""
        jobs = self._jobs
        pop = jobs.popleft
        ran = 0
        try:
            while jobs:
                pop()()
                ran += 1
                if ran > MAX_JOBS_PER_DRAIN:
                    raise RuntimeError(f"more than {MAX_JOBS_PER_DRAIN} microtasks in one drain")
        finally:
            self.ran += ran

    def clear(self) -> None:
        """Drop every queued job (a step that raised: what it queued never runs)."""
        self._jobs.clear()

    def __len__(self) -> int:
        return len(self._jobs)


#: A reaction: called (as a job) with the promise's settled state and value.
Reaction = Callable[["State", Any], None]


class JsPromise:
    """A promise with ECMAScript's semantics on a :class:`Microtasks` queue.

    Reactions are one callable each, handed the state and the value, so a
    ``then`` costs one closure and one job (this sits under every ``await``
    of the engine, thousands of times per simulated second).
    """

    __slots__ = ("_reactions", "queue", "state", "value")

    def __init__(
        self,
        queue: Microtasks,
        executor: Callable[[Callable[[Any], None], Callable[[Any], None]], None] | None = None,
    ) -> None:
        self.queue = queue
        self.state: State = "pending"
        self.value: Any = None
        self._reactions: list[Reaction] | None = None
        if executor is not None:
            resolve, reject = self.resolving_functions()
            try:
                executor(resolve, reject)
            except Exception as error:  # an executor that throws rejects its promise
                reject(error)

    # --- settling (CreateResolvingFunctions, FulfillPromise, RejectPromise) -------------------

    def resolving_functions(self) -> tuple[Callable[[Any], None], Callable[[Any], None]]:
        """The ``resolve`` and ``reject`` a promise's executor gets: only the first call counts."""
        done = False

        def resolve(resolution: Any = None) -> None:
            nonlocal done
            if done:
                return
            done = True
            self._resolve(resolution)

        def reject(reason: Any = None) -> None:
            nonlocal done
            if done:
                return
            done = True
            self._settle("rejected", reason)

        return resolve, reject

    def _resolve(self, resolution: Any) -> None:
        if resolution is self:
            self._settle("rejected", TypeError("Chaining cycle detected for promise"))
            return
        if isinstance(resolution, JsPromise):
            # PromiseResolveThenableJob: one job to call its then, whose reaction is another. Only
            # that reaction settles this promise, once, and the promise ``then`` would derive is
            # never seen: the reaction is registered without one (the same job, in the same place).
            def adopt(state: State, value: Any) -> None:
                if state == "fulfilled":
                    self._resolve(value)
                else:
                    self._settle("rejected", value)

            self.queue.enqueue(partial(resolution._react, adopt))
            return
        self._settle("fulfilled", resolution)

    def _settle(self, state: State, value: Any) -> None:
        assert self.state == "pending", self.state
        reactions = self._reactions
        self.state, self.value, self._reactions = state, value, None
        if reactions:
            enqueue = self.queue.enqueue
            for reaction in reactions:
                enqueue(partial(reaction, state, value))

    # --- reacting (PerformPromiseThen) ---------------------------------------------------

    def then(
        self,
        on_fulfilled: Callable[[Any], Any] | None = None,
        on_rejected: Callable[[Any], Any] | None = None,
    ) -> JsPromise:
        """``promise.then(onFulfilled, onRejected)``: a new promise, settled by the handler's result."""
        derived = JsPromise(self.queue)

        # Only this job settles ``derived``, once: its resolving functions' guard is not needed.
        def reaction(state: State, argument: Any) -> None:
            handler = on_fulfilled if state == "fulfilled" else on_rejected
            if handler is None:
                if state == "fulfilled":
                    derived._resolve(argument)
                else:
                    derived._settle("rejected", argument)
                return
            try:
                result = handler(argument)
            except _Rejection as thrown:
                derived._settle("rejected", thrown.reason)
            except Exception as error:
                derived._settle("rejected", error)
            else:
                derived._resolve(result)

        self._react(reaction)
        return derived

    def _react(self, reaction: Reaction) -> None:
        """PerformPromiseThen's registration (with no derived promise, as ``await``'s)."""
        if self.state == "pending":
            if self._reactions is None:
                self._reactions = [reaction]
            else:
                self._reactions.append(reaction)
        else:
            self.queue.enqueue(partial(reaction, self.state, self.value))

    def catch(self, on_rejected: Callable[[Any], Any]) -> JsPromise:
        return self.then(None, on_rejected)

    def finally_(self, on_finally: Callable[[], Any]) -> JsPromise:
        """``promise.finally(onFinally)``: the handler's result is awaited, then the value passes on."""

        def then_finally(value: Any) -> Any:
            result = on_finally()
            return JsPromise.resolve(self.queue, result).then(lambda _: value)

        def catch_finally(reason: Any) -> Any:
            result = on_finally()

            def rethrow(_: Any) -> Any:
                raise _Rejection(reason)

            return JsPromise.resolve(self.queue, result).then(rethrow)

        return self.then(then_finally, catch_finally)

    # --- statics ---------------------------------------------------------------------------

    @staticmethod
    def resolve(queue: Microtasks, value: Any = None) -> JsPromise:
        """``Promise.resolve(value)``: the promise itself if it is one, else a promise resolved with it."""
        if isinstance(value, JsPromise):
            return value
        promise = JsPromise(queue)
        promise.state, promise.value = "fulfilled", value
        return promise

    @staticmethod
    def rejected(queue: Microtasks, reason: Any) -> JsPromise:
        """``Promise.reject(reason)``."""
        promise = JsPromise(queue)
        promise.state, promise.value = "rejected", reason
        return promise

    @staticmethod
    def all(queue: Microtasks, items: Iterable[Any]) -> JsPromise:
        """``Promise.all``: every value in order once all are fulfilled; the first rejection else.

        Each item gets ``then(resolveElement, reject)``; the promise that
        ``then`` derives is never observed, so the reaction is registered
        without one (the same job, in the same place in the queue).
        """
        result = JsPromise(queue)
        values: list[Any] = []
        remaining = 1

        # ``result`` is only ever settled with a list or a reason, never resolved with a promise:
        # "already resolved" is "no longer pending", so its resolving functions' guard is not needed.
        def element(index: int) -> Reaction:
            def reaction(state: State, value: Any) -> None:
                nonlocal remaining
                if result.state != "pending":
                    return
                if state != "fulfilled":
                    result._settle("rejected", value)
                    return
                values[index] = value
                remaining -= 1
                if remaining == 0:
                    result._settle("fulfilled", list(values))

            return reaction

        for index, item in enumerate(items):
            values.append(None)
            remaining += 1
            JsPromise.resolve(queue, item)._react(element(index))
        remaining -= 1
        if remaining == 0:
            result._settle("fulfilled", list(values))
        return result

    @staticmethod
    def race(queue: Microtasks, items: Iterable[Any]) -> JsPromise:
        """``Promise.race``: settled as the first of ``items`` to settle (reactions as in ``all``)."""
        result = JsPromise(queue)

        # A settled promise's value is never a promise, so (as in ``all``) the first to settle
        # settles ``result`` at once, and "already resolved" is "no longer pending".
        def reaction(state: State, value: Any) -> None:
            if result.state == "pending":
                result._settle(state, value)

        for item in items:
            JsPromise.resolve(queue, item)._react(reaction)
        return result

    def __await__(self) -> Generator[Any, Any, Any]:
        """``await promise`` inside :func:`run_async`."""
        return (yield self)

    def __repr__(self) -> str:
        return f"JsPromise({self.state}, {self.value!r})"


class _Rejection(Exception):
    """A handler's way to reject with a value that is not an exception (``throw reason``)."""

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason


class Awaiting:
    """``await value`` for a value that is not a promise (one hop, as ``await 1`` takes)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.value)


def run_async(queue: Microtasks, coroutine: Coroutine[Any, Any, Any]) -> JsPromise:
    """Run ``coroutine`` as an ``async function`` call: synchronously up to its first ``await``;
    its promise settles with what it returns (or raises)."""
    result = JsPromise(queue)
    send, throw = coroutine.send, coroutine.throw

    def step(state: State, value: Any) -> None:
        try:
            awaited = send(value) if state == "fulfilled" else throw(_as_exception(value))
        except StopIteration as finished:
            result._resolve(finished.value)
            return
        except _Rejection as thrown:
            result._settle("rejected", thrown.reason)
            return
        except Exception as error:
            result._settle("rejected", error)
            return
        # Await: PromiseResolve(awaited), then PerformPromiseThen with a resuming reaction.
        if isinstance(awaited, JsPromise):
            awaited._react(step)
        else:  # a value: already a resolved promise, whose reaction is queued at once
            queue.enqueue(partial(step, "fulfilled", awaited))

    step("fulfilled", None)
    return result


def _as_exception(reason: Any) -> BaseException:
    return reason if isinstance(reason, BaseException) else _Rejection(reason)


class HasMicrotasks(Protocol):
    """An object whose ``async`` methods run on its own queue (``tasks``)."""

    @property
    def tasks(self) -> Microtasks: ...


P = ParamSpec("P")
S = TypeVar("S", bound=HasMicrotasks)


def js_async(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, Any]],
) -> Callable[Concatenate[S, P], JsPromise]:
    """Make an ``async def`` method behave as a TypeScript ``async`` method: calling it runs the body
    at once up to its first ``await`` and returns its promise (on ``self.tasks``).

    Needed because a Python coroutine awaited directly runs *inline*, with no
    hop of its own, where JavaScript's ``await f()`` awaits ``f``'s promise:
    every call of a reference ``async`` function goes through here.
    """

    @functools.wraps(method)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> JsPromise:
        return run_async(self.tasks, method(self, *args, **kwargs))

    return call
