"""The mutation score's moving parts: the checkers that kill specific mutants, and ``semsim mutants``.

Each checker added for a mutant is shown to fire on the mutant and stay
quiet on the reference, in a short scripted world.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import SCENARIOS
from sim.cli import EXIT_OK, EXIT_USAGE, main
from sim.faults import FaultPlan
from sim.mutant_catalog import mutant
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
    config = WorldConfig(duration_ms=180_000, holder=HolderSpec(limit=10))
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
