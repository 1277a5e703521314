"""``alarm_follows_work``: after each reconcile, an object's alarm is set no later than its work needs.

Seed 002's ``reconcile`` (lines 1284-1319) reads every participant's
earliest pending work and keeps the object's one physical alarm at
``max(that time, now + alarmMinDelayMs)``, or earlier: it keeps an alarm
already inside ``[that time, the target]`` ("preserve a fallback inside this
range"), and pulls in one set later. The alarm is what brings an evicted
object back, so an alarm later than that bound leaves due work waiting for
traffic that may never come (a client object's retries and queue, a
holder's grants). ``alarm_armed`` judges the holder's grants against the
holder's own reading; this judges every object's scheduler, holders and
clients alike. The earliest pending time is ``Engine.pending_at``: each
participant's own pending time, the minimum taken apart from
``reconcile``'s ``_targets``, so a reconcile that arms for the wrong
participant, or keeps a later alarm, is caught; a durable table's time is
read from its rows, not through ``pendingTimes``' query, so a head read in
the wrong order is caught too. A participant that computes its own time and
reports a wrong one is not (its own checks judge that: ``alarm_armed`` for
the holder's grants).

Judged after each step in which ``reconcile`` ran, and after each step in
which an alarm pass completed (the pass refreshed the alarm on its way out,
``scheduleNextAlarm``; a refresh that reconciled nothing leaves the alarm the
platform fired gone), once the step's commit was judged (``alarm_armed``,
the narrower check, speaks first), with the step's time. A step whose
alarm pass failed and could not re-arm committed nothing and is skipped:
the platform's retry comes next. While any participant has work pending,
the stored alarm is set and no later than ``max(pending, now +
alarmMinDelayMs)`` (docs/INVARIANTS.md).
"""

from __future__ import annotations

import attrs

from semsim.check.checker import Checker, Fail


@attrs.frozen
class Reconciled:
    """A step of ``object``'s scheduler in which ``reconcile`` ran, as the step left the object."""

    t_ms: int
    object: str
    #: The stored alarm after the step (None: none set).
    alarm_ms: int | None
    #: The earliest time any participant's work is pending (None: nothing pending).
    pending_ms: int | None
    alarm_min_delay_ms: int


class AlarmFollowsWork(Checker):
    """Judges the alarm each reconciling step left (a built-in check: the world reports to it alone)."""

    name = "alarm_follows_work"
    description = (
        "after each reconcile and each alarm pass, an object's alarm is set no later than its "
        "earliest work needs"
    )

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_reconciled(self, reconciled: Reconciled) -> None:
        if reconciled.pending_ms is None:
            return
        bound = max(reconciled.pending_ms, reconciled.t_ms + reconciled.alarm_min_delay_ms)
        if reconciled.alarm_ms is None or reconciled.alarm_ms > bound:
            self.fail(
                self.name,
                f"{reconciled.object}: work pending at {reconciled.pending_ms} after a reconcile at"
                f" {reconciled.t_ms}, but the alarm is {reconciled.alarm_ms} (bound {bound})",
            )
