"""Reports, holder callbacks and cancelled items: the scenarios' checks fail on the wrong story,
and the pieces under them (the forger's lease lies, the callbacks, cancel, the plan, coverage)."""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from semaphore_core.queue import QueueClient, QueueItem
from semsim.check.coverage import EXPECTED, coverage
from semsim.explore.strategies import cases
from semsim.harness.run import CANCEL_AIM_MS, check_plan, run_world
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.world.faults import Cancel, FaultPlan, InputFault
from semsim.world.holder_inputs import BAD_VALUE, PlannedInputFailure, holder_inputs
from semsim.world.mutant_catalog import mutant
from semsim.world.variant import REFERENCE

# --- each new scenario's check notices the wrong story ------------------------------------------


def failures_with(name: str, **changes: Any) -> tuple[str, ...]:
    return run_scenario(attrs.evolve(SCENARIOS[name], **changes)).failures


def without_faults(name: str) -> tuple[str, ...]:
    return failures_with(name, faults=FaultPlan())


def test_without_duplicates_no_report_arrives_twice() -> None:
    assert any("reached the holder twice" in f for f in without_faults("reports-duplicated"))


def test_without_reordering_no_stale_report_arrives_second() -> None:
    assert any("after one sent later" in f for f in without_faults("reports-reordered"))


def test_a_forger_that_only_rewinds_has_not_told_every_lie() -> None:
    plan = attrs.evolve(SCENARIOS["forged-grant-reports"].faults, forged_lies=("rewind",))
    assert any("every kind of lie" in f for f in failures_with("forged-grant-reports", faults=plan))


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("unknown-lease-report", "foreign_lease"),
        ("foreign-lease-report", "unknown_lease"),
        ("replayed-lease-report", "unknown_lease"),
    ],
)
def test_each_lease_story_needs_its_own_lie(name: str, wrong: str) -> None:
    plan = attrs.evolve(SCENARIOS[name].faults, forged_lies=(wrong,))
    failures = failures_with(name, faults=plan)
    assert failures
    assert "the forger" in failures[0]


def test_an_unknown_lease_that_is_not_charged_leaves_the_round_s_lease_whole() -> None:
    with mutant("unknown-lease-debt-dropped").patch():
        failures = run_scenario(SCENARIOS["unknown-lease-report"]).failures
    # The literal model or the lease pass's own check sees the missing debt first and ends
    # the run there.
    seen = ("short by the", "lease_fairness violated", "exact_accounting violated")
    assert any(any(s in f for s in seen) for f in failures), failures


def test_a_report_that_is_not_clamped_frees_capacity_twice() -> None:
    with mutant("released-not-clamped-to-claimed").patch():
        failures = run_scenario(SCENARIOS["forged-grant-reports"]).failures
    assert failures


def test_without_the_cancel_the_grant_is_claimed_whole() -> None:
    failures = without_faults("grant-claimed-in-part")
    assert any("claimed 2 of the 3" in f for f in failures)


def _claims_after_a_cancel_of_20(in_part: bool, items: int = 3) -> tuple[list[int], int, int, str]:
    """``grant-claimed-in-part``'s world with its cancel made a cancel of 20 at 1.005 s, while
    client 0's request for its ``items`` items waits for the round: what client 0 claimed on
    grant it claimed items on (a grant claimed with none has no ``claim`` event), how many
    items were cancelled, when the cancel struck, and how the run ended."""
    scenario = SCENARIOS["grant-claimed-in-part"]
    workload = scenario.config.workload
    script = (attrs.evolve(workload.script[0], count=items), *workload.script[1:])
    config = attrs.evolve(scenario.config, workload=attrs.evolve(workload, script=script))
    plan = FaultPlan(cancels=(Cancel("client-0", 1_005, 20, in_part=in_part),))
    run = run_world(config, plan, scenario.seed)
    claims = [e["items"] for e in run.trace.of_kind("claim") if e["client"] == "client-0"]
    cancelled = [e for e in run.trace.of_kind("cancel") if e["client"] == "client-0"]
    (struck,) = [e["t"] for e in run.trace.of_kind("fault") if e["fault"] == "cancel"]
    return claims, len(cancelled), struck, run.result.outcome


