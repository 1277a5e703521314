"""A team's own gate ledger or lease store, run and judged as a variant (semsim.world.variant), and
a team's own invariants judged on those designs' runs (semsim.check.design_checkers).

The gate and the leased worker have no holder; a variant of one changes the part its seed gives
in full (``ledger``, ``store``), and every command that takes ``--variant`` runs it: ``run``,
``fuzz --design`` (drawn runs and replay), ``compare --designs DESIGN@VARIANT``. A variant that
changes a part its design does not have is refused, not ignored.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from semaphore_core.gate import ConcurrencySlots
from semaphore_core.leased import LeaseStore
from semaphore_core.leased.store import Status
from semsim.check.checker import CHECKER_FAILED, Checker
from semsim.check.design_promises import FENCED_WRITE, GATE_EXACT
from semsim.check.events import ApiCallChange, Finish
from semsim.cli.main import main
from semsim.explore.fuzz import campaign
from semsim.harness.designs import run_design
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.world.variant import REFERENCE, Variant
from tests.helpers import TEAM_INVARIANTS


def _one_too_many(new_token: Callable[[], str], *, max_in_flight: int, stale_ms: int) -> ConcurrencySlots:
    return ConcurrencySlots(new_token, max_in_flight=max_in_flight + 1, stale_ms=stale_ms)


class Unfenced(LeaseStore):
    """Lands every write, whatever its token: the fence forgotten."""

    def write(
        self,
        id: str,
        token: str,
        status: Status,
        now_ms: int,
        *,
        release: bool = False,
        wake_at_ms: int | None = None,
    ) -> bool:
        self.conn.execute("UPDATE workflow_instances SET lease_token = ? WHERE id = ?", (token, id))
        return super().write(id, token, status, now_ms, release=release, wake_at_ms=wake_at_ms)


OVER = Variant("gate-one-too-many", ledger=_one_too_many)
UNFENCED = Variant("store-unfenced", store=Unfenced)

TEAM_MODULE = """
from semaphore_core.gate import ConcurrencySlots
from semsim.world.variant import Variant


def _one_too_many(new_token, *, max_in_flight, stale_ms):
    return ConcurrencySlots(new_token, max_in_flight=max_in_flight + 1, stale_ms=stale_ms)


OVER = Variant("gate-one-too-many", ledger=_one_too_many)
"""


def _in_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, text: str) -> None:
    """``module`` written in the working directory, as a team's own would be, found afresh."""
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, module, raising=False)


@pytest.fixture
def team_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``team_gate:OVER``: a team's gate ledger that admits one too many."""
    _in_working_directory(tmp_path, monkeypatch, "team_gate", TEAM_MODULE)
    return "team_gate:OVER"


def test_a_ledger_that_admits_one_too_many_breaks_gate_exact() -> None:
    story = SCENARIOS["gate-leaked-slot-heals"]  # a cap of 1, and a caller that shed for 2 minutes
    assert run_scenario(story).passed
    result = run_scenario(story, variant=OVER)
    assert result.run.result.invariant == GATE_EXACT
    assert result.run.trace.header["variant"]["name"] == "gate-one-too-many"


def test_a_store_without_its_fence_breaks_fenced_write() -> None:
    story = SCENARIOS["leased-lost-lease-runs-twice"]  # the stale worker writes after its lease is lost
    assert run_scenario(story).passed
    assert run_scenario(story, variant=UNFENCED).run.result.invariant == FENCED_WRITE


def test_the_gates_drawn_runs_find_the_ledger_that_admits_one_too_many() -> None:
    found = campaign(30, seed=1, design="gate", variant="tests.test_design_variants:OVER", examples=())
    assert found.failure is not None
    assert found.failure.invariant == GATE_EXACT
    assert found.failure.case.variant == "tests.test_design_variants:OVER"


@pytest.mark.parametrize(
    ("variant", "design", "part"),
    [
        (Variant("mine", holder=lambda conn, config, new_id: None), "gate", "a holder"),  # type: ignore[arg-type,return-value]
        (Variant("mine", fixes={"calls-end-within-their-permit"}), "leased-worker", "holder fixes"),
        (OVER, "semaphore", "a ledger"),
        (OVER, "leased-worker", "a ledger"),
        (UNFENCED, "gate", "a store"),
    ],
)
def test_a_variant_of_a_part_its_design_does_not_have_is_refused(
    variant: Variant, design: str, part: str
) -> None:
    with pytest.raises(ValueError, match=f"changes {part}, which the {design} design does not have"):
        variant.check_design(design)
    config = SCENARIOS["gate-fails-open" if design == "gate" else "leased-lost-lease-runs-twice"].config
    if design != "semaphore":
        with pytest.raises(ValueError, match="does not have"):
            run_design(
                config,
                SCENARIOS["gate-fails-open"].faults
                if design == "gate"
                else SCENARIOS["leased-lost-lease-runs-twice"].faults,
                1,
                variant=variant,
            )


