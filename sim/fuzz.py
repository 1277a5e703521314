"""Fuzz campaigns: whole simulations under swarm fault plans, shrunk to a replayable case.

Hypothesis draws each :class:`~sim.strategies.Case` (a config, a fault plan,
a seed) and runs it with every invariant checked. Known findings of the
faithful reference (docs/FINDINGS.md) are tolerated and counted by name;
anything else is a failure: Hypothesis shrinks it to a minimal case, which
is saved as JSON next to a one-line command that replays it exactly.

The same module serves ``semsim fuzz`` (with a progress line and a closing
summary), the pytest fuzz suite and ``semsim mutants``.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import example as hypothesis_example
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase

from semaphore_core.fixes import ALL_FIXES, KNOWN_FIXES
from sim.coverage import EXPECTED, coverage, missing
from sim.faults import FaultPlan
from sim.inputs import InputError, read_text
from sim.strategies import Case, cases
from sim.world import WorldConfig, WorldRun, run_world

#: Findings of the faithful reference that a campaign on it expects and counts by name.
KNOWN_FINDINGS: Final = frozenset({"F1", "F2", "F3", "F4"})
#: Where failing cases are written unless told otherwise.
DEFAULT_OUT: Final = Path("semsim-failures")
CASE_FORMAT: Final = "semsim-case/1"
#: Runs spent shrinking a failure before the best case so far is kept (a run costs ~0.3 s).
SHRINK_BUDGET: Final = 150
MAX_CASE_BYTES: Final = 1_000_000


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

    @property
    def failed(self) -> bool:
        return self.outcome != "completed"

    @property
    def failure_name(self) -> str:
        """The invariant broken (with the finding that explains it), or the outcome (``crash``, ...)."""
        if self.invariant is None:
            return self.outcome
        return self.invariant if self.finding is None else f"{self.invariant}:{self.finding}"


def run_case(case: Case, tolerated: frozenset[str]) -> tuple[RunReport, WorldRun | None]:
    """Run one case; an exception out of the model (an internal assertion) is a ``crash``."""
    try:
        run = run_world(case.config, case.faults, case.seed, tolerated=tolerated)
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
    monitor = run.monitor
    return (
        RunReport(
            case=case,
            outcome=run.result.outcome,
            invariant=run.result.invariant,
            finding=run.result.finding,
            detail=run.result.detail,
            sim_ms=run.result.end_ms,
            findings=Counter(v.finding for v in monitor.violations if v.finding is not None),
            documented=monitor.documented + monitor.leaks,
            coverage=coverage(run.trace.events(), case.config.latency_ms),
        ),
        run,
    )


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
        )
        if value
    )
    scheduled = (
        len(faults.partitions)
        + len(faults.drops)
        + len(faults.evictions)
        + len(faults.limit_changes)
        + len(faults.group_limit_changes)
    )
    return rates + scheduled + len(case.config.workload.script)


# --- saved cases ------------------------------------------------------------------------


class CaseFileError(ValueError):
    """A saved case is unreadable or malformed; the message names the file and what is wrong."""


def save_case(case: Case, tolerated: frozenset[str], path: Path, failure: RunReport | None = None) -> None:
    """Write a case as JSON; with ``failure``, what it broke goes in as ``expect``."""
    data: dict[str, Any] = {"format": CASE_FORMAT, "tolerated": sorted(tolerated)}
    if failure is not None:
        data["expect"] = {
            "invariant": failure.invariant,
            "finding": failure.finding,
            "outcome": failure.outcome,
        }
    data.update(case.to_dict())
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def load_case(path: Path) -> tuple[Case, frozenset[str]]:
    """A case written by :func:`save_case` (or by hand) and the findings it tolerates."""
    try:
        data = json.loads(read_text(path, MAX_CASE_BYTES, "a case file"))
    except InputError as error:
        raise CaseFileError(str(error)) from None
    except json.JSONDecodeError as error:
        raise CaseFileError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, dict):
        raise CaseFileError(f"{path}: a case is a JSON object")
    if data.get("format") != CASE_FORMAT:
        raise CaseFileError(f"{path}: format {data.get('format')!r}; this semsim reads {CASE_FORMAT!r}")
    unknown = sorted(set(data) - {"format", "tolerated", "expect", "seed", "config", "faults"})
    if unknown:
        raise CaseFileError(f"{path}: unknown field {unknown[0]!r}")
    seed, tolerated = data.get("seed"), data.get("tolerated", [])
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise CaseFileError(f"{path}: seed must be a non-negative integer, got {seed!r}")
    if not isinstance(tolerated, list) or not all(isinstance(name, str) for name in tolerated):
        raise CaseFileError(f"{path}: tolerated must be a list of finding names")
    try:
        config = WorldConfig.from_dict(data.get("config", {}))
        faults_data = data.get("faults", {})
        if not isinstance(faults_data, dict):
            raise ValueError("faults must be a JSON object")
        faults = FaultPlan.from_dict(faults_data)
    except (TypeError, ValueError) as error:
        raise CaseFileError(f"{path}: {error}") from None
    unknown_fixes = sorted(set(config.holder.fixes) - set(KNOWN_FIXES))
    if unknown_fixes:
        raise CaseFileError(f"{path}: unknown fix {unknown_fixes[0]!r}; known: {', '.join(KNOWN_FIXES)}")
    return Case(config=config, faults=faults, seed=seed), frozenset(tolerated)


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
    #: Runs tried while shrinking the failure.
    shrink_runs: int = 0

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.sim_ms += report.sim_ms
        self.findings += report.findings
        self.documented += report.documented
        self.coverage += report.coverage

    def missing_coverage(self) -> list[str]:
        return missing(self.coverage)


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
    """``--fixes``: '' (the reference), 'all', or names from KNOWN_FIXES."""
    if text == "all":
        return tuple(sorted(ALL_FIXES))
    names = tuple(name for name in (part.strip() for part in text.split(",")) if name)
    unknown = [name for name in names if name not in KNOWN_FIXES]
    if unknown:
        raise ValueError(f"unknown fix {unknown[0]!r}; known: {', '.join(KNOWN_FIXES)}")
    return names


def tolerated_for(fixes: tuple[str, ...]) -> frozenset[str]:
    """The reference's known findings, less those the chosen fixes correct."""
    fixed = {KNOWN_FIXES[name].split(":")[0] for name in fixes}
    return frozenset(KNOWN_FINDINGS - fixed)


