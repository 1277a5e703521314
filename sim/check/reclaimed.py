"""``reclaimed``, once settled: unclaimed grant permits came back after their deadline.

A grant's permits its client never claimed count until the claim deadline;
the holder's alarm then takes them back, within ``alarm_min_delay_ms``
(docs/INVARIANTS.md). Once the run has settled, no grant past that bound
may still hold unclaimed permits. The other half of the promise, that no
claim is accepted after the deadline, is judged at each commit beside
``reports_monotone`` (:mod:`semsim.check.reports_monotone`).

Documented, not failed (seed 002): the platform drops an alarm after its
retries, and without the Engine's fallback re-arm nothing reclaims those
permits (``reclaim_lost_with_dropped_alarm``).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Final

from semsim.check.checker import Checker, Fail, Note
from semsim.check.events import Finish

if TYPE_CHECKING:
    from semsim.world.holder_object import Env

NAME: Final = "reclaimed"
#: Documented: with the platform alone (no Engine fallback) a dropped alarm's reclaim never runs.
DROPPED_ALARM: Final = "reclaim_lost_with_dropped_alarm"


class Reclaimed(Checker):
    """Reads each holder's grants once the run settled."""

    name = NAME
    description = "unclaimed grant permits come back after their deadline"
    kind = "liveness"

    def __init__(
        self,
        fail: Fail,
        note: Note,
        env: Callable[[str], Env],
        object_name: Callable[[str], str],
        dropped_alarms: Container[str],
    ) -> None:
        """``env`` and ``object_name``: a key's holder settings and object name;
        ``dropped_alarms``: the objects whose alarm the platform gave up on."""
        self.fail = fail
        self.note = note
        self._env = env
        self._object_name = object_name
        self._dropped_alarms = dropped_alarms

    def on_finish(self, finish: Finish) -> None:
        for key in finish.holders:
            self.judge(finish, key)

    def judge(self, finish: Finish, key: str) -> None:
        """One key's holder (the Monitor judges key by key, each key's checks together)."""
        now, env = finish.t_ms, self._env(key)
        stale = [
            grant
            for grant in finish.holders[key].grants()
            if grant.claimed < grant.permits and grant.expires_at + env.alarm_min_delay_ms < now
        ]
        if stale and self._object_name(key) in self._dropped_alarms and not env.engine_fallback:
            self.note(NAME, DROPPED_ALARM, len(stale))
        elif stale:
            self.fail(NAME, f"{key}: {len(stale)} grants past their deadline still hold unclaimed permits")
