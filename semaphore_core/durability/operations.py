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
``Attempt`` the engine hands it. Left out (docs/DURABILITY.md): ``memoize``,
tracked sources (``get``/``list``/``watch``) and watchers,
``Durability.migrate`` to a target version, ``traceFunction``.
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
from semaphore_core.durability.engine import Engine, Execution, ExecutionSpec, Join, Participant
from semaphore_core.durability.errors import (
    DuplicateDurablePayloadError,
    DurabilityError,
    DurableAttemptsExhaustedError,
    DurableAttemptTimeoutError,
    DurableResultSerializationError,
    NonRetryableError,
)
from semaphore_core.durability.events import OperationEntity, Purged, Registered
from semaphore_core.durability.policy import (
    MAX_SAFE_INTEGER,
    MethodOptions,
    RetryOptions,
    resolve_policy,
    validate_options,
)
from semaphore_core.durability.records import AlarmInfo, Step
from semaphore_core.durability.serialization import canonical, deserialize, serialize
from semaphore_core.durability.storage import Fence, purge_created_before


@attrs.frozen
class DurabilityOptions:
    """``DurabilityOptions``: the operations (with per-operation overrides) and shared policy."""

    #: Operation names (the reference's handler map keys) and their ``methods`` overrides.
    handlers: Mapping[str, MethodOptions | None]
    attempt_timeout_ms: int | None = None
    retries: RetryOptions | None = None
    #: Attach the handler's result to ``completed`` events (off by default, as in the reference).
    include_results: bool = False

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


def operation_entity(call: CallRow) -> OperationEntity:
    """``operationEntity`` (lines 447-452)."""
    return OperationEntity(operation=call.operation, id=call.id, generation=call.generation_id)


class Durability:
    """Durable operations on one engine (one Durable Object); see docs/DURABILITY.md."""

    def __init__(self, engine: Engine, options: DurabilityOptions, *, new_id: Callable[[], str]) -> None:
        if not isinstance(options, DurabilityOptions):
            raise TypeError(f"options must be DurabilityOptions, got {options!r}")
        self.engine = engine
        self.options = options
        self._new_id = new_id
        self._defaults = MethodOptions(attempt_timeout_ms=options.attempt_timeout_ms, retries=options.retries)
        self._methods = {name: method for name, method in options.handlers.items() if method is not None}
        # ``#active``: in memory, per instance (line 461).
        self.active: dict[str, Execution] = {}
        engine.migrate_schema("operations", migrate_calls)
        engine.register(Participant(table=CALLS, run_due=self._run_due))

    # --- registering ---------------------------------------------------------------------

    def register(self, operation: str, id: str, payload: Any, now_ms: int) -> Registration:
        """``#run`` (lines 635-700): resolves once the row is durable, not when the call completes."""
        if operation not in self.options.handlers:
            raise ValueError(f"no operation {operation!r} (the reference has no such method)")
        if not isinstance(id, str):
            raise TypeError(f"id must be a string, got {id!r}")
        inserted = [False]

        def body() -> None:
            inserted[0] = self._register(operation, id, payload)

        step = self.engine.run_step(now_ms, body)
        return Registration(inserted=inserted[0], step=step)

    def _register(self, operation: str, id: str, payload: Any) -> bool:
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

        created, winner = engine.transaction(write)
        if not created:
            return False
        engine.out.events.append(Registered(entity=operation_entity(winner), timestamp=now))
        # Start eagerly only when a permit is free; otherwise the reconciled alarm picks the row up.
        if not engine.try_acquire_permit():
            return True
        try:
            joined = self._execute(id, eager_permit=True)
        except Exception as error:
            engine.report("durability.background_execution.failed", error)
            return True

        def refresh() -> None:
            # ``.then(() => scheduleNextAlarm())`` (line 695): skipped when the execution rejected,
            # whose failure the engine has reported (``.catch(onError)``, line 696).
            if joined is not None and joined.error is not None:
                return
            try:
                engine.schedule_next_alarm()
            except Exception as error:
                engine.report("durability.background_execution.failed", error)

        if joined is None:
            engine.defer(refresh)
        else:
            joined.then(refresh)
        return True

    # --- running ----------------------------------------------------------------------

    def _run_due(self, now_ms: int, info: AlarmInfo | None) -> Join:
        """``#runDue`` (lines 594-621): due rows, earliest first, through the pool."""
        due = due_ids(self.engine.conn, now_ms)
        # With liveTimers an active operation reschedules itself when it settles.
        pending = [id for id in due if id not in self.active] if self.engine.live_timers else due
        return self.engine.run_concurrent(pending, self._execute_quietly)

    def _execute_quietly(self, id: str) -> Join | None:
        try:
            return self._execute(id)
        except Exception:
            return None

    def _execute(self, id: str, eager_permit: bool = False) -> Join | None:
        """``#execute`` (lines 705-740): start the row unless the same generation already runs.

        An eager permit not handed to ``start_execution`` goes back to the pool
        whatever happened, raising included (the ``finally``, lines 731-738).
        """
        transferred = False
        try:
            call = read_call(self.engine.conn, id)
            if call is None or call.status != "pending":
                return None
            running = self.active.get(id)
            if running is not None and running.spec.generation == call.generation_id:
                # Wait for it to settle; an eager permit is held until then, as in the reference.
                if eager_permit:
                    running.settled.then(self.engine.release_permit)
                transferred = True
                return running.settled
            spec = self._spec(call)
            transferred = True
            return self.engine.start_execution(spec, eager_permit).outcome
        finally:
            if eager_permit and not transferred:
                self.engine.release_permit()

    def _spec(self, call: CallRow) -> ExecutionSpec:
        """``#start`` (lines 742-815)."""
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
        """``purgeBefore`` (lines 550-566): abort older running handlers, delete older rows, any status."""
        if isinstance(before, bool) or not isinstance(before, int) or not 0 <= before <= MAX_SAFE_INTEGER:
            raise ValueError("timestamp must be a non-negative safe integer")

        def body() -> None:
            engine = self.engine
            engine.abort_created_before(self.active, before, DurabilityError("Durable operation was purged"))
            count = engine.transaction(lambda conn: purge_created_before(conn, CALLS, before))
            engine.out.events.append(Purged(timestamp=engine.now_ms, before=before, count=count))

        return self.engine.run_step(now_ms, body)
