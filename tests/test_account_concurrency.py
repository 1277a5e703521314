"""The account-concurrency world (``config.operations``): seed 000's composition, judged at the API.

Admitted items run as durable operations on their client object (id = item
id), whose handler calls the external API; the permit comes back through
the lifecycle hook (or the ``finished`` backstop). ``external_ceiling`` and
``effect_once`` are judged at the API itself.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import attrs
import pytest

from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
from semsim.check.engine_timers import EngineTimers
from semsim.harness.run import WorldConfig, WorldRun, check_plan, run_world, stall_ms
from semsim.runtime.network import Network
from semsim.scenarios import SCENARIOS
from semsim.scenarios.operations import CLIENT, one_job
from semsim.world.external_api import ExternalApi
from semsim.world.faults import Eviction, FaultPlan
from semsim.world.operations import OperationsSpec


def kinds(run: WorldRun) -> Counter[str]:
    return Counter(event["kind"] for event in run.trace.events())


def lifecycle(run: WorldRun) -> list[tuple[str, Any, Any]]:
    return [(e["type"], e.get("attempt"), e.get("outcome")) for e in run.trace.of_kind("operation")]


# --- configuration ---------------------------------------------------------------------------


def test_a_world_without_operations_records_its_config_and_plan_as_before() -> None:
    config, plan = WorldConfig(), FaultPlan()
    assert "operations" not in config.to_dict()
    assert not {"api_error", "api_error_after_effect", "api_slow", "api_slow_factor"} & set(plan.to_dict())
    assert WorldConfig.from_dict(config.to_dict()) == config
    assert FaultPlan.from_dict(plan.to_dict()) == plan


def test_the_operations_and_the_api_faults_round_trip_through_a_record() -> None:
    config = one_job(idempotent=True, attempt_timeout_ms=7_000)
    plan = FaultPlan(api_error=0.1, api_slow=0.2, api_slow_factor=3)
    assert config.to_dict()["operations"]["attempt_timeout_ms"] == 7_000
    assert WorldConfig.from_dict(config.to_dict()) == config
    assert FaultPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_attempts", 0, "config.operations.max_attempts"),
        ("attempt_timeout_ms", -1, "config.operations.attempt_timeout_ms"),
        ("idempotent_api", "yes", "config.operations.idempotent_api"),
    ],
)
def test_a_bad_operations_field_is_named(field: str, value: Any, message: str) -> None:
    record = one_job().to_dict()
    record["operations"][field] = value
    with pytest.raises(ValueError, match=message):
        WorldConfig.from_dict(record)


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ({"api_error": 1.5}, "faults.api_error"),
        ({"api_slow": -0.1}, "faults.api_slow"),
        ({"api_error": 0.6, "api_error_after_effect": 0.6}, "api_error_after_effect"),
        ({"api_slow_factor": 0}, "faults.api_slow_factor"),
    ],
)
def test_bad_api_faults_are_a_value_error_naming_the_field(rates: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultPlan(**rates)
    with pytest.raises(ValueError, match=message):
        FaultPlan.from_dict({**FaultPlan().to_dict(), **rates})


def test_api_faults_without_operations_are_refused_not_ignored() -> None:
    with pytest.raises(ValueError, match="external API"):
        check_plan(WorldConfig(), FaultPlan(api_slow=0.5))
    check_plan(one_job(), FaultPlan(api_slow=0.5))  # with operations: fine


# --- the composition ---------------------------------------------------------------------------


def test_an_admitted_item_runs_as_an_operation_and_its_permit_returns_through_the_hook() -> None:
    run = run_world(one_job(10_000, idempotent=True), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    admitted = [e["item"] for e in run.trace.of_kind("admit")]
    assert len(admitted) == 1
    [item] = admitted
    registered = [e["id"] for e in run.trace.of_kind("operation") if e["type"] == "registered"]
    assert registered == [item]  # operation id = item id
    assert lifecycle(run) == [
        ("registered", 0, None),
        ("attempt_started", 1, None),
        ("attempt_settled", 1, "completed"),
    ]
    [done] = [e for e in run.trace.of_kind("operation") if e["type"] == "attempt_settled"]
    [released] = run.trace.of_kind("release")
    assert released["item"] == item
    assert released["t"] == done["t"]  # the hook, not the finished backstop
    api = run.world.api
    assert isinstance(api, ExternalApi)
    assert api.effects == {item: 1}
    assert kinds(run)["job_start"] == 0  # nothing ran on the job service


def test_a_failed_last_attempt_comes_back_through_the_finished_check() -> None:
    """Seed 000's hook ignores attempt_settled/failed: ``finished`` returns that permit."""
    config = one_job(5_000, idempotent=True)
    run = run_world(config, FaultPlan(api_error=1.0, faults_until_ms=100_000), seed=1)
    assert run.result.outcome == "completed", run.result
    outcomes = [outcome for kind, _, outcome in lifecycle(run) if kind == "attempt_settled"]
    assert outcomes == ["retry_scheduled", "retry_scheduled", "failed"]
    [reconciled] = run.trace.of_kind("reconciled")
    [released] = run.trace.of_kind("release")
    assert reconciled["item"] == released["item"]


