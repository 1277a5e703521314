"""Durable operations and the scheduler ``Engine`` of seed 002, as a pure, synchronous core.

A faithful port of ``durability.ts`` (``DurabilityCore``) and ``scheduler.ts``
(``Engine``) on ``sqlite3``, sans-I/O: ``now_ms`` is passed in, ids and any
jitter come from injected callables, handlers are run by the shell, which
hears of them as ``Attempt`` records and reports their outcomes. See
docs/DURABILITY.md. Where to look:

- ``engine``: the ``Engine`` (pool, attempts, alarm reconcile, early timer, passes, hand-off)
- ``operations``: ``Durability`` (register, run due rows, ``get_result``, ``purge_before``)
- ``calls`` / ``storage``: the ``durability_calls`` table and the fenced writes
- ``memos``: ``durability_memos``, a handler's memoized steps across its attempts
- ``policy``: attempts, timeouts, backoff; ``events``: lifecycle events
- ``records``: ``Attempt``, ``Timer``, ``Step`` and the other things a shell handles
- ``alarm``: the ``StorageAlarm`` protocol and ``SqliteAlarm``
- ``errors``, ``serialization``, ``fixes``
"""

from semaphore_core.durability.alarm import SqliteAlarm, StorageAlarm
from semaphore_core.durability.calls import (
    CALLS,
    CallRow,
    Completed,
    Failed,
    NotFound,
    OperationResult,
    Pending,
    all_calls,
    read_call,
)
from semaphore_core.durability.engine import Engine, Participant, SchedulerOptions
from semaphore_core.durability.errors import (
    DuplicateDurableCallError,
    DuplicateDurablePayloadError,
    DurabilityError,
    DurableAttemptsExhaustedError,
    DurableAttemptTimeoutError,
    DurableResultSerializationError,
    DurableRetryPolicyError,
    NonRetryableError,
    SerializedError,
    UnknownAttemptError,
)
from semaphore_core.durability.events import (
    AttemptSettled,
    AttemptStarted,
    Event,
    OperationEntity,
    Purged,
    Registered,
    Terminal,
)
from semaphore_core.durability.fixes import ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION, ALL_DURABILITY_FIXES
from semaphore_core.durability.memos import Memo, Memoize
from semaphore_core.durability.operations import Durability, DurabilityOptions, Registration
from semaphore_core.durability.policy import AttemptPolicy, ExponentialBackoff, MethodOptions, RetryOptions
from semaphore_core.durability.records import (
    Abort,
    AlarmEnd,
    AlarmInfo,
    AlarmRetry,
    Attempt,
    CallRejected,
    DueRun,
    EarlyTimerSet,
    ReportedFailure,
    Step,
    Timer,
)
from semaphore_core.durability.storage import DurableTable

__all__ = [
    "ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION",
    "ALL_DURABILITY_FIXES",
    "CALLS",
    "Abort",
    "AlarmEnd",
    "AlarmInfo",
    "AlarmRetry",
    "Attempt",
    "AttemptPolicy",
    "AttemptSettled",
    "AttemptStarted",
    "CallRejected",
    "CallRow",
    "Completed",
    "DueRun",
    "DuplicateDurableCallError",
    "DuplicateDurablePayloadError",
    "Durability",
    "DurabilityError",
    "DurabilityOptions",
    "DurableAttemptTimeoutError",
    "DurableAttemptsExhaustedError",
    "DurableResultSerializationError",
    "DurableRetryPolicyError",
    "DurableTable",
    "EarlyTimerSet",
    "Engine",
    "Event",
    "ExponentialBackoff",
    "Failed",
    "Memo",
    "Memoize",
    "MethodOptions",
    "NonRetryableError",
    "NotFound",
    "OperationEntity",
    "OperationResult",
    "Participant",
    "Pending",
    "Purged",
    "Registered",
    "Registration",
    "ReportedFailure",
    "RetryOptions",
    "SchedulerOptions",
    "SerializedError",
    "SqliteAlarm",
    "Step",
    "StorageAlarm",
    "Terminal",
    "Timer",
    "UnknownAttemptError",
    "all_calls",
    "read_call",
]
