"""The durable operations' lifecycle promises, judged in the account-concurrency world.

``attempts_bounded``, ``retry_before_last``, ``handoff_alarm`` and
``registration_idempotent`` (docs/INVARIANTS.md), ``effect_once`` per
operation whatever its key, and ``completed_took_effect``: each holds on the reference in a world built to
reach it, and fails there under the catalog's mutant that breaks it (the
same worlds ``tests/test_mutant_catalog.py`` uses to show each mutant is
real). The checkers' own edges are shown on events written by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
from semaphore_core.durability import AttemptSettled, AttemptStarted, Terminal
from semaphore_core.durability.errors import SerializedError
from semaphore_core.durability.events import OperationEntity
from semsim.check.alarm_follows_work import AlarmFollowsWork, Reconciled
from semsim.check.attempts_bounded import AttemptsBounded
from semsim.check.completed_took_effect import CompletedTookEffect
from semsim.check.effect_once import EffectOnce
from semsim.check.engine_timers import EngineTimers
from semsim.check.events import ApiCallChange, Operation
from semsim.check.handoff_alarm import Handoff, HandoffAlarm
from semsim.check.invariants import Monitor
from semsim.check.retry_before_last import RetryBeforeLast
from semsim.harness.run import WorldConfig, WorldRun, run_world
from semsim.runtime.network import RemoteError
from semsim.scenarios.operations import one_job
from semsim.world.client_object import ClientObject
from semsim.world.faults import FaultPlan
from semsim.world.mutant_catalog import mutant
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload
from tests.operation_worlds import (
    WORLDS,
    every_attempt_fails,
    evicted_at,
    handoff_world,
    heads_by_creation,
    repeating,
    run_story,
)


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_the_reference_holds_and_the_mutant_breaks_the_promise(name: str) -> None:
    world, invariant = WORLDS[name]
    faithful = world()
    assert faithful.result.outcome == "completed", faithful.result
    with mutant(name).patch():
        broken = world()
    assert broken.result.invariant == invariant, broken.result


def test_the_last_attempts_failure_is_final_and_every_attempt_within_max() -> None:
    run = run_world(*every_attempt_fails(), seed=1)
    events = [
        e for e in run.trace.of_kind("operation") if e["type"] in ("attempt_started", "attempt_settled")
    ]
    assert [(e["type"], e["attempt"], e.get("outcome")) for e in events] == [
        ("attempt_started", 1, None),
        ("attempt_settled", 1, "retry_scheduled"),
        ("attempt_started", 2, None),
        ("attempt_settled", 2, "retry_scheduled"),
        ("attempt_started", 3, None),
        ("attempt_settled", 3, "failed"),
    ]


def test_a_pass_that_hands_off_leaves_an_alarm_within_the_minimum_delay() -> None:
    run = run_world(handoff_world(), evicted_at(40_000), seed=1)
    handoffs = [e["t"] for e in run.trace.of_kind("alarm_handoff") if not e.get("early")]
    assert handoffs, "the world reaches a platform alarm's hand-off"
    assert run.result.outcome == "completed", run.result


def test_each_admission_registers_twice_and_the_repeat_is_a_no_op() -> None:
    run = run_world(repeating(one_job(5_000, idempotent=True, count=3)), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    registered = [e["id"] for e in run.trace.of_kind("operation") if e["type"] == "registered"]
    assert len(registered) == len(set(registered)) == 3  # one row each: the repeats inserted nothing


def test_with_the_repeat_off_a_text_compared_payload_goes_unseen() -> None:
    """What the repeat is for: seed 000 registers once (the default), so the mutant meets no
    second payload."""
    with mutant("payload-compared-as-text").patch():
        run = run_world(one_job(5_000, idempotent=True), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result


def test_repeat_registration_is_recorded_only_when_on_and_older_records_run_once() -> None:
    assert "repeat_registration" not in OperationsSpec().to_dict()
    on = OperationsSpec(repeat_registration=True)
    assert on.to_dict()["repeat_registration"] is True
    assert WorldConfig.from_dict(WorldConfig(operations=on).to_dict()).operations == on
    older = WorldConfig(operations=OperationsSpec()).to_dict()  # as a record without the field
    assert WorldConfig.from_dict(older).operations == OperationsSpec(repeat_registration=False)


# --- the checkers on events written by hand ----------------------------------------------------


class Failed(Exception):
    pass


def fail(name: str, detail: str, finding: str | None = None, **state: Any) -> None:
    raise Failed(f"{name}: {detail}")


ENTITY = OperationEntity(operation="run", id="op", generation="g1")
ERROR = SerializedError(name="Error", message="boom")


def heard(*events: Any, max_attempts: int = 3) -> None:
    bounded, retry = AttemptsBounded(fail, max_attempts), RetryBeforeLast(fail, max_attempts)
    for t, event in enumerate(events):
        operation = Operation(t, "client-0", event)
        bounded.on_operation(operation)
        retry.on_operation(operation)


def started(attempt: int, t: int = 0) -> AttemptStarted:
    return AttemptStarted(entity=ENTITY, timestamp=t, attempt=attempt)


def settled(
    attempt: int, outcome: Any, t: int = 0, next_at: int | None = None, error: str | None = None
) -> AttemptSettled:
    return AttemptSettled(
        entity=ENTITY,
        timestamp=t,
        attempt=attempt,
        duration_ms=0,
        outcome=outcome,
        error=None if error is None else SerializedError(name=error, message="boom"),
        next_attempt_at=next_at,
    )


def test_a_run_within_its_attempts_is_heard_without_a_violation() -> None:
    heard(
        started(1),
        settled(1, "retry_scheduled", 10, 20),
        started(2, 20),
        settled(2, "retry_scheduled", 30, 40),
        started(3, 40),
        settled(3, "failed", 50),
    )
    heard(started(1), Terminal(entity=ENTITY, timestamp=5, attempt=3, error=ERROR))
    # decideRetry fails these at once, attempts left or not.
    for error in ("NonRetryableError", "DurableResultSerializationError", "DurableRetryPolicyError"):
        heard(started(1), settled(1, "failed", 5, error=error))


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ((started(4),), "attempts_bounded: .* started attempt 4, outside 1..3"),
        ((started(0),), "attempts_bounded: .* started attempt 0, outside 1..3"),
        (
            (started(1), settled(1, "completed"), started(2)),
            "attempts_bounded: .* after its outcome was recorded",
        ),
        ((Terminal(entity=ENTITY, timestamp=0, attempt=2, error=ERROR),), "exhausted after 2 of 3 attempts"),
        (
            (started(3), settled(3, "retry_scheduled", 5, 9)),
            "retry_before_last: .* retry after attempt 3 of 3",
        ),
        (
            (started(1), settled(1, "retry_scheduled", 5, 4)),
            "retry_before_last: .* at 4, before the failure at 5",
        ),
        (
            (started(2), settled(2, "failed", 5, error="DurableAttemptTimeoutError")),
            "retry_before_last: .* failed for good at attempt 2 of 3 .* with DurableAttemptTimeoutError",
        ),
    ],
)
def test_each_broken_promise_is_named(events: tuple[Any, ...], message: str) -> None:
    with pytest.raises(Failed, match=message):
        heard(*events)


@pytest.mark.parametrize(
    ("alarm_ms", "pending_ms", "broken"),
    [(15_000, 0, False), (16_000, 0, True), (None, 0, True), (None, None, False), (30_000, 30_000, False)],
)
def test_the_handoff_alarm_bound(alarm_ms: int | None, pending_ms: int | None, broken: bool) -> None:
    check = HandoffAlarm(fail)
    handoff = Handoff(
        t_ms=0, object="client-0", alarm_ms=alarm_ms, pending_ms=pending_ms, alarm_min_delay_ms=15_000
    )
    if broken:
        with pytest.raises(Failed, match="handoff_alarm: client-0: an alarm pass handed off"):
            check.on_handoff(handoff)
    else:
        check.on_handoff(handoff)


def test_effect_once_counts_an_operation_under_every_key() -> None:
    check = EffectOnce(fail)
    call = ApiCallChange(0, "end", "acct", "op:2", effects=1, idempotent=True, operation_effects=2)
    with pytest.raises(Failed, match="under more than one idempotency key"):
        check.on_api(call)
    check.on_api(attrs.evolve(call, idempotent=False))  # a non-idempotent API promises nothing
    check.on_api(attrs.evolve(call, operation_effects=1))


def test_completed_took_effect_judges_completions_only() -> None:
    effects = {"op": 0}
    check = CompletedTookEffect(fail, effects)
    for outcome in ("failed", "retry_scheduled"):
        check.on_operation(Operation(0, "client-0", settled(1, outcome)))
    check.on_operation(Operation(0, "client-0", started(1)))
    with pytest.raises(Failed, match="completed_took_effect: client-0: operation op was told completed"):
        check.on_operation(Operation(0, "client-0", settled(1, "completed")))
    effects["op"] = 1
    check.on_operation(Operation(0, "client-0", settled(1, "completed")))


def test_a_handler_that_takes_an_error_answer_for_success_stops_a_world_on_completed_took_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 000's handler throws unless the response is ok. One that returns the API's error
    answer as its result completes the attempt: the permit comes back, nothing retries, and the
    job's work never happened."""
    assert run_story("api-error-retried-under-one-permit").result.outcome == "completed"
    job = ClientObject._job

    async def error_as_result(self: ClientObject, attempt: Any) -> Any:
        try:
            return await job(self, attempt)
        except RemoteError as answer:
            return {"status": 500, "error": str(answer)}

    monkeypatch.setattr(ClientObject, "_job", error_as_result)
    run = run_story("api-error-retried-under-one-permit")
    assert run.result.invariant == "completed_took_effect", run.result
    assert "no call of it took effect at the API" in run.result.detail