def campaign(
    runs: int,
    seed: int,
    fixes: tuple[str, ...] = (),
    tolerated: frozenset[str] | None = None,
    on_run: Callable[[Campaign, RunReport, bool], None] | None = None,
    shrink: bool = True,
    shrink_budget: int = SHRINK_BUDGET,
    examples: Sequence[Case] = (),
    database: ExampleDatabase | None = None,
) -> Campaign:
    """Up to ``runs`` cases drawn from ``seed``; stops at the first unexpected failure and shrinks it.

    ``on_run(campaign, report, shrinking)`` is called after every run (the
    progress line). Every draw derives from ``seed``, so the same arguments
    give the same campaign in the same environment. ``examples`` run first,
    as they are (Hypothesis's explicit examples): the named scenarios, say.
    """
    assert runs >= 1, runs
    allowed = tolerated_for(fixes) if tolerated is None else tolerated
    result = Campaign()
    failed: dict[Case, RunReport] = {}

    @settings(
        max_examples=runs,
        # With a database (the dev and nightly profiles), failures found before replay first.
        database=database,
        deadline=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink] if shrink else [Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(cases(fixes))
    def one(case: Case) -> None:
        known = failed.get(case)
        if known is not None:
            # Hypothesis replays failing cases; answer from memory (a run is deterministic),
            # and keep the one replayed last: the minimal case it reports.
            result.failure = known
            _raise_failure(known)
        if result.failure is not None and result.shrink_runs >= shrink_budget:
            return  # out of shrinking budget: nothing new fails, so the shrinker stops
        report, _ = run_case(case, allowed)
        shrinking = result.failure is not None
        if shrinking:
            result.shrink_runs += 1
        else:
            result.add(report)
        if on_run is not None:
            on_run(result, report, shrinking)
        if report.failed and (result.failure is None or report.failure_name == result.failure.failure_name):
            # While shrinking, only the same failure counts: shrinking keeps the invariant.
            failed[case] = result.failure = report
            _raise_failure(report)

    for example in reversed(examples):
        one = hypothesis_example(case=example)(one)
    try:
        one()
    except _Failed:
        assert result.failure is not None
    return result


# --- the command ----------------------------------------------------------------------------


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total
    return "#" * filled + "." * (width - filled)


def print_summary(result: Campaign, wall_s: float, out: Any = None) -> None:
    out = sys.stdout if out is None else out
    hours = result.sim_ms / 3_600_000
    print(f"runs: {result.runs}, simulated: {hours:.2f} h, wall: {wall_s:.1f} s", file=out)
    violations = Counter({result.failure.failure_name: 1}) if result.failure else Counter()
    print("violations by invariant:", _counts(violations) or "none", file=out)
    print("known findings (tolerated):", _counts(result.findings) or "none", file=out)
    print("documented behaviour:", _counts(result.documented) or "none", file=out)
    print("coverage:", file=out)
    width = max(len(name) for name in EXPECTED)
    for name in EXPECTED:
        print(f"  {name:<{width}}  {result.coverage.get(name, 0)}", file=out)
    never = result.missing_coverage()
    if never:
        print(f"never reached ({len(never)}): {', '.join(never)}", file=out)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counter.items()))


