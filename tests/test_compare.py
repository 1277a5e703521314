"""``semsim compare``: the matrix, its summary, and the command (issue 26, item 4)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from semsim.check.invariants import DESIGN_FINDINGS
from semsim.check.trade_offs import TradeOffs
from semsim.cli.main import main
from semsim.explore.campaigns import local_pool
from semsim.explore.compare import (
    FIGURES,
    PLANS,
    Cell,
    Summary,
    check_matrix,
    compare,
    contender,
    default_config,
    markdown,
    plan_for,
    summarise,
)
from semsim.explore.compare_plot import HATCHES, bar_styles, plot_comparison
from semsim.harness import designs
from semsim.harness.run import WorldConfig
from semsim.world.design import DESIGN_FIXES, DESIGNS
from semsim.world.faults import Window
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.variant import REFERENCE
from semsim.world.workload import Workload
from tests.helpers import TEAM_INVARIANTS


def small() -> WorldConfig:
    """Two minutes, two clients: a comparison's config, small enough for a test."""
    config = default_config()
    return attrs.evolve(
        config,
        duration_ms=240_000,
        workload=attrs.evolve(config.workload, clients=2, until_ms=240_000),
    )


def test_every_plan_fits_every_design_in_the_default_world() -> None:
    check_matrix(default_config(), DESIGNS, PLANS, [1])


def test_each_design_meets_a_plan_in_its_own_form() -> None:
    config = default_config()
    lost = plan_for("coordinator-lost", "leased-worker", config)
    assert lost.partitions
    assert all(window.target == STORE for window in lost.partitions)
    assert plan_for("coordinator-lost", "gate", config).evict_holders_every_ms == 60_000
    stalled = plan_for("worker-stall", "semaphore", config)
    assert stalled.partitions
    assert not stalled.pauses
    assert all(isinstance(window, Window) for window in stalled.partitions)
    assert plan_for("worker-stall", "gate", config).pauses
    with pytest.raises(ValueError, match="unknown plan"):
        plan_for("meteor", "gate", config)


def test_the_cells_are_the_same_whoever_runs_them() -> None:
    world, chosen = small(), ["gate", "leased-worker"]
    here = compare(world, chosen, ["calm", "workers-die"], [1, 2])
    with local_pool(2) as pool:
        heard: list[Cell] = []
        there = compare(
            world,
            chosen,
            ["calm", "workers-die"],
            [1, 2],
            executor=pool,
            on_cell=heard.append,
        )
    assert [(c.design, c.plan, c.seed) for c in there] == [(c.design, c.plan, c.seed) for c in here]
    assert [attrs.evolve(c, cpu_s=0.0) for c in there] == [attrs.evolve(c, cpu_s=0.0) for c in here]
    assert sorted((c.design, c.plan, c.seed) for c in heard) == sorted(
        (c.design, c.plan, c.seed) for c in here
    )
    assert all(cell.judged for cell in here)


def figures(**values: object) -> TradeOffs:
    base: dict[str, object] = dict.fromkeys((f.name for f in attrs.fields(TradeOffs)), 0)
    base.update(design="gate", cap=6, recovery_ms=0, queue_wait_p50_ms=None, queue_wait_p99_ms=None)
    base.update(values)
    return TradeOffs(**base)  # type: ignore[arg-type]  # the test's own figures, by name


def cell(seed: int, trade_offs: TradeOffs | None, outcome: str = "completed") -> Cell:
    return Cell("gate", "lossy", seed, outcome, None, "", (), trade_offs, 0.5)


def test_a_summary_takes_means_the_peaks_maximum_and_counts_what_never_recovered() -> None:
    cells = [
        cell(1, figures(peak_over_admission=1, leaked_cap_s=10.0, recovery_ms=None)),
        cell(2, figures(peak_over_admission=4, leaked_cap_s=20.0, recovery_ms=3_000)),
        cell(3, None, outcome="violation"),
    ]
    (summary,) = summarise(cells)
    assert (summary.runs, summary.judged, summary.not_recovered) == (3, 2, 1)
    assert summary.figures["peak_over_admission"] == 4.0
    assert summary.figures["leaked_cap_s"] == 15.0
    assert summary.figures["recovery_ms"] == 3_000.0
    assert summary.figures["queue_wait_p99_ms"] is None
    row = markdown([summary]).splitlines()[2]
    assert row.startswith("| gate | lossy | 2/3 | 4 |")
    assert "3,000 (1 never)" in row
    assert "n/a" in row


