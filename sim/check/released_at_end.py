"""``released_at_end``: an operation's permit comes back in the step its operation ends.

Seed 000's ``JobShard`` hook (lines 112-120) gives an item's permit back on
either of two events: ``terminal`` (the operation failed for good: every
attempt used) or ``attempt_settled`` with outcome ``completed``. The hook
runs as the engine emits the event, so in the simulation the release is made
within the step that ends the operation. A port that reads only one of the
two events keeps the other's permits until the queue's ``finished`` check
(``finishedCheckMs`` later) returns them: capacity the holder counts as in
use while nothing runs, which no ceiling check sees (it errs on the safe side)
and no liveness check sees either (the permits do come back).

Judged at the end of each engine step of a client, from the step's events
with the reference's own rule (not the world's ``releases_permit``), against
the monitor's record of the items admitted and not released. Not judged
under F5's fix (``calls-end-within-their-permit``): there the release waits
for the operation's last call to end, by design (docs/FINDINGS.md, F5)
(docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from semaphore_core.durability import AttemptSettled, Step, Terminal
from semsim.check.checker import Checker, Fail


class ReleasedAtEnd(Checker):
    name = "released_at_end"
    description = "an operation's permit comes back in the step its operation ends"

    def __init__(self, fail: Fail, running: Mapping[tuple[str, str], str]) -> None:
        self.fail = fail
        #: The items admitted and not yet released, ``(client, item) -> key`` (the monitor's).
        self._running = running

    def on_step(self, object: str, step: Step) -> None:
        for event in step.events:
            if not (
                isinstance(event, Terminal)
                or (isinstance(event, AttemptSettled) and event.outcome == "completed")
            ):
                continue
            key = self._running.get((object, event.entity.id))
            if key is not None:
                self.fail(
                    self.name,
                    f"{object}: operation {event.entity.id} ended ({event.type}) at {step.now_ms} and"
                    f" its permit of {key} is still held",
                )
