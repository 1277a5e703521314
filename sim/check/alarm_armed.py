"""``alarm_armed``: while a grant has unclaimed permits, an alarm is set in time (docs/INVARIANTS.md).

After every holder commit with work pending (the earliest claim deadline of
a grant with unclaimed permits), the object's alarm must be set no later
than max(that deadline, the commit's time + the alarm's minimum delay).
And the engine keeps an alarm already inside that range ("preserve a
fallback inside this range so frequent reconciliation cannot push it
later"): while the same work is pending and not yet due, and the alarm has
not fired, no commit may move it later. Once the work is due, a failed
run's fallback may.

The alarm can also go unset without a commit: the platform drops an alarm
whose run kept failing once its retries are spent. With the engine's
fallback on, a failing run arms its own alarm and the platform never drops
it; a drop while a grant still has unclaimed permits breaks the promise at
that moment, so it is judged then (later traffic may arm a new alarm and
hide the gap from every commit after it). With the fallback off, the drop
is what seed 002 documents (``reclaimed`` counts it). This rests on a
holder's alarm pass running to its end without waiting, so that no
eviction cuts into it before its fallback is armed.
"""

from __future__ import annotations

from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit


class AlarmArmed(Checker):
    """Judges each commit's alarm against the work pending, and against the commit before."""

    name = "alarm_armed"
    description = "while permits wait to be claimed, an alarm is set in time"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        #: Per key, after the last commit: (the earliest pending time, the stored alarm).
        self._before: dict[str, tuple[int | None, int | None]] = {}

    def on_commit(self, commit: Commit) -> None:
        key, now = commit.key, commit.t_ms
        pending, alarm = commit.due_ms, commit.alarm_ms
        before_pending, before_alarm = self._before.get(key, (None, None))
        self._before[key] = (pending, alarm)
        if pending is None:
            return
        bound = max(pending, now + commit.alarm_min_delay_ms)
        if alarm is None or alarm > bound:
            self.fail(
                self.name, f"{key}: unclaimed permits due {pending} but the alarm is {alarm} (bound {bound})"
            )
        if (
            pending == before_pending
            and pending > now
            and before_alarm is not None
            and before_alarm > now
            and alarm is not None
            and alarm > before_alarm
        ):
            self.fail(
                self.name,
                f"{key}: work due {pending} unchanged, but a commit pushed the alarm "
                f"from {before_alarm} to {alarm}",
            )

    def on_alarm_dropped(self, t_ms: int, key: str, pending_ms: int | None, engine_fallback: bool) -> None:
        """The platform gave up on ``key``'s alarm at ``t_ms``; ``pending_ms``: the earliest claim
        deadline of a grant with unclaimed permits then (None: no such grant)."""
        self._before[key] = (pending_ms, None)
        if pending_ms is not None and engine_fallback:
            self.fail(
                self.name,
                f"{key}: the platform dropped the alarm at {t_ms} with unclaimed permits due "
                f"{pending_ms}, though the engine's fallback is on",
            )