def test_an_evicted_client_runs_the_next_attempt_under_the_same_id() -> None:
    config = one_job(30_000, idempotent=True)
    run = run_world(config, FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=10_000),)), seed=1)
    assert run.result.outcome == "completed", run.result
    started = [e for e in run.trace.of_kind("operation") if e["type"] == "attempt_started"]
    assert [e["attempt"] for e in started[:2]] == [1, 2]
    assert len({e["id"] for e in started}) == 1
    assert started[1]["t"] > 10_000
    api = run.world.api
    assert isinstance(api, ExternalApi)
    assert list(api.effects.values()) == [1]  # the idempotent API kept it to one effect


# --- the invariants at the API ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_a_timed_out_attempts_call_running_on_breaks_external_ceiling_as_f5(seed: int) -> None:
    """The zombie (docs/FINDINGS.md, F5): a 30 s call, a 10 s attempt timeout, a non-idempotent API.
    Attempt 2's call starts while attempt 1's runs: two calls in flight on one permit, limit 1."""
    run = run_world(one_job(30_000, attempt_timeout_ms=10_000), FaultPlan(), seed=seed)
    assert run.result.outcome == "violation"
    assert run.result.invariant == "external_ceiling"
    assert run.result.finding == "F5"
    assert "2 calls in flight at the external API > limit 1 (1 permits in use" in run.result.detail


def test_a_duplicated_request_is_not_f5_its_attempt_is_not_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """F5 names calls of attempts that are over. The model's network never duplicates a request
    to the API (HTTP over TCP), so two calls of one running attempt mean a handler that called
    twice: a breach no timeout or eviction explains, which no finding may excuse. Shown here on a
    network that does duplicate requests to the API."""
    register = Network.register

    def register_duplicating(self: Network, name: str, endpoint: Any, *, duplicates: bool = True) -> None:
        register(self, name, endpoint)

    monkeypatch.setattr(Network, "register", register_duplicating)
    plan = FaultPlan(duplicate=1.0, faults_until_ms=10_000)
    run = run_world(one_job(4_000), plan, seed=1)
    assert run.result.invariant == "external_ceiling", run.result
    started = [e for e in run.trace.of_kind("operation") if e["type"] == "attempt_started"]
    assert len(started) == 1  # one attempt: nothing timed out, nothing was evicted
    assert run.result.finding is None, run.result
    assert "calls of finished attempts: none" in run.result.detail


@pytest.mark.parametrize("seed", [6, 7, 26, 35])
def test_a_request_held_back_past_the_next_attempt_is_still_its_own_attempts_f5(seed: int) -> None:
    """Attempt 1 timed out while its request was still in the network; it reached the API after
    attempt 2 had started. The request names its attempt, so the call is attempt 1's zombie:
    F5, not a breach with no finding (as it was judged when calls were told apart by when they
    arrived: these four of seeds 0 to 59). With F5's fix the deadline it carries holds it."""
    config, plan = one_job(8_000, attempt_timeout_ms=2_000), FaultPlan(delay_ms=4_000, faults_until_ms=30_000)
    run = run_world(config, plan, seed=seed)
    assert (run.result.invariant, run.result.finding) == ("external_ceiling", "F5"), run.result
    assert run_world(with_f5_fix(config), plan, seed=seed).result.outcome == "completed"


def test_f5_is_tolerated_by_name_when_asked() -> None:
    run = run_world(
        one_job(30_000, attempt_timeout_ms=10_000), FaultPlan(), seed=1, tolerated=frozenset({"F5"})
    )
    assert run.result.outcome == "completed", run.result
    assert [v.finding for v in run.monitor.violations][:1] == ["F5"]


# --- F5's fix: a call carries its attempt's deadline; the next call and the permit wait for it ----


