"""The errors durable operations raise or record (the seed's ``errors.js``, inferred).

Seed 002 imports these from ``errors.js``, which it does not include. Their
names and constructor arguments are the reference's (``durability.ts``,
seed 002 lines 115-127, 384-396, 756-768, 788-795; ``scheduler.ts`` lines
1034-1080); their message texts are semsim's, since the seed never shows
one. ``serialize_error`` is ``serializeError``: what a row's ``last_error``
and ``last_error_name`` and a lifecycle event's ``error`` hold.

Nothing here knows about tables or the engine.
"""

from __future__ import annotations

import attrs


class DurabilityError(Exception):
    """Base of the errors this package defines (a Python convenience; the reference has none)."""

    #: The JavaScript ``error.name``: what ``serialize_error`` records.
    name = "Error"


class NonRetryableError(DurabilityError):
    """Raised by a handler (reported by the shell) to fail its operation at once, attempts left or not."""

    name = "NonRetryableError"


class DuplicateDurableCallError(DurabilityError):
    """An id registered (or read) under another operation (``assertOperation``, seed 002 lines 384-396)."""

    name = "DuplicateDurableCallError"

    def __init__(self, id: str, existing_operation: str, requested_operation: str) -> None:
        super().__init__(
            f'Durable call "{id}" belongs to operation "{existing_operation}", not "{requested_operation}"'
        )
        self.id = id
        self.existing_operation = existing_operation
        self.requested_operation = requested_operation


class DuplicateDurablePayloadError(DurabilityError):
    """An id registered again with another payload (seed 002 lines 671-675)."""

    name = "DuplicateDurablePayloadError"

    def __init__(self, id: str, operation: str) -> None:
        super().__init__(
            f'Durable call "{id}" of operation "{operation}" was registered with another payload'
        )
        self.id = id
        self.operation = operation


class DurableAttemptsExhaustedError(DurabilityError):
    """Recorded when an attempt cannot be claimed because ``maxAttempts`` were started (lines 756-763)."""

    name = "DurableAttemptsExhaustedError"

    def __init__(self, kind: str, operation: str, max_attempts: int) -> None:
        super().__init__(f'Durable {kind} "{operation}" exhausted its {max_attempts} attempts')
        self.kind = kind
        self.operation = operation
        self.max_attempts = max_attempts


class DurableAttemptTimeoutError(DurabilityError):
    """An attempt ran longer than ``attemptTimeoutMs``: its signal is aborted with this (lines 764-768)."""

    name = "DurableAttemptTimeoutError"

    def __init__(self, operation: str, attempt_timeout_ms: int) -> None:
        super().__init__(f'Durable operation "{operation}" attempt timed out after {attempt_timeout_ms} ms')
        self.operation = operation
        self.attempt_timeout_ms = attempt_timeout_ms


class DurableResultSerializationError(DurabilityError):
    """A handler's result is not JSON-serialisable: a terminal failure (lines 788-795, 808-809)."""

    name = "DurableResultSerializationError"

    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f'Result of durable operation "{operation}" is not serializable: {cause}')
        self.operation = operation
        self.__cause__ = cause


class DurableRetryPolicyError(DurabilityError):
    """The retry policy's delay was not a finite, non-negative, safe number (lines 1048-1079)."""

    name = "DurableRetryPolicyError"

    def __init__(self, label: str, cause: BaseException | None = None) -> None:
        super().__init__(f"Retry policy of {label} returned an invalid delay")
        self.label = label
        if cause is not None:
            self.__cause__ = cause


class UnknownAttemptError(DurabilityError):
    """An outcome was reported to an engine that did not start the attempt (a shell bug).

    The reference cannot express this: an attempt's outcome is a promise of
    the instance that started it. A shell that models a stale instance still
    running reports to *that* engine object, whose fenced writes then apply.
    """

    name = "UnknownAttemptError"


@attrs.frozen
class SerializedError:
    """``{name, message}``: how an error is stored on a row and carried by events."""

    name: str
    message: str

    def to_wire(self) -> dict[str, str]:
        return {"name": self.name, "message": self.message}


def serialize_error(error: BaseException) -> SerializedError:
    """``serializeError``: the JavaScript ``name`` (class name unless set) and the message."""
    name = getattr(error, "name", None)
    if not isinstance(name, str):
        name = type(error).__name__
    return SerializedError(name=name, message=str(error))


def is_non_retryable(error: BaseException) -> bool:
    """``isNonRetryable``: the handler threw a ``NonRetryableError``."""
    return isinstance(error, NonRetryableError)