def cmd_fuzz(args: argparse.Namespace) -> int:
    from sim.cli import EXIT_OK, EXIT_VIOLATION, UsageError, wall_clock, writable_path

    if args.replay is not None:
        return _replay(args)
    if args.trace is not None:
        raise UsageError("--trace goes with --replay (a campaign writes a case file per failure)")
    try:
        fixes = fixes_arg(args.fixes)
    except ValueError as error:
        raise UsageError(str(error)) from None
    out_dir: Path = args.out or DEFAULT_OUT
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a directory")
    variant = "fixes: " + ", ".join(fixes) if fixes else "the faithful reference"
    print(f"semsim fuzz: the named scenarios, then {args.runs} runs, seed {args.seed}, {variant}")
    from scenarios import fuzz_examples

    examples = fuzz_examples(fixes)
    total = args.runs + len(examples)  # the named scenarios run first
    started = wall_clock()
    interactive = not args.quiet and sys.stderr.isatty()

    def progress(state: Campaign, report: RunReport, shrinking: bool) -> None:
        if args.quiet:
            return
        if shrinking:
            line = (
                f"shrinking {state.failure.failure_name if state.failure else ''}: {state.shrink_runs} runs"
            )
        else:
            line = (
                f"[{_bar(state.runs, total)}] {state.runs}/{total} runs, "
                f"{state.sim_ms / 3_600_000:.2f} sim-h, findings {sum(state.findings.values())}"
            )
        if interactive:
            print(f"\r{line}\033[K", end="", file=sys.stderr, flush=True)
        elif shrinking or state.runs % 10 == 0 or state.runs == total:
            print(line, file=sys.stderr, flush=True)

    result = campaign(args.runs, args.seed, fixes, on_run=progress, examples=examples)
    if interactive:
        print(file=sys.stderr)
    print_summary(result, wall_clock() - started)
    if result.failure is None:
        return EXIT_OK
    failure = result.failure
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"case-{args.seed}-{failure.failure_name}.json"
    writable_path(path)
    save_case(failure.case, tolerated_for(fixes), path, failure)
    print(f"\nVIOLATED {failure.failure_name} (seed {failure.case.seed}): {failure.detail}")
    print(f"shrunk to {case_length(failure.case)} plan steps after {result.shrink_runs} shrink runs")
    print(f"replay: semsim fuzz --replay {path} --trace {path.with_suffix('.jsonl')}")
    return EXIT_VIOLATION


def _replay(args: argparse.Namespace) -> int:
    from sim.cli import EXIT_OK, EXIT_VIOLATION, UsageError, writable_path

    try:
        case, tolerated = load_case(args.replay)
    except CaseFileError as error:
        raise UsageError(str(error)) from None
    if args.trace is not None:
        writable_path(args.trace)
    try:
        report, run = run_case(case, tolerated)
    except ValueError as error:  # a config the model rejects
        raise UsageError(f"{args.replay}: {error}") from None
    if run is not None and args.trace is not None:
        run.trace.write(args.trace)
        print(f"trace written to {args.trace}")
    print(
        f"replayed {args.replay}: seed {case.seed}, {case_length(case)} plan steps, outcome {report.outcome}"
    )
    if report.findings:
        print("known findings (tolerated):", _counts(report.findings))
    if not report.failed:
        print("every invariant held")
        return EXIT_OK
    print(f"VIOLATED {report.failure_name} at {report.sim_ms} ms: {report.detail}")
    return EXIT_VIOLATION
