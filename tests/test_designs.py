"""The gate and the leased worker on the runtime, and every design measured alike (issue 26, items 2-3).

Each test is a small story told with a script, so its figures are exact.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from semsim.harness import designs
from semsim.harness.designs import ITEMS_END, run_design
from semsim.harness.run import HolderSpec, WorldConfig, run_world
from semsim.world.design import DesignName, DesignSpec, GateSpec, LeasedSpec
from semsim.world.faults import Drop, Eviction, FaultPlan, LimitChange, Pause, Shutdown
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload


def config(
    design: DesignName,
    *script: Arrival,
    limit: int = 2,
    clients: int = 1,
    idempotent: bool = True,
    gate: GateSpec | None = None,
    leased: LeasedSpec | None = None,
    duration_ms: int = 120_000,
) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=limit),
        operations=OperationsSpec(idempotent_api=idempotent),
        duration_ms=duration_ms,
        workload=Workload(clients=clients, script=script, paced_by_intake=False),
        design=DesignSpec(name=design, gate=gate or GateSpec(), leased=leased or LeasedSpec()),
    )


def events(run: Any, kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in run.trace.of_kind(kind) if all(e.get(k) == v for k, v in match.items())]


# --- the gate -------------------------------------------------------------------------------


def test_the_gate_sheds_past_its_cap_and_the_shed_item_tries_again_after_retry_after() -> None:
    run = run_design(config("gate", Arrival(0, 0, count=3, duration_ms=30_000)), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    shed = events(run, "shed")
    assert shed, "the third item was never shed"
    item = shed[0]["item"]
    assert shed[0]["retry_after_s"] == 10
    # Its next acquire leaves ten seconds after the 429 came back.
    sends = [e for e in events(run, "send", method="acquire") if e["t"] > shed[0]["t"]]
    assert sends[0]["t"] == shed[0]["t"] + 10_000
    figures = run.trade_offs
    assert figures is not None
    assert (figures.peak_over_admission, figures.over_cap_permit_s, figures.completed) == (0, 0.0, 3)
    assert figures.recovery_ms == 0  # no fault, no damage
    assert any(e["item"] == item for e in events(run, "item_done", capped=True))


def test_without_its_binding_every_caller_proceeds_uncapped() -> None:
    story = config("gate", Arrival(0, 0, count=3, duration_ms=30_000), gate=GateSpec(binding=False))
    run = run_design(story, FaultPlan(), seed=1)
    assert len(events(run, "fail_open", reason="no binding")) == 3
    assert not events(run, "send", method="acquire")
    figures = run.trade_offs
    assert figures is not None
    # Three calls of 30 s from the same millisecond against a cap of 2: one over, for 30 s.
    assert (figures.peak_over_admission, figures.over_cap_permit_s) == (1, 30.0)
    # Submitted at 0; each call reaches the API after two legs of 5 ms.
    assert (figures.queue_wait_p50_ms, figures.queue_wait_p99_ms) == (10, 10)


def test_a_gate_that_answers_an_error_lets_its_callers_through() -> None:
    story = config("gate", Arrival(0, 0, count=3, duration_ms=30_000))
    run = run_design(story, FaultPlan(gate_error=1.0, faults_until_ms=60_000), seed=1)
    assert len(events(run, "fail_open", reason="answered 500")) == 3
    assert run.trade_offs is not None
    assert run.trade_offs.peak_over_admission == 1


def test_a_thrown_acquire_proceeds_uncapped() -> None:
    lost = Drop("request", 0, 60_000, method="acquire")
    run = run_design(config("gate", Arrival(0, 0, count=3, duration_ms=30_000)), FaultPlan(drops=(lost,)), 1)
    assert len(events(run, "fail_open", reason="threw: RpcTimeout")) == 3
    assert run.trade_offs is not None
    assert run.trade_offs.peak_over_admission == 1


def test_an_evicted_gate_forgets_its_slots_and_over_admits() -> None:
    story = config(
        "gate", Arrival(0, 0, count=2, duration_ms=60_000), Arrival(20_000, 0, count=2, duration_ms=10_000)
    )
    run = run_design(story, FaultPlan(evictions=(Eviction("gate:acct", 10_000),)), seed=1)
    assert run.trade_offs is not None
    assert run.trade_offs.peak_over_admission == 2
    # Unevicted, the same story stays under the cap.
    calm = run_design(story, FaultPlan(), seed=1)
    assert calm.trade_offs is not None
    assert calm.trade_offs.peak_over_admission == 0


def test_every_slot_is_released_once_in_finally() -> None:
    run = run_design(config("gate", Arrival(0, 0, count=5, duration_ms=5_000)), FaultPlan(), seed=2)
    acquired = [e["token"] for e in events(run, "gate_acquire") if e["token"] is not None]
    released = [e["token"] for e in events(run, "gate_release", released=True)]
    assert len(acquired) == 5
    assert sorted(acquired) == sorted(released)


def test_a_slot_is_released_when_the_call_fails_too() -> None:
    # Every call fails at the API: finally still releases each slot, once.
    story = config("gate", Arrival(0, 0, count=3, duration_ms=5_000))
    run = run_design(story, FaultPlan(api_error=1.0, faults_until_ms=60_000), seed=2)
    assert [e["outcome"] for e in events(run, "item_done")] == ["error"] * 3
    acquired = [e["token"] for e in events(run, "gate_acquire") if e["token"] is not None]
    releases = events(run, "gate_release")
    assert len(acquired) == 3
    assert sorted(e["token"] for e in releases) == sorted(acquired)
    assert all(e["released"] for e in releases)


def test_a_slot_leaked_by_a_dead_caller_heals_after_stale_ms_and_not_before() -> None:
    # Cap 1. The caller dies a second into its item's call: the call runs on at the API, the
    # slot is never released. Back within restart_ms, the caller runs the item again, and is
    # shed until the slot, acquired at 10 ms, has been held longer than STALE_MS (120 s).
    story = config("gate", Arrival(0, 0, count=1, duration_ms=30_000), limit=1, idempotent=False)
    run = run_design(story, FaultPlan(evictions=(Eviction("client-0", 1_000),)), seed=1)
    assert run.result.outcome == "completed", run.result
    first, second = [e for e in events(run, "gate_acquire") if e["token"] is not None][:2]
    assert first["t"] == 10  # the submission's leg, then the acquire's
    assert second["healed"] == [first["token"]]
    assert 120_010 < second["t"] <= 120_010 + 10_000 + 100
    shed_before = [e for e in events(run, "gate_acquire", token=None) if e["t"] < second["t"]]
    assert shed_before
    assert all(e["t"] - first["t"] <= 120_000 for e in shed_before)
    figures = run.trade_offs
    assert figures is not None
    # The item's work ran twice, and took effect twice (this API does not deduplicate).
    assert (figures.duplicate_executions, figures.double_effects) == (1, 2 - 1)
    # The slot was held by no running work from the zombie call's end (30 s) until it healed,
    # and that damage of the eviction (at 1 s) lasted until then.
    assert 85 <= figures.leaked_cap_s <= 100
    assert figures.recovery_ms is not None
    assert 115_000 <= figures.recovery_ms <= 121_000  # until the slot went stale (120 s after 10 ms)


# --- the leased worker ----------------------------------------------------------------------

ONE_AT_A_TIME = LeasedSpec(concurrency=1, lease_ms=20_000, heartbeat_interval_ms=5_000)


def test_a_lost_lease_runs_the_instance_twice_and_fences_the_stale_write() -> None:
    # Renewals are lost for 42 s: the lease runs out at ~21 s and the other worker claims the
    # instance while the first one's call still runs. That call ends at ~41 s, before any
    # renewal could tell its worker the lease is gone, and its write is refused.
    story = config(
        "leased-worker", Arrival(0, 0, duration_ms=40_000), clients=2, idempotent=False, leased=ONE_AT_A_TIME
    )
    run = run_design(story, FaultPlan(drops=(Drop("request", 0, 42_000, method="renew"),)), seed=1)
    assert run.result.outcome == "completed", run.result
    claims = [e for e in events(run, "lease_claim") if e["ids"]]
    assert len(claims) >= 2
    assert claims[0]["owner"] != claims[1]["owner"]
    assert claims[1]["t"] >= claims[0]["until"]
    fenced = events(run, "write_fenced")
    assert [e["token"] for e in fenced] == [claims[0]["token"]]
    refused = events(run, "lease_write", token=claims[0]["token"])
    assert [e["ok"] for e in refused] == [False]
    figures = run.trade_offs
    assert figures is not None
    assert figures.duplicate_executions >= 1
    assert figures.double_effects >= 1
    # Never over the cap: the store counts live leases, and the first one had run out.
    assert figures.peak_over_admission == 0


def test_work_run_again_counts_as_a_duplicate_even_where_the_api_absorbs_it() -> None:
    # The lost-lease story against an API that deduplicates: the second execution's call is
    # refused while the first runs (409) or replayed after it; the work was still run twice.
    story = config("leased-worker", Arrival(0, 0, duration_ms=40_000), clients=2, leased=ONE_AT_A_TIME)
    run = run_design(story, FaultPlan(drops=(Drop("request", 0, 42_000, method="renew"),)), seed=1)
    assert run.result.outcome == "completed", run.result
    assert events(run, "api_conflict") or events(run, "api_replay")
    figures = run.trade_offs
    assert figures is not None
    assert figures.duplicate_executions >= 1
    assert figures.double_effects == 0


def test_a_dead_workers_instance_is_held_until_its_lease_runs_out() -> None:
    story = config("leased-worker", Arrival(0, 0, duration_ms=5_000), limit=1, leased=ONE_AT_A_TIME)
    run = run_design(story, FaultPlan(evictions=(Eviction("client-0", 1_500),)), seed=1)
    assert run.result.outcome == "completed", run.result
    claims = [e for e in events(run, "lease_claim") if e["ids"]]
    assert len(claims) == 2
    assert claims[1]["t"] >= claims[0]["until"]
    assert claims[1]["t"] - claims[0]["until"] <= 1_000  # the next poll after it ran out
    figures = run.trade_offs
    assert figures is not None
    # Held by no running work from the zombie call's end (about 6 s) until the lease ran out (~21 s).
    assert 13 <= figures.leaked_cap_s <= 17
    assert figures.completed == 1
    # The damage: a lease held for a worker that died at 1.5 s, until it ran out.
    assert figures.recovery_ms is not None
    assert claims[0]["until"] - 1_500 - 1_000 <= figures.recovery_ms <= claims[0]["until"] - 1_500


def test_a_paused_worker_loses_its_lease_and_records_nothing_after() -> None:
    story = config("leased-worker", Arrival(0, 0, duration_ms=60_000), leased=ONE_AT_A_TIME)
    run = run_design(story, FaultPlan(pauses=(Pause("client-0", 2_000, 40_000),)), seed=1)
    assert run.result.outcome == "completed", run.result
    lost = events(run, "lease_lost")
    assert lost
    assert lost[0]["t"] >= 40_000
    assert events(run, "write_skipped", reason="lease lost")
    assert run.trade_offs is not None
    assert run.trade_offs.completed == 1


def test_a_worker_shutting_down_records_what_ends_in_time_and_keeps_the_rest_leased() -> None:
    leased = attrs.evolve(ONE_AT_A_TIME, concurrency=2, shutdown_timeout_ms=10_000)
    story = config(
        "leased-worker",
        Arrival(0, 0, duration_ms=5_000),
        Arrival(0, 0, duration_ms=60_000),
        leased=leased,
    )
    run = run_design(story, FaultPlan(shutdowns=(Shutdown("client-0", 2_000),)), seed=1)
    assert run.result.outcome == "completed", run.result
    (exited,) = events(run, "worker_exit")
    assert exited["t"] == 12_000
    assert exited["still_running"] == ["client-0/item-2"]
    writes = events(run, "lease_write", ok=True)
    assert writes[0]["id"] == "client-0/item-1"
    assert writes[0]["t"] < 12_000
    # No claim while shutting down, and the unfinished one is not handed back: it keeps its lease
    # until the lease runs out, and is claimed again only then.
    assert not [
        e for e in events(run, "lease_claim", owner="client-0") if 2_000 <= e["t"] < 12_000 and e["ids"]
    ]
    assert not events(run, "lease_write", id="client-0/item-2", status="pending")
    claims = [e for e in events(run, "lease_claim") if "client-0/item-2" in e["ids"]]
    renewed = [e["t"] for e in events(run, "send", method="renew") if e["body"]["id"] == "client-0/item-2"]
    assert len(claims) == 2
    assert claims[1]["t"] >= max(renewed) + leased.lease_ms


# --- one world, every design ----------------------------------------------------------------


def loaded(design: DesignName) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=4),
        operations=OperationsSpec(),
        duration_ms=120_000,
        workload=Workload(clients=3, items_per_minute=12, until_ms=120_000, paced_by_intake=False),
        design=DesignSpec(name=design),
    )


LOSSY = FaultPlan(request_loss=0.1, reply_loss=0.1)


def first_sends(run: Any) -> dict[str, int]:
    sent: dict[str, int] = {}
    for event in events(run, "send", method="submit", src="workload"):
        for item in event["body"]:
            sent.setdefault(item["id"], event["t"])
    return sent


def test_every_design_meets_the_same_items_at_the_same_times_under_the_same_faults() -> None:
    designs: tuple[DesignName, ...] = ("semaphore", "gate", "leased-worker")
    runs = [run_design(loaded(design), LOSSY, seed=4) for design in designs]
    sends = [first_sends(run) for run in runs]
    assert len(sends[0]) > 20
    assert sends[0] == sends[1] == sends[2]
    assert {run.trade_offs.items for run in runs if run.trade_offs is not None} == {len(sends[0])}


@pytest.mark.parametrize("design", ["gate", "leased-worker"])
def test_a_design_run_is_the_same_run_for_the_same_seed(design: DesignName) -> None:
    first = run_design(loaded(design), LOSSY, seed=7)
    again = run_design(loaded(design), LOSSY, seed=7)
    assert first.trace.digest() == again.trace.digest()
    assert first.trace.header["config"]["design"]["name"] == design


def test_the_meter_only_watches_a_semaphore_run() -> None:
    metered = run_design(loaded("semaphore"), LOSSY, seed=3)
    plain = run_world(loaded("semaphore"), LOSSY, seed=3)
    lines = list(metered.trace.lines())
    assert lines[-1].startswith('{"t":')
    assert '"kind":"trade_offs"' in lines[-1]
    assert lines[:-1] == list(plain.trace.lines())


def test_a_run_whose_items_never_end_fails_items_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # A planted bug: the callers' storage always shows an unfinished item.
    monkeypatch.setattr(designs, "unfinished", lambda storage: 1)
    monkeypatch.setattr(designs, "MAX_SETTLE_MS", 60_000)
    run = run_design(config("gate", Arrival(0, 0)), FaultPlan(), seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", ITEMS_END)
    assert run.result.end_ms == 120_000 + 60_000
    assert "1 of 1 items unfinished" in run.result.detail
    assert run.trade_offs is None


# --- what a plan and a config may say -------------------------------------------------------


@pytest.mark.parametrize(
    ("design", "faults", "message"),
    [
        ("semaphore", FaultPlan(gate_error=0.1), "faults.gate_error is a fault of design gate"),
        ("semaphore", FaultPlan(pauses=(Pause("client-0", 0, 10),)), "faults.pauses is a fault of design"),
        ("gate", FaultPlan(limit_changes=(LimitChange(10, 3),)), "faults.limit_changes is a fault of design"),
        ("gate", FaultPlan(shutdowns=(Shutdown("client-0", 10),)), "shutdowns is a fault of design leased"),
        ("leased-worker", FaultPlan(evict_holders_every_ms=1_000), "evict_holders_every_ms is a fault of"),
        ("gate", FaultPlan(alarm_retries=0), "faults.alarm_retries is a fault of design semaphore"),
        ("leased-worker", FaultPlan(evictions=(Eviction("gate:acct", 10),)), "names nothing in this world"),
        ("gate", FaultPlan(pauses=(Pause("client-9", 0, 10),)), "names nothing in this world"),
        ("gate", FaultPlan(drops=(Drop("request", 0, 10, method="claim"),)), "names nothing in this world"),
    ],
)
def test_a_fault_the_design_does_not_meet_is_refused(
    design: DesignName, faults: FaultPlan, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run_design(config(design, Arrival(0, 0)), faults, seed=1)


def test_run_world_refuses_another_design_and_names_run_design() -> None:
    with pytest.raises(ValueError, match="run_design runs every design"):
        run_world(config("gate", Arrival(0, 0)), FaultPlan(), seed=1)


def test_the_semaphore_is_measured_only_where_its_work_calls_the_api() -> None:
    story = attrs.evolve(config("semaphore", Arrival(0, 0)), operations=None)
    with pytest.raises(ValueError, match=r"config\.operations"):
        run_design(story, FaultPlan(), seed=1)


def test_a_config_records_its_design_and_reads_it_back() -> None:
    story = config(
        "leased-worker", Arrival(0, 0), leased=LeasedSpec(lease_ms=9_000, heartbeat_interval_ms=3_000)
    )
    recorded = story.to_dict()
    settings = {k: v for k, v in attrs.asdict(story.design.leased).items() if k != "fixes"}
    assert recorded["design"] == {"name": "leased-worker", "leased": settings}  # no fixes: none written
    assert recorded["workload"]["paced_by_intake"] is False
    assert WorldConfig.from_dict(recorded) == story
    fixed = attrs.evolve(
        story,
        design=attrs.evolve(
            story.design, leased=attrs.evolve(story.design.leased, fixes=("calls-end-with-their-fetch",))
        ),
    )
    assert fixed.to_dict()["design"]["leased"]["fixes"] == ["calls-end-with-their-fetch"]
    assert WorldConfig.from_dict(fixed.to_dict()) == fixed
    # The semaphore's configs keep their bytes: no design, no pacing, unless set.
    assert "design" not in WorldConfig().to_dict()
    assert "paced_by_intake" not in WorldConfig().to_dict()["workload"]


def test_a_plan_records_pauses_and_shutdowns_only_when_it_has_them() -> None:
    assert {"gate_error", "pauses", "shutdowns"}.isdisjoint(FaultPlan().to_dict())
    plan = FaultPlan(pauses=(Pause("client-0", 1, 2),), shutdowns=(Shutdown("client-0", 3),))
    assert FaultPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lease_ms": 5_000, "heartbeat_interval_ms": 5_000}, "must be shorter than lease_ms"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
    ],
)
def test_leased_settings_are_checked(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LeasedSpec(**settings)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DesignSpec(gate=GateSpec(binding=False)), "gate settings are for design gate"),
        (lambda: DesignSpec(name="gate", leased=LeasedSpec(concurrency=2)), "leased settings are for design"),
        (lambda: GateSpec(retry_after_s=0), "retry_after_s must be a positive integer"),
    ],
)
def test_design_settings_that_would_be_ignored_or_spin_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_an_unknown_design_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="name must be one of"):
        DesignSpec(name="mutex")  # type: ignore[arg-type]