def test_a_cancel_in_part_leaves_the_group_s_oldest_item_for_its_grant() -> None:
    # Every item the request asked for goes: the grant of 3 is claimed with none.
    assert _claims_after_a_cancel_of_20(in_part=False) == ([], 3, 1_005, "completed")
    # In part: the newest two go, the oldest stays, and the grant of 3 is claimed with one.
    assert _claims_after_a_cancel_of_20(in_part=True) == ([1], 2, 1_005, "completed")


def test_a_cancel_in_part_waits_for_a_request_of_two_then_cancels_as_any_cancel() -> None:
    # A request for one item is never aimed at; after ``CANCEL_AIM_MS`` the cancel takes the
    # newest queued items as one without ``in_part`` does, and by then client 0's one item
    # has run: nothing is left to cancel, and the grant was claimed whole.
    late = 1_005 + CANCEL_AIM_MS
    assert _claims_after_a_cancel_of_20(in_part=True, items=1) == ([1], 0, late, "completed")
    assert _claims_after_a_cancel_of_20(in_part=False, items=1) == ([], 1, 1_005, "completed")


def test_a_reclaim_that_takes_claimed_permits_fails_the_partial_claim_story() -> None:
    with mutant("reclaim-takes-claimed").patch():
        result = run_scenario(SCENARIOS["grant-claimed-in-part"])
    assert result.invariant_failure is not None
    assert "conservative" in result.invariant_failure
    assert any("stayed charged" in f or "only the unclaimed permit" in f for f in result.failures)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("can-grant-denied", "`not_permitted`"),
        ("group-limit-fails-closed", "`limit_resolution_error`"),
        ("group-limit-returns-bad", "`limit_resolution_error`"),
        ("limit-fails-round", "rounds in the window failed"),
    ],
)
def test_without_the_misbehaving_callback_nothing_is_blocked(name: str, expected: str) -> None:
    assert any(expected in f for f in without_faults(name))


def test_a_denial_is_not_a_resolution_error() -> None:
    denied = SCENARIOS["can-grant-denied"].faults
    assert any(
        "`limit_resolution_error`" in f for f in failures_with("group-limit-fails-closed", faults=denied)
    )


# --- the callbacks ----------------------------------------------------------------------------


def test_callbacks_misbehave_only_in_their_window_and_for_their_group() -> None:
    t = [0]
    faults = (
        InputFault("can_grant", 10, 20, group="a"),
        InputFault("group_limit", 10, 20, group="b"),
        InputFault("group_limit", 10, 20, group="c", bad=True),
        InputFault("limit", 30, 40),
        InputFault("limit", 50, 60, bad=True),
    )
    inputs = holder_inputs(lambda: 7, {"b": 3}, faults, lambda: t[0])
    assert inputs.can_grant is not None
    assert (inputs.limit(), inputs.group_limit("b"), inputs.can_grant("a")) == (7, 3, True)
    t[0] = 10
    assert not inputs.can_grant("a")
    assert inputs.can_grant("b")
    with pytest.raises(PlannedInputFailure):
        inputs.group_limit("b")
    assert inputs.group_limit("c") == BAD_VALUE
    assert inputs.group_limit("a") is None
    t[0] = 30
    with pytest.raises(PlannedInputFailure):
        inputs.limit()
    with inputs.behaving():
        assert inputs.limit() == 7  # the checkers read the deployment's limit
    t[0] = 55
    assert inputs.limit() == BAD_VALUE
    t[0] = 60
    assert inputs.limit() == 7
    assert holder_inputs(lambda: 1, {}, faults[1:], lambda: 0).can_grant is None


def test_a_flapping_callback_misbehaves_on_every_other_call_per_group_and_per_set() -> None:
    t = [0]
    faults = (InputFault("group_limit", 10, 20, flapping=True), InputFault("limit", 10, 20, flapping=True))
    inputs = holder_inputs(lambda: 7, {"b": 3}, faults, lambda: t[0])
    twin = holder_inputs(lambda: 7, {"b": 3}, faults, lambda: t[0], inputs)
    assert inputs.group_limit("b") == 3  # before the window: no call is counted
    t[0] = 10
    outcomes: list[int | str | None] = []
    for group in ("b", "b", "a", "b", "a"):
        try:
            outcomes.append(inputs.group_limit(group))
        except PlannedInputFailure:
            outcomes.append("raised")
    assert outcomes == ["raised", 3, "raised", "raised", None]
    with inputs.behaving():  # the checkers' reads count on neither set
        assert (inputs.group_limit("b"), twin.group_limit("b"), twin.limit()) == (3, 3, 7)
    with pytest.raises(PlannedInputFailure):
        twin.group_limit("b")  # the twin's own first call
    assert twin.group_limit("b") == 3
    with pytest.raises(PlannedInputFailure):
        inputs.limit()
    assert inputs.limit() == 7
    t[0] = 20
    assert (inputs.limit(), inputs.limit()) == (7, 7)