# --- the command ---------------------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "world.json"
    path.write_text(json.dumps(small().to_dict()))
    return path


def test_compare_prints_the_table_and_json_and_writes_the_plot(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot, table = tmp_path / "trade-offs.png", tmp_path / "table.md"
    argv = [
        "compare",
        "--config",
        str(config_file),
        "--designs",
        "gate,leased-worker",
        "--plans",
        "calm,lossy",
    ]
    argv += [
        "--seeds",
        "1",
        "--workers",
        "1",
        "--json",
        "--plot",
        str(plot),
        "--markdown",
        str(table),
        "--quiet",
        "--no-db",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "ok"
    assert [(c["design"], c["plan"]) for c in out["cells"]] == [
        ("gate", "calm"),
        ("gate", "lossy"),
        ("leased-worker", "calm"),
        ("leased-worker", "lossy"),
    ]
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert table.read_text().startswith("| design | plan | runs judged |")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--designs", "mutex"], "unknown design 'mutex'"),
        (["--plans", "calm,calm"], "names one twice"),
        (["--plans", "meteor"], "unknown plan 'meteor'"),
        (["--plot", "/nonexistent-dir/x.png"], "--plot"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "one or the other"),
    ],
)
def test_compare_refuses_bad_input_before_running(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--seeds", "1", "--no-db", *argv]) == 2
    assert message in capsys.readouterr().err


def test_compare_refuses_a_config_that_names_a_design_or_is_no_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    named = tmp_path / "named.json"
    named.write_text(json.dumps({**small().to_dict(), "design": {"name": "gate"}}))
    assert main(["compare", "--config", str(named)]) == 2
    assert "compare runs each design itself" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"holder": {"limit": "six"}}')
    assert main(["compare", "--config", str(broken)]) == 2
    assert "config.holder.limit" in capsys.readouterr().err
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"workload": attrs.asdict(Workload(clients=2))}))
    assert main(["compare", "--config", str(plain), "--designs", "semaphore"]) == 2
    assert "needs operations" in capsys.readouterr().err


def test_compare_exits_1_when_a_run_breaks_an_invariant(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(designs, "unfinished", lambda storage: 1)  # a planted bug: items never end
    monkeypatch.setattr(designs, "MAX_SETTLE_MS", 30_000)
    argv = ["compare", "--config", str(config_file), "--designs", "gate", "--plans", "calm"]
    assert main([*argv, "--seeds", "1", "--workers", "1", "--quiet", "--no-db"]) == 1
    out = capsys.readouterr().out
    assert "gate under calm, seed 1: violation (items_end)" in out
    assert "| gate | calm | 0/1 |" in out


@pytest.mark.parametrize(
    ("text", "label", "fixes"),
    [
        ("semaphore", "semaphore", ()),
        ("semaphore@reference", "semaphore", ()),
        ("gate@reference", "gate", ()),
        ("leased-worker@reference", "leased-worker", ()),
        ("semaphore@every-fix", "semaphore@every-fix", ()),
        ("semaphore@mine:VARIANT", "semaphore@mine:VARIANT", ()),
        ("gate@every-fix", "gate@every-fix", DESIGN_FIXES),
        (
            "leased-worker@calls-end-with-their-fetch",
            "leased-worker@calls-end-with-their-fetch",
            DESIGN_FIXES,
        ),
    ],
)
def test_a_row_is_a_design_or_a_variant_of_one(text: str, label: str, fixes: tuple[str, ...]) -> None:
    row = contender(text)
    assert row.label == label
    assert row.fixes() == fixes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mutex@every-fix", "unknown design 'mutex'"),
        ("gate@", "name a variant after '@'"),
        ("semaphore@ every-fix", "without spaces"),
    ],
)
def test_a_row_that_names_no_variant_of_its_design_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        contender(text)


