"""``attempts_in_turn``: an operation's next attempt starts only once its last one settled, and not
before its retry time.

Seed 002 registers an execution in its instance's active map before it waits
for a pool permit (``startExecution``, line 1639, before line 1654), "so the
same ID cannot run twice in this instance" (line 1914): ``#execute`` finds
it there and starts nothing. An attempt ends in its own settlement (its
outcome written, ``attempt_settled``), a timeout or an abort included (the
engine settles those itself, however long the handler runs on). A failure
schedules the next attempt at ``nextAttemptAt``, and only due rows run
(``#runDue``, lines 601-603). So, in one instance, attempt ``n + 1`` of an
operation starts after attempt ``n`` settled, at or after the retry time
that settlement named. A second execution of the same row breaks both: it
claims an attempt while the first runs, or at once after the first failed,
ignoring its backoff, and the policy's spacing of calls is gone.

The reference itself breaks the second half: ``#runDue`` reads its due rows
once and each lane of ``runConcurrent`` awaits one row's execution before it
takes the next, so a lane can reach a row it read as due after that row's
running attempt failed; ``#execute`` checks only that the row is pending and
not active, and the claim does not look at ``next_attempt_at``. A retry
started before its time is finding F8 (docs/FINDINGS.md), corrected by the
opt-in fix ``retries-wait-their-time``; one that starts while the last
attempt has not settled is not the reference's, and is no finding.

Judged on the lifecycle events as they are emitted, per operation (client,
id, generation), with each client object's instance as the monitor sees it
(``DurableObject.generation``): an evicted instance's attempt never
settles, and the next instance's may start without it (still not before
the retry time). Judged in the account-concurrency world
(docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from semaphore_core.durability import AttemptSettled, AttemptStarted, Terminal
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation

#: Per (client, operation id, generation): one operation's run on one client object.
_Run = tuple[str, str, str]


@attrs.frozen
class _Last:
    """An operation's latest attempt: the instance it started in, and its settlement if any."""

    instance: int
    attempt: int
    #: When the next attempt is due (None: not settled yet).
    retry_at_ms: int | None


class AttemptsInTurn(Checker):
    name = "attempts_in_turn"
    description = "an operation's next attempt starts only once its last settled, not before its retry time"

    def __init__(self, fail: Fail, instance_of: Callable[[str], int]) -> None:
        self.fail = fail
        #: The generation of the client object's live instance, by client name.
        self._instance_of = instance_of
        self._last: dict[_Run, _Last] = {}

    def on_operation(self, operation: Operation) -> None:
        event, client = operation.event, operation.client
        if not isinstance(event, AttemptStarted | AttemptSettled | Terminal):
            return
        run = (client, event.entity.id, event.entity.generation)
        if isinstance(event, AttemptSettled) and event.outcome == "retry_scheduled":
            last = self._last.get(run)
            if last is not None and event.next_attempt_at is not None:
                self._last[run] = attrs.evolve(last, retry_at_ms=event.next_attempt_at)
            return
        if not isinstance(event, AttemptStarted):
            self._last.pop(run, None)  # ended: ``attempts_bounded`` judges any later start
            return
        instance = self._instance_of(client)
        last = self._last.get(run)
        what = f"{client}: operation {event.entity.id} started attempt {event.attempt} at {operation.t_ms}"
        if last is not None and last.retry_at_ms is None and last.instance == instance:
            self.fail(
                self.name, f"{what} while its attempt {last.attempt} had not settled, in the same instance"
            )
        elif last is not None and last.retry_at_ms is not None and operation.t_ms < last.retry_at_ms:
            self.fail(self.name, f"{what}, before its retry time {last.retry_at_ms}", "F8")
        self._last[run] = _Last(instance, event.attempt, None)