def test_each_flapping_fault_counts_its_own_calls_and_any_fault_may_strike() -> None:
    t = [0]
    faults = (
        InputFault("group_limit", 0, 10, flapping=True),
        InputFault("group_limit", 5, 10, group="g", bad=True),
        InputFault("group_limit", 20, 30, flapping=True),
    )
    inputs = holder_inputs(lambda: 7, {"g": 3}, faults, lambda: t[0])

    def answers(count: int) -> list[object]:
        found: list[object] = []
        for _ in range(count):
            try:
                found.append(inputs.group_limit("g"))
            except PlannedInputFailure:
                found.append("raised")
        return found

    assert answers(3) == ["raised", 3, "raised"]
    t[0] = 5  # a steady fault beside the flapping one: every call misbehaves
    assert answers(2) == [BAD_VALUE, "raised"]
    t[0] = 20  # a window of its own counts from its own first call
    assert answers(2) == ["raised", 3]
    with inputs.peeking_only():  # a peek answers as the next call would, and counts nothing
        assert answers(2) == ["raised", "raised"]
    assert answers(1) == ["raised"]


@pytest.mark.parametrize("input_name", ["limit", "group_limit", "can_grant"])
def test_judging_beside_a_model_does_not_change_what_a_flapping_callback_answers(input_name: str) -> None:
    """The model in lockstep reads usage() after every operation; those reads only peek, so the
    holder's callbacks answer the same with or without a model beside it."""
    scenario = SCENARIOS["group-limit-flapping"]
    group = None if input_name == "limit" else "wf-2"
    plan = FaultPlan(input_faults=(InputFault(input_name, 0, 10_000, group=group, flapping=True),))
    runs = [
        run_world(scenario.config, plan, scenario.seed, variant=variant)
        for variant in (REFERENCE, attrs.evolve(REFERENCE, name="no-model", model=None))
    ]
    assert all(run.result.outcome == "completed" for run in runs), [run.result for run in runs]
    struck = [[(e["kind"], e["t"]) for e in run.trace.of_kind("round_failed", "blocked")] for run in runs]
    assert struck[0] == struck[1]
    assert struck[0]
    assert list(runs[0].trace.events()) == list(runs[1].trace.events())  # the headers name the variants


def test_a_plan_with_a_steady_callback_fault_reads_as_it_always_has() -> None:
    steady = FaultPlan(input_faults=(InputFault("limit", 1, 9),))
    assert list(steady.to_dict()["input_faults"]) == [
        {"input": "limit", "start_ms": 1, "end_ms": 9, "group": None, "key": None, "bad": False}
    ]
    flapping = FaultPlan(input_faults=(InputFault("limit", 1, 9, flapping=True),))
    assert flapping.to_dict()["input_faults"][0]["flapping"] is True
    assert FaultPlan.from_dict(flapping.to_dict()) == flapping
    with pytest.raises(ValueError, match=r"input_faults\[0\]\.flapping"):
        FaultPlan.from_dict({"input_faults": [{"input": "limit", "start_ms": 1, "end_ms": 9, "flapping": 1}]})


def test_a_plan_with_a_cancel_of_any_group_reads_as_it_always_has() -> None:
    anywhere = FaultPlan(cancels=(Cancel("client-0", 5, 2),))
    assert list(anywhere.to_dict()["cancels"]) == [{"target": "client-0", "at_ms": 5, "count": 2}]
    aimed = FaultPlan(cancels=(Cancel("client-0", 5, 20, in_part=True),))
    assert aimed.to_dict()["cancels"][0]["in_part"] is True
    assert FaultPlan.from_dict(aimed.to_dict()) == aimed
    with pytest.raises(ValueError, match=r"cancels\[0\]\.in_part"):
        FaultPlan.from_dict({"cancels": [{"target": "client-0", "at_ms": 5, "in_part": "yes"}]})


