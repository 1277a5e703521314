"""Fuzz campaigns: whole simulations under swarm fault plans, shrunk to a replayable case.

Hypothesis draws each :class:`~semsim.explore.strategies.Case` (a config, a fault plan,
a seed) and runs it with every invariant checked. Known findings of the
faithful reference (docs/FINDINGS.md) are tolerated and counted by name;
anything else is a failure: Hypothesis shrinks it to a minimal case, which
is saved as JSON next to a one-line command that replays it exactly.

The same campaigns serve ``semsim fuzz`` (``semsim.cli.fuzz_command``: a progress
line and a closing summary), the pytest fuzz suite and ``semsim mutants``.
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import example as hypothesis_example
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase

from semaphore_core.fixes import ALL_FIXES, KNOWN_FIXES
from semsim.check.checker import MAX_CHECKERS
from semsim.check.coverage import EXPECTED, FULL_CHECKS, coverage, missing
from semsim.check.design_checkers import check_design_checkers
from semsim.check.design_coverage import DESIGN_EXPECTED, design_coverage, design_missing
from semsim.check.invariants import DESIGN_FINDINGS, SEMAPHORE_FINDINGS
from semsim.check.invariants import KNOWN_FINDINGS as KNOWN_FINDINGS  # what a campaign counts by name
from semsim.explore.design_strategies import design_cases
from semsim.explore.strategies import Case, cases
from semsim.harness.designs import DesignRun, run_design
from semsim.harness.invariants import find_invariants
from semsim.harness.run import WorldConfig, WorldRun, check_plan, check_tolerated, run_world
from semsim.harness.variants import find_variant
from semsim.inputs.files import InputError, parse_json, read_from, read_text, write_text_whole
from semsim.inputs.validation import check_seed
from semsim.runtime.kernel import SCHEDULE
from semsim.world.design import CALLS_END_WITH_THEIR_FETCH, DESIGN_FIXES, DESIGNS, DesignName
from semsim.world.faults import FaultPlan

#: Where failing cases are written unless told otherwise.
DEFAULT_OUT: Final = Path("semsim-failures")
CASE_FORMAT: Final = "semsim-case/1"
#: Simulated work (trace events, summed over shrink runs) spent shrinking a failure before the
#: best case so far is kept. A budget of work rather than of seconds keeps shrinking
#: deterministic: the same failure shrinks to the same case on any machine. A run records
#: about 2,000 events and the simulator about 10,000 a CPU second here: some 500 shrink runs,
#: two minutes at most (docs/BENCHMARKS.md).
SHRINK_BUDGET_EVENTS: Final = 1_000_000
MAX_CASE_BYTES: Final = 1_000_000
#: One semaphore case in this many (by a digest of the case) is judged with the checker's full checks too
#: (:func:`judged_in_full`): they cost some 7% more CPU per run (docs/BENCHMARKS.md).
FULL_CHECKS_EVERY: Final = 4


@attrs.frozen
class RunReport:
    """One run of a campaign: what broke (if anything) and what it reached."""

    case: Case
    outcome: str
    invariant: str | None
    #: The known finding that explains the violation (when the run did not tolerate it).
    finding: str | None
    detail: str
    sim_ms: int
    findings: Counter[str]
    documented: Counter[str]
    coverage: Counter[str]
    #: Trace events the run recorded: the measure of its work.
    events: int = 0

    @property
    def failed(self) -> bool:
        return self.outcome != "completed"

    @property
    def failure_name(self) -> str:
        """The invariant broken (with the finding that explains it), or the outcome (``crash``, ...)."""
        if self.invariant is None:
            return self.outcome
        return self.invariant if self.finding is None else f"{self.invariant}:{self.finding}"


def judged_in_full(case: Case) -> bool:
    """Whether a semaphore case is judged with the checker's full checks whatever was asked: one
    case in ``FULL_CHECKS_EVERY``, by a digest of the whole case.

    The checks read incrementally (a mirror of the holder's rows, kept readings of the clients'
    storage); the full checks read the same from scratch beside them, and a disagreement is the
    ``checker`` verdict. Fuzzing correct code cannot show a check that judges too little; this
    sample of every campaign's runs can. The rule is the case's own, so a campaign and a replay
    of its case judge a case alike, on any number of workers. It reads the world (seed, config,
    faults), not the seed alone: Hypothesis draws few distinct seeds (14-19 in a 50-run
    campaign, seed 0 in a fifth of the runs), so a rule on the seed judged one run in ten in
    full, and a whole family of neighbouring cases alike (docs/BENCHMARKS.md). Not the variant
    or the user's invariants: a planted bug's campaign judges in full the runs the reference's
    does. The cost: a shrink candidate is judged in full one time in four, so a ``checker``
    failure shrinks less far than others (the case it keeps still fails).
    """
    if case.config.design.name != "semaphore":
        return False
    world = {"seed": case.seed, "config": case.config.to_dict(), "faults": case.faults.to_dict()}
    digest = hashlib.sha256(json.dumps(world, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "big") % FULL_CHECKS_EVERY == FULL_CHECKS_EVERY - 1


def run_case(
    case: Case, tolerated: frozenset[str], full_checks: bool = False
) -> tuple[RunReport, WorldRun | DesignRun | None]:
    """Run one case; an exception out of the model (an internal assertion) is a ``crash``.

    ``full_checks``: the checker's debug mode (``run_world``'s), same verdict; a case
    :func:`judged_in_full` has it anyway. A seed or ``tolerated`` that no run takes is refused
    here, not reported as the case's crash.
    """
    check_seed(case.seed, "case.seed")
    check_tolerated(tolerated)
    variant = find_variant(case.variant)  # VariantLookupError: the caller's to report, not a crash
    checkers = find_invariants(case.invariants)  # InvariantLookupError: the same
    if case.config.design.name != "semaphore":
        # The gate's and the leased worker's: their own findings, and a variant of their own part.
        check_design_case(case, tolerated, full_checks)
        variant.check_design(case.config.design.name)
        check_design_checkers(checkers, case.config.design.name)
    try:
        if case.config.design.name != "semaphore":
            measured = run_design(
                case.config, case.faults, case.seed, tolerated=tolerated, variant=variant, checkers=checkers
            )
            return design_report_of(case, measured), measured
        run = run_world(
            case.config,
            case.faults,
            case.seed,
            tolerated=tolerated,
            full_checks=full_checks or judged_in_full(case),
            variant=variant,
            checkers=checkers,
        )
    except Exception as error:  # a crash is a finding, reported with its message
        while isinstance(error, BaseExceptionGroup) and isinstance(error.exceptions[0], Exception):
            error = error.exceptions[0]
        where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
        location = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
        return (
            RunReport(
                case,
                "crash",
                None,
                None,
                f"{type(error).__name__}{location}: {error}",
                0,
                Counter(),
                Counter(),
                Counter(),
            ),
            None,
        )
    return report_of(case, run), run


def report_of(case: Case, run: WorldRun) -> RunReport:
    """What ``run`` (of ``case``) broke and reached, as a campaign records it."""
    monitor = run.monitor
    return RunReport(
        case=case,
        outcome=run.result.outcome,
        invariant=run.result.invariant,
        finding=run.result.finding,
        detail=run.result.detail,
        sim_ms=run.result.end_ms,
        findings=Counter(v.finding for v in monitor.violations if v.finding is not None),
        documented=monitor.documented + monitor.leaks,
        coverage=coverage(run.trace.events(), case.config.latency_ms)
        + Counter({FULL_CHECKS: 1 if monitor.full else 0}),
        events=len(run.trace),
    )


def design_report_of(case: Case, run: DesignRun) -> RunReport:
    """What a gate's or leased worker's ``run`` (of ``case``) broke and reached."""
    return RunReport(
        case=case,
        outcome=run.result.outcome,
        invariant=run.result.invariant,
        finding=run.result.finding,
        detail=run.result.detail,
        sim_ms=run.result.end_ms,
        findings=Counter(run.findings),
        documented=Counter(),
        coverage=design_coverage(run.trace.events(), run.design, case.config.latency_ms),
        events=len(run.trace),
    )


def check_design_case(case: Case, tolerated: frozenset[str], full_checks: bool) -> None:
    """A case of the gate or the leased worker tolerates only its design's findings and is not
    replayed in the checker's debug mode: else refused (``ValueError``), not run. (Its variant
    and invariants are checked once loaded: ``Variant.check_design``,
    ``check_design_checkers``.)"""
    design = case.config.design.name
    if full_checks:
        raise ValueError(f"a case of the {design} design takes no checker's full checks: it has no holder")
    theirs = DESIGN_FINDINGS[design]
    if not tolerated <= theirs:
        raise ValueError(
            f"a case of the {design} design tolerates only its own findings ({', '.join(sorted(theirs))}), "
            f"not {sorted(tolerated - theirs)[0]}"
        )


def design_tolerated_for(design: str, fixes: tuple[str, ...]) -> frozenset[str]:
    """``design``'s known findings, less those its fixes correct (both of its findings are corrected
    by the one fix, ``calls-end-with-their-fetch``). An unknown fix is ``ValueError``."""
    unknown = [name for name in fixes if name not in DESIGN_FIXES]
    if unknown:
        raise ValueError(f"unknown fix {unknown[0]!r} of design {design}; known: {', '.join(DESIGN_FIXES)}")
    return frozenset() if CALLS_END_WITH_THEIR_FETCH in fixes else DESIGN_FINDINGS[design]


def case_length(case: Case) -> int:
    """A counterexample's length in plan steps: each fault kind switched on, each scheduled action.

    This is what shrinking minimises and what the mutation table reports.
    """
    faults = case.faults
    rates = sum(
        1
        for value in (
            faults.request_loss,
            faults.reply_loss,
            faults.duplicate,
            faults.delay_ms,
            faults.reorder,
            faults.alarm_failure,
            faults.release_loss,
            faults.forged_reports,
            faults.evict_holders_every_ms,
            faults.gate_error,
        )
        if value
    )
    scheduled = (
        len(faults.partitions)
        + len(faults.drops)
        + len(faults.evictions)
        + len(faults.limit_changes)
        + len(faults.group_limit_changes)
        + len(faults.input_faults)
        + len(faults.cancels)
        + len(faults.pauses)
        + len(faults.shutdowns)
        + len(faults.rollbacks)
    )
    return rates + scheduled + len(case.config.workload.script)


# --- saved cases ------------------------------------------------------------------------


class CaseFileError(ValueError):
    """A saved case is unreadable or malformed; the message names the file and what is wrong."""


def case_text(case: Case, tolerated: frozenset[str], failure: RunReport | None = None) -> str:
    """A case as the JSON :func:`load_case` reads; with ``failure``, what it broke goes in as ``expect``."""
    data: dict[str, Any] = {"format": CASE_FORMAT, "schedule": SCHEDULE, "tolerated": sorted(tolerated)}
    if failure is not None:
        data["expect"] = {
            "invariant": failure.invariant,
            "finding": failure.finding,
            "outcome": failure.outcome,
        }
    data.update(case.to_dict())
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def save_case(
    case: Case, tolerated: frozenset[str], path: str | os.PathLike[str], failure: RunReport | None = None
) -> None:
    """Write a case as JSON (see :func:`case_text`) to ``path`` (a ``str`` or a path-like object),
    whole or not at all."""
    write_text_whole(path, case_text(case, tolerated, failure))


def load_case(path: str | os.PathLike[str]) -> tuple[Case, frozenset[str]]:
    """A case written by :func:`save_case` (or by hand) and the findings it tolerates."""
    try:
        text = read_text(path, MAX_CASE_BYTES, "a case file")
    except InputError as error:
        raise CaseFileError(str(error)) from None
    where = read_from(path)  # what messages call it: standard input, for -
    try:
        data = parse_json(text)
    except InputError as error:
        raise CaseFileError(f"{where}: {error}") from None
    if not isinstance(data, dict):
        raise CaseFileError(f"{where}: a case is a JSON object")
    if data.get("format") != CASE_FORMAT:
        raise CaseFileError(f"{where}: format {data.get('format')!r}; this semsim reads {CASE_FORMAT!r}")
    known = {"format", "schedule", "tolerated", "expect", "seed", "variant", "invariants", "config", "faults"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise CaseFileError(f"{where}: unknown field {unknown[0]!r}")
    schedule = data.get("schedule", 1)
    if isinstance(schedule, bool) or not isinstance(schedule, int) or not 1 <= schedule <= SCHEDULE:
        raise CaseFileError(
            f"{where}: schedule must be an integer in [1, {SCHEDULE}] (this semsim runs {SCHEDULE}), "
            f"got {schedule!r}"
        )
    seed, tolerated = data.get("seed"), data.get("tolerated", [])
    try:  # the rules run_world applies, with the file's name in front
        check_seed(seed)
        if not isinstance(tolerated, list) or not all(isinstance(name, str) for name in tolerated):
            raise TypeError("tolerated must be a list of finding names")
        check_tolerated(frozenset(tolerated))
    except (TypeError, ValueError) as error:
        raise CaseFileError(f"{where}: {error}") from None
    assert isinstance(seed, int), seed
    variant = data.get("variant", "reference")
    if not isinstance(variant, str) or not variant.strip():
        raise CaseFileError(f"{where}: variant must be a variant's name or module:attribute, got {variant!r}")
    invariants = data.get("invariants", [])
    if not (
        isinstance(invariants, list)
        and len(invariants) <= MAX_CHECKERS
        and all(isinstance(name, str) and name.strip() for name in invariants)
    ):
        raise CaseFileError(
            f"{where}: invariants must be a list of at most {MAX_CHECKERS} invariants' names or "
            f"module:attribute references, got {invariants!r}"
        )
    if "expect" in data:
        problem = _expect_problem(data["expect"])
        if problem:
            raise CaseFileError(f"{where}: expect: {problem}")
    try:
        config = WorldConfig.from_dict(data.get("config", {}))
        faults = FaultPlan.from_dict(data.get("faults", {}))
        check_plan(config, faults)
    except ValueError as error:
        raise CaseFileError(f"{where}: {error}") from None
    case = Case(config=config, faults=faults, seed=seed, variant=variant, invariants=tuple(invariants))
    return case, frozenset(tolerated)


#: What a saved case can have broken (``expect.outcome``): every outcome of a failed run.
EXPECT_OUTCOMES: Final = ("violation", "crash", "deadlock", "time_limit", "step_limit")
_EXPECT_FIELDS: Final = ("invariant", "finding", "outcome")


def _expect_problem(expect: object) -> str | None:
    """What is wrong with a case's ``expect`` (docs/WIRE.md), or None: it must be what
    :func:`case_text` writes for a failed run, so a test comparing against it compares
    against something a run can give."""
    shape = 'an object {"invariant", "finding", "outcome"}'
    if not isinstance(expect, dict):
        return f"must be {shape}, got {json.dumps(expect)}"
    unknown = sorted(set(expect) - set(_EXPECT_FIELDS))
    if unknown:
        return f"unknown field {unknown[0]!r}; it holds {shape}"
    missing = [name for name in _EXPECT_FIELDS if name not in expect]
    if missing:
        return f"missing field {missing[0]!r}; it holds {shape}"
    invariant, finding, outcome = (expect[name] for name in _EXPECT_FIELDS)
    if not isinstance(outcome, str) or outcome not in EXPECT_OUTCOMES:
        return f"outcome must be one of {', '.join(EXPECT_OUTCOMES)}, got {outcome!r}"
    if finding is not None and (not isinstance(finding, str) or finding not in KNOWN_FINDINGS):
        return f"finding must be null or one of {', '.join(sorted(KNOWN_FINDINGS))}, got {finding!r}"
    if outcome == "violation":
        if not isinstance(invariant, str) or not invariant:
            return f"invariant must name the invariant a violation broke, got {invariant!r}"
    elif invariant is not None or finding is not None:
        return f"invariant and finding must be null for outcome {outcome!r}: only a violation breaks one"
    return None


def case_schedule(path: Path) -> int:
    """The schedule a case file was saved under (1 when it does not say: files from before
    the field); read it after :func:`load_case` accepted the file."""
    data = parse_json(read_text(path, MAX_CASE_BYTES, "a case file"))
    schedule = data.get("schedule", 1)
    assert isinstance(schedule, int), schedule
    return schedule


def case_expected_invariant(path: Path) -> str | None:
    """The invariant a case file says it broke (``expect.invariant``), or None; read it after
    :func:`load_case` accepted the file."""
    data = parse_json(read_text(path, MAX_CASE_BYTES, "a case file"))
    expect = data.get("expect") or {}
    invariant = expect.get("invariant")
    assert invariant is None or isinstance(invariant, str), invariant
    return invariant


# --- campaigns ----------------------------------------------------------------------------


@attrs.define
class Campaign:
    """What a campaign saw; ``failure`` is the shrunk failing run, if any."""

    runs: int = 0
    sim_ms: int = 0
    findings: Counter[str] = attrs.field(factory=Counter)
    documented: Counter[str] = attrs.field(factory=Counter)
    coverage: Counter[str] = attrs.field(factory=Counter)
    failure: RunReport | None = None
    #: Runs tried while shrinking the failure, and the work they did (trace events).
    shrink_runs: int = 0
    shrink_events: int = 0
    #: Shrinking stopped at its budget (or was interrupted): the case may not be minimal.
    shrink_cut_short: bool = False
    #: The campaign was stopped before its runs were done (Ctrl-C): what it saw is partial.
    interrupted: bool = False
    #: The design its drawn runs ran (``semsim fuzz --design``).
    design: DesignName = "semaphore"

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.sim_ms += report.sim_ms
        self.findings += report.findings
        self.documented += report.documented
        self.coverage += report.coverage

    def missing_coverage(self) -> list[str]:
        if self.design != "semaphore":
            return design_missing(self.coverage, self.design)
        return missing(self.coverage)

    def expected_coverage(self) -> tuple[str, ...]:
        """The counters its design's runs are expected to reach, in report order."""
        return EXPECTED if self.design == "semaphore" else DESIGN_EXPECTED[self.design]


