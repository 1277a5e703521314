"""The mutation score's moving parts: the checkers that kill specific mutants, and ``semsim mutants``.

Each checker added for a mutant is shown to fire on the mutant and stay
quiet on the reference, in a short scripted world.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

import sim.mutants
from scenarios import SCENARIOS
from sim.cli import EXIT_OK, EXIT_USAGE, EXIT_VIOLATION, UsageError, main
from sim.faults import FaultPlan
from sim.fuzz import Campaign
from sim.mutant_catalog import MUTANTS, Mutant, mutant
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


def _as_in_the_committed_table() -> list[MutantResult]:
    table = sim.mutants.read_table(sim.mutants.COMMITTED_TABLE)
    return [
        _killed(m.name, caught_by) if (caught_by := table[m.name].caught_by) else _survived(m.name)
        for m in MUTANTS
    ]


def test_the_committed_table_reads_back_as_one_verdict_per_catalogued_mutant() -> None:
    table = sim.mutants.read_table(sim.mutants.COMMITTED_TABLE)
    assert list(table) == [m.name for m in MUTANTS]
    assert str(table["limit-off-by-one"]) == "killed by ceiling"
    assert str(table["reports-after-allocation"]) == "survived"


def test_a_written_table_reads_back_and_the_same_results_give_the_same_bytes(tmp_path: Path) -> None:
    results = [_killed("limit-off-by-one", "ceiling"), _survived("contended-never-set")]
    text = sim.mutants.markdown(results, 150, 7)
    assert sim.mutants.markdown(list(results), 150, 7) == text
    path = tmp_path / "MUTANTS.md"
    path.write_text(text)
    assert sim.mutants.read_table(path) == {r.name: r.verdict for r in results}


def test_a_hand_edited_table_with_padding_and_a_pipe_in_a_planted_bug_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "MUTANTS.md"
    path.write_text(
        "# Mutation score\n\n"
        "| mutant   | planted bug | result | caught by | campaign | runs to kill | steps |\n"
        "|:---------|-------------|--------|-----------|----------|-------------:|------:|\n"
        "| `a-b`    | x | y       | killed | `ceiling` | reference | 3 | 2 |\n"
        "| `c-d`    | z           | **survived** |  |  |  |  |\n"
        "\nmore text | with a pipe\n"
    )
    table = sim.mutants.read_table(path)
    assert table == {"a-b": sim.mutants.Verdict(True, "ceiling"), "c-d": sim.mutants.Verdict(False, None)}


def test_exit_0_when_every_verdict_is_as_in_the_committed_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _canned(monkeypatch, *_as_in_the_committed_table())
    assert main(["mutants"]) == EXIT_OK  # though three mutants survive
    assert f"every verdict as in {sim.mutants.COMMITTED_TABLE}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("result", "line"),
    [
        (
            _survived("limit-off-by-one"),
            "limit-off-by-one: the table says killed by ceiling; this run: survived",
        ),
        (
            _killed("limit-off-by-one", "conservative"),
            "limit-off-by-one: the table says killed by ceiling; this run: killed by conservative",
        ),
        (
            _killed("reports-after-allocation", "progress"),
            "reports-after-allocation: the table says survived; this run: killed by progress",
        ),
    ],
    ids=["now-survives", "other-invariant", "now-killed"],
)
def test_exit_1_with_one_line_per_verdict_that_differs_from_the_table(
    result: MutantResult, line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _canned(monkeypatch, result)
    assert main(["mutants", "--only", result.name]) == EXIT_VIOLATION
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"1 difference from {sim.mutants.COMMITTED_TABLE}:", f"  {line}"]


def test_a_full_run_reports_the_tables_rows_the_catalog_no_longer_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _as_in_the_committed_table()
    _canned(monkeypatch, *results)
    rows = [_survived(r.name) if r.name == "limit-off-by-one" else r for r in results]
    gone = MutantResult("renamed-mutant", "a bug", True, "ceiling", "reference", 3, 2, 5)
    table = tmp_path / "MUTANTS.md"
    table.write_text(sim.mutants.markdown([*rows, gone], 150, 7))
    monkeypatch.setattr(sim.mutants, "COMMITTED_TABLE", table)
    assert main(["mutants"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "  renamed-mutant: in the table, not in the catalog" in out
    assert "  limit-off-by-one: the table says survived; this run: killed by ceiling" in out


def test_without_a_committed_table_it_says_so_and_every_mutant_must_be_killed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sim.mutants, "COMMITTED_TABLE", tmp_path / "MUTANTS.md")
    _canned(monkeypatch, _killed("limit-off-by-one", "ceiling"), _survived("contended-never-set"))
    assert main(["mutants", "--only", "limit-off-by-one"]) == EXIT_OK
    assert main(["mutants", "--only", "limit-off-by-one,contended-never-set"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert f"no expected table at {tmp_path / 'MUTANTS.md'}: exit 0 only if every mutant is killed" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# Mutation score\n\nno table here\n", "no kill table"),
        (
            "| mutant | planted bug | result | caught by | campaign | runs to kill | steps |\n"
            "|---|---|---|---|---|---|---|\n"
            "| `limit-off-by-one` | bug | killed |  | reference | 3 | 2 |\n",
            "line 3: limit-off-by-one: killed by no invariant",
        ),
        (
            "| mutant | planted bug | result | caught by | campaign | runs to kill | steps |\n"
            "|---|---|---|---|---|---|---|\n"
            "| `limit-off-by-one` | bug | maybe | `ceiling` |\n",
            "line 3: 4 cells, not 7",
        ),
    ],
    ids=["no-table", "killed-by-nothing", "short-row"],
)
def test_exit_2_for_a_malformed_committed_table_before_any_run(
    text: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = tmp_path / "MUTANTS.md"
    table.write_text(text)
    monkeypatch.setattr(sim.mutants, "COMMITTED_TABLE", table)
    _canned(monkeypatch)  # any campaign would fail the test: no canned results
    assert main(["mutants", "--only", "limit-off-by-one"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert f"semsim mutants: error: expected table: {table}" in captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert "started" not in captured.err


def _expected(path: Path) -> argparse.Namespace:
    """``semsim mutants --only limit-off-by-one --expected PATH``, as sim/cli.py would parse it."""
    return argparse.Namespace(only="limit-off-by-one", markdown=None, expected=path)


def test_a_named_expected_table_replaces_the_committed_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "expected.md"
    table.write_text(sim.mutants.markdown([_survived("limit-off-by-one")], 150, 7))
    _canned(monkeypatch, _survived("limit-off-by-one"))
    assert sim.mutants.cmd_mutants(_expected(table)) == EXIT_OK
    assert f"every verdict as in {table}" in capsys.readouterr().out


def test_a_named_expected_table_that_does_not_exist_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _canned(monkeypatch, _killed("limit-off-by-one", "ceiling"))
    with pytest.raises(UsageError, match="no such file"):
        sim.mutants.cmd_mutants(_expected(tmp_path / "missing.md"))