def test_a_factory_that_builds_something_else_is_refused_naming_the_variant() -> None:
    odd = Variant("odd", ledger=lambda new_token, **_: object(), store=lambda conn: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(
        TypeError, match=re.escape("variant 'odd' built a object, not a semaphore_core.gate.ConcurrencySlots")
    ):
        odd.build_ledger(lambda: "t", max_in_flight=1, stale_ms=1)
    with pytest.raises(
        TypeError, match=re.escape("variant 'odd' built a object, not a semaphore_core.leased.LeaseStore")
    ):
        odd.build_store(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a variant's ledger builds one"):
        Variant("bad", ledger=3)  # type: ignore[arg-type]


def test_a_variants_patch_is_entered_around_a_design_run() -> None:
    entered: list[str] = []

    @contextlib.contextmanager
    def patch() -> Iterator[None]:
        entered.append("in")
        try:
            yield
        finally:
            entered.append("out")

    story = SCENARIOS["gate-fails-open"]
    run = run_design(story.config, story.faults, 1, variant=Variant("patched", patch=patch))
    assert run.result.outcome == "completed"
    assert entered == ["in", "out"]
    REFERENCE.check_design("gate")  # the seed's gate: nothing foreign


def test_semsim_run_takes_a_teams_gate_variant(team_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "gate-leaked-slot-heals", "--variant", team_module]) == 1
    captured = capsys.readouterr()
    assert "design gate, variant team_gate:OVER, judged by: items_end, gate_exact" in captured.out
    assert f"invariant {GATE_EXACT} violated" in captured.out + captured.err
    assert main(["run", "gate-fails-open", "--variant", "every-fix"]) == 2
    err = capsys.readouterr().err
    assert "--variant: variant 'every-fix' changes holder fixes, which the gate design does not have" in err


@pytest.mark.parametrize(
    ("story", "variant", "name"),
    [
        ("gate-leaked-slot-heals", "tests.test_design_variants:OVER", "gate-one-too-many"),
        ("leased-lost-lease-runs-twice", "tests.test_design_variants:UNFENCED", "store-unfenced"),
    ],
)
def test_semsim_run_json_names_a_design_storys_variant(
    story: str, variant: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gate's or leased worker's run has no world to ask its variant of; ``--json`` still names
    the one it ran (it once said null, as if the seed's part had run)."""
    assert main(["run", story, "--variant", variant, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["variant"], result["passed"]) == (name, False)
    assert f"--variant {variant}" in result["reproduce"]


def test_semsim_fuzz_finds_and_replays_a_teams_gate_variant(
    team_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fuzz", "--design", "gate", "--variant", team_module, "--runs", "2", "--workers", "1"]
    assert main([*argv, "--no-db", "--quiet", "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "variant team_gate:OVER of the design gate (judged by: items_end, gate_exact)" in out
    (case,) = (tmp_path / "out").glob("case-*.json")
    assert json.loads(case.read_text())["variant"] == "team_gate:OVER"
    assert main(["fuzz", "--replay", str(case)]) == 1
    assert (
        "variant team_gate:OVER (judged by: items_end, gate_exact), outcome violation"
        in capsys.readouterr().out
    )
    assert (
        main(["fuzz", "--design", "leased-worker", "--variant", team_module, "--runs", "1", "--no-db"]) == 2
    )
    assert "changes a ledger, which the leased-worker design does not have" in capsys.readouterr().err
    assert main(["fuzz", "--variant", team_module, "--runs", "1", "--no-db"]) == 2
    assert "changes a ledger, which the semaphore design does not have" in capsys.readouterr().err


def test_semsim_compare_runs_a_teams_gate_beside_the_seeds(
    team_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", "--designs", f"gate,gate@{team_module}", "--plans", "calm", "--seeds", "1"]
    assert main([*argv, "--workers", "1", "--quiet", "--no-db"]) == 1
    out = capsys.readouterr().out
    assert "| gate | calm | 1/1 |" in out
    assert "| gate@team_gate:OVER | calm | 0/1 |" in out
    assert "gate@team_gate:OVER under calm, seed 1: violation (gate_exact)" in out


# --- a team's own invariants on the other designs' runs (semsim.check.design_checkers) ---------


class CountsCalls(Checker):
    """Keeps what it heard, for the test to read (each run builds its own instance)."""

    name = "counts_calls"
    heard: ClassVar[list[tuple[str, int, int, int | None]]] = []
    finished: ClassVar[list[dict[str, int]]] = []

    def on_api(self, call: ApiCallChange) -> None:
        CountsCalls.heard.append((call.change, call.in_flight, call.in_use, call.limit))

    def on_finish(self, finish: Finish) -> None:
        CountsCalls.finished.append(dict(finish.in_use))


class Broken(Checker):
    name = "broken"

    def on_api(self, call: ApiCallChange) -> None:
        raise RuntimeError("a bug of the checker's own")


@pytest.fixture
def team_invariants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``team_invariants``: a module of a team's checkers."""
    _in_working_directory(tmp_path, monkeypatch, "team_invariants", TEAM_INVARIANTS)
    return "team_invariants"


def test_a_checker_hears_every_api_change_and_the_end_of_a_gates_run() -> None:
    CountsCalls.heard.clear()
    CountsCalls.finished.clear()
    story = SCENARIOS["gate-evicted-over-admits"]  # cap 2; the gate evicted at 10 s
    result = run_scenario(story, checkers=[CountsCalls])
    assert result.passed, result.failures
    assert "counts_calls" in result.run.judges()
    starts = [
        (in_flight, in_use, limit)
        for change, in_flight, in_use, limit in CountsCalls.heard
        if change == "start"
    ]
    # Both slots are taken before either call starts; then the successor's two: four calls at
    # the API while the design counts two.
    assert starts == [(1, 2, 2), (2, 2, 2), (3, 2, 2), (4, 2, 2)]
    assert CountsCalls.finished == [{"acct": 0}]


def test_a_teams_invariant_breaks_where_the_gate_over_admits(
    team_invariants: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    never_over = f"{team_invariants}:NeverOverCap"
    assert main(["run", "gate-fails-open", "--invariant", never_over]) == 1
    out = capsys.readouterr().out
    assert "judged by: items_end, gate_exact, never_over_cap" in out
    assert "invariant never_over_cap violated" in out
    argv = ["fuzz", "--design", "gate", "--invariant", never_over, "--runs", "2", "--workers", "1"]
    assert main([*argv, "--no-db", "--quiet", "--out", str(tmp_path / "out")]) == 1
    (case,) = (tmp_path / "out").glob("case-*never_over_cap.json")
    assert json.loads(case.read_text())["invariants"] == [never_over]
    assert main(["fuzz", "--replay", str(case)]) == 1
    assert "VIOLATED never_over_cap" in capsys.readouterr().out


def test_a_checker_that_hears_what_the_design_never_calls_is_refused(
    team_invariants: str, capsys: pytest.CaptureFixture[str]
) -> None:
    deaf = f"{team_invariants}:HearsRounds"
    assert main(["run", "gate-fails-open", "--invariant", deaf]) == 2
    assert "hears on_round, which a run of the gate design never calls" in capsys.readouterr().err
    assert main(["fuzz", "--design", "leased-worker", "--invariant", deaf, "--runs", "1", "--no-db"]) == 2
    assert "hears on_round, which a run of the leased-worker design never calls" in capsys.readouterr().err
    story = SCENARIOS["gate-fails-open"]
    with pytest.raises(ValueError, match="hears on_round"):
        run_design(story.config, story.faults, 1, checkers=[sys.modules["team_invariants"].HearsRounds])


def test_a_checker_that_fails_for_its_own_reasons_is_the_checker_verdict() -> None:
    story = SCENARIOS["leased-lost-lease-runs-twice"]
    run = run_design(story.config, story.faults, 1, checkers=[Broken])
    assert run.result.invariant == CHECKER_FAILED
    assert (
        "invariant broken (Broken.on_api) failed: RuntimeError: a bug of the checker's own"
        in run.result.detail
    )


def test_a_planted_bug_of_the_semaphores_core_is_refused_on_another_design(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "gate-leaked-slot-heals", "--variant", "mutant/report-lowers-high-water"]) == 2
    assert "is written for the semaphore design, not the gate design" in capsys.readouterr().err


CLASH = """
from semsim.check.checker import Checker


class Clash(Checker):
    name = "gate_exact"

    def on_api(self, call):
        pass
"""


def test_a_checker_named_like_a_designs_own_judge_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_working_directory(tmp_path, monkeypatch, "clash", CLASH)
    assert main(["run", "gate-fails-open", "--invariant", "clash:Clash"]) == 2
    err = capsys.readouterr().err
    assert "invariant gate_exact takes the name of one of the gate design's own judges" in err
    assert "Traceback" not in err
    assert main(["fuzz", "--design", "gate", "--invariant", "clash:Clash", "--runs", "1", "--no-db"]) == 2
    assert "takes the name of one of the gate design's own judges" in capsys.readouterr().err