class _Failed(Exception):
    """Raised inside the Hypothesis test so it shrinks; one subclass per failure name."""


_FAILURE_TYPES: dict[str, type[_Failed]] = {}


def _failure_type(name: str) -> type[_Failed]:
    # Hypothesis shrinks towards failures of the same type raised at the same
    # place, so each invariant gets its own type: shrinking keeps the invariant.
    if name not in _FAILURE_TYPES:
        _FAILURE_TYPES[name] = type(f"Violated_{name}", (_Failed,), {})
    return _FAILURE_TYPES[name]


def _raise_failure(report: RunReport) -> NoReturn:
    # One raise site: Hypothesis tells failures apart by type and by where they were raised.
    raise _failure_type(report.failure_name)(report.detail)


def fixes_arg(text: str) -> tuple[str, ...]:
    """``--fixes``: '' (the reference; the command line refuses it), 'all', or names from KNOWN_FIXES."""
    names = tuple(name for name in (part.strip() for part in text.split(",")) if name)
    if names == ("all",):
        return tuple(sorted(ALL_FIXES))
    unknown = [name for name in names if name not in KNOWN_FIXES and name != "all"]
    if unknown:
        raise ValueError(f"unknown fix {unknown[0]!r}; known: {', '.join(KNOWN_FIXES)}, or all")
    if "all" in names:
        raise ValueError("'all' turns on every fix and goes alone, not with other names")
    return names