def with_f5_fix(config: WorldConfig) -> WorldConfig:
    return attrs.evolve(config, holder=attrs.evolve(config.holder, fixes=(CALLS_END_WITHIN_THEIR_PERMIT,)))


def calls(run: WorldRun) -> list[tuple[int, int, str]]:
    """``(start, end, outcome)`` of every call the API ran, in start order."""
    ends = {e["call"]: (e["t"], e["outcome"]) for e in run.trace.of_kind("api_end")}
    return [(e["t"], *ends[e["call"]]) for e in run.trace.of_kind("api_start")]


@pytest.mark.parametrize("seed", range(4))
def test_with_f5s_fix_a_timed_out_attempts_call_ends_with_the_attempt(seed: int) -> None:
    """F5's zombie with the fix: each call carries its attempt's deadline, so the API cuts it
    when the attempt times out, before the retry calls: never two calls on the one permit."""
    run = run_world(with_f5_fix(one_job(30_000, attempt_timeout_ms=10_000)), FaultPlan(), seed=seed)
    assert run.result.outcome == "completed", run.result
    made = calls(run)
    assert [outcome for _, _, outcome in made] == ["deadline"] * 3
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in itertools.pairwise(made))
    assert max(e["in_flight"] for e in run.trace.of_kind("api_start")) == 1
    api = run.world.api
    assert isinstance(api, ExternalApi)
    assert api.effects == {}


def test_with_f5s_fix_the_attempt_after_an_eviction_waits_for_the_lost_attempts_call() -> None:
    """An eviction loses attempt 1's handler, not its logged deadline: attempt 2, run from the
    alarm while call 1 may still run, waits for that deadline before it calls."""
    plan = FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=5_000),))
    reference = run_world(one_job(30_000), plan, seed=1)
    assert (reference.result.invariant, reference.result.finding) == ("external_ceiling", "F5")
    run = run_world(with_f5_fix(one_job(30_000)), plan, seed=1)
    assert run.result.outcome == "completed", run.result
    [waited] = run.trace.of_kind("call_waits")
    first, second = calls(run)[:2]
    assert waited["t"] > 5_000
    assert waited["until"] == first[0] - 5 + 60_000 + 1
    assert second[0] >= waited["until"] > first[1]


def test_with_f5s_fix_the_permit_returns_only_once_the_last_call_is_over() -> None:
    """The operation is over (its last attempt evicted, then ``terminal``) while its call may
    still run: the permit waits for that call's deadline, then comes back."""
    scenario = SCENARIOS["last-attempt-evicted-terminal"]
    run = run_world(with_f5_fix(scenario.config), scenario.faults, scenario.seed)
    assert run.result.outcome == "completed", run.result
    waits = run.trace.of_kind("release_waits")
    assert waits, "no release had to wait"
    releases = {e["item"]: e["t"] for e in run.trace.of_kind("release")}
    for wait in waits:
        assert releases[wait["item"]] >= wait["until"] > wait["t"]


def test_with_f5s_fix_a_waiting_release_lost_to_an_eviction_is_rebuilt_from_the_call_log() -> None:
    """Evicted while a permit waits for its call's deadline: the next instance reads the call
    log and returns the permit at that deadline, as the lost one would have (not a finished
    check later)."""
    scenario = SCENARIOS["last-attempt-evicted-terminal"]
    config = with_f5_fix(scenario.config)
    [wait] = run_world(config, scenario.faults, scenario.seed).trace.of_kind("release_waits")
    plan = attrs.evolve(
        scenario.faults, evictions=(*scenario.faults.evictions, Eviction(target=CLIENT, at_ms=wait["t"] + 1))
    )
    run = run_world(config, plan, scenario.seed)
    assert run.result.outcome == "completed", run.result
    [release] = [e for e in run.trace.of_kind("release") if e["item"] == wait["item"]]
    assert release["t"] == wait["until"]
    assert not [e for e in run.trace.of_kind("reconciled") if e["item"] == wait["item"]]
    rebuilt = [e["t"] for e in run.trace.of_kind("instance") if e["object"] == CLIENT]
    assert any(wait["t"] < t < release["t"] for t in rebuilt)  # a new instance did it


def test_without_f5s_fix_no_deadline_is_sent_and_nothing_is_logged() -> None:
    run = run_world(one_job(4_000), FaultPlan(), seed=1)
    [request] = [e["body"] for e in run.trace.of_kind("send") if e["dst"] == "api"]
    assert "deadlineAt" not in request
    assert not run.trace.of_kind("call_waits")
    assert not run.trace.of_kind("release_waits")
    fixed = run_world(with_f5_fix(one_job(4_000)), FaultPlan(), seed=1)
    [request] = [e["body"] for e in fixed.trace.of_kind("send") if e["dst"] == "api"]
    assert request["deadlineAt"] == 2_025 + 60_000


