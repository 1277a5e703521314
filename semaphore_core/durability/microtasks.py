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

from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any, Final, Literal

State = Literal["pending", "fulfilled", "rejected"]
#: ``new Promise(executor)``'s executor: it is handed ``resolve`` and ``reject``.
Executor = Callable[[Callable[[Any], None], Callable[[Any], None]], None]
#: A reaction's job body: it is handed the settled value.
Reaction = Callable[[Any], None]
#: At most this many jobs in one drain: a promise loop that never ends is a bug, reported.
MAX_JOBS_PER_DRAIN: Final = 10_000_000


class Microtasks:
    """The microtask (job) queue: jobs run first in, first out, until none is left."""

    def __init__(self) -> None:
        self._jobs: deque[Callable[[], None]] = deque()
        #: Jobs run so far (for tests and bounds).
        self.ran = 0

    def enqueue(self, job: Callable[[], None]) -> None:
        self._jobs.append(job)

    def drain(self) -> None:
        """Run jobs until the queue is empty (a job may queue more)."""
        ran = 0
        while self._jobs:
            self._jobs.popleft()()
            ran += 1
            if ran > MAX_JOBS_PER_DRAIN:
                raise RuntimeError(f"more than {MAX_JOBS_PER_DRAIN} microtasks in one drain")
        self.ran += ran

    def __len__(self) -> int:
        return len(self._jobs)


class JsPromise:
    """A promise with ECMAScript's semantics on a :class:`Microtasks` queue."""

    __slots__ = ("_fulfil_reactions", "_reject_reactions", "queue", "state", "value")

    def __init__(
        self,
        queue: Microtasks,
        executor: Callable[[Callable[[Any], None], Callable[[Any], None]], None] | None = None,
    ) -> None:
        self.queue = queue
        self.state: State = "pending"
        self.value: Any = None
        self._fulfil_reactions: list[Callable[[Any], None]] = []
        self._reject_reactions: list[Callable[[Any], None]] = []
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
            # PromiseResolveThenableJob: one job to call its then, whose reaction is another.
            def job() -> None:
                resolve, reject = self.resolving_functions()
                resolution.then(resolve, reject)

            self.queue.enqueue(job)
            return
        self._settle("fulfilled", resolution)

    def _settle(self, state: State, value: Any) -> None:
        assert self.state == "pending", self.state
        reactions = self._fulfil_reactions if state == "fulfilled" else self._reject_reactions
        self.state, self.value = state, value
        self._fulfil_reactions, self._reject_reactions = [], []
        for reaction in reactions:
            self.queue.enqueue(_bind(reaction, value))

    # --- reacting (PerformPromiseThen) ---------------------------------------------------

    def then(
        self,
        on_fulfilled: Callable[[Any], Any] | None = None,
        on_rejected: Callable[[Any], Any] | None = None,
    ) -> JsPromise:
        """``promise.then(onFulfilled, onRejected)``: a new promise, settled by the handler's result."""
        derived = JsPromise(self.queue)
        resolve, reject = derived.resolving_functions()

        def reaction(
            handler: Callable[[Any], Any] | None, passthrough: Callable[[Any], None]
        ) -> Callable[[Any], None]:
            def job(argument: Any) -> None:
                if handler is None:
                    passthrough(argument)
                    return
                try:
                    result = handler(argument)
                except _Rejection as thrown:
                    reject(thrown.reason)
                except Exception as error:
                    reject(error)
                else:
                    resolve(result)

            return job

        self._react(reaction(on_fulfilled, resolve), reaction(on_rejected, reject))
        return derived

    def _react(self, on_fulfilled: Callable[[Any], None], on_rejected: Callable[[Any], None]) -> None:
        """Register reactions without a derived promise (``await``'s PerformPromiseThen)."""
        if self.state == "pending":
            self._fulfil_reactions.append(on_fulfilled)
            self._reject_reactions.append(on_rejected)
        elif self.state == "fulfilled":
            self.queue.enqueue(_bind(on_fulfilled, self.value))
        else:
            self.queue.enqueue(_bind(on_rejected, self.value))

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
        promise._resolve(value)
        return promise

    @staticmethod
    def rejected(queue: Microtasks, reason: Any) -> JsPromise:
        """``Promise.reject(reason)``."""
        promise = JsPromise(queue)
        promise._settle("rejected", reason)
        return promise

    @staticmethod
    def all(queue: Microtasks, items: Iterable[Any]) -> JsPromise:
        """``Promise.all``: every value in order once all are fulfilled; the first rejection else."""
        result = JsPromise(queue)
        resolve, reject = result.resolving_functions()
        values: list[Any] = []
        remaining = 1

        def element(index: int) -> Callable[[Any], None]:
            called = False

            def on_value(value: Any) -> None:
                nonlocal called, remaining
                if called:
                    return
                called = True
                values[index] = value
                remaining -= 1
                if remaining == 0:
                    resolve(list(values))

            return on_value

        for index, item in enumerate(items):
            values.append(None)
            remaining += 1
            JsPromise.resolve(queue, item).then(element(index), reject)
        remaining -= 1
        if remaining == 0:
            resolve(list(values))
        return result

    @staticmethod
    def race(queue: Microtasks, items: Iterable[Any]) -> JsPromise:
        """``Promise.race``: settled as the first of ``items`` to settle."""
        result = JsPromise(queue)
        resolve, reject = result.resolving_functions()
        for item in items:
            JsPromise.resolve(queue, item).then(resolve, reject)
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


def _bind(reaction: Callable[[Any], None], argument: Any) -> Callable[[], None]:
    return lambda: reaction(argument)


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
    resolve, reject = result.resolving_functions()

    def step(send: Callable[[], Any]) -> None:
        try:
            awaited = send()
        except StopIteration as finished:
            resolve(finished.value)
            return
        except _Rejection as thrown:
            reject(thrown.reason)
            return
        except Exception as error:
            reject(error)
            return
        # Await: PromiseResolve(awaited), then PerformPromiseThen with resuming reactions.
        JsPromise.resolve(queue, awaited)._react(
            lambda value: step(lambda: coroutine.send(value)),
            lambda reason: step(lambda: coroutine.throw(_as_exception(reason))),
        )

    step(lambda: coroutine.send(None))
    return result


def _as_exception(reason: Any) -> BaseException:
    return reason if isinstance(reason, BaseException) else _Rejection(reason)