def design_fixes_arg(text: str, design: str) -> tuple[str, ...]:
    """``--fixes`` for the gate or the leased worker: 'all', or names from ``DESIGN_FIXES``."""
    names = tuple(name for name in (part.strip() for part in text.split(",")) if name)
    if names == ("all",):
        return DESIGN_FIXES
    unknown = [name for name in names if name not in DESIGN_FIXES]
    if unknown:
        raise ValueError(
            f"unknown fix {unknown[0]!r} of design {design}; known: {', '.join(DESIGN_FIXES)}, or all"
        )
    return names


def tolerated_for(fixes: tuple[str, ...]) -> frozenset[str]:
    """The semaphore reference's known findings, less those the chosen fixes correct.

    A name that is not a fix is the caller's error, said as ``--fixes`` says it (``fixes_arg``).
    """
    unknown = [name for name in fixes if name not in KNOWN_FIXES]
    if unknown:
        raise ValueError(f"unknown fix {unknown[0]!r}; known: {', '.join(KNOWN_FIXES)}")
    fixed = {KNOWN_FIXES[name].split(":")[0] for name in fixes}
    return frozenset(SEMAPHORE_FINDINGS - fixed)


class _Stopped(BaseException):
    """Raised inside the Hypothesis test to end a campaign early (a user's interrupt).

    A ``BaseException``, so Hypothesis does not take it for a failure to shrink.
    """


