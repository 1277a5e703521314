"""``retry_before_last``: a retry is scheduled after an attempt before the last, and only then.

Seed 002's ``decideRetry`` (lines 1034-1080) makes a failure terminal once
``attempt >= maxAttempts``, or when the error is one it never retries (a
``NonRetryableError``, a result that cannot be serialised, a retry policy
that gave no usable delay); otherwise it schedules the next attempt after
the policy's delay, never before the failure. Judged on each
``attempt_settled``, against the world's ``maxAttempts``: a
``retry_scheduled`` after the last attempt or in the past, and a ``failed``
before the last attempt with an error ``decideRetry`` retries (a timeout, say)
are violations (docs/INVARIANTS.md).
"""

from __future__ import annotations

from typing import Final

from semaphore_core.durability import AttemptSettled, NonRetryableError
from semaphore_core.durability.errors import DurableResultSerializationError, DurableRetryPolicyError
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation

#: The errors ``decideRetry`` fails at once, attempts left or not, by the name events carry.
NOT_RETRIED: Final = frozenset(
    error.name for error in (NonRetryableError, DurableResultSerializationError, DurableRetryPolicyError)
)


class RetryBeforeLast(Checker):
    """A retry is scheduled after a retryable failure before the last attempt, only then, and not
    in the past."""

    name = "retry_before_last"
    description = "a retryable failure before the last attempt is retried, and only such a failure"

    def __init__(self, fail: Fail, max_attempts: int) -> None:
        assert max_attempts >= 1, max_attempts
        self.fail = fail
        self.max_attempts = max_attempts

    def on_operation(self, operation: Operation) -> None:
        event = operation.event
        if not isinstance(event, AttemptSettled):
            return
        what = f"{operation.client}: operation {event.entity.id}"
        if event.outcome == "failed" and event.attempt < self.max_attempts:
            error = None if event.error is None else event.error.name
            if error not in NOT_RETRIED:
                self.fail(
                    self.name,
                    f"{what} failed for good at attempt {event.attempt} of {self.max_attempts}"
                    f" (maxAttempts) with {error}, which decideRetry retries",
                )
        if event.outcome != "retry_scheduled":
            return
        if event.attempt >= self.max_attempts:
            self.fail(
                self.name,
                f"{what} scheduled a retry after attempt {event.attempt} of {self.max_attempts}"
                " (maxAttempts)",
            )
        if event.next_attempt_at is None or event.next_attempt_at < event.timestamp:
            self.fail(
                self.name,
                f"{what} scheduled its retry at {event.next_attempt_at},"
                f" before the failure at {event.timestamp}",
            )