def test_a_retryable_failure_treated_as_terminal_stops_a_world_on_retry_before_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The converse of a retry after the last attempt: an engine that fails every error at once
    (as if each were a NonRetryableError) gives up on an operation with attempts left."""
    assert run_world(*every_attempt_fails(), seed=1).result.outcome == "completed"
    monkeypatch.setattr(engine_module, "is_non_retryable", lambda error: True)
    run = run_world(*every_attempt_fails(), seed=1)
    assert run.result.invariant == "retry_before_last", run.result
    assert "failed for good at attempt 1 of" in run.result.detail


@pytest.mark.parametrize(
    ("alarm_ms", "pending_ms", "broken"),
    [
        (15_000, 0, False),
        (15_001, 0, True),
        (None, 0, True),
        (None, None, False),
        (40_000, None, False),  # nothing pending: an alarm left over wakes the object for nothing
        (30_000, 30_000, False),
        (30_001, 30_000, True),
    ],
)
def test_the_reconciled_alarm_bound(alarm_ms: int | None, pending_ms: int | None, broken: bool) -> None:
    check = AlarmFollowsWork(fail)
    reconciled = Reconciled(
        t_ms=0, object="client-0", alarm_ms=alarm_ms, pending_ms=pending_ms, alarm_min_delay_ms=15_000
    )
    if broken:
        with pytest.raises(Failed, match="alarm_follows_work: client-0: work pending at"):
            check.on_reconciled(reconciled)
    else:
        check.on_reconciled(reconciled)


def _latest_participant(self: engine_module.Engine) -> tuple[int | None, int | None]:
    """``reconcile``'s reading with the latest participant's time for the earliest (a lost min)."""
    readings = [self._pending_times(participant) for participant in self._participants]
    physical = [p for p, _ in readings if p is not None]
    timers = [t for _, t in readings if t is not None]
    return max(physical, default=None), max(timers, default=None)


def _never_pulled_in(self: engine_module.Engine, physical_next_at: int, current: int | None) -> int | None:
    """``reconcile``'s decision without ``currentAlarm > target``: a later alarm is kept."""
    target = max(physical_next_at, self.now_ms + self.options.alarm_min_delay_ms)
    return target if current is None or current < physical_next_at else None