def test_calls_within_the_limit_are_not_judged_however_many_attempts_overlap() -> None:
    # The same zombies under a limit of 4: two calls on one permit, but never above the limit.
    run = run_world(one_job(30_000, attempt_timeout_ms=10_000, limit=4), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    api = run.world.api
    assert isinstance(api, ExternalApi)
    assert max(api.effects.values()) == 3  # three attempts, three calls, three effects


def test_operations_queued_for_the_pool_are_work_moving_not_a_stuck_run() -> None:
    """No fault at all: 20 jobs on one client whose scheduler runs one attempt at a time
    (``alarmConcurrency`` 1), each call slower than the attempt timeout. Attempts go on all the
    time, but the first operation ends only after every other one has had its turns (the pool
    serves its waiters first in, first out), long after ``stall_ms``: a slow run, not a stuck one."""
    config = attrs.evolve(
        one_job(30_000, attempt_timeout_ms=10_000, limit=50, count=20),
        operations=OperationsSpec(idempotent_api=False, attempt_timeout_ms=10_000, alarm_concurrency=1),
    )
    run = run_world(config, FaultPlan(), seed=1, tolerated=frozenset({"F5"}))
    assert run.result.outcome == "completed", run.result
    releases = [e["t"] for e in run.trace.of_kind("release")]
    assert len(releases) == 20
    assert releases[0] > stall_ms(config)  # nothing was released for longer than the stall window
    assert not [v for v in run.monitor.violations if v.name != "external_ceiling"]


def test_a_stuck_operation_is_still_cut_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: an operation that never gets another attempt (its alarm is lost) leaves
    its item running and nothing moves; ``progress`` fails once the stall window has passed."""
    from semsim.runtime.scheduler import DurabilityScheduler

    monkeypatch.setattr(DurabilityScheduler, "_fire", lambda self: None)  # no in-memory timer fires
    plan = FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=5_000),))
    monkeypatch.setattr(DurabilityScheduler, "alarm", _no_pass)
    run = run_world(one_job(10_000, idempotent=True), plan, seed=1)
    # An early timer that never fires is a shell's bug ``engine_timers`` names first ...
    assert run.result.invariant == "engine_timers", run.result
    # ... and without it, ``progress`` still cuts the stuck operation short.
    monkeypatch.setattr(EngineTimers, "on_step", lambda *_: None)
    run = run_world(one_job(10_000, idempotent=True), plan, seed=1)
    assert run.result.invariant == "progress", run.result
    assert "nothing was admitted or released" in run.result.detail


async def _no_pass(self: Any) -> None:
    """An alarm that runs no participant's due work."""


def test_effect_once_breaks_when_an_idempotent_api_takes_effect_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check can fail: an API that claims idempotency but forgets what took effect."""
    real_end = ExternalApi._end

    def forgetful_end(self: ExternalApi, call: Any) -> None:
        real_end(self, call)
        self._stored.clear()  # the next call with the key runs again, and takes effect again

    monkeypatch.setattr(ExternalApi, "_end", forgetful_end)
    # The client is evicted while attempt 1's 10 s call runs; attempt 2 (from the stored alarm,
    # after the call ended) calls again with the same key.
    plan = FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=5_000),))
    run = run_world(one_job(10_000, idempotent=True), plan, seed=1)
    assert run.result.invariant == "effect_once", run.result
    assert "took effect 2 times at an idempotent API" in run.result.detail
    # The same story against the real API: one effect, no violation.
    monkeypatch.undo()
    run = run_world(one_job(10_000, idempotent=True), plan, seed=1)
    assert run.result.outcome == "completed", run.result


def test_operation_progress_breaks_when_a_permit_returns_while_its_operation_is_still_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check can fail: a hook that returns the permit at a retry (not at the end), with a
    retry due long after the run settles, leaves the operation pending in a settled run."""
    from semaphore_core.durability import AttemptSettled, DurabilityOptions, ExponentialBackoff, RetryOptions
    from semsim.world import client_object

    def release_on_any_settle(event: Any) -> str | None:
        return event.entity.id if isinstance(event, AttemptSettled) else None

    def slow_retries(self: OperationsSpec, execute_only_due: bool = False) -> DurabilityOptions:
        delay = ExponentialBackoff(initial_ms=3_600_000, max_ms=3_600_000)
        return DurabilityOptions(
            handlers={"run": None},
            retries=RetryOptions(max_attempts=3, delay=delay),
            execute_only_due=execute_only_due,
        )

    monkeypatch.setattr(client_object, "releases_permit", release_on_any_settle)
    monkeypatch.setattr(OperationsSpec, "durability_options", slow_retries)
    plan = FaultPlan(api_error=1.0, faults_until_ms=60_000)
    run = run_world(one_job(5_000, idempotent=True), plan, seed=1)
    assert run.result.invariant == "operation_progress", run.result
    assert "1 operations still pending once the run settled: client-0/" in run.result.detail
    # The faithful hook keeps the permit until the operation ends: no violation.
    monkeypatch.undo()
    run = run_world(one_job(5_000, idempotent=True), plan, seed=1)
    assert run.result.outcome == "completed", run.result
    assert run.trace.of_kind("settled")


def test_fenced_breaks_when_an_outcome_names_an_attempt_other_than_the_latest() -> None:
    """The check can fail: the outcome of attempt 1 recorded after attempt 2 started (a stale
    attempt's completion, which seed 002's fencing by generation and attempt must drop)."""
    from semaphore_core.durability import AttemptSettled, AttemptStarted, OperationEntity
    from semsim.check.invariants import InvariantViolation, Monitor
    from semsim.runtime.kernel import Limits, Sim
    from semsim.runtime.trace import Trace

    monitor = Monitor(Sim(1, Trace(1, {}, {}), Limits()))
    job = OperationEntity(operation="run", id="job-1", generation="g-1")
    monitor.operation_event(CLIENT, AttemptStarted(entity=job, timestamp=0, attempt=1))
    # The latest attempt's outcome, and another client's operation of the same id: both fine.
    monitor.operation_event(
        CLIENT, AttemptSettled(job, 1, attempt=1, duration_ms=1, outcome="retry_scheduled")
    )
    monitor.operation_event("client-1", AttemptStarted(entity=job, timestamp=1, attempt=1))
    monitor.operation_event(CLIENT, AttemptStarted(entity=job, timestamp=2, attempt=2))
    with pytest.raises(InvariantViolation, match="fenced"):
        monitor.operation_event(CLIENT, AttemptSettled(job, 3, attempt=1, duration_ms=3, outcome="completed"))
    reused = OperationEntity(operation="run", id="job-1", generation="g-2")
    monitor.operation_event(CLIENT, AttemptStarted(entity=reused, timestamp=4, attempt=1))
    with pytest.raises(InvariantViolation, match="fenced"):  # the old generation's attempt 1
        monitor.operation_event(CLIENT, AttemptSettled(job, 5, attempt=1, duration_ms=5, outcome="completed"))


@pytest.mark.parametrize("seed", range(3))
def test_fenced_holds_through_timeouts_and_evictions(seed: int) -> None:
    plan = FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=15_000),), api_slow=0.5)
    run = run_world(one_job(20_000, idempotent=True, attempt_timeout_ms=10_000, count=3, limit=3), plan, seed)
    assert run.result.outcome == "completed", run.result
    started = [e for e in run.trace.of_kind("operation") if e["type"] == "attempt_started"]
    assert len(started) > 3  # retries happened: the fence was exercised


