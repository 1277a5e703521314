"""The ``semsim_runner`` fixture's object: worlds, scenarios and campaigns run as a test's steps.

Each method runs what it is given and returns it for the test to assert
on (a run's trace and monitor, a scenario's expectations, a campaign's
counters). When semsim itself judges the run failed (an invariant broken,
a crash, a run that did not finish, a scenario's expectation unmet), the
method saves the case and raises :class:`~semsim.testing.SemsimFailure`
with the invariant, the case file and the command that replays it, as
``semsim fuzz`` prints them. ``check=False`` returns a failed run instead,
for a test that expects one.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

import attrs
from hypothesis import settings

from semsim.check.checker import Checker
from semsim.explore.fuzz import (
    Campaign,
    RunReport,
    campaign,
    design_report_of,
    fixes_arg,
    report_of,
    tolerated_for,
)
from semsim.explore.strategies import Case
from semsim.harness.designs import DesignRun
from semsim.harness.invariants import find_invariant, find_invariants, reference_to
from semsim.harness.run import WorldConfig, WorldRun, check_world_run, run_world
from semsim.harness.variants import find_variant
from semsim.scenarios import Scenario, ScenarioResult, run_scenario
from semsim.scenarios.registry import find
from semsim.testing.failures import failure
from semsim.world.faults import FaultPlan
from semsim.world.variant import REFERENCE, Variant

#: Runs a campaign takes when neither the call nor ``--semsim-runs`` says (``semsim fuzz``'s default).
DEFAULT_RUNS = 100

#: The user's own invariants, as a test names them: checker classes, registered names, or
#: ``module:attribute`` references.
Invariants: TypeAlias = Sequence[str | type[Checker]]


def _variant_name(variant: object) -> str:
    """A campaign's variant, as the name its cases record (a Variant object has none)."""
    if not isinstance(variant, str):
        raise TypeError(
            f"a campaign's variant is the name it is found by (reference, a registered name or "
            f"module:attribute), so its cases can name it; got {variant!r}"
        )
    find_variant(variant)
    return variant


def references_of(invariants: Invariants) -> tuple[str, ...]:
    """Each invariant as the reference that finds it again (what a case file records)."""
    if isinstance(invariants, str):
        raise TypeError(f"invariants is a list of checkers or references, got {invariants!r}")
    references = tuple(
        invariant if isinstance(invariant, str) else reference_to(invariant) for invariant in invariants
    )
    find_invariants(references)  # unknown, malformed or two of one name: raised here, before any run
    return references