class _Aborted(BaseException):
    """Raised inside the Hypothesis test when ``on_run`` failed (a results file on a full disk):
    the campaign ends and ``error`` is raised from it, never shrunk as if the case had failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


#: The Hypothesis internals the two context managers below replace for a campaign, by name.
_LOCAL_CONSTANTS: Final = "_get_local_constants"
_MUTATOR: Final = "generate_mutations_from"


class DrawsWarning(UserWarning):
    """This Hypothesis lacks an internal a campaign relies on to draw its cases from its seed
    alone, every run afresh: the campaign still runs, but its cases are not the ones the same
    seed draws with the Hypothesis semsim pins (the ``test`` extra), and some may be
    near-copies of others."""


def _without(what: str) -> None:
    warnings.warn(
        f"this Hypothesis has no {what}: the campaign's cases may differ from what the same seed "
        "draws elsewhere, and may repeat worlds (semsim pins Hypothesis in its test extra)",
        DrawsWarning,
        stacklevel=4,
    )


@contextmanager
def _cases_independent_of_loaded_modules() -> Iterator[None]:
    """Draw a campaign's cases from its seed alone, whatever modules the process has loaded.

    Hypothesis draws about 5% of values from constants it mines out of every
    *local* module in ``sys.modules`` (``providers._get_local_constants``), so
    the same seed gave different cases in pytest (which loads the tests), in
    ``semsim fuzz`` and in a worker process. For the duration of a campaign
    that pool is empty; the global constants (edge values such as 0 and -1)
    still apply. If a Hypothesis version has no such pool, there is nothing
    to do; if its providers module is there without the pool's function (renamed, say),
    a :class:`DrawsWarning` says so.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - older Hypothesis: no local constants
        yield
        return
    if not (hasattr(providers, _LOCAL_CONSTANTS) and hasattr(providers, "CONSTANTS_CACHE")):
        _without(f"providers.{_LOCAL_CONSTANTS}")
        yield
        return
    saved = getattr(providers, _LOCAL_CONSTANTS)
    empty = Constants()
    setattr(providers, _LOCAL_CONSTANTS, lambda: empty)
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        setattr(providers, _LOCAL_CONSTANTS, saved)
        providers.CONSTANTS_CACHE.cache.clear()