def _retrying_job() -> WorldRun:
    return run_world(*every_attempt_fails(), seed=1)


def _burst() -> WorldRun:
    return run_story("over-burst")


@pytest.mark.parametrize(
    ("attribute", "broken", "world"),
    [("_targets", _latest_participant, _retrying_job), ("_alarm_target", _never_pulled_in, _burst)],
    ids=["reads-the-latest-participant", "never-pulls-the-alarm-in"],
)
def test_a_client_alarm_reconciled_past_its_work_stops_a_world_on_alarm_follows_work(
    monkeypatch: pytest.MonkeyPatch, attribute: str, broken: Any, world: Callable[[], WorldRun]
) -> None:
    """A client object's scheduler arms one alarm for its queue and its operations: a reconcile
    that arms it for the wrong participant (a job retrying while the queue waits), or keeps an
    alarm later than the work now needs (a burst after a quiet spell), is judged at once, with
    no eviction needed to show the work would wait."""
    assert world().result.outcome == "completed"
    monkeypatch.setattr(engine_module.Engine, attribute, broken)
    if attribute == "_targets":
        # A wrong reading is judged at the read itself first (engine_timers, against the rows);
        # without that judge, the alarm it leaves is judged here.
        assert world().result.invariant == "engine_timers"
        monkeypatch.setattr(EngineTimers, "on_targets", lambda *args: None)
    run = world()
    assert run.result.invariant == "alarm_follows_work", run.result
    assert "client-" in run.result.detail


