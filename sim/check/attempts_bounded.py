"""``attempts_bounded``: a durable operation's attempts stay within what its policy allows.

Seed 002 counts each attempt in the operation's row before its handler runs
(``claimAttempt``: only while ``attempt < maxAttempts``), and declares an
operation exhausted only once every attempt was used (``failExhausted``:
``attempt >= maxAttempts``); a row whose outcome is recorded is no longer
pending, so no attempt of it starts again. Nothing in the world
shows a run breaking these (an extra attempt is one more call, which the
idempotent API absorbs), so they are judged on the lifecycle events
themselves, against the world's ``maxAttempts`` (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semaphore_core.durability import AttemptSettled, AttemptStarted, Terminal
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation

#: Per (client, operation id, generation): one operation's run on one client object.
_Run = tuple[str, str, str]


class AttemptsBounded(Checker):
    """Each attempt is numbered within ``1..max_attempts``, none starts once the outcome is recorded,
    and exhaustion comes only after the last attempt."""

    name = "attempts_bounded"
    description = "an operation's attempts stay within maxAttempts, and none starts once it ended"

    def __init__(self, fail: Fail, max_attempts: int) -> None:
        assert max_attempts >= 1, max_attempts
        self.fail = fail
        self.max_attempts = max_attempts
        #: Runs whose outcome is recorded (completed, failed or exhausted).
        self._ended: set[_Run] = set()

    def on_operation(self, operation: Operation) -> None:
        event, client = operation.event, operation.client
        if not isinstance(event, AttemptStarted | AttemptSettled | Terminal):
            return
        run = (client, event.entity.id, event.entity.generation)
        what = f"{client}: operation {event.entity.id}"
        if isinstance(event, AttemptStarted):
            if run in self._ended:
                self.fail(self.name, f"{what} started attempt {event.attempt} after its outcome was recorded")
            if not 1 <= event.attempt <= self.max_attempts:
                self.fail(
                    self.name,
                    f"{what} started attempt {event.attempt}, outside 1..{self.max_attempts} (maxAttempts)",
                )
        elif isinstance(event, Terminal):
            if event.attempt < self.max_attempts:
                self.fail(
                    self.name,
                    f"{what} was declared exhausted after {event.attempt} of {self.max_attempts} attempts",
                )
            self._ended.add(run)
        elif event.outcome != "retry_scheduled":
            self._ended.add(run)