def test_every_pass_that_hands_off_is_in_the_trace_early_ones_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries run in the engine's early passes (their backoff is shorter than the alarm's
    floor), and an early pass races the hand-off as the platform's does: with 10 s attempts
    and a 5 s ``alarmHandoffMs``, each retry's pass hands off. Each is an ``alarm_handoff``."""
    from semsim.runtime.scheduler import DurabilityScheduler

    ends: list[bool] = []
    apply = DurabilityScheduler.apply

    def counting(self: DurabilityScheduler, step: Any) -> None:
        ends.extend(end.early for end in step.alarm_ends if end.outcome == "handed_off")
        apply(self, step)

    monkeypatch.setattr(DurabilityScheduler, "apply", counting)
    config = attrs.evolve(
        one_job(30_000, attempt_timeout_ms=10_000),
        operations=OperationsSpec(attempt_timeout_ms=10_000, alarm_handoff_ms=5_000),
    )
    run = run_world(config, FaultPlan(), seed=1, tolerated=frozenset({"F5"}))
    assert True in ends, ends
    assert [e.get("early", False) for e in run.trace.of_kind("alarm_handoff")] == ends


# --- a client's alarm pass that throws (the plan's alarm_failure, account-concurrency worlds) ------


def test_a_clients_throwing_alarm_pass_is_re_armed_by_its_engine_and_its_operations_finish() -> None:
    """Evicted mid-attempt, the client comes back only through its alarm, whose passes all throw
    until 60 s: its engine re-arms its own fallback each time (seed 002, ``armFallbackAlarm``), the
    operations' attempts it claimed run on, and once the faults stop every operation finishes."""
    plan = FaultPlan(
        alarm_failure=1.0, evictions=(Eviction(target=CLIENT, at_ms=5_000),), faults_until_ms=60_000
    )
    run = run_world(one_job(30_000, idempotent=True, count=3, limit=2), plan, seed=1)
    assert run.result.outcome == "completed", run.result
    retries = [e for e in run.trace.of_kind("alarm_retry") if e["object"] == CLIENT]
    assert retries
    assert all(e["t"] < 60_000 for e in retries)
    assert all("injected: due work threw" in e["error"] for e in retries)
    started = [e["t"] for e in run.trace.of_kind("operation") if e["type"] == "attempt_started"]
    assert any(5_000 < t < 60_000 for t in started)  # the failing passes still started attempts


