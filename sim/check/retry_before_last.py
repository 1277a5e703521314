"""``retry_before_last``: a retry is scheduled only after an attempt before the last.

Seed 002's ``decideRetry`` (lines 1034-1080) makes a failure terminal once
``attempt >= maxAttempts``; otherwise it schedules the next attempt after
the policy's delay, never before the failure. Judged on each
``attempt_settled`` with ``outcome: retry_scheduled``, against the world's
``maxAttempts`` (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semaphore_core.durability import AttemptSettled
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation


class RetryBeforeLast(Checker):
    """A retry is scheduled only after an attempt before the last, and not in the past."""

    name = "retry_before_last"
    description = "a retry is scheduled only before the last attempt"

    def __init__(self, fail: Fail, max_attempts: int) -> None:
        assert max_attempts >= 1, max_attempts
        self.fail = fail
        self.max_attempts = max_attempts

    def on_operation(self, operation: Operation) -> None:
        event = operation.event
        if not isinstance(event, AttemptSettled) or event.outcome != "retry_scheduled":
            return
        what = f"{operation.client}: operation {event.entity.id}"
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
