"""Lifecycle events of durable operations (``DurabilityLifecycleEvent``, ``lifecycle.js`` inferred).

Seed 002 builds each event where it emits it, so their fields are the
reference's: ``registered`` (``#run``, lines 677-682), ``attempt_started``
(``startExecution``, lines 1668-1673), ``attempt_settled`` with ``outcome``
``completed`` (lines 1707-1715), ``failed`` or ``retry_scheduled`` (``settleFailure``,
lines 1811-1830), ``terminal`` with ``reason: 'attempts_exhausted'``
(``failExhausted``, lines 1771-1778) and ``purged`` (``purgeBefore``, lines
557-563). Which event ends an operation matters to a lifecycle hook: a
failed *last* attempt emits ``attempt_settled`` with ``outcome: 'failed'``;
``terminal`` comes only when an attempt could not even be claimed because
every attempt was already used (an eviction during the last one; a timeout of
the last attempt is its failure, ``attempt_settled`` ``failed``).

The reference's emitter is best effort and outside any transaction; here
the engine collects events in emission order into the step's result, after
the commit they describe. Only records; nothing here decides anything.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from semaphore_core.durability.errors import SerializedError

Outcome: TypeAlias = Literal["completed", "failed", "retry_scheduled"]


@attrs.frozen
class OperationEntity:
    """``OperationLifecycleEntity`` (``operationEntity``, lines 447-452)."""

    operation: str
    id: str
    generation: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "entityKind": "operation",
            "operation": self.operation,
            "id": self.id,
            "generation": self.generation,
        }


@attrs.frozen
class Registered:
    """A new row was committed (not emitted for a repeated registration)."""

    type: ClassVar[str] = "registered"
    entity: OperationEntity
    timestamp: int
    attempt: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.entity.to_wire(),
            "type": self.type,
            "timestamp": self.timestamp,
            "attempt": self.attempt,
        }


@attrs.frozen
class AttemptStarted:
    """An attempt was claimed (and counted) and its handler is about to run."""

    type: ClassVar[str] = "attempt_started"
    entity: OperationEntity
    timestamp: int
    attempt: int

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.entity.to_wire(),
            "type": self.type,
            "timestamp": self.timestamp,
            "attempt": self.attempt,
        }


@attrs.frozen
class AttemptSettled:
    """An attempt's outcome was recorded (only when its fenced write matched)."""

    type: ClassVar[str] = "attempt_settled"
    entity: OperationEntity
    timestamp: int
    attempt: int
    duration_ms: int
    outcome: Outcome
    error: SerializedError | None = None
    next_attempt_at: int | None = None
    #: Present only with ``include_results`` (then ``result_included``).
    result: Any = None
    result_included: bool = False

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            **self.entity.to_wire(),
            "type": self.type,
            "timestamp": self.timestamp,
            "attempt": self.attempt,
            "durationMs": self.duration_ms,
        }
        if self.error is not None:
            wire["error"] = self.error.to_wire()
        wire["outcome"] = self.outcome
        if self.next_attempt_at is not None:
            wire["nextAttemptAt"] = self.next_attempt_at
        if self.result_included:
            wire["result"] = self.result
        return wire


@attrs.frozen
class Terminal:
    """An attempt could not be claimed: every attempt was used; the row is now ``failed``."""

    type: ClassVar[str] = "terminal"
    entity: OperationEntity
    timestamp: int
    attempt: int
    error: SerializedError
    reason: Literal["attempts_exhausted"] = "attempts_exhausted"

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.entity.to_wire(),
            "type": self.type,
            "timestamp": self.timestamp,
            "attempt": self.attempt,
            "reason": self.reason,
            "error": self.error.to_wire(),
        }


@attrs.frozen
class Purged:
    """``purgeBefore`` removed ``count`` records created before ``before``."""

    type: ClassVar[str] = "purged"
    timestamp: int
    before: int
    count: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "entityKind": "operation",
            "timestamp": self.timestamp,
            "before": self.before,
            "count": self.count,
        }


Event: TypeAlias = Registered | AttemptStarted | AttemptSettled | Terminal | Purged
