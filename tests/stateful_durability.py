"""A Hypothesis state machine that drives ``semaphore_core.durability`` as a shell would.

Rules: time advancing (firing the instance's in-memory timers: early alarm,
attempt timeouts, hand-offs), the platform delivering the stored alarm,
registration (new; repeated with the same payload; repeated with another),
handler outcomes (success, retryable error, non-retryable error, timeout),
zombies settling after their timeout, outcomes reported by a stale instance
after an eviction, an alarm pass that throws, and eviction (a new engine on
the same connection; the old one is retired: it starts nothing, but the
fenced writes of its handlers in flight may still land, the worst an
evicted instance can leave behind).

After every step it checks the library's own promises (seed 002):

- ``terminal_final``: a completed or failed row never changes again.
- ``attempts_bounded``: no row and no attempt counts past ``maxAttempts``.
- ``claims_counted``: a row's attempt count equals the ``attempt_started``
  events for it: every attempt was claimed (and counted) before it ran.
- ``fenced``: a completed row holds the result of its own last attempt, and
  a report from an attempt that is not the row's current one changes
  nothing.
- ``alarm_armed``: while a row is pending, the alarm is stored, or a
  platform alarm invocation is running (the platform retries it if the
  instance dies).
- ``permits``: per instance, permits out of the pool stay within
  ``alarmConcurrency`` and equal the handlers running there (zombies
  included) plus eager starts not yet claimed.
- ``same_id``: every attempt carries its row's id, generation and payload.

At teardown, ``at_least_once``: with faults stopped and every handler
succeeding, every row reaches a terminal state within a bounded number of
alarm and timer deliveries, and every completed row ran at least once.
The module defines the machine; ``tests/test_stateful_durability.py`` runs it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import attrs
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from semaphore_core.durability import (
    AlarmInfo,
    AttemptSettled,
    AttemptStarted,
    CallRejected,
    DuplicateDurablePayloadError,
    DurableTable,
    Engine,
    NonRetryableError,
    Participant,
    Step,
    all_calls,
)
from semaphore_core.durability.engine import Join
from tests.durability_shell import Shell

IDS = tuple(f"op-{i}" for i in range(6))
STEPS_MS = (0, 1, 500, 1_000, 5_000, 15_000, 60_000)
MAX_ATTEMPTS = 3
TIMEOUT_MS = 20_000
#: A platform alarm whose instance died mid-run is retried this long after.
PLATFORM_RETRY_MS = 2_000
#: Alarm and timer deliveries the teardown may take to settle everything.
DRAIN_ROUNDS = 400

#: What the runs reached, by name: ``tests/test_stateful_durability.py`` demands each one.
REACH: Counter[str] = Counter()


class DurabilityMachine(RuleBasedStateMachine):
    concurrency = 2
    live_timers = False
    handoff_ms = 90_000
    fixes: frozenset[str] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self.shell = Shell(
            max_attempts=MAX_ATTEMPTS,
            attempt_timeout_ms=TIMEOUT_MS,
            alarm_concurrency=self.concurrency,
            alarm_handoff_ms=self.handoff_ms,
            live_timers=self.live_timers,
            fixes=self.fixes,
        )
        self.now = 0
        self.throw_next_pass = False
        self._attach_flaky(self.shell.engine)
        #: Attempts the current instance handed out whose handler the machine has not settled.
        self.live: list[Any] = []
        #: Retired instances and their handlers still in flight.
        self.stale: list[tuple[Engine, Any]] = []
        self.payloads: dict[str, str] = {}
        self.started_events: dict[str, int] = {}
        self.completions: dict[str, int] = {}
        self.final: dict[str, Any] = {}
        #: Platform alarm passes of the current instance still running.
        self.platform_passes: set[int] = set()

    def _attach_flaky(self, engine: Engine) -> None:
        def run_due(now: int, info: AlarmInfo | None) -> Join | None:
            if self.throw_next_pass:
                self.throw_next_pass = False
                raise OSError("injected: due work threw")
            return None

        engine.register(
            Participant(table=DurableTable("flaky", "k"), run_due=run_due, next_pending_at=lambda conn: None)
        )

    # --- bookkeeping ---------------------------------------------------------------

    def absorb(self, step: Step, platform: bool = False) -> None:
        for event in step.events:
            REACH[f"event:{event.type}:{getattr(event, 'outcome', '')}"] += 1
            if isinstance(event, AttemptStarted):
                self.started_events[event.entity.id] = self.started_events.get(event.entity.id, 0) + 1
            elif isinstance(event, AttemptSettled) and event.outcome == "completed":
                self.completions[event.entity.id] = self.completions.get(event.entity.id, 0) + 1
        for attempt in step.started:
            row = self.shell.row(attempt.id)
            assert (attempt.generation, json.dumps(attempt.payload)) == (
                row.generation_id,
                json.dumps(json.loads(row.payload)),
            ), "same_id"
            assert attempt.attempt <= MAX_ATTEMPTS, "attempts_bounded"
            self.live.append(attempt)
        if platform:
            self.platform_passes.update(step.passes_started)
        REACH["abort"] += len(step.aborted)
        for end in step.alarm_ends:
            REACH[f"alarm:{'early' if end.early else 'platform'}:{end.outcome}"] += 1
            self.platform_passes.discard(end.pass_id)
            if end.outcome == "failed" and not end.early:
                self.platform_retry()

    def platform_retry(self) -> None:
        if self.shell.alarm.get_alarm() is None:
            self.shell.alarm.set_alarm(self.now + PLATFORM_RETRY_MS)

    def running_here(self) -> list[Any]:
        running = set(a.fence for a in self.shell.engine.running())
        return [a for a in self.live if a.fence in running]

    # --- rules -----------------------------------------------------------------------

    @rule(dt=st.sampled_from(STEPS_MS))
    def advance(self, dt: int) -> None:
        self.now += dt
        self.absorb(self.shell.engine.advance(self.now))

    @rule()
    def platform_alarm(self) -> None:
        at = self.shell.alarm.get_alarm()
        if at is None:
            return
        self.now = max(self.now, at)
        self.absorb(self.shell.engine.advance(self.now))
        at = self.shell.alarm.get_alarm()
        if at is None or at > self.now:
            return
        self.absorb(self.shell.platform_alarm(self.now), platform=True)

    @rule(id=st.sampled_from(IDS), n=st.integers(0, 3))
    def register_new(self, id: str, n: int) -> None:
        if id in self.payloads:
            return
        payload = {"id": id, "n": n}
        self.payloads[id] = json.dumps(payload, sort_keys=True)
        registration = self.shell.durability.register("run", id, payload, self.now)
        assert registration.inserted
        self.absorb(registration.step)

    @rule(id=st.sampled_from(IDS))
    def register_same(self, id: str) -> None:
        if id not in self.payloads:
            return
        before = self.shell.rows()
        payload = json.loads(self.payloads[id])
        registration = self.shell.durability.register("run", id, dict(reversed(payload.items())), self.now)
        assert not registration.inserted
        assert registration.step.events == ()
        assert registration.step.started == ()
        assert [r for r in self.shell.rows() if r.id == id] == [r for r in before if r.id == id]

    @rule(id=st.sampled_from(IDS))
    def register_other(self, id: str) -> None:
        if id not in self.payloads:
            return
        before = self.shell.rows()
        with pytest.raises(CallRejected) as rejected:
            self.shell.durability.register("run", id, {"id": id, "n": "other"}, self.now)
        assert isinstance(rejected.value.error, DuplicateDurablePayloadError), rejected.value.error
        assert rejected.value.step.events == ()
        assert rejected.value.step.started == ()
        assert self.shell.rows() == before

    @rule(data=st.data(), outcome=st.sampled_from(["ok", "retryable", "fatal"]))
    def settle(self, data: st.DataObject, outcome: str) -> None:
        running = self.running_here()
        if not running:
            return
        attempt = data.draw(st.sampled_from(running))
        self.live.remove(attempt)
        self._report(self.shell.engine, attempt, outcome)

    @rule(data=st.data())
    def time_out(self, data: st.DataObject) -> None:
        running = [a for a in self.running_here() if not self.shell.engine.is_zombie(a)]
        if not running:
            return
        attempt = data.draw(st.sampled_from(running))
        self.now = max(self.now, attempt.timeout_at_ms)
        self.absorb(self.shell.engine.advance(self.now))

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "retryable", "fatal"]))
    def stale_report(self, data: st.DataObject, outcome: str) -> None:
        engine, attempt = data.draw(st.sampled_from(self.stale))
        self.stale.remove((engine, attempt))
        if attempt.fence not in {a.fence for a in engine.running()}:
            return
        self._report(engine, attempt, outcome, stale=True)

    def _report(self, engine: Engine, attempt: Any, outcome: str, stale: bool = False) -> None:
        row = self.shell.row(attempt.id)
        current = row.status == "pending" and row.attempt == attempt.attempt
        current = current and row.generation_id == attempt.generation
        zombie = engine.is_zombie(attempt)
        if outcome == "ok":
            step = engine.complete(attempt, f"{attempt.id}#{attempt.attempt}", self.now)
        elif outcome == "retryable":
            step = engine.fail(attempt, RuntimeError("503"), self.now)
        else:
            step = engine.fail(attempt, NonRetryableError("bad input"), self.now)
        if stale:
            for started in step.started:
                raise AssertionError(f"a retired instance started {started}")
            self.absorb(attrs_evolve_started(step))
        else:
            self.absorb(step)
        REACH[
            f"report:{'stale' if stale else 'live'}:{'zombie' if zombie else 'current' if current else 'old'}"
        ] += 1
        if stale and current and self.shell.row(attempt.id) != row:
            REACH["stale report landed"] += 1
        if not current or zombie:
            after = self.shell.row(attempt.id)
            restarted = [started for started in step.started if started.id == attempt.id]
            if restarted:
                # The permit the report freed went to a waiting lane of a pass that listed this row
                # as due before this attempt ran: that lane claimed its next attempt (claimAttempt
                # does not look at next_attempt_at), which moves the attempt count and nothing else.
                REACH["report freed a permit for the same row"] += 1
                [claimed] = restarted
                assert row.status == "pending", "fenced: a settled row was claimed again"
                assert (claimed.attempt, claimed.generation) == (row.attempt + 1, row.generation_id)
                assert after.attempt == claimed.attempt, "fenced: the row's next attempt is the only change"
                after = attrs.evolve(after, attempt=row.attempt)
            assert after == row, "fenced: a stale or zombie report changed the row"

    @rule()
    def throw_next(self) -> None:
        self.throw_next_pass = True

    @rule()
    def evict(self) -> None:
        old = self.shell.engine
        in_flight = self.running_here()
        old.retire()
        self.shell.evict()
        self._attach_flaky(self.shell.engine)
        self.stale = [*self.stale, *((old, a) for a in in_flight)][-6:]
        self.live = []
        if self.platform_passes:
            self.platform_passes = set()
            self.platform_retry()

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def promises(self) -> None:
        rows = all_calls(self.shell.conn)
        engine = self.shell.engine
        for row in rows:
            previous = self.final.get(row.id)
            if previous is not None:
                assert row == previous, f"terminal_final: {previous} became {row}"
            if row.status != "pending":
                self.final[row.id] = row
            assert row.attempt <= MAX_ATTEMPTS, f"attempts_bounded: {row}"
            assert row.attempt == self.started_events.get(row.id, 0), f"claims_counted: {row}"
            if row.status == "completed":
                assert row.result == json.dumps(f"{row.id}#{row.attempt}"), f"fenced: {row}"
                assert self.completions.get(row.id) == 1, f"fenced: {row.id} completed twice"
        if any(row.status == "pending" for row in rows):
            assert self.shell.alarm.get_alarm() is not None or self.platform_passes, "alarm_armed"
        held = engine.permits_held
        assert 0 <= held <= engine.options.alarm_concurrency, f"permits: {held}"
        assert len(engine.running()) == held, "permits: a running handler without a permit"
        # What the shell knows is running here (zombies included), whatever the engine remembers.
        assert len(self.live) <= engine.options.alarm_concurrency, f"permits: {len(self.live)} handlers run"
        # The shell's cheap question (the next timer) answers as the full listing does.
        timers = engine.timers()
        assert engine.next_timer_at() == (timers[0].at_ms if timers else None), "timers: next differs"

    def teardown(self) -> None:
        if not hasattr(self, "shell"):
            return
        self.throw_next_pass = False
        for engine, attempt in self.stale:
            if attempt.fence in {a.fence for a in engine.running()}:
                self._report(engine, attempt, "ok", stale=True)
        self.stale = []
        for _ in range(DRAIN_ROUNDS):
            for attempt in self.running_here():
                self.live.remove(attempt)
                self._report(self.shell.engine, attempt, "ok")
            self.promises()
            if all(row.status != "pending" for row in all_calls(self.shell.conn)):
                break
            next_timer = self.shell.engine.next_timer_at()
            at = self.shell.alarm.get_alarm()
            candidates = [t for t in (next_timer, at) if t is not None]
            assert candidates, "at_least_once: pending work with no timer and no alarm"
            self.now = max(self.now, min(candidates))
            self.absorb(self.shell.engine.advance(self.now))
            at = self.shell.alarm.get_alarm()
            if at is not None and at <= self.now:
                self.absorb(self.shell.platform_alarm(self.now), platform=True)
        else:
            raise AssertionError("at_least_once: rows still pending after the drain")
        for row in all_calls(self.shell.conn):
            if row.status == "completed":
                assert row.attempt >= 1, "at_least_once"


def attrs_evolve_started(step: Step) -> Step:
    """A retired instance's step, for bookkeeping (it starts nothing)."""
    return step
