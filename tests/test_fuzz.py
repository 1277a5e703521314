"""The fuzz suite: whole simulations under swarm fault plans, every invariant checked.

Campaigns run under the chosen Hypothesis profile (``semsim-ci`` by default, so CI
is reproducible): the faithful reference, which may break invariants only
through its known findings (docs/FINDINGS.md, counted by name), and the
variant with every fix, which may break none. The fixed variant runs on
several seeds derived from the suite's seed, never one, so the suite
cannot be tuned to a seed without anyone noticing: ``semsim-ci`` runs 4 seeds
x 50 runs, ``semsim-dev`` 6 x 100, ``semsim-nightly`` 10 x 500 (``benchmarks/sweep.py`` runs
bigger sweeps; docs/FINDINGS.md has the figures). A failure is shrunk to a
minimal case, saved under ``.semsim-failures/`` with its trace, and the
test prints the one-line command that replays it. Under ``pytest -n N`` each
campaign is computed by one worker and read by the others
(:func:`once_per_session`).

Each known finding is also replayed from its shrunk counterexample
(``tests/fixtures/findings/``): it breaks its invariant on the reference and
holds once its fix is on.
"""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import attrs
import pytest
from filelock import FileLock
from hypothesis import settings

from semaphore_core.fixes import ALL_FIXES, KNOWN_FIXES
from semsim.check.coverage import missing
from semsim.check.invariants import DESIGN_FINDINGS
from semsim.cli.fuzz_command import with_design_fixes
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import (
    KNOWN_FINDINGS,
    Campaign,
    campaign,
    case_length,
    load_case,
    run_case,
    save_case,
)
from semsim.world.design import CALLS_END_WITH_THEIR_FETCH

ROOT = Path(__file__).resolve().parent.parent
FAILURES = ROOT / ".semsim-failures"
FINDINGS = Path(__file__).resolve().parent / "fixtures" / "findings"
#: The reference campaign runs the profile's ``max_examples`` (150 under ``semsim-ci``) and
#: uses its example database (none under ``semsim-ci``; Hypothesis's under the larger two).
PROFILE = settings()
RUNS = PROFILE.max_examples
SEED = 20261129
#: The fixed variant: (seeds, runs per seed) by profile size.
FIXED_SEEDS, FIXED_RUNS = (4, 50) if RUNS <= 150 else (6, 100) if RUNS <= 500 else (10, 500)
#: Seeds derived from the suite's, far apart.
DERIVED_SEEDS = tuple(SEED + 7_919 * (index + 1) for index in range(FIXED_SEEDS))
EVERY_FIX = tuple(sorted(ALL_FIXES))


def _fail_with_replay(name: str, campaign_result: Campaign, tolerated: frozenset[str]) -> None:
    failure = campaign_result.failure
    assert failure is not None
    FAILURES.mkdir(exist_ok=True)
    path = FAILURES / f"{name}-{failure.failure_name}.json"
    save_case(failure.case, tolerated, path, failure)
    _, run = run_case(failure.case, tolerated)
    trace = path.with_suffix(".jsonl")
    if run is not None:
        run.trace.write(trace)
    pytest.fail(
        f"{failure.failure_name} after {campaign_result.runs} runs, shrunk to {case_length(failure.case)} "
        f"plan steps: {failure.detail}\n"
        f"replay: semsim fuzz --replay {path.relative_to(ROOT)} --trace {trace.relative_to(ROOT)}",
        pytrace=False,
    )


