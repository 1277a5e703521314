"""Each design's trade-offs as named scenarios, and its promises judged as it runs (issue 26, item 5).

Every story passes as told, and its check fails on a wrong story: the same world without the
fault that tells it, or with a setting that tells another. Every promise of
:mod:`semsim.check.design_promises` is shown to fail where it is broken on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from semaphore_core.leased import Lease, LeaseStore
from semaphore_core.leased.store import Status
from semsim.check.design_promises import FENCED_WRITE, GATE_EXACT, LEASE_CEILING, LEASE_LIMIT, SINGLE_LEASE
from semsim.cli.main import main
from semsim.harness import designs
from semsim.harness.designs import run_design
from semsim.harness.run import HolderSpec, WorldConfig
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.scenarios.designs import ALL, ONE_AT_A_TIME
from semsim.world.design import DesignSpec, GateSpec
from semsim.world.faults import Drop, FaultPlan
from semsim.world.lease_store_object import LeaseStoreObject
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload

NAMES = [build().name for build in ALL]


@pytest.mark.parametrize("name", NAMES)
def test_each_design_story_holds_as_told(name: str) -> None:
    result = run_scenario(SCENARIOS[name])
    assert result.passed, result.failures
    assert result.expectations
    assert all(outcome.held for outcome in result.expectations)


#: The stories of a known finding: told without a fault, and wrong with the finding's fix on.
FINDING_STORIES = {"gate-call-outlives-its-fetch", "leased-call-outlives-its-fetch"}


def _fixed(config: WorldConfig) -> WorldConfig:
    design = config.design
    on = ("calls-end-with-their-fetch",)
    if design.name == "gate":
        return attrs.evolve(config, design=attrs.evolve(design, gate=attrs.evolve(design.gate, fixes=on)))
    return attrs.evolve(config, design=attrs.evolve(design, leased=attrs.evolve(design.leased, fixes=on)))


@pytest.mark.parametrize("name", NAMES)
def test_each_design_story_fails_on_the_wrong_story(name: str) -> None:
    # Without the fault that tells it; a finding's story with the finding's fix on.
    scenario = SCENARIOS[name]
    if name in FINDING_STORIES:
        wrong = run_design(_fixed(scenario.config), scenario.faults, scenario.seed)
    else:
        wrong = run_design(scenario.config, FaultPlan(), scenario.seed)
    assert wrong.result.outcome == "completed", wrong.result
    assert scenario.check(wrong), f"{name}'s check passed the wrong story"


@pytest.mark.parametrize(
    ("name", "invariant", "finding"),
    [
        ("gate-call-outlives-its-fetch", GATE_EXACT, "F6"),
        ("leased-call-outlives-its-fetch", LEASE_CEILING, "F7"),
    ],
)
def test_f6_and_f7_break_their_promise_on_the_reference_and_hold_with_the_fix(
    name: str, invariant: str, finding: str
) -> None:
    scenario = SCENARIOS[name]
    reference = run_design(scenario.config, scenario.faults, scenario.seed)
    assert (reference.result.outcome, reference.result.invariant, reference.result.finding) == (
        "violation",
        invariant,
        finding,
    )
    fixed = run_design(_fixed(scenario.config), scenario.faults, scenario.seed)
    assert fixed.result.outcome == "completed", fixed.result
    assert not fixed.trace.of_kind("violation")
    assert fixed.trade_offs is not None
    assert fixed.trade_offs.peak_over_admission == 0
    # The cost: the call that outlived its fetch is cut at the fetch's deadline, without effect.
    assert fixed.trade_offs.completed == 1
    assert next(e["outcome"] for e in fixed.trace.of_kind("api_end")) == "deadline"


def test_the_leaked_slot_story_fails_if_the_slot_heals_before_stale_ms() -> None:
    scenario = SCENARIOS["gate-leaked-slot-heals"]
    early = attrs.evolve(scenario.config, design=DesignSpec(name="gate", gate=GateSpec(stale_ms=60_000)))
    unmet = scenario.check(run_design(early, scenario.faults, scenario.seed))
    assert any("older than STALE_MS" in line for line in unmet), unmet


def test_the_lost_lease_story_fails_if_the_store_does_not_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    real = LeaseStore.write

    def unfenced(self: LeaseStore, id: str, token: str, status: Status, now_ms: int, release: bool) -> bool:
        instance = self.get(id)
        assert instance is not None
        assert instance.lease_token is not None
        return real(self, id, instance.lease_token, status, now_ms, release=release)  # any token lands

    monkeypatch.setattr(LeaseStore, "write", unfenced)
    result = run_scenario(SCENARIOS["leased-lost-lease-runs-twice"])
    assert not result.passed
    assert result.run.result.invariant == FENCED_WRITE, result.run.result


# --- each promise fails where it is broken -----------------------------------------------------


def _world(
    design: str, *script: Arrival, limit: int, clients: int = 1, gate: GateSpec | None = None
) -> WorldConfig:
    spec = (
        DesignSpec(name="gate", gate=gate or GateSpec())
        if design == "gate"
        else DesignSpec(name="leased-worker", leased=ONE_AT_A_TIME)
    )
    return WorldConfig(
        holder=HolderSpec(limit=limit),
        operations=OperationsSpec(),
        duration_ms=120_000,
        workload=Workload(clients=clients, script=script, paced_by_intake=False),
        design=spec,
    )


def test_gate_exact_fails_when_a_slot_heals_while_its_call_still_runs() -> None:
    # STALE_MS below the calls' length: the second item's acquire heals the first's slot while
    # its call runs, and the living gate has two calls under its slots against a cap of 1.
    story = _world(
        "gate",
        Arrival(0, 0, duration_ms=30_000),
        Arrival(10_000, 0, duration_ms=30_000),
        limit=1,
        gate=GateSpec(stale_ms=5_000),
    )
    run = run_design(story, FaultPlan(), seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", GATE_EXACT), run.result
    # With the seed's STALE_MS (above the fetch layer's cap) the second item is shed instead.
    held = run_design(attrs.evolve(story, design=DesignSpec(name="gate")), FaultPlan(), seed=1)
    assert held.result.outcome == "completed", held.result


def test_gate_exact_does_not_count_what_the_seed_admits() -> None:
    # An evicted gate's old slots and callers failing open are the seed's, not violations.
    for name in ("gate-evicted-over-admits", "gate-fails-open"):
        result = run_scenario(SCENARIOS[name])
        assert result.run.result.outcome == "completed", (name, result.run.result)
        assert GATE_EXACT in result.run.judges()


def test_single_lease_fails_when_a_claim_ignores_live_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    real = LeaseStore.claim

    def blind(self: LeaseStore, lease: Lease, limit: int, *args: object, **kwargs: object) -> object:
        ahead = attrs.evolve(lease, now_ms=lease.now_ms + 60_000, until_ms=lease.until_ms + 60_000)
        return real(self, ahead, limit, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LeaseStore, "claim", blind)
    story = _world("leased-worker", Arrival(0, 0, duration_ms=10_000), limit=2, clients=2)
    run = run_design(story, FaultPlan(), seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", SINGLE_LEASE), run.result


def test_lease_limit_fails_when_the_store_claims_past_a_workflows_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Lax(LeaseStoreObject):
        def __init__(self, sim: object, accounts: object, cap: int, *rest: object) -> None:
            super().__init__(sim, accounts, cap + 1, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(designs, "LeaseStoreObject", Lax)
    story = _world("leased-worker", Arrival(0, 0, count=2, duration_ms=10_000), limit=1, clients=2)
    run = run_design(story, FaultPlan(), seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", LEASE_LIMIT), run.result


def test_fenced_write_holds_where_the_store_refuses_a_stale_token() -> None:
    story = _world("leased-worker", Arrival(0, 0, duration_ms=40_000), limit=2, clients=2)
    run = run_design(story, FaultPlan(drops=(Drop("request", 0, 42_000, method="renew"),)), seed=1)
    assert run.result.outcome == "completed", run.result
    assert [e for e in run.trace.of_kind("lease_write") if not e["ok"]], "no stale write was tried"
    assert run.trace.header["judges"] == ["items_end", LEASE_CEILING, SINGLE_LEASE, FENCED_WRITE, LEASE_LIMIT]


# --- semsim run NAME -----------------------------------------------------------------------------


def test_semsim_run_runs_a_design_story_and_prints_what_it_traded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "gate-evicted-over-admits"]) == 0
    out = capsys.readouterr().out
    assert "design gate, judged by: items_end, gate_exact" in out
    assert "what it traded, at the external API:" in out
    assert "peak over admission: 2" in out
    assert "every expectation and invariant held" in out


def test_semsim_run_json_of_a_design_story(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "leased-dead-worker-holds-lease", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["design"] == "leased-worker"
    assert result["variant"] == "reference"  # the seed's worker, named as the semaphore's reference is
    assert result["trade_offs"]["completed"] == 1
    assert result["judges"] == ["items_end", LEASE_CEILING, SINGLE_LEASE, FENCED_WRITE, LEASE_LIMIT]


def test_semsim_run_of_the_measured_semaphore_story_keeps_its_judges(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "semaphore-holds-lost-capacity", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["design"], result["variant"]) == ("semaphore", "reference")
    assert result["trade_offs"]["peak_over_admission"] == 0
    # The semaphore's own judges, as in any of its runs: measuring it takes none away.
    assert result["judges"] == [
        "exact_accounting against the literal model",
        "exact_queue against the literal queue model",
        "safety",
        "liveness",
    ]


@pytest.mark.parametrize("option", [["--full-checks"], ["--per-group", "--plot", "{tmp}/p.png"]])
def test_semsim_run_refuses_holder_options_for_another_design(
    option: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    option = [part.format(tmp=tmp_path) for part in option]
    assert main(["run", "gate-fails-open", *option]) == 2
    err = capsys.readouterr().err
    assert "concern the semaphore's holder; scenario gate-fails-open runs the gate design" in err
    assert "Traceback" not in err
