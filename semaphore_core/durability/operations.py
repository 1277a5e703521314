"""``Durability``: at-least-once durable operations (seed 002, ``durability.ts``, lines 115-870).

What this module owns: the operations' side of the reference's
``DurabilityCore``: registering a call (the row and the alarm in one
transaction; the same id and payload again is a no-op, another operation
or payload raises), the eager start while a permit is free, the alarm
participant that runs due rows (``#runDue``), the per-id lookup that
starts an attempt unless the same generation already runs (``#execute``),
the operation-specific parts of an execution (``#start``: payload,
missing handler, completion write, serialisation failure as terminal),
``getResult`` and ``purgeBefore``. What it must not know: permits, timers,
the alarm's arithmetic (``engine.py``), how a handler runs (the shell).

A handler is not a Python callable here: ``DurabilityOptions.handlers``
names the operations (with their policy overrides) and the shell runs each
``Attempt`` the engine hands it, with the attempt's ``memoize``
(:meth:`Durability.memoize`). Lifecycle events go to the step and to the
hooks added with :meth:`Durability.lifecycle`, at emission. Left out
(docs/DURABILITY.md): tracked sources (``get``/``list``/``watch``) and
watchers, ``Durability.migrate`` to a target version, ``traceFunction``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from semaphore_core.durability.calls import (
    CALLS,
    CallRow,
    NotFound,
    OperationResult,
    assert_operation,
    call_state,
    complete_call,
    due_ids,
    insert_call,
    migrate_calls,
    read_call,
)
from semaphore_core.durability.engine import Engine, Execution, ExecutionSpec, Participant, Release
from semaphore_core.durability.errors import (
    DuplicateDurablePayloadError,
    DurabilityError,
    DurableAttemptsExhaustedError,
    DurableAttemptTimeoutError,
    DurableResultSerializationError,
    NonRetryableError,
)
from semaphore_core.durability.events import Event, OperationEntity, Purged, Registered
from semaphore_core.durability.memos import Memoize, migrate_memos
from semaphore_core.durability.microtasks import JsPromise, Microtasks, js_async, run_async
from semaphore_core.durability.policy import (
    MAX_SAFE_INTEGER,
    MethodOptions,
    RetryOptions,
    resolve_policy,
    validate_options,
)
from semaphore_core.durability.records import AlarmInfo, Attempt, CallRejected, DueRun, Step
from semaphore_core.durability.serialization import canonical, deserialize, serialize
from semaphore_core.durability.storage import Fence


@attrs.frozen
class DurabilityOptions:
    """``DurabilityOptions``: the operations (with per-operation overrides) and shared policy."""

    #: Operation names (the reference's handler map keys) and their ``methods`` overrides.
    handlers: Mapping[str, MethodOptions | None]
    attempt_timeout_ms: int | None = None
    retries: RetryOptions | None = None
    #: Attach the handler's result to ``completed`` events (off by default, as in the reference).
    include_results: bool = False
    #: F8's fix (off by default: the reference does not): ``#execute`` starts a row only once it
    #: is due, so a pass's lane that reaches a row it read before the row's last attempt failed
    #: leaves the retry to its time (docs/FINDINGS.md, F8).
    execute_only_due: bool = False

    def __attrs_post_init__(self) -> None:
        validate_options("", MethodOptions(attempt_timeout_ms=self.attempt_timeout_ms, retries=self.retries))
        for name, method in self.handlers.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"operation names must be non-empty strings, got {name!r}")
            if method is not None:
                validate_options(f"methods.{name}.", method)


@attrs.frozen(hash=False)
class Registration:
    """What ``register`` did: whether a new row was inserted, and the step (eager start included)."""

    inserted: bool
    step: Step


@attrs.frozen(eq=False)
class _Hook:
    """One ``lifecycle`` attachment (the same hook added twice is two of them)."""

    hook: Callable[[Event], object]


def operation_entity(call: CallRow) -> OperationEntity:
    """``operationEntity`` (lines 447-452)."""
    return OperationEntity(operation=call.operation, id=call.id, generation=call.generation_id)


class Durability:
    """Durable operations on one engine (one Durable Object); see docs/DURABILITY.md."""

    def __init__(self, engine: Engine, options: DurabilityOptions, *, new_id: Callable[[], str]) -> None:
        if not isinstance(options, DurabilityOptions):
            raise TypeError(f"options must be DurabilityOptions, got {options!r}")
        self.engine = engine
        #: The engine's microtask queue, which this object's ``async`` methods run on.
        self.tasks: Microtasks = engine.tasks
        self.options = options
        self._new_id = new_id
        self._defaults = MethodOptions(attempt_timeout_ms=options.attempt_timeout_ms, retries=options.retries)
        self._methods = {name: method for name, method in options.handlers.items() if method is not None}
        # ``#active``: in memory, per instance (line 461).
        self.active: dict[str, Execution] = {}
        # ``#executionStarts``: per id, the lookup in progress (lines 705-712).
        self._execution_starts: dict[str, JsPromise] = {}
        #: Hooks added with ``lifecycle``, in the order they were added (``createLifecycleHooks``).
        self._hooks: list[_Hook] = []
        engine.migrate_schema("operations", migrate_calls)
        engine.migrate_schema("memos", migrate_memos)
        engine.register(Participant(table=CALLS, run_due=self._run_due))

    # --- lifecycle hooks and memos ------------------------------------------------------------

    def lifecycle(self, hook: Callable[[Event], object]) -> Callable[[], None]:
        """``lifecycle(hook)`` (lines 536-544): a best-effort hook beside the step's events; returns
        the function that detaches it.

        Called at each event's emission, inside the step, after the hooks
        added before it: what it does runs where the reference's would. A
        throw, or a returned ``JsPromise`` that rejects, is reported
        (``durability.lifecycle_hook.failed``) and changes nothing else.
        """
        if not callable(hook):
            raise TypeError(f"a lifecycle hook must be callable, got {hook!r}")
        entry = _Hook(hook)
        self._hooks.append(entry)

        def detach() -> None:
            if entry in self._hooks:
                self._hooks.remove(entry)

        return detach

    def _emit(self, event: Event) -> None:
        """``#emit``: the step's events, then every hook attached now (a snapshot, as the
        stand-in's ``[...emitters]`` is)."""
        engine = self.engine
        engine.emit(event)
        for entry in list(self._hooks):

            def report(error: BaseException, event: Event = event) -> None:
                engine.report("durability.lifecycle_hook.failed", error, {"type": event.type})

            engine.call_hook(entry.hook, event, report)

    def memoize(self, attempt: Attempt) -> Memoize:
        """The ``memoize`` the reference passes this attempt's handler (lines 781-785)."""
        if attempt.table != CALLS.name:
            raise ValueError(f"not an attempt of durable operations: {attempt!r}")
        return Memoize(
            self.engine.conn, CALLS, key=attempt.id, generation=attempt.generation, attempt=attempt.attempt
        )

    # --- registering ---------------------------------------------------------------------

    def register(self, operation: str, id: str, payload: Any, now_ms: int) -> Registration:
        """The operation's method (``#run``, lines 635-700) as a step of its own.

        Resolves once the row is durable, not when the call completes. A
        rejection (another payload under the same id, say) is raised after
        the step as :class:`CallRejected`, which holds the step (apply it)
        and the error.
        """
        if operation not in self.options.handlers:
            raise ValueError(f"no operation {operation!r} (the reference has no such method)")
        if not isinstance(id, str):
            raise TypeError(f"id must be a string, got {id!r}")
        if self.engine.in_step:
            raise RuntimeError("register opens a step of its own: call it outside the engine's steps")
        call: list[JsPromise] = []
        step = self.engine.run_step(now_ms, lambda: call.append(self._run(operation, id, payload)))
        [promise] = call
        assert promise.state != "pending", "a registration's transaction outlived its step"
        if promise.state == "rejected":
            raise CallRejected(promise.value, step) from promise.value
        inserted: bool = promise.value
        return Registration(inserted=inserted, step=step)

    @js_async
    async def _run(self, operation: str, id: str, payload: Any) -> bool:
        """``#run`` (lines 635-700): true when a new row was inserted."""
        engine = self.engine
        text = serialize(payload)
        now = engine.now_ms
        generation = self._new_id()

        def write(conn: Any) -> tuple[bool, CallRow]:
            created = insert_call(conn, id, operation, text, now, generation)
            current = read_call(conn, id)
            if current is None:
                raise RuntimeError(f'Durable call "{id}" was not persisted')
            assert_operation(id, current.operation, operation)
            # Reuse is idempotent only for the same data; anything else is a caller bug.
            if not created and canonical(current.payload) != canonical(text):
                raise DuplicateDurablePayloadError(id, operation)
            return created, current

        created, winner = await engine.transaction_async(write)
        if not created:
            return False
        self._emit(Registered(entity=operation_entity(winner), timestamp=now))
        # Start eagerly only when a permit is free; otherwise the reconciled alarm picks the row up.
        eager_permit = engine.try_acquire_permit()
        if eager_permit is None:
            return True

        def on_error(error: BaseException) -> None:
            engine.report("durability.background_execution.failed", error, {"operation": operation, "id": id})

        self._execute(id, eager_permit).then(lambda _: engine.schedule_next_alarm()).catch(on_error)
        return True

    # --- running ----------------------------------------------------------------------

    @js_async
    async def _run_due(self, now_ms: int, info: AlarmInfo | None) -> None:
        """``#runDue`` (lines 594-621): due rows, earliest first, through the pool."""
        due = due_ids(self.engine.conn, now_ms)
        if self.engine.due_observer is not None:  # for a checker: what was read, as it was read
            self.engine.due_observer(CALLS.name, now_ms, tuple(due))
        # With liveTimers an active operation reschedules itself when it settles.
        pending = [id for id in due if id not in self.active] if self.engine.live_timers else due

        handed = [0]

        async def worker(id: str) -> None:
            handed[0] += 1
            try:
                await self._execute(id)
            except Exception:
                return

        await self.engine.run_concurrent(pending, lambda id: run_async(self.tasks, worker(id)))
        # For a checker: every row read was handed on (counted here, outside runConcurrent).
        self.engine.out.due_runs.append(DueRun(self.engine.now_ms, CALLS.name, len(pending), handed[0]))

    @js_async
    async def _execute(self, id: str, eager_permit: Release | None = None) -> Any:
        """``#execute`` (lines 705-740): start the row unless the same generation already runs.

        Lookups for one id are serialised, so two concurrent callers cannot
        both miss the active map. An eager permit not handed to
        ``startExecution`` goes back to the pool whatever happened.
        """
        previous_start = self._execution_starts.get(id) or JsPromise.resolve(self.tasks)
        current_start = JsPromise(self.tasks)
        release_start, _ = current_start.resolving_functions()
        self._execution_starts[id] = current_start
        permit_transferred = False
        try:
            await previous_start
            call = read_call(self.engine.conn, id)
            if call is None or call.status != "pending":
                return None
            if self.options.execute_only_due and call.next_attempt_at > self.engine.now_ms:
                return None  # F8's fix: not due yet; the alarm the failure armed runs it then
            running = self.active.get(id)
            if running is not None and running.spec.generation == call.generation_id:
                release_start(None)
                await running.settled
                return None
            execution = self._start(call, eager_permit)
            permit_transferred = True
            release_start(None)
            return execution
        finally:
            release_start(None)
            if self._execution_starts.get(id) is current_start:
                del self._execution_starts[id]
            if not permit_transferred and eager_permit is not None:
                eager_permit()

    def _start(self, call: CallRow, eager_permit: Release | None) -> JsPromise:
        """``#start`` (lines 742-815)."""
        execution = self.engine.start_execution(self._spec(call), eager_permit)
        assert execution.outcome is not None
        return execution.outcome

    def _spec(self, call: CallRow) -> ExecutionSpec:
        """The spec ``#start`` builds (lines 742-815)."""
        policy = resolve_policy(self._defaults, self._methods, call.operation)
        has_handler = call.operation in self.options.handlers
        fence_key, generation = call.id, call.generation_id

        def invoke(attempt: int) -> Any:
            if not has_handler:
                raise NonRetryableError(f'No handler registered for operation "{call.operation}"')
            return deserialize(call.payload)

        def complete(result: Any, attempt: int, now_ms: int) -> int | None:
            try:
                serialized = serialize(result)
            except Exception as error:
                raise DurableResultSerializationError(call.operation, error) from error
            fence = Fence(key=fence_key, generation=generation, attempt=attempt)
            return now_ms if complete_call(self.engine.conn, fence, serialized, now_ms) else None

        return ExecutionSpec(
            table=CALLS,
            key=call.id,
            operation=call.operation,
            generation=generation,
            created_at=call.created_at,
            label=f'operation "{call.operation}"',
            entity=operation_entity(call),
            active=self.active,
            policy=policy,
            include_result=self.options.include_results,
            exhausted_error=lambda: DurableAttemptsExhaustedError(
                "operation", call.operation, policy.max_attempts
            ),
            timeout_error=lambda: DurableAttemptTimeoutError(call.operation, policy.attempt_timeout_ms),
            invoke=invoke,
            complete=complete,
            is_terminal=lambda error: isinstance(error, DurableResultSerializationError),
            emit=self._emit,
        )

    # --- reading and purging ------------------------------------------------------------

    def get_result(self, operation: str, id: str) -> OperationResult:
        """``getResult`` (lines 623-633): the persisted state; another operation's id raises."""
        call = read_call(self.engine.conn, id)
        if call is None:
            return NotFound()
        assert_operation(id, call.operation, operation)
        return call_state(call)

    def purge_before(self, before: int, now_ms: int) -> Step:
        """``purgeBefore`` (lines 550-566) as a step: abort older running handlers, delete older rows.

        A rejection is raised after the step as :class:`CallRejected` (the
        handlers it aborted may have settled in it: apply its step).
        """
        if isinstance(before, bool) or not isinstance(before, int) or not 0 <= before <= MAX_SAFE_INTEGER:
            raise ValueError("timestamp must be a non-negative safe integer")
        if self.engine.in_step:
            raise RuntimeError("purge_before opens a step of its own: call it outside the engine's steps")
        call: list[JsPromise] = []
        step = self.engine.run_step(now_ms, lambda: call.append(self._purge_before(before)))
        [promise] = call
        assert promise.state != "pending", "a purge's transaction outlived its step"
        if promise.state == "rejected":
            raise CallRejected(promise.value, step) from promise.value
        return step

    @js_async
    async def _purge_before(self, before: int) -> int:
        engine = self.engine
        count: int = await engine.purge(
            CALLS, before, self.active, DurabilityError("Durable operation was purged")
        )
        self._emit(Purged(timestamp=engine.now_ms, before=before, count=count))
        return count