def once_per_session(name: str, compute: Callable[[], Campaign], base: pytest.TempPathFactory) -> Campaign:
    """``compute()``, once for the whole session even under ``pytest -n``, where each worker runs it.

    pytest-xdist's documented pattern: the first worker to ask computes it under
    a lock in the session's shared temporary directory and leaves the result
    there; the others wait on the lock and read it. A campaign is a pure
    function of its arguments, so the result read is the one they would have
    computed. Run serially (no worker), it is just ``compute()``.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return compute()
    path = base.getbasetemp().parent / f"campaign-{name}.pickle"
    with FileLock(f"{path}.lock"):
        if path.is_file():
            cached = pickle.loads(path.read_bytes())
            assert isinstance(cached, Campaign)
            return cached
        result = compute()
        path.write_bytes(pickle.dumps(result))
        return result


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    return once_per_session(
        "reference",
        lambda: campaign(
            RUNS,
            SEED,
            fixes=(),
            tolerated=KNOWN_FINDINGS,
            # The named scenarios on the reference are tests/test_scenarios.py's, every invariant
            # judged: here the draws alone, which meet the findings too (F5 under semsim-ci).
            examples=(),
            database=PROFILE.database,
        ),
        tmp_path_factory,
    )


@pytest.fixture(scope="session")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Campaign]:
    """The variant with every fix on one derived seed; the first also runs the named scenarios."""

    @cache
    def on(seed: int) -> Campaign:
        return once_per_session(
            f"fixed-{seed}",
            lambda: campaign(
                FIXED_RUNS,
                seed,
                fixes=EVERY_FIX,
                tolerated=frozenset(),
                examples=fuzz_examples(EVERY_FIX) if seed == DERIVED_SEEDS[0] else (),
                database=PROFILE.database,
            ),
            tmp_path_factory,
        )

    return on


def test_the_reference_breaks_invariants_only_through_its_known_findings(reference: Campaign) -> None:
    if reference.failure is not None:
        _fail_with_replay("reference", reference, KNOWN_FINDINGS)
    assert reference.runs == RUNS
    # The campaign meets the reference's findings, and reports them by name.
    assert set(reference.findings) <= KNOWN_FINDINGS
    assert reference.findings, "a ci campaign on the reference should meet its known findings"


@pytest.mark.parametrize("seed", DERIVED_SEEDS)
def test_the_variant_with_every_fix_breaks_no_invariant(seed: int, fixed: Callable[[int], Campaign]) -> None:
    result = fixed(seed)
    if result.failure is not None:
        _fail_with_replay(f"fixed-{seed}", result, frozenset())
    assert result.runs == FIXED_RUNS + (len(fuzz_examples()) if seed == DERIVED_SEEDS[0] else 0)
    assert not result.findings


def test_the_campaigns_reach_every_sometimes_state(
    reference: Campaign, fixed: Callable[[int], Campaign]
) -> None:
    reached = Counter(reference.coverage)
    for seed in DERIVED_SEEDS:
        reached += fixed(seed).coverage
    assert missing(reached) == []


def test_the_fixed_variant_is_judged_on_several_seeds_and_budgets() -> None:
    assert len(set(DERIVED_SEEDS)) == FIXED_SEEDS >= 4
    assert SEED not in DERIVED_SEEDS


def _finding_cases() -> list[Path]:
    return sorted(FINDINGS.glob("F*.json"))


@pytest.mark.parametrize("path", _finding_cases(), ids=lambda p: p.stem)
def test_a_finding_breaks_its_invariant_on_the_reference(path: Path) -> None:
    case, _ = load_case(path)
    finding = path.stem.split("-")[0]
    report, _ = run_case(case, tolerated=DESIGN_FINDINGS[case.config.design.name] - {finding})
    assert (report.outcome, report.finding) == ("violation", finding), report.detail
    assert report.invariant == json.loads(path.read_text())["expect"]["invariant"]


@pytest.mark.parametrize("path", _finding_cases(), ids=lambda p: p.stem)
def test_a_finding_holds_once_its_fix_is_on(path: Path) -> None:
    case, _ = load_case(path)
    finding = path.stem.split("-")[0]
    if case.config.design.name != "semaphore":  # the gate's and the leased worker's: their own fix
        fixed_case, _ = with_design_fixes(case, frozenset(), (CALLS_END_WITH_THEIR_FETCH,))
        report, _ = run_case(fixed_case, tolerated=frozenset())
        assert report.outcome == "completed", report.detail
        return
    [fix] = [name for name, text in KNOWN_FIXES.items() if text.startswith(f"{finding}:")]
    holder = attrs.evolve(case.config.holder, fixes=(fix,))
    fixed_case = attrs.evolve(case, config=attrs.evolve(case.config, holder=holder))
    report, _ = run_case(fixed_case, tolerated=frozenset())
    assert report.outcome == "completed", report.detail
