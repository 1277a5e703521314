"""The mutation score's moving parts: the checkers that kill specific mutants, and ``semsim mutants``.

Each checker added for a mutant is shown to fire on the mutant and stay
quiet on the reference, in a short scripted world.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import sim.mutants
from scenarios import SCENARIOS
from sim.cli import EXIT_OK, EXIT_USAGE, main
from sim.faults import FaultPlan
from sim.fuzz import Campaign
from sim.mutant_catalog import Mutant, mutant
from sim.mutants import MutantResult
from sim.workload import Arrival, Workload
from sim.world import HolderSpec, WorldConfig, run_world

FINDINGS = frozenset({"F1", "F2", "F3", "F4"})


def _two_clients_one_permit() -> WorldConfig:
    """Limit 1; client 0's demand (t=1 s) is older than client 1's (t=1.5 s); one round serves both."""
    return WorldConfig(
        holder=HolderSpec(limit=1, leases=None),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=5_000),
                Arrival(at_ms=1_500, client=1, count=1, duration_ms=5_000),
            ),
        ),
        duration_ms=30_000,
    )


def test_progress_flags_a_round_that_serves_younger_demand_while_older_waits_on_the_limit() -> None:
    config = _two_clients_one_permit()
    faithful = run_world(config, FaultPlan(), seed=1, tolerated=FINDINGS)
    assert faithful.result.outcome == "completed"
    assert faithful.trace.of_kind("grant")[0]["client"] == "client-0"
    with mutant("oldest-first-reversed").patch():
        reversed_ = run_world(config, FaultPlan(), seed=1, tolerated=FINDINGS)
    assert reversed_.result.invariant == "progress"
    assert "waited on the limit" in reversed_.result.detail


def test_reclaimed_flags_a_claim_accepted_after_its_deadline() -> None:
    story = SCENARIOS["late-claim-expired"]
    faithful = run_world(story.config, story.faults, story.seed, tolerated=FINDINGS)
    assert faithful.result.outcome == "completed"
    with mutant("claim-window-not-enforced").patch():
        late = run_world(story.config, story.faults, story.seed, tolerated=FINDINGS)
    assert late.result.invariant == "reclaimed"
    assert "after its deadline" in late.result.detail


def test_semsim_mutants_prints_the_verdict_and_writes_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "MUTANTS.md"
    assert main(["mutants", "--only", "alarm-armed-before-round-writes", "--markdown", str(table)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "killed by alarm_armed" in out
    text = table.read_text()
    assert "| `alarm-armed-before-round-writes` |" in text
    assert "**1 of 1 mutants killed.**" in text


def test_an_unknown_mutant_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--only", "no-such-mutant"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no-such-mutant" in err
    assert "Traceback" not in err


def _forged_world() -> tuple[WorldConfig, FaultPlan]:
    config = WorldConfig(duration_ms=180_000, holder=HolderSpec(limit=10), check_liveness=True)
    return config, FaultPlan(forged_reports=0.5, faults_until_ms=90_000)


def test_the_reference_clamps_every_forged_report_and_the_forger_leaves_nothing_charged() -> None:
    config, plan = _forged_world()
    run = run_world(config, plan, seed=3, tolerated=FINDINGS)
    assert run.result.outcome == "completed"  # capacity_returns judged at the end, too
    lies = {event["lie"] for event in run.trace.of_kind("fault") if event["fault"] == "forged_report"}
    assert lies == {"released_above_claimed", "claim_above_permits", "rewind"}


@pytest.mark.parametrize("name", ["released-not-clamped-to-claimed", "report-lowers-high-water"])
def test_a_forged_report_exposes_a_missing_clamp(name: str) -> None:
    config, plan = _forged_world()
    with mutant(name).patch():
        run = run_world(config, plan, seed=3, tolerated=FINDINGS)
    assert run.result.invariant == "reports_monotone"


# --- semsim mutants without real campaigns: try_mutant returns canned results ------------------


def _killed(name: str, caught_by: str, runs: int = 3) -> MutantResult:
    return MutantResult(name, mutant(name).description, True, caught_by, "reference", runs, 2, 5)


def _survived(name: str) -> MutantResult:
    return MutantResult(name, mutant(name).description, False, None, None, 2 * 150, None, 0)


def _canned(
    monkeypatch: pytest.MonkeyPatch,
    *results: MutantResult,
    runs: Callable[[Callable[[str, Campaign, bool], None]], None] | None = None,
) -> None:
    """``try_mutant`` answers from ``results``; ``runs`` plays progress callbacks first."""
    by_name = {result.name: result for result in results}

    def fake(candidate: Mutant, on_run: Callable[[str, Campaign, bool], None] | None = None) -> MutantResult:
        if runs is not None and on_run is not None:
            runs(on_run)
        return by_name[candidate.name]

    monkeypatch.setattr(sim.mutants, "try_mutant", fake)


def test_without_a_terminal_progress_is_plain_lines_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    every = sim.mutants.PROGRESS_EVERY_RUNS

    def play(on_run: Callable[[str, Campaign, bool], None]) -> None:
        for n in range(1, 2 * every + 1):
            on_run("reference", Campaign(runs=n), False)
        for n in range(1, every + 1):
            on_run("reference", Campaign(runs=2 * every + 1, shrink_runs=n), True)

    _canned(monkeypatch, _killed("limit-off-by-one", "ceiling"), runs=play)
    main(["mutants", "--only", "limit-off-by-one"])
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "\033" not in err
    assert err.splitlines() == [
        "[1/1] limit-off-by-one  started",
        f"[1/1] limit-off-by-one  reference: run {every}",
        f"[1/1] limit-off-by-one  reference: run {2 * every}",
        "[1/1] limit-off-by-one  reference: shrinking the counterexample",
        f"[1/1] limit-off-by-one  reference: shrinking ({every} runs)",
    ]
