"""A holder variant is a subclass, not a monkeypatch, and its judges are chosen explicitly.

The variant here over-admits: its rounds allocate as if the limit were one
higher. Judged with the literal model or by the invariants alone, it stops
at the ceiling it breaks; with a model of its own that makes the same
change, the model agrees and the ceiling still breaks. A variant whose
change no invariant can see (usage() reports one permit fewer) passes when
judged by the invariants alone and fails against the literal model: which
judges ran is the verdict's to say, and the run and its trace say it.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from semaphore_core import Holder, HolderConfig
from semaphore_core.holder import RoundOutcome
from semaphore_core.policy import resolve_limit
from semaphore_core.usage import Usage
from semsim.check.literal_holder import LiteralHolder
from semsim.cli.main import main
from semsim.explore.fuzz import case_text, load_case
from semsim.explore.strategies import Case
from semsim.harness.run import HolderSpec, WorldConfig, run_world
from semsim.harness.variants import builtin
from semsim.world.faults import FaultPlan
from semsim.world.variant import REFERENCE, Variant
from semsim.world.workload import Workload
from tests.installed import install_entry_points

#: Busy enough that grant room is the limit: a room one larger over-admits at once.
CONFIG = WorldConfig(
    holder=HolderSpec(limit=3),
    workload=Workload(clients=3, items_per_minute=40, until_ms=60_000),
    duration_ms=90_000,
)


class OverAdmittingHolder(Holder):
    """Allocates each round as if the limit were one higher: it grants a permit past the limit."""

    def round(self, requests: Sequence[Any], now: int) -> RoundOutcome:
        honest = self.config
        self.config = attrs.evolve(honest, limit=resolve_limit(honest) + 1)
        try:
            return super().round(requests, now)
        finally:
            self.config = honest


class OverAdmittingModel(LiteralHolder):
    """The literal model with the same change."""

    def round(self, messages: Sequence[object], now: int) -> tuple[list[Any], list[Any]]:
        honest = self._limit
        limit = self._resolve_limit()
        self._limit = lambda: limit + 1
        try:
            return super().round(messages, now)
        finally:
            self._limit = honest


class ReserveShowingHolder(Holder):
    """Reports one permit fewer available than the room it grants from: an operator's reserve."""

    def usage(self, now: int) -> Usage:
        usage = super().usage(now)
        return attrs.evolve(usage, available=max(0, usage.available - 1))


def _violation(variant: Variant, seed: int = 1) -> str | None:
    run = run_world(CONFIG, FaultPlan(), seed, variant=variant)
    assert run.variant is variant
    return run.result.invariant


def test_the_reference_holds_in_this_world() -> None:
    assert _violation(REFERENCE) is None


def test_over_admitting_judged_with_the_literal_model_stops_at_the_first_judge_to_see_it() -> None:
    # The commit's ceiling check sees it before the model compares the round's replies.
    assert _violation(Variant("over-admitting", holder=OverAdmittingHolder)) == "ceiling"


def test_judged_by_the_invariants_alone_it_stops_at_the_ceiling_it_breaks() -> None:
    assert _violation(Variant("over-admitting", holder=OverAdmittingHolder, model=None)) == "ceiling"


def test_a_model_of_its_own_agrees_with_it_and_the_invariants_still_judge() -> None:
    variant = Variant("over-admitting", holder=OverAdmittingHolder, model=OverAdmittingModel)
    assert _violation(variant) == "ceiling"
    assert (
        variant.judges()[0]
        == "exact_accounting against its own model (tests.test_variants.OverAdmittingModel)"
    )


def test_a_change_no_invariant_sees_passes_on_the_invariants_alone_and_the_verdict_says_so() -> None:
    literal = Variant("reserve-showing", holder=ReserveShowingHolder)
    alone = Variant("reserve-showing", holder=ReserveShowingHolder, model=None)
    assert _violation(literal) == "exact_accounting"
    run = run_world(CONFIG, FaultPlan(), 1, variant=alone)
    assert run.result.outcome == "completed"
    assert run.trace.header["variant"] == {"name": "reserve-showing", "judges": ["safety", "liveness"]}
    assert "variant" not in run_world(CONFIG, FaultPlan(), 1).trace.header