def test_the_flapping_scenario_needs_its_flapping() -> None:
    scenario = SCENARIOS["group-limit-flapping"]
    assert run_scenario(scenario).passed
    steady = InputFault("group_limit", 0, 10_000, group="wf-2")
    assert any(
        "granted inside the window" in f
        for f in failures_with("group-limit-flapping", faults=FaultPlan(input_faults=(steady,)))
    )
    assert any("failed wf-2 closed" in f for f in without_faults("group-limit-flapping"))


def test_reading_a_group_s_policy_per_demand_is_caught_when_the_policy_flaps() -> None:
    """group-policy-per-demand survives every drawn run (no drawn callback changes within a round);
    the flapping scenario catches it twice over: its own check, and the model in lockstep."""
    scenario = SCENARIOS["group-limit-flapping"]
    with mutant("group-policy-per-demand").patch():
        judged = run_scenario(scenario)
        # Judged by the invariants alone (a variant without a model): the story's own check.
        unmodelled = run_scenario(scenario, variant=attrs.evolve(REFERENCE, name="no-model", model=None))
    assert judged.invariant_failure is not None
    assert "exact_accounting" in judged.invariant_failure
    assert unmodelled.invariant_failure is None
    assert any("no round both failed wf-2 closed and granted it" in f for f in unmodelled.failures)


@pytest.mark.parametrize("full_checks", [False, True])
def test_the_reference_reads_each_callback_alike_beside_its_model(full_checks: bool) -> None:
    """Every callback flapping: the holder and the model in lockstep read the callbacks equally
    often, so the reference passes, in full checks too."""
    scenario = SCENARIOS["group-limit-flapping"]
    plan = FaultPlan(
        input_faults=(
            InputFault("group_limit", 0, 10_000, flapping=True),
            InputFault("can_grant", 0, 10_000, group="wf-1", flapping=True),
            InputFault("limit", 0, 10_000, bad=True, flapping=True),
        )
    )
    run = run_world(scenario.config, plan, scenario.seed, full_checks=full_checks)
    assert run.result.outcome == "completed", run.result
    assert {e["reason"] for e in run.trace.of_kind("blocked")} >= {"not_permitted", "limit_resolution_error"}
    assert run.trace.of_kind("round_failed")


def test_a_usage_call_is_answered_beside_the_model_even_while_the_limit_flaps() -> None:
    """``usage`` reads the limit too: the model answers each call beside the holder (a failed call
    fails on both), so a flapping limit alternates alike on both sides: without that, the holder
    would read it once more per call than the model, and the two would disagree from then on."""
    scenario = SCENARIOS["group-limit-flapping"]
    plan = FaultPlan(input_faults=(InputFault("limit", 0, 10_000, flapping=True),))
    answered: list[tuple[int, object]] = []

    def observe(sim: Any, world: Any, quiet_from_ms: int) -> Any:
        def ask() -> None:
            try:
                answer: object = world.holders["acct"].dispatch("usage", None)["limit"]
            except Exception as error:
                answer = str(error)
            answered.append((sim.now(), answer))

        for t_ms in range(2_100, 14_000, 700):
            sim.timers.call_at(t_ms, ask)
        return lambda: None

    run = run_world(scenario.config, plan, scenario.seed, observe=observe)
    assert run.result.outcome == "completed", run.result
    inside = {answer for t_ms, answer in answered if t_ms < 10_000}
    after = {answer for t_ms, answer in answered if t_ms >= 10_000}
    # The judge's own reads only peek, so the calls' answers alternate with the holder's reads.
    assert inside == {"error: usage failed: PlannedInputFailure: the limit callback failed (planned)", 4}
    assert after == {4}


def test_a_denial_that_never_ends_is_still_seen_by_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    # Liveness is judged once every window has ended; a denial that outlived its window
    # (a broken fault model) would starve its group, and ``progress`` must say so.
    scenario = SCENARIOS["can-grant-denied"]
    monkeypatch.setattr(
        InputFault, "covers", lambda self, input, group, t_ms: input == "can_grant" and group == "wf-2"
    )
    run = run_world(scenario.config, scenario.faults, scenario.seed)
    assert run.result.invariant == "progress"


# --- cancelling ------------------------------------------------------------------------------