@attrs.define
class SemsimRunner:
    """Runs worlds, scenarios and campaigns for one test (the ``semsim_runner`` fixture).

    ``seed``: ``--semsim-seed``, the seed of :meth:`run` and :meth:`fuzz` when
    the call names none (scenarios keep their own: their stories are told
    under them). ``runs``: ``--semsim-runs``. ``out_dir``: ``--semsim-out``,
    where failing cases are saved. ``test_name``: the test's, in case files' names.
    """

    out_dir: Path
    test_name: str
    seed: int | None = None
    runs: int = DEFAULT_RUNS
    #: ``--hypothesis-seed``, for :meth:`fuzz` with ``profile=True``.
    hypothesis_seed: int | None = None

    def run(
        self,
        config: WorldConfig,
        faults: FaultPlan | None = None,
        *,
        seed: int | None = None,
        tolerated: frozenset[str] = frozenset(),
        full_checks: bool = False,
        check: bool = True,
        variant: Variant | str = REFERENCE,
        invariants: Invariants = (),
    ) -> WorldRun:
        """``run_world(config, faults, seed, ...)``; a run that did not complete fails the test.

        ``seed``: the call's, else ``--semsim-seed``, else 0. ``check=False``
        returns the run whatever its outcome (``run.result`` says it).
        ``variant``: the holder design and its judges (:mod:`semsim.world.variant`), or the
        name it is found by (``semsim run --variant``'s), which a failing case then records.
        ``invariants``: the user's own, judged beside semsim's (:mod:`semsim.check.checker`);
        a failing case names them, so its replay judges them too.
        """
        __tracebackhide__ = True
        plan = FaultPlan() if faults is None else faults
        references = references_of(invariants)
        named = variant if isinstance(variant, str) else REFERENCE.name
        variant = find_variant(variant) if isinstance(variant, str) else variant
        checkers = tuple(find_invariant(reference) for reference in references)
        used = self._seed(seed)
        if isinstance(config, WorldConfig) and config.design.name != "semaphore":
            raise ValueError(
                f"config.design names {config.design.name!r}: semsim_runner.run runs the semaphore's "
                "worlds; semsim_runner.scenario tells a design's story, and "
                "semsim.harness.designs.run_design runs any design's world"
            )
        # The caller's errors are theirs, raised as they are: only what the run raises is a crash.
        check_world_run(config, plan, used, None, tolerated, full_checks, variant, checkers)
        case = Case(config=config, faults=plan, seed=used, variant=named, invariants=references)
        try:
            run = run_world(
                config,
                plan,
                case.seed,
                tolerated=tolerated,
                full_checks=full_checks,
                variant=variant,
                checkers=checkers,
            )
        except Exception as error:  # a crash: the case is saved, the traceback kept
            crashed = failure(
                [f"the run crashed: {type(error).__name__}: {error}"], case, tolerated, None, *self._where()
            )
            error.add_note(str(crashed))
            raise
        if check and run.result.outcome != "completed":
            report = report_of(case, run)
            lines = [_headline(run)]
            hint = None
            if variant != REFERENCE or checkers:
                lines.append(f"variant {variant.name}, judged by: {', '.join(run.judges())}")
            if variant != REFERENCE and named == REFERENCE.name:
                # A Variant object has no name the command line can find it by: replaying its
                # case is Python's job (or name the variant by reference to get a command).
                hint = f"load_case(the case) and run_world(..., variant=) with variant {variant.name!r}"
            raise failure(lines, case, tolerated, report, *self._where(), replay_hint=hint)
        return run

    def scenario(
        self, scenario: Scenario | str, *, seed: int | None = None, invariants: Invariants = ()
    ) -> ScenarioResult:
        """Run a scenario (an object, a registered name or ``module:function``) and require it to pass.

        It fails when an invariant broke (``invariants``: the user's own, judged
        beside semsim's), the run did not finish, or an expectation of its
        check was unmet: each unmet one is listed.
        """
        __tracebackhide__ = True
        found = find(scenario) if isinstance(scenario, str) else scenario
        references = references_of(invariants)
        checkers = tuple(find_invariant(reference) for reference in references)
        result = run_scenario(found, seed, checkers=checkers)
        if result.passed:
            return result
        case = Case(config=found.config, faults=found.faults, seed=result.seed, invariants=references)
        report = _report(case, result)
        # A case holds the world, not the scenario's check: only `semsim run` judges its expectations.
        again = scenario if isinstance(scenario, str) else None
        hint = None
        if again is not None:
            judged = "".join(f" --invariant {shlex.quote(reference)}" for reference in references)
            hint = f"semsim run {again} --seed {result.seed}{judged} --trace out.jsonl"
        lines = [
            f"scenario {found.name}, seed {result.seed}:",
            *(f"  FAILED: {line}" for line in result.failures),
        ]
        if again is None and report is None:
            lines.append(
                "  the invariants held; the replay below runs the world, and the expectations are the"
                " scenario's own (name it as module:function for a `semsim run` command)"
            )
        raise failure(lines, case, found.tolerated, report, *self._where(), replay_hint=hint)

    def fuzz(
        self,
        *,
        runs: int | None = None,
        seed: int | None = None,
        fixes: str | Sequence[str] = (),
        examples: Sequence[Case] = (),
        on_run: Callable[[Campaign, RunReport, bool], None] | None = None,
        variant: str = REFERENCE.name,
        invariants: Invariants = (),
        profile: bool = False,
    ) -> Campaign:
        """A campaign (``semsim fuzz``'s): ``runs`` from the call, else ``--semsim-runs``.

        ``fixes``: fix names (``semaphore_core.fixes``), or ``"all"``; an unknown
        name is a ``ValueError`` naming the known ones. ``variant``: the holder
        variant every run runs, by the name it is found by (``semsim fuzz
        --variant``'s: campaign cases record it). ``invariants``: the user's
        own, judged in every run beside semsim's. ``profile=True`` takes what
        the call does not say from Hypothesis instead: runs from the active
        profile's ``max_examples``, its example database (a failure found once
        replays first), and the seed from ``--hypothesis-seed`` when given
        (``semsim fuzz`` keeps its fixed settings, so a seed names one
        campaign everywhere). The first failure is
        shrunk, saved and fails the test with its replay command; findings the
        reference is known for are tolerated as ``semsim fuzz`` tolerates them,
        unless ``fixes`` correct them.
        """
        __tracebackhide__ = True
        chosen = fixes_arg(fixes if isinstance(fixes, str) else ",".join(fixes))
        chosen = find_variant(_variant_name(variant)).with_fixes(chosen)  # its fixes: drawn, not tolerated
        tolerated = tolerated_for(chosen)
        database = None
        if profile:
            active = settings()
            runs = active.max_examples if runs is None else runs
            database = active.database
            if seed is None and self.hypothesis_seed is not None:
                seed = self.hypothesis_seed
        result = campaign(
            self.runs if runs is None else runs,
            self._seed(seed),
            chosen,
            tolerated,
            on_run=on_run,
            examples=examples,
            database=database,
            variant=_variant_name(variant),
            invariants=references_of(invariants),
        )
        report = result.failure
        if report is not None:
            lines = [
                f"a campaign of {result.runs} runs (seed {self._seed(seed)}) broke {report.failure_name}"
                f" at t={report.sim_ms} ms: {report.detail}"
            ]
            if result.shrink_cut_short:
                lines.append("(the shrink ran out of budget: the case is the smallest found so far)")
            raise failure(lines, report.case, tolerated, report, *self._where())
        return result

    def _seed(self, seed: int | None) -> int:
        if seed is not None:
            return seed
        return 0 if self.seed is None else self.seed

    def _where(self) -> tuple[Path, str]:
        return self.out_dir, self.test_name


