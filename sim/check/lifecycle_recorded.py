"""``lifecycle_recorded``: an operation's row says what its lifecycle events say.

Seed 002 writes each step of an operation's life to its row and then emits
the event that tells of it: ``settleFailure`` writes ``status = 'pending'``
and ``next_attempt_at`` (the failure's time plus the policy's delay for the
attempt that failed, ``Math.round``-ed: ``decideRetry``, lines 1034-1080)
and emits ``attempt_settled`` ``retry_scheduled`` with that time;
``failExhausted`` writes ``failed`` and emits ``terminal``; a settled
attempt's ``completed`` or ``failed`` is written, then emitted. A world's
hooks act on the events (a finished operation gives its permit back) and
its alarm on the rows, so the two must tell one story. ``attempts_bounded``
and ``retry_before_last`` judge the events' sequence; this holds the events
to the policy and to the rows:

- a retry is due exactly when the operation's policy says: its
  ``nextAttemptAt`` is the failure's ``timestamp`` plus the rounded
  ``delay(attempt)`` of the world's policy (the policy object is the one
  the engine resolves, ``OperationsSpec.retry_delay``; the rounding and the
  sum are computed here, so the engine's use of the policy is judged, not
  the policy itself);
- the row, while it still stands at that attempt and pending, is due then
  too (``next_attempt_at`` written, not left at an earlier due time);
- an attempt's settlement tells its time: its ``durationMs`` is the time
  since the attempt started, at most the policy's ``attemptTimeoutMs``
  (the attempt's timer cuts it there: ``startExecution``, lines
  1628-1747), and exactly that when it failed with the timeout's error;
- a ``registered`` event tells of a row inserted (``#run`` emits it only
  when the insert made a row, lines 656-678), so a row's registration is
  told once: a second ``registered`` for the same operation and generation
  before its end was told is a repeated registration told as a new row;
- every attempt counted in a row is told: ``claimAttempt`` counts it and
  ``attempt_started`` tells of it in the same synchronous stretch
  (``startExecution``, lines 1653-1671), so the attempts a row's run tells
  are numbered 1, 2, 3 ... with none skipped, a ``terminal`` names the last
  of them (``exhaustAttempts`` counts none), and once the run has settled a
  row's ``attempt`` is the last one told for its generation. An attempt
  counted and never told (claimed, say, before a wait its instance died in)
  uses up the policy's ``maxAttempts`` without a call;
- once the run has settled, every row that ended (``completed`` or
  ``failed``) ended with an event that says so, for the row's generation:
  an ``attempt_settled`` that completed, or one that failed or a
  ``terminal``.

Judged in the account-concurrency world, where clients run their items as
durable operations (docs/INVARIANTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from semaphore_core.durability import CALLS, AttemptSettled, AttemptStarted, Registered, Terminal
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation
from semsim.check.reads import select

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

ROW: Final = f"SELECT status, attempt, next_attempt_at, generation_id FROM {CALLS.name} WHERE id = ?"
ENDED_ROWS: Final = (
    f"SELECT id, generation_id, status FROM {CALLS.name} WHERE status != 'pending' ORDER BY id"
)
COUNTED_ROWS: Final = f"SELECT id, generation_id, attempt FROM {CALLS.name} WHERE attempt > 0 ORDER BY id"
#: The name a timed-out attempt's error is stored under (``DurableAttemptTimeoutError``).
TIMEOUT_ERROR: Final = "DurableAttemptTimeoutError"
#: At most this many operations are named in the detail.
SHOWN: Final = 5


def js_round(value: float) -> int:
    """``Math.round``: halves go up (towards +infinity), unlike Python's ``round``."""
    return math.floor(value + 0.5)


