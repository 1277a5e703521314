"""``engine_permits``: the engine's permits out of its pool are the attempt handlers running.

Seed 002 bounds the work one instance does at once by ``alarmConcurrency``
permits (``tryAcquirePermit``/``acquirePermit``, lines 1450-1480). An
execution takes one before it claims its attempt (or is handed the eager
one ``run`` took), and ``startExecution``'s ``releaseIfSettled`` (lines
1628-1747) gives it back only once the outcome is persisted *and* the
handler settled, zombies included: a handler still running after its
attempt timed out keeps its permit. So at every moment the permits out of
the pool are at least the handlers running. A permit given back early
(an eager permit returned as it is handed over, say) lets more than
``alarmConcurrency`` handlers run, which is what the permits exist to stop,
and only a world that saturates the pool would show it at the external
API. What this cannot see here: a permit released once the outcome is
persisted but before its handler settles. The simulator cancels an aborted
handler inside the step that aborts it, so no handler outlives its
attempt's outcome, and such a release behaves as the reference's does.

The other way round, no permit stays out with no handler to give it back.
The reference holds a permit outside a running handler only while
continuations run: ``run``'s eager permit until ``startExecution`` takes
it, an execution's between its permit and its claim, between its outcome
and ``releaseIfSettled``, and across the storage transaction of
``failExhausted`` (a claim that found every attempt used) and of
``settleFailure``. None of these waits on a timer or a message *in this
simulator*: its platform's ``transaction`` settles in microtasks
(``semaphore_core.durability.platform.PlatformStorage``), so once a step
has drained its continuations the permits out are exactly the handlers
running. A platform model whose storage took time would need this rule to
allow a permit held across a pending transaction. A permit that never
comes back (a waiter handed a release already spent, a release that
forgets to give back) shows there at the first step after its handler
settles, long before the pool running dry stalls any operation.

Judged after every step of an object's scheduler: the shell counts the
handlers it was handed attempts for and whose outcome it has not yet
reported (the engine's own count is not what is judged), and the engine's
``permits_held`` must be that many (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semsim.check.checker import Checker, Fail
from semsim.runtime.scheduler import EngineReading


class EnginePermits(Checker):
    """Judges the engine's permits against the handlers running (a built-in check)."""

    name = "engine_permits"
    description = (
        "every attempt handler running holds one of the engine's alarmConcurrency permits, and no "
        "permit is out of the pool without one"
    )

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_reading(self, object: str, t_ms: int, reading: EngineReading) -> None:
        if reading.permits_held > reading.handlers_running:
            self.fail(
                self.name,
                f"{object}: at {t_ms}, the engine holds {reading.permits_held} of its "
                f"{reading.options.alarm_concurrency} permits (alarmConcurrency) but only "
                f"{reading.handlers_running} attempt handlers are running: a permit out of the pool "
                "with no handler to give it back",
            )
        if reading.permits_held < reading.handlers_running:
            self.fail(
                self.name,
                f"{object}: at {t_ms}, {reading.handlers_running} attempt handlers are running but the "
                f"engine holds {reading.permits_held} of its {reading.options.alarm_concurrency} permits "
                "(alarmConcurrency): each running handler holds one until it settles",
            )
