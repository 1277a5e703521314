"""``fenced``: a durable operation records only the outcome of the attempt it last started.

Seed 002 fences every completion and failure by generation and attempt ("a
late attempt cannot overwrite a newer one"): an ``attempt_settled`` must
name the generation and attempt the operation last started, on whichever
instance of the client started it. Judged on each client's operation
lifecycle events (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semaphore_core.durability import AttemptSettled, AttemptStarted
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation


class Fenced(Checker):
    """Remembers each operation's latest attempt per client; a settlement must name it."""

    name = "fenced"
    description = "an operation records only the outcome of its latest attempt"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        #: Per (client, operation id): the generation and attempt last started.
        self._attempts: dict[tuple[str, str], tuple[str, int]] = {}

    def on_operation(self, operation: Operation) -> None:
        event, client = operation.event, operation.client
        if isinstance(event, AttemptStarted):
            self._attempts[client, event.entity.id] = (event.entity.generation, event.attempt)
        elif isinstance(event, AttemptSettled):
            latest = self._attempts.get((client, event.entity.id))
            settled = (event.entity.generation, event.attempt)
            if latest != settled:
                self.fail(
                    self.name,
                    f"{client}: operation {event.entity.id} recorded the outcome of attempt {settled} "
                    f"after attempt {latest} had started",
                )