def test_every_objects_reconciles_are_judged_holders_and_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[str] = []
    real = Monitor.reconciled

    def heard(self: Monitor, object: str, *args: Any) -> None:
        judged.append(object)
        real(self, object, *args)

    monkeypatch.setattr(Monitor, "reconciled", heard)
    assert _retrying_job().result.outcome == "completed"
    assert sorted(set(judged)) == ["client-0", "holder:acct"]


def _refresh_kept_for_good(self: engine_module.Engine) -> Any:
    """``scheduleNextAlarm`` without the ``finally`` that clears its coalesced refresh: after the
    first, every refresh (a pass's last) returns that settled promise and reconciles nothing."""
    if self._alarm_refresh is None:
        self._alarm_refresh = self.transaction_async(lambda _conn: None)
    return self._alarm_refresh


def test_a_pass_that_ends_without_refreshing_the_alarm_stops_a_world_on_alarm_follows_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass's last step is judged whether or not its refresh reconciled: the alarm the platform
    fired is gone, and with work still pending nothing sets another."""
    assert run_story("zombie-call-over-the-limit").result.invariant is None
    monkeypatch.setattr(engine_module.Engine, "schedule_next_alarm", _refresh_kept_for_good)
    run = run_story("zombie-call-over-the-limit")
    assert run.result.invariant == "alarm_follows_work", run.result
    assert "but the alarm is None" in run.result.detail


def _two_jobs_failing() -> WorldRun:
    """Two jobs 10 s apart, every call failing, six attempts each: the older job's fifth retry
    (16 s off, past the client's 15 s alarm floor) is pending while the newer job's is due first."""
    config = one_job(5_000, idempotent=True, limit=2)
    assert config.operations is not None
    jobs = tuple(Arrival(at_ms=at, client=0, count=1, duration_ms=5_000) for at in (1_000, 11_000))
    config = attrs.evolve(
        config,
        operations=attrs.evolve(config.operations, max_attempts=6),
        workload=Workload(clients=1, plain_clients=1, script=jobs),
    )
    return run_world(config, FaultPlan(api_error=1.0, faults_until_ms=170_000), seed=1)


def test_a_pending_head_read_by_creation_stops_a_world_on_alarm_follows_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check reads a client's operations' earliest pending time from their rows, apart from
    ``pendingTimes``' query: a head read in creation order arms the alarm for the older job's
    retry while the newer one's is due sooner."""
    assert _two_jobs_failing().result.outcome == "completed"
    monkeypatch.setattr(engine_module, "pending_heads", heads_by_creation)
    # engine_timers judges the reading itself first; without it, the alarm it left is judged here.
    assert _two_jobs_failing().result.invariant == "engine_timers"
    monkeypatch.setattr(EngineTimers, "on_targets", lambda *args: None)
    run = _two_jobs_failing()
    assert run.result.invariant == "alarm_follows_work", run.result
    assert "client-0: work pending at" in run.result.detail
