"""The reference's scheduler ``Engine`` (seed 002, scheduler.ts), as the semaphore uses it.

- ``reconcile`` runs inside every write transaction, before commit: it sets
  the object's one alarm from the earliest pending time of its participants,
  never sooner than ``alarm_min_delay_ms`` from now, and keeps an alarm that
  already sits in ``[pending, target]`` so frequent transactions cannot push
  it later. So a committed row always has its alarm.
- After commit, ``after_commit`` publishes the in-memory early timer for a
  deadline sooner than the floor. The timer dies with the instance.
- ``alarm`` runs due work and re-arms; if that throws, it arms its own
  fallback alarm ``alarm_min_delay_ms`` out instead of letting the platform
  retry (the platform drops an alarm after a few failures). With
  ``fallback=False`` setting that fallback alarm fails as well, so the
  failure goes to the platform: the one case in which the reference's
  ``alarm()`` rethrows (``armFallbackAlarm`` returned false).

Left out: ``liveTimers`` (off by default in the reference), the alarm
handoff after ``alarmHandoffMs`` (the semaphore's due work is one short
transaction), and the concurrency pool (durable operations only).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final, Protocol

from semaphore_core.transaction import transaction
from sim.runtime.durable import HandlerFailure, ObjectContext, ObjectTimer

MIN_ALARM_DELAY_MS: Final = 1_000
MAX_ALARM_DELAY_MS: Final = 15_000


class Participant(Protocol):
    """A table attached to the engine: its earliest pending time, and how to run due work."""

    def next_pending_at(self, conn: sqlite3.Connection) -> int | None: ...

    def run_due(self, now_ms: int) -> None: ...


class InjectedAlarmFailure(HandlerFailure):
    """A fault plan's ``alarm_failure``: due work threw (think: a storage hiccup)."""


class Engine:
    """One object's alarm and timers, shared by the helpers attached to it."""

    def __init__(
        self,
        ctx: ObjectContext,
        alarm_min_delay_ms: int = MAX_ALARM_DELAY_MS,
        *,
        fallback: bool = True,
        alarm_failure: float = 0.0,
    ) -> None:
        if not MIN_ALARM_DELAY_MS <= alarm_min_delay_ms <= MAX_ALARM_DELAY_MS:
            raise ValueError(
                f"alarm_min_delay_ms must be between {MIN_ALARM_DELAY_MS} and {MAX_ALARM_DELAY_MS}, "
                f"got {alarm_min_delay_ms}"
            )
        self.ctx = ctx
        self.alarm_min_delay_ms = alarm_min_delay_ms
        self.fallback = fallback
        self._alarm_failure = alarm_failure
        #: Injected alarm failures stop here (the fault plan's quiet point).
        self.faults_until_ms: int | None = None
        #: Called after every transaction's commit (the invariant monitor listens here).
        self.on_commit: Callable[[], None] | None = None
        self._participants: list[Participant] = []
        self._timer_at: int | None = None
        self._early: tuple[int, ObjectTimer] | None = None

    def _faults_active(self) -> bool:
        until = self.faults_until_ms
        return until is None or self.ctx.sim.now() < until

    def register(self, participant: Participant) -> None:
        self._participants.append(participant)

    # --- inside a transaction -------------------------------------------------------

    def reconcile(self, conn: sqlite3.Connection) -> None:
        """Arm the physical alarm from the earliest pending time; call before commit."""
        times = [t for p in self._participants if (t := p.next_pending_at(conn)) is not None]
        physical = min(times) if times else None
        current = self.ctx.get_alarm()
        self._timer_at = physical
        if physical is None:
            if current is not None:
                self.ctx.delete_alarm()
            return
        target = max(physical, self.ctx.sim.now() + self.alarm_min_delay_ms)
        # Preserve a fallback inside this range so frequent reconciliation cannot push it later.
        if current is None or current < physical or current > target:
            self.ctx.set_alarm(target)

    def after_commit(self) -> None:
        """Publish what the last transaction decided: wake the platform, set the early timer."""
        self.ctx.alarm_written()
        self._schedule_early_alarm(self._timer_at)
        if self.on_commit is not None:
            self.on_commit()

    # --- the in-memory timer ----------------------------------------------------------

    def _schedule_early_alarm(self, at_ms: int | None) -> None:
        if self._early is not None and self._early[0] == at_ms:
            return
        if self._early is not None:
            self._early[1].cancel()
            self._early = None
        if at_ms is None:
            return
        delay = at_ms - self.ctx.sim.now()
        # The in-memory timer only covers the window below the alarm's floor.
        if delay >= self.alarm_min_delay_ms:
            return

        def fire() -> None:
            if self._early is None or self._early[0] != at_ms:
                return
            self._early = None
            self.ctx.sim.event("early_alarm", object=self.ctx.name, scheduled=at_ms)
            try:
                self._alarm()
            except Exception as error:  # reported, as reportFailure does; the physical alarm remains
                self.ctx.sim.event("alarm_failed", object=self.ctx.name, early=True, error=repr(error))

        self._early = (at_ms, self.ctx.call_at(self.ctx.sim.now() + max(delay, 0), fire))

    # --- the alarm ------------------------------------------------------------------

    async def alarm(self) -> None:
        """Run due work and re-arm; on failure arm our own fallback rather than throw."""
        self._alarm()

    def _alarm(self) -> None:
        try:
            self._run_alarm()
        except Exception as error:
            if not self.fallback:
                raise
            at = self.ctx.sim.now() + self.alarm_min_delay_ms
            self.ctx.set_alarm(at)
            self.ctx.alarm_written()
            self.ctx.sim.event("alarm_retry", object=self.ctx.name, retry_at=at, error=repr(error))

    def _run_alarm(self) -> None:
        now = self.ctx.sim.now()
        failure = self._alarm_failure if self._faults_active() else 0.0
        if failure and self.ctx.sim.rng(f"alarm:{self.ctx.name}").random() < failure:
            raise InjectedAlarmFailure("injected: due work threw")
        for participant in self._participants:
            participant.run_due(now)
        self.schedule_next_alarm()

    def schedule_next_alarm(self) -> None:
        """A transaction that writes nothing but reconciles the alarm."""
        with transaction(self.ctx.storage):
            self.reconcile(self.ctx.storage)
        self.after_commit()