def test_cancel_withdraws_only_queued_items_newest_first() -> None:
    queue = QueueClient(sqlite3.connect(":memory:"), "c")
    queue.enqueue([QueueItem(f"i{n}", "k", "g") for n in range(3)], now=1)
    assert queue.newest_queued(2) == ["i2", "i1"]
    assert queue.cancel("i2")
    assert not queue.cancel("i2")
    assert not queue.cancel("nope")
    assert queue.enqueue([QueueItem("i2", "k", "g")], now=2) == 0  # its id stays taken
    assert [d.count for d in queue.build_request("k", 3).demand] == [2]


# --- the plan --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"input_faults": [{"input": "limit", "start_ms": 5, "end_ms": 5}]}, "end_ms must be after"),
        (
            {"input_faults": [{"input": "limit", "start_ms": 1, "end_ms": 5, "group": "a"}]},
            "group must be null",
        ),
        (
            {"input_faults": [{"input": "can_grant", "start_ms": 1, "end_ms": 5, "bad": True}]},
            "can_grant only",
        ),
        ({"input_faults": [{"input": "size", "start_ms": 1, "end_ms": 5}]}, "input_faults[0].input"),
        ({"cancels": [{"target": "client-0", "at_ms": 1, "count": 0}]}, "cancels[0].count"),
        ({"forged_lies": ["lying"]}, "faults.forged_lies[0] must be one of"),
        ({"forged_lies": "rewind"}, "faults.forged_lies must be a JSON array, got str"),
    ],
)
def test_bad_plan_entries_are_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r".") as caught:
        FaultPlan.from_dict(data)
    assert message in str(caught.value)


def test_plan_entries_round_trip_and_set_the_quiet_point() -> None:
    plan = FaultPlan(
        forged_lies=("unknown_lease",),
        input_faults=(InputFault("group_limit", 1, 9_000, group="wf-1", bad=True),),
        cancels=(Cancel("client-0", 12_000, 2),),
    )
    assert FaultPlan.from_dict(plan.to_dict() | {"forged_lies": ["unknown_lease"]}) == plan
    assert plan.quiet_from_ms(60_000) == 12_000


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (FaultPlan(input_faults=(InputFault("limit", 1, 2, key="nope"),)), "input_faults[0].key 'nope'"),
        (FaultPlan(input_faults=(InputFault("can_grant", 1, 2, group="nope"),)), "input_faults[0].group"),
        (FaultPlan(input_faults=(InputFault("limit", 1, 10**8),)), "input_faults[0].end_ms"),
        (FaultPlan(cancels=(Cancel("client-9", 1),)), "cancels[0].target 'client-9'"),
        (FaultPlan(cancels=(Cancel("client-0", 10**8),)), "cancels[0].at_ms"),
    ],
)
def test_plans_naming_nothing_in_the_world_are_refused(plan: FaultPlan, message: str) -> None:
    with pytest.raises(ValueError, match=r".") as caught:
        check_plan(SCENARIOS["can-grant-denied"].config, plan)
    assert message in str(caught.value)


# --- coverage and the swarm --------------------------------------------------------------------


def test_coverage_counts_lease_lies_callbacks_rollbacks_and_partial_claims() -> None:
    events = [
        {"t": 1, "kind": "fault", "fault": "forged_lease_report", "lie": "foreign_lease"},
        {"t": 1, "kind": "fault", "fault": "cancel"},
        {"t": 1, "kind": "fault", "fault": "rollback", "target": "holder:acct", "to": "0001"},
        {"t": 1, "kind": "blocked", "reason": "not_permitted"},
        {"t": 1, "kind": "round_failed"},
        {"t": 2, "kind": "grant", "grant": "g", "permits": 3},
        {"t": 3, "kind": "claim", "grant": "g", "items": 2},
        {"t": 4, "kind": "grant", "grant": "h", "permits": 2},
        {"t": 5, "kind": "claim", "grant": "h", "items": 2},
    ]
    counts = coverage(events, latency_ms=5)
    for name in (
        "forged:foreign_lease",
        "fault:cancel",
        "fault:rollback",
        "blocked:not_permitted",
        "round_failed",
    ):
        assert counts[name] == 1
        assert name in EXPECTED
    assert counts["grant_claimed_in_part"] == 1


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(cases())
def test_the_swarm_draws_callback_windows_and_cancels_inside_the_fault_phase(case: Any) -> None:
    check_plan(case.config, case.faults)  # raises if anything falls outside the story
    for fault in case.faults.input_faults:
        assert fault.end_ms <= case.faults.faults_until_ms