def test_a_variant_row_runs_with_its_fixes_and_no_longer_tolerates_what_they_fix() -> None:
    config = default_config()
    world, variant, tolerated = contender("gate@every-fix").world(config)
    assert world.design.gate.fixes == DESIGN_FIXES
    assert (variant, tolerated) == (REFERENCE, frozenset())
    assert contender("gate").world(config)[2] == DESIGN_FINDINGS["gate"]
    world, variant, tolerated = contender("semaphore@every-fix").world(config)
    assert (world.design.name, variant.name, tolerated) == ("semaphore", "every-fix", frozenset())
    assert contender("semaphore").world(config)[2] == DESIGN_FINDINGS["semaphore"]


def test_compare_runs_variants_beside_the_reference_under_the_same_faults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Seed 1 of api-slow meets F6 on the reference gate (docs/comparison.json): its row names F6, and
    # the fixed gate's row meets nothing. Were the variant ignored, F6 would be a violation there.
    argv = ["compare", "--designs", "gate,gate@every-fix", "--plans", "api-slow", "--seeds", "1"]
    assert main([*argv, "--workers", "1", "--quiet", "--no-db", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(row["design"], row["findings"]) for row in out["summary"]] == [
        ("gate", ["F6"]),
        ("gate@every-fix", []),
    ]
    assert out["designs"] == ["gate", "gate@every-fix"]


def test_compare_runs_a_users_own_holder_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "team_holder.py").write_text(
        "import attrs\n"
        "from semsim.harness.variants import builtin\n"
        "VARIANT = attrs.evolve(builtin()['every-fix'], name='team-holder')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    argv = ["compare", "--designs", "semaphore@team_holder:VARIANT", "--plans", "calm", "--seeds", "1"]
    assert main([*argv, "--seed", "2", "--workers", "1", "--quiet", "--no-db"]) == 0
    out = capsys.readouterr().out
    assert "| semaphore@team_holder:VARIANT | calm | 1/1 |" in out
    assert out.splitlines()[0].startswith("comparing semaphore@team_holder:VARIANT under 1 fault plan")


@pytest.mark.parametrize(
    ("designs", "message"),
    [
        ("semaphore@no_such_module:X", "--designs semaphore@no_such_module:X: "),
        ("semaphore@mutant/no-such-mutant", "--designs semaphore@mutant/no-such-mutant: "),
        ("gate@bogus", "--designs gate@bogus: "),
        ("gate@fix/return-idle-leases", "changes holder fixes, which the gate design does not have"),
        ("semaphore,semaphore@reference", "names one twice (semaphore@reference is semaphore)"),
        ("gate,gate@reference", "names one twice (gate@reference is gate)"),
        (
            "gate@every-fix,gate@calls-end-with-their-fetch",
            "'gate@every-fix' and 'gate@calls-end-with-their-fetch' run the same",
        ),
        (
            "leased-worker@calls-end-with-their-fetch,leased-worker@every-fix",
            "'leased-worker@calls-end-with-their-fetch' and 'leased-worker@every-fix' run the same",
        ),
    ],
)
def test_compare_refuses_a_variant_it_cannot_run_before_running(
    designs: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--designs", designs, "--seeds", "1", "--no-db"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_two_rows_that_run_the_same_are_refused_before_any_run() -> None:
    """Each design's every fix is, for now, its one fix: the two names are one row, whose cells
    would run twice under two labels. A variant named otherwise but running the same is one too."""
    config = default_config()
    assert DESIGN_FIXES == ("calls-end-with-their-fetch",)  # else gate@every-fix is a row of its own
    with pytest.raises(
        ValueError, match="'gate@every-fix' and 'gate@calls-end-with-their-fetch' run the same"
    ):
        check_matrix(config, ["gate@every-fix", "gate@calls-end-with-their-fetch"], ["calm"], [1])
    with pytest.raises(
        ValueError, match=re.escape("'semaphore' and 'semaphore@tests.test_compare:RENAMED' run the same")
    ):
        check_matrix(config, ["semaphore", "semaphore@tests.test_compare:RENAMED"], ["calm"], [1])
    check_matrix(config, ["gate", "gate@every-fix", "semaphore", "semaphore@every-fix"], ["calm"], [1])


#: The reference under another name: it runs and is judged as the reference is.
RENAMED = attrs.evolve(REFERENCE, name="renamed", description="the reference, renamed")


def test_two_variants_of_one_design_are_told_apart_in_the_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.axes import Axes

    drawn: dict[str, tuple[object, object]] = {}
    real = Axes.bar

    def bar(self: Axes, *args: Any, **kwargs: Any) -> Any:
        drawn[kwargs["label"]] = (kwargs["color"], kwargs["hatch"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar", bar)
    rows = ["gate", "gate@every-fix", "gate@team:LEDGER", "leased-worker", "leased-worker@team:STORE"]
    figures: dict[str, float | None] = {name: 1.0 for name, _ in FIGURES}
    plot_comparison([Summary(row, "calm", 1, 1, (), figures, 0) for row in rows], tmp_path / "p.png")
    assert list(drawn) == rows
    assert len(set(drawn.values())) == len(rows), drawn
    # A variant keeps its design's colour: the hatch tells it from the design and its other variants.
    assert {drawn[row][0] for row in rows[:3]} == {drawn["gate"][0]}
    assert drawn["gate"][1] is None


def test_many_variants_of_one_design_each_get_a_hatch_of_their_own() -> None:
    rows = [f"gate@v{index}" for index in range(2 * len(HATCHES) + 1)]
    styles = bar_styles(["gate", *rows])
    assert len(set(styles.values())) == len(rows) + 1


# --- the user's own invariants judge every row (compare --invariant) -----------------------------


@pytest.fixture
def team_invariants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of a team's own checkers, in the working directory and on the path a pool's workers
    start with."""
    # A name of its own: resolved invariants are cached by reference for the process, and other
    # tests load their own team_invariants from their own directories.
    (tmp_path / "team_compare_invariants.py").write_text(TEAM_INVARIANTS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "team_compare_invariants"


def test_compare_judges_every_row_by_the_users_invariant_too(
    team_invariants: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The gate loses its ledger with each eviction and admits past the cap: a trade-off compare
    # measures (peak over cap), which the team's invariant makes a violation.
    argv = ["compare", "--designs", "gate", "--plans", "coordinator-lost", "--seeds", "1", "--workers", "1"]
    assert main([*argv, "--quiet", "--no-db"]) == 0
    assert "| gate | coordinator-lost | 1/1 | 5 |" in capsys.readouterr().out
    yours = ["--invariant", f"{team_invariants}:NeverOverCap"]
    assert main([*argv, "--quiet", "--no-db", "--json", *yours]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["invariants"] == [f"{team_invariants}:NeverOverCap"]
    assert result["verdict"] == "violation"
    (cell,) = result["cells"]
    assert (cell["outcome"], cell["invariant"]) == ("violation", "never_over_cap")
    assert "calls for acct, cap 6" in cell["detail"]
    assert f"judged by yours too: {team_invariants}:NeverOverCap" in captured.err


def test_the_users_invariant_judges_the_cells_run_on_other_processes_alike(team_invariants: str) -> None:
    config = default_config()
    yours = (f"{team_invariants}:NeverOverCap",)
    here = compare(config, ["gate"], ["coordinator-lost"], [1, 2], invariants=yours)
    with local_pool(2) as pool:
        there = compare(config, ["gate"], ["coordinator-lost"], [1, 2], pool, invariants=yours)
    timeless = [[attrs.evolve(cell, cpu_s=0.0) for cell in cells] for cells in (here, there)]
    assert timeless[0] == timeless[1]
    assert {cell.invariant for cell in here} == {"never_over_cap"}


def test_compare_refuses_an_invariant_a_rows_design_never_calls_before_running(
    team_invariants: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hears_rounds = ["--invariant", f"{team_invariants}:HearsRounds", "--seeds", "1", "--no-db"]
    assert main(["compare", "--designs", "semaphore,leased-worker", *hears_rounds]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(
        "semsim compare: error: leased-worker: invariant hears_rounds hears on_round, which a run of the "
        "leased-worker design never calls"
    )
    assert "comparing" not in captured.out
    with pytest.raises(ValueError, match=r"^gate: invariant hears_rounds hears on_round"):
        check_matrix(
            default_config(), ["semaphore", "gate"], ["calm"], [1], (f"{team_invariants}:HearsRounds",)
        )
    check_matrix(default_config(), ["semaphore"], ["calm"], [1], (f"{team_invariants}:HearsRounds",))
    assert main(["compare", "--invariant", "no_such_module:X", "--seeds", "1", "--no-db"]) == 2
    assert "--invariant: invariant 'no_such_module:X' cannot be loaded" in capsys.readouterr().err