def test_a_factory_that_builds_no_holder_is_refused_naming_the_variant() -> None:
    def not_a_holder(conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> Any:
        return object()

    # A crash inside the world comes out of its nursery, as every crash of a run does.
    with pytest.raises(ExceptionGroup) as caught:
        run_world(CONFIG, FaultPlan(), 1, variant=Variant("broken", holder=not_a_holder))
    assert caught.group_contains(
        TypeError, match=r"variant 'broken' built a object, not a semaphore_core\.Holder"
    )


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"name": ""}, ValueError, "a non-empty string without spaces"),
        ({"name": "two words"}, ValueError, "a non-empty string without spaces"),
        ({"name": "v", "holder": 3}, TypeError, "builds a Holder"),
        ({"name": "v", "model": "exact"}, TypeError, "'literal', a model factory"),
    ],
)
def test_a_malformed_variant_is_refused_naming_the_field(
    arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        Variant(**arguments)


def test_run_world_refuses_what_is_not_a_variant() -> None:
    with pytest.raises(TypeError, match=r"variant must be a semsim\.world\.variant\.Variant"):
        run_world(CONFIG, FaultPlan(), 1, variant=OverAdmittingHolder)  # type: ignore[arg-type]


# --- variants by name: the command line and case files ------------------------------------------

#: Module-level, so `module:attribute` finds them (tests.test_variants:OVER).
OVER = Variant("over-admitting", holder=OverAdmittingHolder, model=None)
RESERVE = Variant("reserve-showing", holder=ReserveShowingHolder, model=None)
RESERVE_BY_THE_MODEL = Variant("reserve-showing", holder=ReserveShowingHolder)


def test_run_takes_a_variant_says_who_judged_and_reproduces_with_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "strict-burst", "--variant", "tests.test_variants:RESERVE"]) == 0
    assert "variant tests.test_variants:RESERVE, judged by: safety, liveness" in capsys.readouterr().out
    assert main(["run", "strict-burst", "--variant", "tests.test_variants:RESERVE_BY_THE_MODEL"]) == 1
    err = capsys.readouterr().err
    assert "exact_accounting" in err
    assert "--variant tests.test_variants:RESERVE_BY_THE_MODEL --trace out.jsonl" in err


def test_a_campaign_of_a_variant_saves_a_case_that_names_it_and_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fuzz", "--variant", "tests.test_variants:OVER", "--runs", "2", "--workers", "1", "--no-db"]
    assert main([*argv, "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "variant tests.test_variants:OVER (judged by: safety, liveness)" in out
    (case,) = tmp_path.glob("*.json")
    assert json.loads(case.read_text(encoding="utf-8"))["variant"] == "tests.test_variants:OVER"
    assert load_case(case)[0].variant == "tests.test_variants:OVER"
    assert main(["fuzz", "--replay", str(case)]) == 1
    replayed = capsys.readouterr().out
    assert "variant tests.test_variants:OVER (judged by: safety, liveness)" in replayed
    assert "ceiling" in replayed


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "strict-burst", "--variant", "no-such-variant"], "unknown variant 'no-such-variant'"),
        (["fuzz", "--variant", "tests.test_variants:CONFIG", "--no-db"], "is a WorldConfig, not a Variant"),
        (["fuzz", "--variant", "nosuchmodule:V", "--no-db"], "cannot import 'nosuchmodule'"),
    ],
)
def test_a_variant_that_cannot_be_loaded_is_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_replay_cannot_drop_the_variant_its_case_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = tmp_path / "case.json"
    data = json.loads(
        case_text(Case(CONFIG, FaultPlan(), 1, variant="tests.test_variants:GONE"), frozenset())
    )
    case.write_text(json.dumps(data), encoding="utf-8")
    assert main(["fuzz", "--replay", str(case)]) == 2
    err = capsys.readouterr().err
    assert "names variant 'tests.test_variants:GONE', which cannot be loaded" in err
    assert main(["fuzz", "--replay", str(case), "--variant", "reference"]) == 2
    assert "--variant does not go with --replay" in capsys.readouterr().err


def test_a_case_of_the_reference_reads_and_writes_as_it_always_has() -> None:
    text = case_text(Case(CONFIG, FaultPlan(), 1), frozenset())
    assert '"variant"' not in text


def test_a_variant_in_the_working_directory_is_found_as_python_m_finds_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "workdirvariants.py").write_text(
        "from semsim.world.variant import Variant\nALONE = Variant('alone', model=None)\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "workdirvariants", raising=False)
    try:
        assert main(["run", "late-claim-not-found", "--variant", "workdirvariants:ALONE"]) == 0
    finally:
        sys.modules.pop("workdirvariants", None)  # a local module left behind would change what
        # later derandomized tests draw (Hypothesis mines constants from every local module)
    assert "variant workdirvariants:ALONE, judged by: safety, liveness" in capsys.readouterr().out


def test_a_variant_an_installed_package_registers_runs_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = {"registered-reserve": "tests.test_variants:RESERVE"}
    install_entry_points(tmp_path, monkeypatch, "theirvariants", "semsim.variants", entries)
    assert main(["list", "--variants"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    # semsim's own first (the reference, its fixes, its mutants), then the installed ones
    assert listed == [*builtin(), "registered-reserve"]
    assert listed[:2] == ["reference", "every-fix"]
    assert main(["run", "strict-burst", "--variant", "registered-reserve"]) == 0
    assert "variant registered-reserve, judged by: safety, liveness" in capsys.readouterr().out
    assert main(["run", "strict-burst", "--variant", "registered-reserv"]) == 2
    assert "(did you mean 'registered-reserve'?)" in capsys.readouterr().err
