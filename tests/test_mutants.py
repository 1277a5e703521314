"""The mutation score's moving parts: the checkers that kill specific mutants, and ``semsim mutants``.

Each checker added for a mutant is shown to fire on the mutant and stay
quiet on the reference, in a short scripted world.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest

import semsim.check.lockstep
import semsim.explore.mutant_layers
import semsim.explore.mutants
from semsim.cli.main import main
from semsim.explore.fuzz import Campaign
from semsim.explore.mutant_layers import NOT_RUN, SURVIVED, LayerVerdict
from semsim.explore.mutants import FuzzResult, MutantResult
from semsim.harness.catalog import MUTANTS, mutant
from semsim.harness.run import HolderSpec, WorldConfig, run_world
from semsim.inputs.commands import EXIT_OK, EXIT_USAGE, EXIT_VIOLATION, UsageError
from semsim.scenarios import SCENARIOS
from semsim.world.faults import FaultPlan
from semsim.world.forger import GRANT_LIES
from semsim.world.mutant_catalog import Mutant
from semsim.world.workload import Arrival, Workload
from tests.helpers import NoLockstep

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


def test_progress_flags_a_round_that_serves_younger_demand_while_older_waits_on_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The checker is under test: the literal model would name the mutant first (exact_accounting).
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    config = _two_clients_one_permit()
    faithful = run_world(config, FaultPlan(), seed=1, tolerated=FINDINGS)
    assert faithful.result.outcome == "completed"
    assert faithful.trace.of_kind("grant")[0]["client"] == "client-0"
    with mutant("oldest-first-reversed").patch():
        reversed_ = run_world(config, FaultPlan(), seed=1, tolerated=FINDINGS)
    assert reversed_.result.invariant == "progress"
    assert "waited on the limit" in reversed_.result.detail


def test_reclaimed_flags_a_claim_accepted_after_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # The checker is under test: the literal model would name the mutant first (exact_accounting).
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
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
    # A section another tool writes there (benchmarks/bench_time_to_bug.py --render) is kept.
    kept = "<!-- time to bug: written by ... -->\n## Time to bug\n<!-- time to bug: end -->"
    table.write_text(f"old table\n\n{kept}\n")
    argv = [
        "mutants",
        "--only",
        "alarm-armed-before-round-writes",
        "--layers",
        "fuzz",
        "--markdown",
        str(table),
    ]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert "fuzz killed by alarm_armed" in out
    assert "s of CPU time" in out
    text = table.read_text()
    assert "| `alarm-armed-before-round-writes` |" in text
    assert "**Killed by the suite (any layer): 1 of 1 (100%).**" in text
    row = next(line for line in text.splitlines() if "alarm-armed-before-round-writes" in line)
    assert "| not run | not run | not run | `alarm_armed` | reference |" in row
    assert "old table" not in text
    assert text.endswith(f"\n{kept}\n")


def test_an_unknown_mutant_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--only", "no-such-mutant"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no-such-mutant" in err
    assert "Traceback" not in err


def _forged_world(lies: tuple[str, ...] = ()) -> tuple[WorldConfig, FaultPlan]:
    config = WorldConfig(duration_ms=180_000, holder=HolderSpec(limit=10))
    return config, FaultPlan(forged_reports=0.5, forged_lies=lies, faults_until_ms=90_000)


def test_the_reference_clamps_every_forged_report_and_the_forger_leaves_nothing_charged() -> None:
    config, plan = _forged_world()
    run = run_world(config, plan, seed=3, tolerated=FINDINGS)
    assert run.result.outcome == "completed"  # capacity_returns judged at the end, too
    lies = {event["lie"] for event in run.trace.of_kind("fault") if event["fault"] == "forged_report"}
    assert lies == set(GRANT_LIES)


@pytest.mark.parametrize("name", ["released-not-clamped-to-claimed", "report-lowers-high-water"])
def test_a_forged_report_exposes_a_missing_clamp(name: str) -> None:
    # The lies a clamp answers (a negative count is rejected before any clamp).
    config, plan = _forged_world(("released_above_claimed", "claim_above_permits", "rewind"))
    with mutant(name).patch():
        run = run_world(config, plan, seed=3, tolerated=FINDINGS)
    assert run.result.invariant == "reports_monotone"


# --- the layers: the pytest plugin, a pytest layer, the scenarios layer -------------------------


def test_the_plugin_applies_a_mutant_for_the_whole_session_and_refuses_an_unknown_one() -> None:
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "semsim.explore.mutant_plugin",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    target = [
        "tests/test_mutant_catalog.py::"
        "test_the_mutant_changes_what_it_claims_and_the_original_comes_back[limit-off-by-one]"
    ]
    root = semsim.explore.mutant_layers.ROOT
    # The catalog's own test pins the faithful behaviour outside a patch block: under a
    # session-wide mutant it must fail, and it passes without one.
    assert subprocess.run([*base, *target], cwd=root, capture_output=True, check=False).returncode == 0
    mutated = subprocess.run(
        [*base, "--mutant=limit-off-by-one", *target], cwd=root, capture_output=True, text=True, check=False
    )
    assert mutated.returncode == 1
    assert "1 failed" in mutated.stdout
    unknown = subprocess.run(
        [*base, "--mutant=no-such-mutant", *target], cwd=root, capture_output=True, text=True, check=False
    )
    assert unknown.returncode == 4
    assert "unknown mutant 'no-such-mutant'" in unknown.stderr


def test_the_pytest_layers_say_what_they_lack_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A pytest that cannot start exits 1 too: without this check it would look like a kill.
    monkeypatch.setattr(semsim.explore.mutant_layers, "ROOT", tmp_path)  # an install without tests/
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "unit"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "the unit and state-machine layers run the repository's tests" in err
    assert "--layers scenarios,fuzz" in err
    monkeypatch.undo()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "pytest_trio" else real(name)
    )
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "state-machine"]) == EXIT_USAGE
    assert (
        "the unit and state-machine layers need pytest_trio: pip install -e '.[test]'"
        in capsys.readouterr().err
    )
    # The repository's pytest configuration passes --dist: without pytest-xdist pytest would stop
    # at its arguments (exit 4), after the command had started; say so before anything runs.
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "xdist" else real(name))
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "unit"]) == EXIT_USAGE
    assert "the unit and state-machine layers need xdist: pip install -e '.[test]'" in capsys.readouterr().err


def test_semsim_mutants_runs_without_pytest_installed() -> None:
    # pytest is the test extra's, not a dependency: only the plugin needs it. A process in
    # which it cannot be imported still loads the command and says what the layers lack.
    script = (
        "import sys, importlib.abc\n"
        "class Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pytest', '_pytest', 'pytest_trio'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "import importlib.util\n"
        "importlib.util.find_spec = lambda name: None if name in ('pytest', 'pytest_trio') else 1\n"
        "import semsim.cli.main, semsim.explore.mutants\n"
        "from semsim.explore.mutant_layers import pytest_layers_missing\n"
        "print(pytest_layers_missing())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    need = "the unit and state-machine layers need pytest and pytest_trio: pip install -e '.[test]'"
    assert out.strip() == f"{need} in the clone"


def test_a_pytest_layer_names_the_first_failing_test_or_survives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(semsim.explore.mutant_layers.PYTEST_LAYERS, "unit", ("tests/test_holder.py",))
    killed = semsim.explore.mutant_layers.run_pytest_layer("limit-off-by-one", "unit")
    assert killed.status == "killed"
    assert killed.caught_by is not None
    assert killed.caught_by.startswith("test_holder.py::")
    # The engine is not the holder's: test_holder.py cannot see this one.
    assert semsim.explore.mutant_layers.run_pytest_layer("engine-pushes-alarm-later", "unit") == SURVIVED


def test_a_pytest_layer_over_its_cpu_budget_is_timed_out_not_waited_on() -> None:
    verdict = semsim.explore.mutant_layers.run_pytest_layer(
        "limit-off-by-one", "state-machine", cpu_budget_s=1
    )
    assert verdict == LayerVerdict("timed out")


def test_the_scenarios_layer_names_the_scenario_whose_outcome_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import semsim.scenarios

    monkeypatch.setattr(
        semsim.scenarios, "SCENARIOS", {"late-claim-expired": SCENARIOS["late-claim-expired"]}
    )
    killed = semsim.explore.mutant_layers.run_scenarios_layer("claim-window-not-enforced")
    assert killed == LayerVerdict("killed", "late-claim-expired")
    assert semsim.explore.mutant_layers.run_scenarios_layer("parse-accepts-negative-counts") == SURVIVED


def test_workers_give_the_verdicts_of_a_serial_run_in_catalog_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["mutants", "--only", "limit-off-by-one,alarm-armed-before-round-writes", "--layers", "fuzz"]
    main(argv)
    serial = capsys.readouterr().out.splitlines()
    main([*argv, "--workers", "2"])
    parallel = capsys.readouterr().out.splitlines()
    verdicts = [line for line in serial if line.startswith("[")]
    assert len(verdicts) == 2
    assert verdicts[0].startswith("[1/2] limit-off-by-one")
    assert [line for line in parallel if line.startswith("[")] == verdicts


# --- semsim mutants without real layers: score_mutant returns canned results --------------------

FUZZ_ONLY = {"unit": NOT_RUN, "state-machine": NOT_RUN, "scenarios": NOT_RUN}


def _result(name: str, fuzz: str | None, **layers: LayerVerdict) -> MutantResult:
    """A result whose fuzz layer killed the mutant with ``fuzz`` (None: it survived)."""
    detail = (
        FuzzResult(True, fuzz, "reference", 3, 2, 5)
        if fuzz is not None
        else FuzzResult(False, None, None, 2 * 150, None, 0)
    )
    verdicts = {
        "unit": SURVIVED,
        "state-machine": SURVIVED,
        "scenarios": SURVIVED,
        **{key.replace("_", "-"): value for key, value in layers.items()},
        "fuzz": detail.verdict,
    }
    return MutantResult(name, mutant(name).description if name in NAMES else "a bug", verdicts, detail)


NAMES = {m.name for m in MUTANTS}
COMMITTED = semsim.explore.mutants.COMMITTED_TABLE.read_text(encoding="utf-8")


def _canned(
    monkeypatch: pytest.MonkeyPatch,
    *results: MutantResult,
    runs: Callable[[Callable[[str, Campaign, bool], None]], None] | None = None,
) -> None:
    """``score_mutant`` answers from ``results``; ``runs`` plays progress callbacks first."""
    by_name = {result.name: result for result in results}

    def fake(
        candidate: Mutant,
        layers: Sequence[str],
        cpu_budget_s: int,
        on_run: Callable[[str, Campaign, bool], None] | None = None,
        on_layer: Callable[[str, LayerVerdict], None] | None = None,
    ) -> MutantResult:
        if runs is not None and on_run is not None:
            runs(on_run)
        result = by_name[candidate.name]
        verdicts = {layer: v if layer in layers else NOT_RUN for layer, v in result.layers.items()}
        if on_layer is not None:
            for layer in layers:
                on_layer(layer, verdicts[layer])
        return attrs.evolve(result, layers=verdicts, fuzz=result.fuzz if "fuzz" in layers else None)

    monkeypatch.setattr(semsim.explore.mutants, "score_mutant", fake)
    # The baseline (each pytest layer without a mutant) passes, without running pytest.
    monkeypatch.setattr(
        semsim.explore.mutants, "run_pytest_layer", lambda name, layer, budget, design: SURVIVED
    )


def test_a_pytest_layer_that_fails_without_a_mutant_stops_the_run_before_any_mutant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _canned(monkeypatch)  # any mutant run would fail the test: no canned results
    baseline: list[tuple[str | None, str]] = []

    def clean(name: str | None, layer: str, budget: int, design: str) -> LayerVerdict:
        baseline.append((name, layer))
        return LayerVerdict("killed", "test_docs.py::test_every_option") if layer == "unit" else SURVIVED

    monkeypatch.setattr(semsim.explore.mutants, "run_pytest_layer", clean)
    assert main(["mutants", "--only", "limit-off-by-one"]) == EXIT_USAGE
    assert baseline == [(None, "unit")]
    err = capsys.readouterr().err
    assert "the unit layer fails without a mutant (killed by test_docs.py::test_every_option)" in err
    assert "started" not in err


def test_without_a_terminal_progress_is_plain_lines_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    every = semsim.explore.mutants.PROGRESS_EVERY_RUNS

    def play(on_run: Callable[[str, Campaign, bool], None]) -> None:
        for n in range(1, 2 * every + 1):
            on_run("reference", Campaign(runs=n), False)
        for n in range(1, every + 1):
            on_run("reference", Campaign(runs=2 * every + 1, shrink_runs=n), True)

    _canned(monkeypatch, _result("limit-off-by-one", "ceiling"), runs=play)
    main(["mutants", "--only", "limit-off-by-one", "--layers", "scenarios,fuzz"])
    captured = capsys.readouterr()
    assert "\r" not in captured.err
    assert "\033" not in captured.err
    assert captured.err.splitlines() == [
        "[1/1] limit-off-by-one  started",
        f"[1/1] limit-off-by-one  reference: run {every}",
        f"[1/1] limit-off-by-one  reference: run {2 * every}",
        "[1/1] limit-off-by-one  reference: shrinking the counterexample",
        f"[1/1] limit-off-by-one  reference: shrinking ({every} runs)",
        "[1/1] limit-off-by-one  scenarios: survived",
        "[1/1] limit-off-by-one  fuzz: killed by ceiling",
    ]
    assert captured.out.splitlines()[0] == (
        "[1/1] limit-off-by-one  killed: scenarios survived; "
        "fuzz killed by ceiling (reference, 3 runs, 2 steps)"
    )


def _as_in_the_committed_table() -> list[MutantResult]:
    table = semsim.explore.mutants.read_table(semsim.explore.mutants.COMMITTED_TABLE)
    results = []
    for m in MUTANTS:
        verdicts = table[m.name]
        fuzz = verdicts["fuzz"].caught_by
        others = {layer.replace("-", "_"): v for layer, v in verdicts.items() if layer != "fuzz"}
        results.append(_result(m.name, fuzz, **others))
    return results


def test_the_committed_table_reads_back_as_one_verdict_per_catalogued_mutant_and_layer() -> None:
    table = semsim.explore.mutants.read_table(semsim.explore.mutants.COMMITTED_TABLE)
    assert list(table) == [m.name for m in MUTANTS]
    assert all(list(verdicts) == list(semsim.explore.mutant_layers.LAYERS) for verdicts in table.values())
    assert str(table["limit-off-by-one"]["fuzz"]) == "killed by exact_accounting"


def test_a_written_table_reads_back_and_the_same_results_give_the_same_bytes(tmp_path: Path) -> None:
    results = [
        _result("limit-off-by-one", "ceiling", unit=LayerVerdict("killed", "test_rounds.py::test_x[a|b]")),
        _result("contended-never-set", None, state_machine=LayerVerdict("timed out"), scenarios=NOT_RUN),
    ]
    text = semsim.explore.mutants.markdown(results, 150, 7)
    assert semsim.explore.mutants.markdown(list(results), 150, 7) == text
    assert "**Killed by the suite (any layer): 1 of 2 (50%).**" in text
    assert "**Killed by the whole-system fuzz alone: 1 of 2 (50%).**" in text
    path = tmp_path / "MUTANTS.md"
    path.write_text(text)
    assert semsim.explore.mutants.read_table(path) == {r.name: r.layers for r in results}


def test_a_hand_edited_table_with_padding_and_a_pipe_in_a_planted_bug_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "MUTANTS.md"
    path.write_text(
        "# Mutation score\n\n"
        "| mutant | planted bug | unit tests | state machine | scenarios | fuzz "
        "| campaign | runs to kill | steps |\n"
        "|:-------|-------------|------------|---------------|-----------|------|----------|-------------:|------:|\n"
        "| `a-b`  | x | y       | `t.py::t` | **survived** | not run | `ceiling` | reference | 3 | 2 |\n"
        "| `c-d`  | z           | timed out | **survived** | **survived** | **survived** |  |  |  |\n"
        "\nmore text | with a pipe\n"
    )
    table = semsim.explore.mutants.read_table(path)
    assert table == {
        "a-b": {
            "unit": LayerVerdict("killed", "t.py::t"),
            "state-machine": SURVIVED,
            "scenarios": NOT_RUN,
            "fuzz": LayerVerdict("killed", "ceiling"),
        },
        "c-d": {
            "unit": LayerVerdict("timed out"),
            "state-machine": SURVIVED,
            "scenarios": SURVIVED,
            "fuzz": SURVIVED,
        },
    }


def test_exit_0_when_every_verdict_is_as_in_the_committed_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _canned(monkeypatch, *_as_in_the_committed_table())
    assert main(["mutants"]) == EXIT_OK  # though some mutants survive
    assert f"every verdict as in {semsim.explore.mutants.COMMITTED_TABLE}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("result", "line"),
    [
        (
            _result("limit-off-by-one", None),
            "limit-off-by-one: fuzz: the table says killed by exact_accounting; this run: survived",
        ),
        (
            _result("limit-off-by-one", "conservative"),
            "limit-off-by-one: fuzz: the table says killed by exact_accounting; "
            "this run: killed by conservative",
        ),
    ],
    ids=["now-survives", "other-invariant"],
)
def test_exit_1_with_one_line_per_verdict_that_differs_from_the_table(
    result: MutantResult, line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {r.name: r for r in _as_in_the_committed_table()}
    # Only the fuzz verdict differs from the table's row; the other layers agree.
    result = attrs.evolve(result, layers={**table[result.name].layers, "fuzz": result.layers["fuzz"]})
    _canned(monkeypatch, result)
    assert main(["mutants", "--only", result.name]) == EXIT_VIOLATION
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"1 difference from {semsim.explore.mutants.COMMITTED_TABLE}:", f"  {line}"]


def test_exit_1_when_a_mutant_the_table_says_survived_is_now_killed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fuzz kills every mutant of the committed table, so the table is one where it did not.
    row = next(line for line in COMMITTED.splitlines() if line.startswith("| `lease-ignores-group-room` |"))
    cells = row.strip().strip("|").split(" | ")
    survived = "| " + " | ".join([*cells[:5], "**survived**", "", "", ""]) + " |"
    table = tmp_path / "MUTANTS.md"
    table.write_text(COMMITTED.replace(row, survived), encoding="utf-8")
    result = _result("lease-ignores-group-room", "progress")
    row_result = {r.name: r for r in _as_in_the_committed_table()}["lease-ignores-group-room"]
    result = attrs.evolve(result, layers={**row_result.layers, "fuzz": result.layers["fuzz"]})
    _canned(monkeypatch, result)
    args = ["mutants", "--only", result.name, "--expected", str(table)]
    assert main(args) == EXIT_VIOLATION
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"1 difference from {table}:",
        "  lease-ignores-group-room: fuzz: the table says survived; this run: killed by progress",
    ]


def test_a_pytest_layers_first_failing_test_is_reported_but_not_compared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "expected.md"
    then = _result("limit-off-by-one", "ceiling", unit=LayerVerdict("killed", "test_a.py::one"))
    table.write_text(semsim.explore.mutants.markdown([then], 150, 7))
    now = _result("limit-off-by-one", "ceiling", unit=LayerVerdict("killed", "test_b.py::two"))
    _canned(monkeypatch, now)
    assert semsim.explore.mutants.cmd_mutants(_expected(table)) == EXIT_OK
    survived = _result("limit-off-by-one", "ceiling", unit=SURVIVED)
    _canned(monkeypatch, survived)
    assert semsim.explore.mutants.cmd_mutants(_expected(table)) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "limit-off-by-one: unit: the table says killed by test_a.py::one; this run: survived" in out


def test_layers_not_run_are_not_compared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "expected.md"
    table.write_text(
        semsim.explore.mutants.markdown([_result("limit-off-by-one", "ceiling", unit=SURVIVED)], 150, 7)
    )
    monkeypatch.setattr(semsim.explore.mutants, "COMMITTED_TABLE", table)
    _canned(monkeypatch, _result("limit-off-by-one", "ceiling", unit=LayerVerdict("timed out")))
    # The unit verdict differs from the table's, but only the fuzz layer runs.
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "fuzz"]) == EXIT_OK
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "unit"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "limit-off-by-one: unit: the table says survived; this run: timed out" in out


def test_a_full_run_reports_the_tables_rows_the_catalog_no_longer_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _as_in_the_committed_table()
    _canned(monkeypatch, *results)
    rows = [_result(r.name, None, **FUZZ_ONLY) if r.name == "limit-off-by-one" else r for r in results]
    gone = _result("renamed-mutant", "ceiling")
    table = tmp_path / "MUTANTS.md"
    table.write_text(semsim.explore.mutants.markdown([*rows, gone], 150, 7))
    monkeypatch.setattr(semsim.explore.mutants, "COMMITTED_TABLE", table)
    assert main(["mutants"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "  renamed-mutant: in the table, not in the catalog" in out
    assert "  limit-off-by-one: fuzz: the table says survived; this run: killed by exact_accounting" in out


def test_without_a_committed_table_it_says_so_and_every_mutant_must_be_killed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(semsim.explore.mutants, "COMMITTED_TABLE", tmp_path / "MUTANTS.md")
    _canned(monkeypatch, _result("limit-off-by-one", "ceiling"), _result("contended-never-set", None))
    assert main(["mutants", "--only", "limit-off-by-one"]) == EXIT_OK
    assert main(["mutants", "--only", "limit-off-by-one,contended-never-set"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert f"no expected table at {tmp_path / 'MUTANTS.md'}: exit 0 only if every mutant is killed" in out


HEADER = (
    "| mutant | planted bug | unit tests | state machine | scenarios | fuzz "
    "| campaign | runs to kill | steps |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# Mutation score\n\nno table here\n", "no kill table"),
        (
            HEADER + "| `limit-off-by-one` | bug | killed | x | y | z | reference | 3 | 2 |\n",
            "line 3: limit-off-by-one: unit tests 'killed' is not a verdict",
        ),
        (HEADER + "| `limit-off-by-one` | bug | maybe | `ceiling` |\n", "line 3: 4 cells, not 9"),
        (
            "| mutant | planted bug | result | caught by | campaign | runs to kill | steps |\n|---|---|\n",
            "no kill table",
        ),
    ],
    ids=["no-table", "not-a-verdict", "short-row", "old-format"],
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
    monkeypatch.setattr(semsim.explore.mutants, "COMMITTED_TABLE", table)
    _canned(monkeypatch)  # any run would fail the test: no canned results
    assert main(["mutants", "--only", "limit-off-by-one"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert f"semsim mutants: error: expected table: {table}" in captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert "started" not in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layers", "unit,fuzzz"], "--layers: unknown layer 'fuzzz'; layers: unit, state-machine"),
        (["--layers", ","], "--layers names no layer"),
        (["--workers", "0"], "--workers must be from 1 to 64, got 0"),
        (["--cpu-budget", "0"], "--cpu-budget must be from 1 to 86400 seconds, got 0"),
    ],
    ids=["unknown-layer", "no-layer", "no-workers", "no-budget"],
)
def test_bad_layers_workers_or_budget_are_usage_errors_before_any_run(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _canned(monkeypatch)
    assert main(["mutants", "--only", "limit-off-by-one", *argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def _expected(path: Path) -> argparse.Namespace:
    """``semsim mutants --only limit-off-by-one --expected PATH``, as sim/cli/main.py would parse it."""
    return argparse.Namespace(
        only="limit-off-by-one", markdown=None, expected=path, layers=None, workers=1, cpu_budget=60
    )


def test_a_named_expected_table_replaces_the_committed_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "expected.md"
    table.write_text(semsim.explore.mutants.markdown([_result("limit-off-by-one", None)], 150, 7))
    _canned(monkeypatch, _result("limit-off-by-one", None))
    assert semsim.explore.mutants.cmd_mutants(_expected(table)) == EXIT_OK
    assert f"every verdict as in {table}" in capsys.readouterr().out


def test_a_named_expected_table_that_does_not_exist_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _canned(monkeypatch, _result("limit-off-by-one", "ceiling"))
    with pytest.raises(UsageError, match="no such file"):
        semsim.explore.mutants.cmd_mutants(_expected(tmp_path / "missing.md"))


def test_json_is_each_mutants_verdicts_and_the_table_compared(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {r.name: r for r in _as_in_the_committed_table()}
    changed = attrs.evolve(
        table["limit-off-by-one"], layers={**table["limit-off-by-one"].layers, "fuzz": SURVIVED}
    )
    _canned(monkeypatch, changed)
    assert main(["mutants", "--only", "limit-off-by-one", "--layers", "fuzz", "--json"]) == EXIT_VIOLATION
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["passed"] is False
    assert result["layers"] == ["fuzz"]
    [mutant] = result["mutants"]
    assert (mutant["name"], mutant["layers"]) == (
        "limit-off-by-one",
        {"fuzz": {"status": "survived", "caught_by": None}},
    )
    assert result["differences"] == [
        "limit-off-by-one: fuzz: the table says killed by exact_accounting; this run: survived"
    ]
    assert "1 difference from" in captured.err