@contextmanager
def _every_run_drawn_afresh() -> Iterator[None]:
    """Draw every run of a campaign afresh from the seed: no run is a near-copy of another.

    After each case it draws, Hypothesis's generate phase runs up to five *mutations* of it
    (``ConjectureRunner.generate_mutations_from``: one span of the case copied over another
    span of the same label, to make duplicated values likely). For a property test that is
    cheap variety; for a swarm campaign it was most of the budget: of the first 150 drawn
    runs of seeds 1-3, 111, 116 and 115 were such near-copies of 39, 34 and 35 fresh draws,
    so a campaign of 150 runs met about 35 worlds and their neighbours (docs/BENCHMARKS.md,
    "Every run drawn afresh"). For the duration of a campaign the mutator does nothing, and
    every run is a fresh draw. Shrinking is untouched. If a Hypothesis version has no such
    method, there is nothing to turn off, and a :class:`DrawsWarning` says so.
    """
    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner
    except ImportError:  # pragma: no cover - another Hypothesis layout
        _without("ConjectureRunner")
        yield
        return
    saved = ConjectureRunner.__dict__.get(_MUTATOR)
    if saved is None:
        _without(f"ConjectureRunner.{_MUTATOR}")
        yield
        return

    def no_mutations(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    setattr(ConjectureRunner, _MUTATOR, no_mutations)
    try:
        yield
    finally:
        setattr(ConjectureRunner, _MUTATOR, saved)


#: Answers one run of a campaign: ``(case, tolerated) -> report``.
Runner = Callable[[Case, frozenset[str]], RunReport]


def _run_here(case: Case, tolerated: frozenset[str]) -> RunReport:
    return run_case(case, tolerated)[0]


def campaign(
    runs: int,
    seed: int,
    fixes: tuple[str, ...] = (),
    tolerated: frozenset[str] | None = None,
    on_run: Callable[[Campaign, RunReport, bool], None] | None = None,
    shrink: bool = True,
    shrink_budget_events: int = SHRINK_BUDGET_EVENTS,
    examples: Sequence[Case] = (),
    database: ExampleDatabase | None = None,
    stop: Callable[[], bool] | None = None,
    runner: Runner | None = None,
    variant: str = "reference",
    invariants: tuple[str, ...] = (),
    design: DesignName = "semaphore",
) -> Campaign:
    """Up to ``runs`` cases drawn from ``seed``; stops at the first unexpected failure and shrinks it.

    ``design``: the design every drawn case runs (``semsim fuzz --design``): the semaphore's
    cases come from :func:`semsim.explore.strategies.cases`, the gate's and the leased
    worker's from :func:`semsim.explore.design_strategies.design_cases`; their ``fixes``
    are their design's (``semsim.world.design.DESIGN_FIXES``), they tolerate their design's
    findings (F6, F7) unless fixed, take no ``invariants`` and only a ``variant`` of their own
    part (``Variant.check_design``; else ``ValueError``).

    ``variant``: the holder variant every drawn case runs, by the name
    :func:`semsim.harness.variants.find_variant` finds it by (``examples`` carry their own);
    its fixes join ``fixes``.
    ``invariants``: the user's own invariants every drawn case judges, by the references
    :func:`semsim.harness.invariants.find_invariant` finds them by.

    ``on_run(campaign, report, shrinking)`` is called after every run (the
    progress line); an exception out of it ends the campaign and is raised
    from it as it is. Every draw derives from ``seed`` alone (not from which
    modules are loaded), so the same arguments give the same campaign in any
    process. ``examples`` run first, as they are (Hypothesis's explicit
    examples): the named scenarios, say. Shrinking stops after
    ``shrink_budget_events`` of simulated work and keeps the best case so far
    (``shrink_cut_short``). ``stop()`` is asked before every run: once it
    says so, the campaign ends (``interrupted``), or, while shrinking, the
    shrink does. ``runner(case, tolerated)`` answers each run (default:
    :func:`run_case` here); ``semsim.explore.campaigns`` passes one that answers
    from runs done ahead on other processes, which must give the same report
    as :func:`run_case` would, so the campaign cannot tell the difference.
    """
    assert runs >= 1, runs
    assert shrink_budget_events >= 0, shrink_budget_events
    check_seed(seed)
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}: the designs are {', '.join(DESIGNS)}")
    if design != "semaphore":  # checkers of what the design shares with the semaphore, or refused now
        check_design_checkers(find_invariants(invariants), design)
    if tolerated is not None:
        check_tolerated(tolerated)
    if design == "semaphore":
        chosen = find_variant(variant)  # one that cannot be loaded is the caller's error, now
        chosen.check_design(design)
        fixes = chosen.with_fixes(fixes)  # its fixes are the campaign's: drawn into its cases, not tolerated
        find_invariants(invariants)
        allowed = tolerated_for(fixes) if tolerated is None else tolerated
        # A finding the variant's own fixes correct is never tolerated, whatever the caller passed.
        allowed &= tolerated_for(tuple(chosen.fixes))
        drawn = cases(fixes, variant, tuple(invariants))
    else:
        # The design's own fixes (semsim.world.design.DESIGN_FIXES), drawn into its worlds.
        allowed = design_tolerated_for(design, fixes) if tolerated is None else tolerated
        allowed &= design_tolerated_for(design, fixes)
        find_variant(variant).check_design(design)  # one of the design's own part, or refused now
        drawn = design_cases(design, fixes).map(
            lambda case: attrs.evolve(case, variant=variant, invariants=tuple(invariants))
        )
    run = runner if runner is not None else _run_here
    result = Campaign(design=design)
    failed: dict[Case, RunReport] = {}

    @settings(
        max_examples=runs,
        # With a database (the semsim-dev and semsim-nightly profiles), failures found before replay first.
        database=database,
        deadline=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink] if shrink else [Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(drawn)
    def one(case: Case) -> None:
        known = failed.get(case)
        if known is not None:
            # Hypothesis replays failing cases; answer from memory (a run is deterministic),
            # and keep the one replayed last: the minimal case it reports.
            result.failure = known
            _raise_failure(known)
        shrinking = result.failure is not None
        if shrinking and (result.shrink_events >= shrink_budget_events or (stop is not None and stop())):
            # Out of budget, or asked to stop: nothing new fails, so the shrinker stops.
            result.shrink_cut_short = True
            return
        if not shrinking and stop is not None and stop():
            raise _Stopped
        report = run(case, allowed)
        if shrinking:
            result.shrink_runs += 1
            result.shrink_events += report.events
        else:
            result.add(report)
        if on_run is not None:
            try:
                on_run(result, report, shrinking)
            except Exception as error:  # the caller's failure (its results file), not the case's
                raise _Aborted(error) from error
        if report.failed and (result.failure is None or report.failure_name == result.failure.failure_name):
            # While shrinking, only the same failure counts: shrinking keeps the invariant.
            failed[case] = result.failure = report
            _raise_failure(report)

    for example in reversed(examples):
        one = hypothesis_example(case=example)(one)
    with _cases_independent_of_loaded_modules(), _every_run_drawn_afresh():
        try:
            one()
        except _Failed:
            assert result.failure is not None
        except _Stopped:
            result.interrupted = True
        except _Aborted as aborted:
            raise aborted.error from None
    return result
