"""What the swarm reaches so the whole-system fuzz sees more bugs, and that each reach can fail.

- Clients whose ids differ only in case, and bursts that every client sends
  at the same moment: equally old demand, so the holder's ``localeCompare``
  tie-break decides (``equal-age-ties-by-locale``).
- A forger's report with a negative count: the holder must reject the
  message whole (``malformed-report-rejected``).
- ``alarm_armed``'s second clause: while the same work is pending and not
  yet due, no commit pushes the stored alarm later (the reference engine's
  "preserve a fallback inside this range").
- A drawn run with delays delivers on a tick, and a drawn holder eviction at
  an odd ms is a deploy rolled back: a claim lands on its deadline's
  millisecond (``claim-deadline-off-by-one``), and a down migration runs
  (``migration-down-keeps-claim-index``).

Each is shown against a catalogued mutant: the check that should see the
bug stops the run, and the same world without it completes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

import semsim.check.lockstep
from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
from semsim.check.coverage import EXPECTED, coverage
from semsim.explore.fuzz import load_case, run_case
from semsim.explore.strategies import API_FAULT_KINDS, DELAY_TICK_MS, Case, cases
from semsim.harness.run import HolderSpec, WorldConfig, check_plan, run_world
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.scenarios.operations import one_job
from semsim.world.faults import Drop, FaultPlan
from semsim.world.mutant_catalog import mutant
from semsim.world.workload import Arrival, Workload
from tests.helpers import NoLockstep

# --- ids that differ only in case, and aligned bursts ----------------------------------------


def test_case_twins_are_named_lower_case_first_and_differ_only_in_case() -> None:
    names = Workload(clients=5, client_ids="case_twins").client_names()
    assert names == ["client-0", "Client-0", "client-1", "Client-1", "client-2"]
    assert Workload(clients=3).client_names() == ["client-0", "client-1", "client-2"]


def test_aligned_needs_bursts_and_an_unknown_naming_is_refused() -> None:
    with pytest.raises(ValueError, match="aligned needs arrival 'bursts'"):
        Workload(arrival="steady", aligned=True)
    with pytest.raises(ValueError, match="client_ids"):
        Workload(client_ids="lettered")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"config\.workload\.aligned"):
        WorldConfig.from_dict({"workload": {"arrival": "bursts", "aligned": "yes"}})


def test_aligned_bursts_come_at_the_same_moments_from_every_client() -> None:
    workload = Workload(
        clients=3, arrival="bursts", burst_size=1, burst_every_ms=10_000, until_ms=35_000, aligned=True
    )
    config = WorldConfig(holder=HolderSpec(limit=10, leases=None), workload=workload, duration_ms=60_000)
    run = run_world(config, FaultPlan(), seed=3)
    ages: dict[str, set[int]] = {}
    for send in run.trace.of_kind("send"):
        if send["method"] == "permits" and send["body"].get("demand"):
            ages.setdefault(send["src"], set()).update(d["oldestAt"] for d in send["body"]["demand"])
    assert sorted(ages) == ["client-0", "client-1", "client-2"]
    first = {client: min(times) for client, times in ages.items()}
    assert len(set(first.values())) == 1, first
    # Without alignment each client's first burst comes at its own random moment.
    loose = run_world(
        attrs.evolve(config, workload=attrs.evolve(workload, aligned=False)), FaultPlan(), seed=3
    )
    starts = {s["src"]: s["t"] for s in reversed(loose.trace.of_kind("send")) if s["method"] == "permits"}
    assert len(set(starts.values())) == len(starts) == 3


@pytest.mark.parametrize("name", ["ties-by-code-point", "ties-case-blind"])
def test_a_port_that_breaks_ties_otherwise_fails_the_ties_story(name: str) -> None:
    with mutant(name).patch():
        result = run_scenario(SCENARIOS["equal-age-ties-by-locale"])
    assert any("localeCompare served client-0" in f for f in result.failures), result.failures


@pytest.mark.parametrize("name", ["ties-by-code-point", "ties-case-blind"])
def test_without_the_literal_model_the_ties_story_still_sees_the_wrong_order(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    with mutant(name).patch():
        result = run_scenario(SCENARIOS["equal-age-ties-by-locale"])
    assert result.invariant_failure is None
    assert any("localeCompare served client-0" in f for f in result.failures), result.failures


def test_with_numbered_ids_the_ties_story_has_nothing_to_tell() -> None:
    story = SCENARIOS["equal-age-ties-by-locale"]
    numbered = attrs.evolve(story.config, workload=attrs.evolve(story.config.workload, client_ids="numbered"))
    failures = run_scenario(attrs.evolve(story, config=numbered)).failures
    assert failures


def test_the_swarm_draws_case_twins_and_aligned_bursts() -> None:
    seen: set[tuple[str, bool]] = set()

    @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(cases())
    def draw(case: object) -> None:
        workload = case.config.workload  # type: ignore[attr-defined]
        seen.add((workload.client_ids, workload.aligned))

    draw()
    assert {("case_twins", True), ("numbered", True), ("case_twins", False)} <= seen


# --- a report with a negative count ----------------------------------------------------------


def test_without_the_negative_counts_the_malformed_story_has_no_lie() -> None:
    story = SCENARIOS["malformed-report-rejected"]
    plan = attrs.evolve(story.faults, forged_lies=("rewind",))
    failures = run_scenario(attrs.evolve(story, faults=plan)).failures
    assert any("negative count" in f for f in failures), failures


def test_a_parser_that_accepts_negative_counts_is_seen_by_the_story_and_the_literal_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with mutant("parse-accepts-negative-counts").patch():
        result = run_scenario(SCENARIOS["malformed-report-rejected"])
    assert result.invariant_failure is not None
    assert "exact_accounting" in result.invariant_failure
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    with mutant("parse-accepts-negative-counts").patch():
        result = run_scenario(SCENARIOS["malformed-report-rejected"])
    assert result.failures, "the story's own expectations must see an accepted negative count"


def test_a_negative_count_is_counted_as_sometimes_reached() -> None:
    assert "forged:negative_count" in EXPECTED
    story = SCENARIOS["malformed-report-rejected"]
    run = run_world(story.config, story.faults, seed=story.seed)
    assert coverage(run.trace.events(), 5)["forged:negative_count"] >= 2


# --- the alarm is not pushed later ------------------------------------------------------------


def _steady_short_grants() -> WorldConfig:
    """Grant deadlines (3 s) well inside the alarm's 15 s floor, so every commit's target moves."""
    return WorldConfig(
        holder=HolderSpec(limit=2, leases=None, grant_timeout_ms=3_000, alarm_min_delay_ms=15_000),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=tuple(
                Arrival(at_ms=t, client=t // 1_000 % 2, count=2, duration_ms=2_500)
                for t in range(1_000, 20_000, 700)
            ),
        ),
        duration_ms=60_000,
    )


def test_an_engine_that_pushes_the_alarm_later_breaks_alarm_armed() -> None:
    config = _steady_short_grants()
    # Client 1's replies are lost for a while: its grants stay unclaimed while client 0's
    # rounds commit, each of which would move the alarm to its own now + 15 s.
    plan = FaultPlan(drops=(Drop(leg="reply", start_ms=0, end_ms=4_000, src="client-1"),))
    assert run_world(config, plan, seed=1).result.outcome == "completed"
    with mutant("engine-pushes-alarm-later").patch():
        run = run_world(config, plan, seed=1)
    assert run.result.invariant == "alarm_armed", run.result
    assert "pushed the alarm" in run.result.detail


# --- the account-concurrency world in the swarm ------------------------------------------------


def test_the_swarm_draws_account_concurrency_worlds_with_api_faults_only_there() -> None:
    seen: set[str] = set()

    @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(cases())
    def draw(case: Case) -> None:
        operations, faults = case.config.operations, case.faults
        if operations is None:
            assert not faults.api_faults(), faults  # check_plan would refuse it
            seen.add("plain")
            return
        check_plan(case.config, faults)
        seen.add("operations")
        seen.update(name for name in API_FAULT_KINDS if getattr(faults, name))
        seen.add(f"idempotent={operations.idempotent_api}")
        if operations.attempt_timeout_ms < case.config.workload.duration_ms[1]:
            seen.add("calls outlive their attempts")  # zombies can happen
        if operations.alarm_handoff_ms < operations.attempt_timeout_ms:
            seen.add("passes hand off")

    draw()
    assert seen == {
        "plain",
        "operations",
        *API_FAULT_KINDS,
        "idempotent=True",
        "idempotent=False",
        "calls outlive their attempts",
        "passes hand off",
    }


def test_each_account_concurrency_state_is_counted_from_a_trace() -> None:
    events = [
        {"t": 0, "kind": "operation", "object": "client-0", "type": "attempt_started", "id": "op"},
        {"t": 0, "kind": "send", "msg": "m1", "src": "client-0", "dst": "api", "method": "run"},
        {"t": 1, "kind": "deliver", "msg": "m1", "dst": "api", "method": "run"},
        {"t": 1, "kind": "api_start", "call": "c1", "account": "a", "key": "op", "until": 20, "slow": True},
        # The attempt timed out with its call still running: a zombie.
        {
            "t": 9,
            "kind": "operation",
            "object": "client-0",
            "type": "attempt_settled",
            "id": "op",
            "outcome": "retry_scheduled",
        },
        {"t": 10, "kind": "operation", "object": "client-0", "type": "attempt_started", "id": "op"},
        {"t": 11, "kind": "api_conflict", "account": "a", "key": "op", "call": "c1"},
        {"t": 12, "kind": "evict", "object": "client-0", "calls": 0, "live": True},  # mid-attempt
        {"t": 20, "kind": "api_end", "call": "c1", "account": "a", "outcome": "error_after_effect"},
        {"t": 21, "kind": "drop", "msg": "m1", "leg": "reply", "reason": "lost"},  # counted at api_end
        {"t": 22, "kind": "send", "msg": "m2", "src": "client-0", "dst": "api", "method": "run"},
        {"t": 22, "kind": "deliver", "msg": "m2", "dst": "api", "method": "run"},
        {"t": 22, "kind": "api_replay", "account": "a", "key": "op", "outcome": "ok"},
        {"t": 22, "kind": "drop", "msg": "m2", "leg": "reply", "reason": "lost"},  # the replay's news lost
        {"t": 23, "kind": "api_start", "call": "c2", "account": "a", "key": "op", "until": 24},
        {"t": 24, "kind": "api_end", "call": "c2", "account": "a", "outcome": "error"},
        {
            "t": 25,
            "kind": "operation",
            "object": "client-0",
            "type": "attempt_settled",
            "id": "op",
            "outcome": "failed",
        },
        {"t": 26, "kind": "alarm_handoff", "object": "client-0"},
        {"t": 27, "kind": "evict", "object": "client-0", "calls": 0, "live": True},  # nothing running
    ]
    counts = coverage(events, latency_ms=5)
    assert {name: n for name, n in counts.items() if name.startswith("ops:")} == {
        "ops:api_slow": 1,
        "ops:zombie_call": 1,
        "ops:conflict": 1,
        "ops:eviction_mid_attempt": 1,
        "ops:lost_completion": 2,  # an error after the effect, and a lost reply that told of one
        "ops:replay": 1,
        "ops:api_error": 1,
        "ops:retries_exhausted": 1,
        "ops:handoff": 1,
    }
    # Every ops counter but the client alarm's (counted with the alarm faults: the test below).
    assert {name for name in EXPECTED if name.startswith("ops:")} - {"ops:client_alarm_retry"} == set(
        counts
    ) - {"fault:reply_loss"}


def test_a_lost_completion_is_a_lost_reply_that_told_of_an_effect_not_any_lost_reply() -> None:
    """The API's reply lost after an error, a conflict or a refusal at the deadline: no effect
    happened, so no completion was lost. After ``ok``, or a replay of it: one was."""

    def request(msg: str, t: int, *api_events: dict[str, Any], reason: str = "lost") -> list[dict[str, Any]]:
        return [
            {"t": t, "kind": "send", "msg": msg, "src": "client-0", "dst": "api", "method": "run"},
            {"t": t, "kind": "deliver", "msg": msg, "dst": "api", "method": "run"},
            *api_events,
            {"t": t + 5, "kind": "drop", "msg": msg, "leg": "reply", "reason": reason},
        ]

    def call(call: str, t: int, outcome: str) -> list[dict[str, Any]]:
        return [
            {"t": t, "kind": "api_start", "call": call, "account": "a", "key": "op", "until": t + 1},
            {"t": t + 1, "kind": "api_end", "call": call, "account": "a", "outcome": outcome},
        ]

    events = [
        *request("m1", 0, *call("c1", 0, "error")),
        *request("m2", 10, *call("c2", 10, "deadline")),
        *request("m3", 20, {"t": 20, "kind": "api_deadline", "account": "a", "key": "op", "deadline": 19}),
        *request("m4", 30, {"t": 30, "kind": "api_conflict", "account": "a", "key": "op", "call": "c9"}),
        *request("m5", 40, *call("c5", 40, "ok")),  # lost
        *request("m6", 50, {"t": 50, "kind": "api_replay", "account": "a", "key": "op", "outcome": "ok"}),
        *request("m7", 60, *call("c7", 60, "ok"), reason="partitioned"),  # the client cut off: lost too
    ]
    assert coverage(events, latency_ms=5)["ops:lost_completion"] == 3


@pytest.mark.parametrize(("fixed", "zombies"), [(False, 3), (True, 0)])
def test_a_call_cut_at_its_attempts_timeout_is_no_zombie(fixed: bool, zombies: int) -> None:
    """A 30 s call, 10 s attempts. On the reference each attempt's call runs on 20 s after the
    attempt is over: three zombies. With F5's fix the API cuts each call at its deadline, the
    millisecond its attempt times out: no call outlives its attempt, so none is counted."""
    config = one_job(30_000, attempt_timeout_ms=10_000)
    if fixed:
        config = attrs.evolve(
            config, holder=attrs.evolve(config.holder, fixes=(CALLS_END_WITHIN_THEIR_PERMIT,))
        )
    run = run_world(config, FaultPlan(), seed=1, tolerated=frozenset({"F5"}))
    ends = [(e["t"], e["outcome"]) for e in run.trace.of_kind("api_end")]
    settled = [e["t"] for e in run.trace.of_kind("operation") if e["type"] == "attempt_settled"]
    if fixed:
        assert ends == [(t, "deadline") for t in settled]  # each call ends as its attempt does
    assert coverage(run.trace.events(), latency_ms=5)["ops:zombie_call"] == zombies


def test_a_clients_re_armed_alarm_is_counted_and_a_holders_is_not() -> None:
    events = [
        {"t": 1, "kind": "alarm_retry", "object": "client-0", "retry_at": 16, "error": "x"},
        {"t": 2, "kind": "alarm_retry", "object": "holder:acct", "retry_at": 17, "error": "x"},
    ]
    counts = coverage(events, latency_ms=5)
    assert counts["ops:client_alarm_retry"] == 1
    assert counts["fault:alarm_failure"] == 2


# --- a delivery tick and a rollback, as drawn ------------------------------------------------

#: Seed 3's 39th drawn run of a 50-run campaign (2026-12-04): delays on a 500 ms tick, a grant
#: timeout of 1 s, and two holder evictions drawn at odd ms, so two rollbacks.
ON_A_TICK_ROLLED_BACK = Path(__file__).parent / "fixtures" / "drawn_on_a_tick_rolled_back.json"


@pytest.mark.parametrize(
    ("name", "invariant"),
    [("claim-deadline-off-by-one", "reclaimed"), ("migration-down-keeps-claim-index", "crash")],
)
def test_a_drawn_run_on_a_tick_with_rollbacks_reaches_the_exact_deadline_and_the_down_path(
    name: str, invariant: str
) -> None:
    case, tolerated = load_case(ON_A_TICK_ROLLED_BACK)
    assert case.faults.delay_tick_ms == DELAY_TICK_MS
    assert case.faults.rollbacks
    report, _ = run_case(case, tolerated)
    assert report.outcome == "completed", report
    untick = attrs.evolve(case, faults=attrs.evolve(case.faults, delay_tick_ms=0, rollbacks=()))
    for reached, expected in ((case, invariant), (untick, None)):
        report, _ = run_case(attrs.evolve(reached, variant=f"mutant/{name}"), tolerated)
        assert (report.failure_name if report.failed else None) == expected, report