class LifecycleRecorded(Checker):
    """Retries due as the policy says, rows due as their events say, every ended row's end emitted."""

    name = "lifecycle_recorded"
    description = "an operation's row and its retries' times are what its lifecycle events and policy say"

    def __init__(
        self,
        fail: Fail,
        clients: Mapping[str, DurableObject],
        delay: Callable[[int], float],
        attempt_timeout_ms: int | None = None,
    ) -> None:
        self.fail = fail
        self.clients = clients
        #: The world's retry policy: the delay after attempt ``n`` failed (``policy.delay(n)``).
        self.delay = delay
        #: The world's ``attemptTimeoutMs`` (None: durations are held to their start alone).
        self.attempt_timeout_ms = attempt_timeout_ms
        #: When each attempt started, by (client, operation id, generation, attempt), until it settles.
        self._started: dict[tuple[str, str, str, int], int] = {}
        #: How each operation's end was emitted, by (client, operation id, generation):
        #: ``completed`` or ``failed`` (a failed last attempt, or ``terminal``).
        self._ended: dict[tuple[str, str, str], str] = {}
        #: The rows whose registration was told and whose end was not yet, by (client, id, generation).
        self._registered: set[tuple[str, str, str]] = set()
        #: The last attempt told started, by (client, operation id, generation).
        self._told: dict[tuple[str, str, str], int] = {}

    def on_operation(self, operation: Operation) -> None:
        event, client = operation.event, operation.client
        if isinstance(event, Registered):
            self._judge_registered(client, event)
            return
        if isinstance(event, AttemptStarted):
            self._judge_counted(client, event, event.attempt - 1)
            self._told[(client, event.entity.id, event.entity.generation)] = event.attempt
            self._started[(client, event.entity.id, event.entity.generation, event.attempt)] = event.timestamp
            return
        if isinstance(event, AttemptSettled):
            self._judge_duration(client, event)
        if isinstance(event, Terminal):
            self._judge_counted(client, event, event.attempt)
            self._end(client, event.entity.id, event.entity.generation, "failed")
            return
        if not isinstance(event, AttemptSettled):
            return
        if event.outcome != "retry_scheduled":
            self._end(client, event.entity.id, event.entity.generation, event.outcome)
            return
        what = f"{client}: operation {event.entity.id}"
        due = event.timestamp + js_round(self.delay(event.attempt))
        if event.next_attempt_at != due:
            self.fail(
                self.name,
                f"{what} failed attempt {event.attempt} at {event.timestamp} and scheduled its retry at "
                f"{event.next_attempt_at}, but the policy's delay({event.attempt}) makes it {due}",
            )
        obj = self.clients.get(client)
        if obj is None:
            return
        rows = select(obj.storage, ROW, (event.entity.id,))
        if not rows:
            return
        status, attempt, next_attempt_at, generation = rows[0]
        if (status, attempt, generation) == ("pending", event.attempt, event.entity.generation) and (
            next_attempt_at != event.next_attempt_at
        ):
            self.fail(
                self.name,
                f"{what} scheduled its retry at {event.next_attempt_at}, but its row is due at "
                f"{next_attempt_at}",
            )

    def _end(self, client: str, id: str, generation: str, outcome: str) -> None:
        self._ended[(client, id, generation)] = outcome
        self._registered.discard((client, id, generation))

    def _judge_registered(self, client: str, event: Registered) -> None:
        row = (client, event.entity.id, event.entity.generation)
        if row in self._registered:
            self.fail(
                self.name,
                f"{client}: operation {event.entity.id} (generation {event.entity.generation}) was told "
                f"registered again at {event.timestamp}, though its row was told registered before and "
                "has not ended: only an insert that made a new row is told",
            )
        self._registered.add(row)

    def _judge_counted(self, client: str, event: AttemptStarted | Terminal, before: int) -> None:
        """``before`` attempts were told before ``event`` (none skipped, none counted untold)."""
        told = self._told.get((client, event.entity.id, event.entity.generation), 0)
        if told == before:
            return
        what = "started attempt" if isinstance(event, AttemptStarted) else "was declared exhausted after"
        self.fail(
            self.name,
            f"{client}: operation {event.entity.id} {what} {event.attempt} at {event.timestamp}, but the "
            f"last attempt told started was {told}: an attempt counted in its row was never told "
            "(claimAttempt and attempt_started go together)",
        )

    def _judge_duration(self, client: str, event: AttemptSettled) -> None:
        started = self._started.pop((client, event.entity.id, event.entity.generation, event.attempt), None)
        if started is None:
            return  # started in an instance the run did not hear (none, in a whole run)
        ran_ms = event.timestamp - started
        what = f"{client}: operation {event.entity.id} attempt {event.attempt}"
        if event.duration_ms != max(0, ran_ms):
            self.fail(
                self.name,
                f"{what} started at {started} and settled at {event.timestamp}, but its durationMs "
                f"is {event.duration_ms}",
            )
        timeout_ms = self.attempt_timeout_ms
        if timeout_ms is None:
            return
        timed_out = event.error is not None and event.error.name == TIMEOUT_ERROR
        if ran_ms > timeout_ms or (timed_out and ran_ms != timeout_ms):
            self.fail(
                self.name,
                f"{what} started at {started} and settled {event.outcome.replace('_', ' ')} at "
                f"{event.timestamp}, {ran_ms} ms later"
                + (" with the timeout's error" if timed_out else "")
                + f" (attemptTimeoutMs {timeout_ms}: its timer cuts it then)",
            )

    def judge(self, clients: Mapping[str, DurableObject]) -> None:
        """Every ended row of every client ended with an event, and every attempt a row counts was
        told (the Monitor's ``finish`` calls it, once the run has settled)."""
        untold = [
            f"{name}/{id} (attempt {attempt}, told {last})"
            for name, obj in sorted(clients.items())
            for id, generation, attempt in select(obj.storage, COUNTED_ROWS)
            if (last := self._told.get((name, id, generation), 0)) != attempt
        ]
        if untold:
            self.fail(
                self.name,
                f"{len(untold)} operations counted attempts never told started: {', '.join(untold[:SHOWN])}"
                + (" ..." if len(untold) > SHOWN else ""),
            )
        silent = [
            f"{name}/{id} ({status}" + ("" if told is None else f", though its events said {told}") + ")"
            for name, obj in sorted(clients.items())
            for id, generation, status in select(obj.storage, ENDED_ROWS)
            if (told := self._ended.get((name, id, generation))) != status
        ]
        if silent:
            self.fail(
                self.name,
                f"{len(silent)} operations ended with no event telling of it: {', '.join(silent[:SHOWN])}"
                + (" ..." if len(silent) > SHOWN else ""),
            )
