"""``engine_permits``: every attempt handler running holds one of the engine's permits.

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

Judged after every step of an object's scheduler: the shell counts the
handlers it was handed attempts for and whose outcome it has not yet
reported (the engine's own count is not what is judged), and the engine's
``permits_held`` must be no fewer (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semsim.check.checker import Checker, Fail
from semsim.runtime.scheduler import EngineReading


class EnginePermits(Checker):
    """Judges the engine's permits against the handlers running (a built-in check)."""

    name = "engine_permits"
    description = "every attempt handler running holds one of the engine's alarmConcurrency permits"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_reading(self, object: str, t_ms: int, reading: EngineReading) -> None:
        if reading.permits_held < reading.handlers_running:
            self.fail(
                self.name,
                f"{object}: at {t_ms}, {reading.handlers_running} attempt handlers are running but the "
                f"engine holds {reading.permits_held} of its {reading.options.alarm_concurrency} permits "
                "(alarmConcurrency): each running handler holds one until it settles",
            )