def _report(case: Case, result: ScenarioResult) -> RunReport | None:
    """What a failed scenario's run broke, as its case records it; None when it broke nothing and
    only expectations were unmet. A gate's or leased worker's run has no world, and its report
    is its design's: else the failure would name no invariant, and say they held."""
    if result.invariant_failure is None:
        return None
    world, run = result.world, result.run
    if world is not None:
        return report_of(case, world)
    assert isinstance(run, DesignRun), run  # a run without a world is a design's
    return design_report_of(case, run)


def _headline(run: WorldRun) -> str:
    result = run.result
    if result.outcome == "violation":
        # The detail names the invariant and the time: "capacity_returns at t=267000 ms: ...".
        headline = f"invariant violated: {result.detail}"
        if result.finding is None:
            return headline
        return (
            f"{headline}\nthis is the reference's known finding {result.finding} (docs/FINDINGS.md):"
            f" tolerated=frozenset({{{result.finding!r}}}) accepts it"
        )
    return f"the run ended with {result.outcome} at t={result.end_ms} ms: {result.detail}"


def scenario_test(scenario: Scenario | str) -> Callable[[SemsimRunner], None]:
    """A test function that runs ``scenario`` and passes when it does::

        test_double_eviction = scenario_test("myservice.scenarios:double_eviction")

    A name or ``module:function`` is looked up when the test runs, so a
    scenario that cannot be found fails its test, not the collection.
    """

    def test(semsim_runner: SemsimRunner) -> None:
        __tracebackhide__ = True
        semsim_runner.scenario(scenario)

    label = scenario if isinstance(scenario, str) else scenario.name
    test.__doc__ = f"The scenario {label} tells its story: every expectation and invariant holds."
    return test
