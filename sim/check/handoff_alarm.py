"""``handoff_alarm``: an alarm pass that hands its work on leaves an alarm that comes soon.

Seed 002's ``runAlarm`` races a pass's due work against ``alarmHandoffMs``;
when the hand-off wins, the work goes on in memory and ``armForHandoff``
(lines 1613-1621) writes an alarm no later than ``alarmMinDelayMs`` from
then, so a fresh invocation picks the work up if this instance dies. A
later alarm (or none) would leave the work that was due waiting on a
timer the platform does not keep. Judged as each step that handed off is
done: while work is pending, the stored alarm must be set, and no later
than the hand-off's time plus ``alarmMinDelayMs``, or the pending work's
own time when that is later (a reconcile in the same step may move it
there) (docs/INVARIANTS.md).
"""

from __future__ import annotations

import attrs

from semsim.check.checker import Checker, Fail


@attrs.frozen
class Handoff:
    """A step in which an alarm pass of ``object`` handed off, as the step left the object."""

    t_ms: int
    object: str
    #: The stored alarm after the step (None: none set).
    alarm_ms: int | None
    #: The earliest time any participant's work is pending (None: nothing pending).
    pending_ms: int | None
    alarm_min_delay_ms: int


class HandoffAlarm(Checker):
    """Judges each hand-off's alarm (a built-in check: the world reports hand-offs to it alone)."""

    name = "handoff_alarm"
    description = "after an alarm pass hands off, an alarm is set within alarmMinDelayMs"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_handoff(self, handoff: Handoff) -> None:
        if handoff.pending_ms is None:
            return
        bound = max(handoff.t_ms + handoff.alarm_min_delay_ms, handoff.pending_ms)
        if handoff.alarm_ms is None or handoff.alarm_ms > bound:
            self.fail(
                self.name,
                f"{handoff.object}: an alarm pass handed off with work pending at {handoff.pending_ms},"
                f" but the alarm is {handoff.alarm_ms} (bound {bound})",
            )
