"""semsim's own variants: the opt-in fixes and the planted bugs run as variants, by name.

``every-fix`` and ``fix/NAME`` are the reference with fixes on; ``mutant/NAME``
is a planted bug of the catalog, entered around each run wherever it runs
(this process, a campaign's workers). What a variant brings shows in the run's
config and trace, and leaves nothing behind once the run is over.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

import semaphore_core.holder as holder_module
from semaphore_core.fixes import ALL_FIXES, CLAIMS_RESPECT_THE_LIMIT, KNOWN_FIXES
from semsim.cli.main import main
from semsim.explore.fuzz import KNOWN_FINDINGS, RunReport, campaign, load_case, run_case
from semsim.explore.strategies import Case
from semsim.harness.catalog import MUTANTS, mutant
from semsim.harness.run import run_world
from semsim.harness.variants import EVERY_FIX, VariantLookupError, builtin, find_variant
from semsim.runtime.kernel import Limits
from semsim.scenarios import SCENARIOS
from semsim.world.variant import REFERENCE, Variant
from tests.installed import install_entry_points

FIXTURES = Path(__file__).parent / "fixtures" / "findings"
#: A planted bug the named scenario below kills at once: rounds allocate one permit over the limit.
PLANTED = "limit-off-by-one"
STORY = SCENARIOS["evicted-before-round"]


def test_every_fix_and_each_fix_and_each_mutant_is_a_variant_by_name() -> None:
    variants = builtin()
    assert list(variants)[:2] == ["reference", "every-fix"]
    assert variants["every-fix"].fixes == ALL_FIXES
    for name in KNOWN_FIXES:
        assert variants[f"fix/{name}"].fixes == {name}
    for planted in MUTANTS:
        assert find_variant(f"mutant/{planted.name}").patch is planted.patch
    assert all(variant.model == "literal" for variant in variants.values())  # judged as the reference


def test_a_variants_fixes_are_the_runs_and_its_trace_says_so() -> None:
    config = STORY.config
    assert config.holder.fixes == ()
    fixed = run_world(config, STORY.faults, STORY.seed, variant=EVERY_FIX)
    assert list(fixed.trace.header["config"]["holder"]["fixes"]) == sorted(ALL_FIXES)
    assert fixed.trace.header["variant"]["name"] == "every-fix"
    by_config = run_world(
        attrs.evolve(config, holder=attrs.evolve(config.holder, fixes=tuple(sorted(ALL_FIXES)))),
        STORY.faults,
        STORY.seed,
    )
    assert list(fixed.trace.events()) == list(by_config.trace.events())


def test_a_fix_variant_turns_a_finding_into_a_pass() -> None:
    case, _ = load_case(FIXTURES / "F3-claim-after-the-limit-fell.json")
    reference, _ = run_case(case, frozenset())
    assert (reference.invariant, reference.finding) == ("real_ceiling", "F3")
    fixed, _ = run_case(attrs.evolve(case, variant=f"fix/{CLAIMS_RESPECT_THE_LIMIT}"), frozenset())
    assert not fixed.failed, fixed.detail


def test_a_mutant_variant_is_planted_for_its_run_only() -> None:
    before = holder_module.__dict__.copy()
    planted = run_world(STORY.config, STORY.faults, STORY.seed, variant=mutant(PLANTED).variant)
    assert planted.result.outcome == "violation"
    assert holder_module.__dict__ == before  # put back after the run
    assert run_world(STORY.config, STORY.faults, STORY.seed).result.outcome == "completed"


def test_a_mutant_variant_is_taken_out_when_the_run_stops_early() -> None:
    before = holder_module.__dict__.copy()
    stopped = run_world(
        STORY.config, STORY.faults, STORY.seed, limits=Limits(step_limit=50), variant=mutant(PLANTED).variant
    )
    assert stopped.result.outcome != "completed"
    assert holder_module.__dict__ == before


def test_a_campaign_of_a_variant_with_fixes_draws_them_and_tolerates_none() -> None:
    drawn: list[tuple[str, ...]] = []
    result = campaign(
        3,
        5,
        on_run=lambda state, report, shrinking: drawn.append(report.case.config.holder.fixes),
        variant="every-fix",
    )
    assert result.failure is None
    assert drawn == [tuple(sorted(ALL_FIXES))] * 3


def test_a_finding_a_variants_fixes_correct_is_never_tolerated_whatever_the_caller_passed() -> None:
    seen: list[frozenset[str]] = []

    def runner(case: Case, tolerated: frozenset[str]) -> RunReport:
        seen.append(tolerated)
        report, _ = run_case(case, tolerated)
        return report

    campaign(2, 5, tolerated=frozenset(KNOWN_FINDINGS), runner=runner, variant="every-fix")
    campaign(2, 5, tolerated=frozenset({"F4"}), runner=runner, variant=f"fix/{CLAIMS_RESPECT_THE_LIMIT}")
    assert seen == [frozenset()] * 2 + [frozenset({"F4"})] * 2


def test_the_plugins_cases_draw_the_variants_fixes() -> None:
    from hypothesis import HealthCheck, Phase, given, settings

    from semsim.testing import cases

    drawn: list[Case] = []

    @settings(max_examples=2, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(cases(variant="every-fix"))
    def draw(case: Case) -> None:
        drawn.append(case)

    draw()
    assert drawn
    assert all(set(case.config.holder.fixes) == ALL_FIXES and case.variant == "every-fix" for case in drawn)


def test_fuzz_json_of_a_mutant_variant_names_it_and_its_fixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fuzz", "--runs", "3", "--no-db", "--out", str(tmp_path), "--json"]
    assert main([*argv, "--variant", f"mutant/{PLANTED}"]) == 1
    killed = json.loads(capsys.readouterr().out)
    assert killed["variant"] == f"mutant/{PLANTED}"
    assert killed["failure"]["invariant"] == "exact_accounting"
    case, _ = load_case(Path(killed["failure"]["case"]))
    assert case.variant == f"mutant/{PLANTED}"  # the replay plants it again
    assert main(["fuzz", "--replay", killed["failure"]["case"]]) == 1
    capsys.readouterr()
    assert main([*argv, "--variant", "every-fix"]) == 0
    assert json.loads(capsys.readouterr().out)["fixes"] == sorted(ALL_FIXES)


def test_the_same_mutant_is_killed_the_same_way_on_two_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = []
    for workers in ("1", "2"):
        argv = ["fuzz", "--runs", "3", "--no-db", "--out", str(tmp_path / workers), "--json"]
        assert main([*argv, "--workers", workers, "--variant", f"mutant/{PLANTED}"]) == 1
        failure = json.loads(capsys.readouterr().out)["failure"]
        found.append((failure["invariant"], failure["detail"], failure["steps"]))
    assert found[0] == found[1]


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"fixes": {"no-such-fix"}}, ValueError, "got no-such-fix"),
        ({"fixes": "return-idle-leases"}, TypeError, "a set of fix names"),
        ({"patch": 3}, TypeError, "a function returning a context manager"),
    ],
)
def test_a_malformed_fix_or_patch_is_refused_naming_it(
    fields: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Variant("mine", **fields)  # type: ignore[arg-type]


def test_a_misspelt_mutant_is_told_the_name_it_meant() -> None:
    with pytest.raises(VariantLookupError, match=f"did you mean 'mutant/{PLANTED}'"):
        find_variant(f"mutant/{PLANTED[:-1]}")


def test_an_installed_variant_cannot_take_a_name_of_semsims_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_entry_points(tmp_path, monkeypatch, "shadowing", "semsim.variants", {"every-fix": "x:Y"})
    find_variant.cache_clear()
    try:
        assert main(["run", STORY.name, "--variant", "every-fix"]) == 2
    finally:
        find_variant.cache_clear()
    assert "an installed package registers one by that name too" in capsys.readouterr().err


def test_the_reference_is_the_default_and_brings_nothing() -> None:
    assert (REFERENCE.fixes, REFERENCE.patch) == (frozenset(), None)
    assert builtin()["reference"] is REFERENCE
    assert REFERENCE.with_fixes(("b", "a")) == ("b", "a")  # as given: no fixes of its own