def test_without_operations_a_clients_alarm_passes_never_throw() -> None:
    """Older worlds keep their traces: the plan's alarm_failure is the holders' alone there."""
    config = attrs.evolve(one_job(4_000), operations=None)
    plan = FaultPlan(alarm_failure=1.0, evictions=(Eviction(target=CLIENT, at_ms=1_500),))
    run = run_world(config, plan, seed=1)
    assert not [e for e in run.trace.of_kind("alarm_retry") if e["object"] == CLIENT]
    assert [e for e in run.trace.of_kind("alarm") if e["object"] == CLIENT]  # its alarm did run


def _call(in_flight: int, *running: Any, limit: int | None = 2, in_use: int = 0, **extra: Any) -> Any:
    from semsim.check.events import ApiCallChange

    return ApiCallChange(
        10,
        "start",
        "acct",
        "job-1",
        1,
        True,
        in_flight=in_flight,
        in_use=in_use,
        limit=limit,
        running=tuple(running),
        **extra,
    )


def test_external_ceiling_tells_a_zombies_call_from_a_live_one() -> None:
    """The checker alone, on the events it hears: over the limit with every call's attempt live is
    a violation with no finding; with a call of an attempt a later one replaced, F5; under the
    limit, or explained by as many permits in use, or in over mode, nothing."""
    from semaphore_core.config import LeaseOptions, Over
    from semaphore_core.durability import AttemptStarted, OperationEntity
    from semsim.check.events import Operation, RunningCall
    from semsim.check.external_ceiling import ExternalCeiling

    failed: list[tuple[str, str, str | None]] = []
    checker = ExternalCeiling(
        lambda name, detail, finding=None, **state: failed.append((name, detail, finding))
    )
    live = [RunningCall(f"job-{n}", 0, 1, True) for n in range(3)]
    checker.on_api(_call(2, *live[:2]))
    checker.on_api(_call(3, *live, in_use=3))
    checker.on_api(_call(3, *live, leases=LeaseOptions(provisioning=Over(2))))
    checker.on_api(_call(3, *live, limit=None))
    assert failed == []
    checker.on_api(_call(3, *live))
    assert failed[-1] == (
        "external_ceiling",
        "acct: 3 calls in flight at the external API > limit 2 (0 permits in use; calls of finished "
        "attempts: none)",
        None,
    )
    job = OperationEntity(operation="run", id="job-0", generation="g-1")
    checker.on_operation(Operation(5, CLIENT, AttemptStarted(entity=job, timestamp=5, attempt=2)))
    checker.on_api(_call(3, *live))  # job-0's call is attempt 1's, and attempt 2 started
    assert failed[-1][1].endswith("calls of finished attempts: job-0)")
    assert [finding for _, _, finding in failed] == [None, "F5"]
    unnamed = RunningCall("job-0", 6, None, True)  # no attempt named: sent after attempt 2 started
    checker.on_api(_call(3, unnamed, *live[1:]))
    assert failed[-1][1].endswith("attempts: none)")
    released = RunningCall("job-1", 0, 1, False)  # its item no longer holds a permit
    checker.on_api(_call(3, live[0], released, live[2]))
    assert failed[-1][1].endswith("attempts: job-0, job-1)")
