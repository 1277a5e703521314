"""``semsim fuzz``: a campaign with a progress line and a closing summary, or one case replayed.

Everything the user asked for is checked before the first run: the fixes,
that ``--out`` can hold the case a campaign may find, that the options make
sense together (``--replay`` refuses the campaign's own options rather than
ignoring them). A campaign that finds a violation prints it, with the
command that replays it, *before* it tries to save anything, so a disk
that fails at the end cannot lose the counterexample: if saving fails, the
case is printed instead.

Ctrl-C stops a campaign after the run in progress, prints what it saw so
far and exits 130 (a second Ctrl-C stops at once); during shrinking it
keeps the smallest case so far and reports that the shrink was cut short.
Spread over workers (``--workers``, ``--scheduler``: ``semsim.explore.campaigns``),
Ctrl-C stops dispatching and the summary covers the runs that came back in order.

Every campaign is recorded in the results database (``--db``, default
``semsim-results.sqlite``; ``--no-db`` records nothing): it is checked before
the first run, written as the runs come back, and closed with the verdict
(``semsim.explore.results``; ``semsim report`` reads it).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final, TextIO, cast

import attrs

from semsim.check.checker import CHECKER_FAILED, Checker
from semsim.check.design_checkers import check_design_checkers
from semsim.check.design_promises import PROMISES, judges_for
from semsim.check.invariants import INVARIANTS
from semsim.cli.loading import load_invariants, load_variant
from semsim.cli.main import interrupted_by
from semsim.explore import campaigns
from semsim.explore.campaigns import ClusterError, dask_pool, default_workers, local_pool, parallel_campaign
from semsim.explore.fuzz import (
    DEFAULT_OUT,
    Campaign,
    CaseFileError,
    RunReport,
    campaign,
    case_expected_invariant,
    case_length,
    case_schedule,
    case_text,
    design_fixes_arg,
    design_tolerated_for,
    fixes_arg,
    load_case,
    run_case,
    tolerated_for,
)
from semsim.explore.results import DEFAULT_DB, Recorder, ResultsError, check_db, open_db
from semsim.explore.strategies import Case
from semsim.inputs.commands import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    distinct_files,
    json_result,
    output_dir,
    output_file,
    plural,
    wall_clock,
)
from semsim.inputs.files import read_from, write_text_whole, written_to
from semsim.inputs.progress import Progress
from semsim.runtime.kernel import SCHEDULE
from semsim.world.design import DESIGNS, DesignName
from semsim.world.variant import REFERENCE, Variant

#: What a case of the gate or the leased worker may break, beyond semsim's invariants.
DESIGN_INVARIANTS: Final = frozenset({"items_end", *(name for names in PROMISES.values() for name in names)})

DEFAULT_RUNS: Final = 100
DEFAULT_SEED: Final = 0
#: Without a terminal, a progress line every this many runs (and shrink runs).
PROGRESS_EVERY_RUNS: Final = 10
PROGRESS_EVERY_SHRINK_RUNS: Final = 25


def cmd_fuzz(args: argparse.Namespace) -> int:
    """A campaign, or one case replayed (``--json``: the result as one object on standard output)."""
    with json_result(args.json) as out:
        status = _fuzz(args, out)
    return status


def _fits(variant: Variant, design: str, where: str) -> None:
    """A usage error if ``variant`` changes a part ``design`` does not have."""
    try:
        variant.check_design(design)
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None


def _hear(checkers: Sequence[type[Checker]], design: str, where: str) -> None:
    """A usage error if a checker hears what a run of ``design`` never calls."""
    try:
        check_design_checkers(checkers, design)
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None


def _fixes_for(design: str, text: str | None) -> tuple[str, ...]:
    """``--fixes`` as ``design`` knows its fixes (the semaphore's holder's, or the design's own)."""
    try:
        fixes = fixes_arg(text or "") if design == "semaphore" else design_fixes_arg(text or "", design)
    except ValueError as error:
        raise UsageError(f"--fixes: {error}") from None
    if text is not None and not fixes:
        raise UsageError("--fixes names no fix: give all or A,B, or leave it out for the faithful reference")
    return fixes


def _fuzz(args: argparse.Namespace, out: dict[str, Any] | None) -> int:
    design = args.design or "semaphore"
    if design not in DESIGNS:
        raise UsageError(f"--design: unknown design {design!r}; the designs are {', '.join(DESIGNS)}")
    if args.replay is not None:
        if args.fixes is not None:
            # A name no design knows is refused before the case is read; one some design knows
            # goes on to the replay, which checks it against the case's own design. Only this
            # check is lenient: the replay's own errors must reach the user as they are.
            try:
                _fixes_for("gate", args.fixes)  # the gate's fixes are the leased worker's too
            except UsageError:
                _fixes_for("semaphore", args.fixes)
        return _replay(args, out)
    fixes = _fixes_for(design, args.fixes)
    if design != "semaphore" and args.invariant is not None:
        _hear(load_invariants(args.invariant, "--invariant"), design, "--invariant")
    if args.variant is not None:
        _fits(load_variant(args.variant, "--variant"), design, "--variant")
    if args.trace is not None:
        raise UsageError("--trace goes with --replay (a campaign saves its case; replay it for a trace)")
    if args.full_checks:
        raise UsageError("--full-checks goes with --replay (debug the checker on the one case it replays)")
    if args.workers is not None and args.scheduler is not None:
        raise UsageError(
            "--workers does not go with --scheduler: the Dask cluster's workers run the campaign"
        )
    if args.no_db and args.db is not None:
        raise UsageError("--db does not go with --no-db")
    runs = DEFAULT_RUNS if args.runs is None else args.runs
    seed = DEFAULT_SEED if args.seed is None else args.seed
    out_dir = output_dir(args.out or DEFAULT_OUT, "--out")
    db_path = None if args.no_db else (args.db if args.db is not None else DEFAULT_DB)
    if db_path is not None:
        try:
            check_db(db_path)
        except ResultsError as error:
            raise UsageError(str(error)) from None
    # A variant's own fixes are the campaign's: drawn into its cases, and no longer tolerated.
    fixes = (
        load_variant(args.variant or REFERENCE.name, "--variant").with_fixes(fixes) if args.variant else fixes
    )
    tolerated = tolerated_for(fixes) if design == "semaphore" else design_tolerated_for(design, fixes)
    try:
        return _campaign(args, runs, seed, fixes, tolerated, out_dir, db_path, out)
    except ResultsError as error:  # the results file failed: a full disk, a locked file
        raise UsageError(str(error)) from None


def _campaign(
    args: argparse.Namespace,
    runs: int,
    seed: int,
    fixes: tuple[str, ...],
    tolerated: frozenset[str],
    out_dir: Path,
    db_path: Path | None,
    out: dict[str, Any] | None = None,
) -> int:
    from semsim.explore.examples import fuzz_examples
    from semsim.scenarios.registry import ScenarioLookupError, every_scenario

    try:
        every = every_scenario()  # semsim's own, then those installed packages register
    except ScenarioLookupError as error:
        raise UsageError(str(error)) from None
    design = cast(DesignName, args.design or "semaphore")  # checked by _fuzz
    scenarios = {name: s for name, s in every.items() if s.config.design.name == design}
    variant_name = args.variant or REFERENCE.name
    variant = load_variant(variant_name, "--variant")
    invariants = tuple(args.invariant or ())
    checkers = load_invariants(invariants, "--invariant")
    examples = [
        attrs.evolve(case, variant=variant_name, invariants=invariants)
        for case in fuzz_examples(fixes, scenarios, design)
    ]
    total = runs + len(examples)  # the named scenarios run first
    progress = _Progress(total, quiet=bool(args.quiet))
    with ExitStack() as resources:
        resources.callback(progress.done)  # the bar stops on every way out (a refused cluster, ...)
        executor, workers, where = _executor(args, resources)
        on_run: Callable[[Campaign, RunReport, bool], None] = progress
        recorder = None
        if db_path is not None:
            db = resources.enter_context(closing(open_db(db_path)))
            recorder = Recorder.begin(
                db,
                db_path,
                seed=seed,
                runs=runs,
                examples=len(examples),
                fixes=fixes,
                tolerated=tolerated,
                executor="serial" if executor is None else "dask" if args.scheduler else "local",
                workers=workers,
                variant=variant_name,
                invariants=invariants,
                design=design,
            )
            on_run = _both(progress, recorder)
        holder = "fixes: " + ", ".join(fixes) if fixes else "the faithful reference"
        if design != "semaphore":
            holder = f"design {design} (judged by: {', '.join(('items_end', *judges_for(design)))})"
            holder += ", fixes: " + ", ".join(fixes) if fixes else ", as its seed has it"
        if variant != REFERENCE and design == "semaphore":
            holder = f"variant {variant_name} (judged by: {', '.join(variant.judges())}), " + holder
        elif variant != REFERENCE:  # judged by the design's promises, as the line says
            holder = f"variant {variant_name} of the " + holder
        if checkers:
            holder += f", with invariants {', '.join(checker.name for checker in checkers)}"
        print(
            f"semsim fuzz: the named scenarios, then {runs} runs, seed {seed}, {holder}, {where}", flush=True
        )
        started = wall_clock()
        with _interrupts() as stop:
            try:
                if executor is None:
                    result = campaign(
                        runs,
                        seed,
                        fixes,
                        tolerated,
                        on_run=on_run,
                        examples=examples,
                        stop=stop,
                        variant=variant_name,
                        invariants=invariants,
                        design=design,
                    )
                else:
                    result = parallel_campaign(
                        runs,
                        seed,
                        executor,
                        workers,
                        fixes,
                        tolerated,
                        on_run,
                        examples=examples,
                        stop=stop,
                        variant=variant_name,
                        invariants=invariants,
                        design=design,
                    )
            except BaseException as error:
                if not interrupted_by(error) or progress.state is None:
                    raise
                result = attrs.evolve(progress.state, interrupted=True)  # a second Ctrl-C, mid-run
        progress.done()
        failure = result.failure
        if failure is not None:
            path = out_dir / f"case-{seed}-{failure.failure_name}.json"
            case, trace = shlex.quote(str(path)), shlex.quote(str(path.with_suffix(".jsonl")))
            replay = f"semsim fuzz --replay {case} --trace {trace}"
        # The verdict is recorded before anything is printed: a reader that goes away
        # (`| head`) ends the command at its next write, and must not cost the record.
        if recorder is not None:
            if failure is None:
                recorder.finish(result)
            else:
                recorder.finish(result, case_text(failure.case, tolerated, failure), replay)
        print_summary(result, wall_clock() - started)
        if out is not None:
            out.update(
                _campaign_json(
                    result, seed, runs, len(examples), fixes, variant_name, invariants, db_path, design
                )
            )
            if failure is not None:
                out["failure"] = {
                    **_report_json(failure),
                    "shrink_runs": result.shrink_runs,
                    "shrink_cut_short": result.shrink_cut_short,
                    "case": str(path),
                    "replay": replay,
                }
        if failure is None:
            if recorder is not None:
                print(f"recorded in {db_path}")
            if result.interrupted:
                print(f"\ninterrupted after {result.runs} of {total} runs: no violation so far")
                return EXIT_INTERRUPTED
            return EXIT_OK
        _report_violation(failure, result, named=dict(zip(examples, scenarios, strict=True)))
        print(f"replay: {replay}", flush=True)
        saved = _save(failure, tolerated, path)
        if out is not None and not saved:
            out["failure"]["case"] = None  # printed to standard error instead
        if recorder is not None:
            print(f"recorded in {db_path}")
        return EXIT_VIOLATION


def _executor(args: argparse.Namespace, resources: ExitStack) -> tuple[Executor | None, int, str]:
    """Where the runs go: ``(executor, workers, a phrase for the header)``; ``None`` is here, serially."""
    if args.scheduler is not None:
        try:
            executor, threads = resources.enter_context(
                dask_pool(args.scheduler, campaigns.CONNECT_TIMEOUT_S)
            )
        except ClusterError as error:
            raise UsageError(str(error)) from None
        return executor, threads, f"on the Dask cluster at {args.scheduler} ({threads} worker threads)"
    workers = default_workers() if args.workers is None else args.workers
    if workers == 1:
        return None, 1, "serially"
    return resources.enter_context(local_pool(workers)), workers, f"on {workers} worker processes"


def _both(
    first: Callable[[Campaign, RunReport, bool], None], second: Callable[[Campaign, RunReport, bool], None]
) -> Callable[[Campaign, RunReport, bool], None]:
    def both(state: Campaign, report: RunReport, shrinking: bool) -> None:
        first(state, report, shrinking)
        second(state, report, shrinking)

    return both


def _report_violation(failure: RunReport, result: Campaign, named: Mapping[Case, str]) -> None:
    print(f"\nVIOLATED {failure.failure_name} (case seed {failure.case.seed}): {failure.detail}")
    steps = case_length(failure.case)
    scenario = named.get(failure.case)
    if scenario is not None:
        # Hypothesis runs explicit examples as they are: a named scenario's case is never shrunk.
        print(
            f"in the named scenario {scenario} ({plural(steps, 'plan step')}, run as it is: named "
            f"scenarios are not shrunk; `semsim run {scenario}` tells its story)"
        )
    elif result.shrink_cut_short:
        print(
            f"shrunk to {plural(steps, 'plan step')} after {plural(result.shrink_runs, 'shrink run')}; "
            "shrinking was cut "
            "short (its budget ran out, or it was interrupted), so a smaller case may exist"
        )
    else:
        print(
            f"shrunk to {plural(steps, 'plan step')} after {plural(result.shrink_runs, 'shrink run')} "
            "(shrinking finished)"
        )


def _save(failure: RunReport, tolerated: frozenset[str], path: Path) -> bool:
    """Write the case; if that fails, print it so it is not lost. Whether it was written."""
    text = case_text(failure.case, tolerated, failure)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_whole(path, text)
    except OSError as error:
        print(f"could not save the case to {path}: {error.strerror or error}; here it is:", file=sys.stderr)
        print(text, end="")
        return False
    print(f"case written to {path}")
    return True


class _Progress:
    """The campaign's progress: rich's bar on a terminal, a line every few runs otherwise."""

    def __init__(self, total: int, quiet: bool, stream: TextIO | None = None) -> None:
        self.total = total
        self.quiet = quiet
        self.stream = sys.stderr if stream is None else stream
        interactive = not quiet and self.stream.isatty()
        self.bar = (
            Progress("fuzz", total, "runs", stream=self.stream, interactive=True) if interactive else None
        )
        #: The campaign as of the last run (what a hard interrupt still has to report).
        self.state: Campaign | None = None

    def __call__(self, state: Campaign, report: RunReport, shrinking: bool) -> None:
        self.state = state
        if self.quiet:
            return
        if shrinking:
            name = state.failure.failure_name if state.failure else ""
            line = f"shrinking {name}: {state.shrink_runs} runs"
            due = state.shrink_runs == 1 or state.shrink_runs % PROGRESS_EVERY_SHRINK_RUNS == 0
        else:
            filled = 30 * state.runs // self.total
            bar = "#" * filled + "." * (30 - filled)
            note = f"{state.sim_ms / 3_600_000:.2f} sim-h, findings {sum(state.findings.values())}"
            line = f"[{bar}] {state.runs}/{self.total} runs, {note}"
            due = state.runs % PROGRESS_EVERY_RUNS == 0 or state.runs == self.total or report.failed
        if self.bar is not None:
            if shrinking:
                self.bar.say(line)
            else:
                self.bar.update(state.runs, note)
        elif due:
            print(line, file=self.stream, flush=True)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def _interrupts() -> Iterator[Callable[[], bool]]:
    """Ctrl-C asks the campaign to stop after the current run; a second one stops at once.

    Yields the ``stop()`` the campaign polls. Outside the main thread (where
    signals cannot be handled) Ctrl-C keeps its default behaviour.
    """
    asked: list[bool] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if asked:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        asked.append(True)
        print("\nstopping after this run (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    try:
        previous = signal.signal(signal.SIGINT, handle)
    except ValueError:  # not the main thread
        yield lambda: False
        return
    try:
        yield lambda: bool(asked)
    finally:
        signal.signal(signal.SIGINT, previous)


def print_summary(result: Campaign, wall_s: float, out: TextIO | None = None) -> None:
    out = sys.stdout if out is None else out
    hours = result.sim_ms / 3_600_000
    partial = " (interrupted: partial)" if result.interrupted else ""
    print(f"runs: {result.runs}{partial}, simulated: {hours:.2f} h, wall: {wall_s:.1f} s", file=out)
    violations = Counter({result.failure.failure_name: 1}) if result.failure else Counter()
    print("violations by invariant:", _counts(violations) or "none", file=out)
    print("known findings (tolerated):", _counts(result.findings) or "none", file=out)
    print("documented behaviour:", _counts(result.documented) or "none", file=out)
    print("coverage:", file=out)
    expected = result.expected_coverage()
    width = max(len(name) for name in expected)
    for name in expected:
        print(f"  {name:<{width}}  {result.coverage.get(name, 0)}", file=out)
    never = result.missing_coverage()
    if never:
        print(f"never reached ({len(never)}): {', '.join(never)}", file=out)
    out.flush()


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counter.items()))


# --- one case ---------------------------------------------------------------------------------


def _campaign_json(
    result: Campaign,
    seed: int,
    runs: int,
    examples: int,
    fixes: tuple[str, ...],
    variant: str,
    invariants: tuple[str, ...],
    db_path: Path | None,
    design: str = "semaphore",
) -> dict[str, Any]:
    """``semsim fuzz --json``'s object for a campaign (docs/CLI.md lists its fields)."""
    return {
        "seed": seed,
        "design": design,
        "runs_asked": runs,
        "examples": examples,
        "fixes": list(fixes),
        "variant": variant,
        "invariants": list(invariants),
        "runs": result.runs,
        "sim_ms": result.sim_ms,
        "interrupted": result.interrupted,
        "findings": dict(sorted(result.findings.items())),
        "documented": dict(sorted(result.documented.items())),
        "coverage": dict(sorted(result.coverage.items())),
        "never_reached": result.missing_coverage(),
        "failure": None,
        "db": None if db_path is None else str(db_path),
    }


def _report_json(report: RunReport) -> dict[str, Any]:
    """What one run broke, as ``--json`` shows it."""
    return {
        "name": report.failure_name,
        "outcome": report.outcome,
        "invariant": report.invariant,
        "finding": report.finding,
        "detail": report.detail,
        "sim_ms": report.sim_ms,
        "steps": case_length(report.case),
        "seed": report.case.seed,
    }


def _replay(args: argparse.Namespace, out: dict[str, Any] | None = None) -> int:
    """``semsim fuzz --replay CASE [--fixes A,B] [--trace F.jsonl]``: one case, exactly.

    ``--fixes`` turns those fixes on in the replayed case (does the fix fix
    it?); the findings they correct are then no longer tolerated.
    """
    given = [
        name
        for name in ("runs", "seed", "out", "workers", "scheduler", "db", "variant", "invariant", "design")
        if getattr(args, name) is not None
    ]
    if args.no_db:
        given.append("no-db")
    if given:
        raise UsageError(
            f"--{given[0]} does not go with --replay: a replay runs the one case it is given"
            + (" (the case names its variant)" if given[0] == "variant" else "")
            + (" (the case names its invariants)" if given[0] == "invariant" else "")
            + (" (the case's config names its design)" if given[0] == "design" else "")
        )
    try:
        case, tolerated = load_case(args.replay)
    except CaseFileError as error:
        raise UsageError(str(error)) from None
    saved_under = case_schedule(args.replay)
    if saved_under != SCHEDULE:
        print(
            f"note: {args.replay} was saved under schedule {saved_under}; this semsim runs schedule "
            f"{SCHEDULE}, which orders work due in the same millisecond differently, so this run "
            "need not repeat the saved one (docs/WIRE.md, case files)",
            file=sys.stderr,
        )
    if args.trace is not None:
        output_file(args.trace, "--trace")
        distinct_files([("the case being replayed (--replay)", args.replay)], [("--trace", args.trace)])
    variant = load_variant(
        case.variant, f"{args.replay} names variant {case.variant!r}, which cannot be loaded"
    )
    checkers = load_invariants(case.invariants, str(args.replay))
    expected = case_expected_invariant(args.replay)
    judged = {*INVARIANTS, CHECKER_FAILED, *(checker.name for checker in checkers), *DESIGN_INVARIANTS}
    if expected is not None and expected not in judged:
        # Replaying without the check the case broke would report "every invariant held": a lie.
        raise UsageError(
            f"{args.replay} expects invariant {expected!r}, which neither semsim nor the case's "
            f"invariants ({', '.join(case.invariants) or 'none named'}) define: add the reference "
            f'that finds it to the case\'s "invariants" list'
        )
    design = case.config.design.name
    _fits(variant, design, str(args.replay))
    if design != "semaphore":
        _hear(checkers, design, str(args.replay))
    fixes = _fixes_for(design, args.fixes)
    if fixes and design == "semaphore":
        case, tolerated = with_fixes(case, tolerated, fixes)
    if design != "semaphore":
        if args.full_checks:
            raise UsageError(
                f"--full-checks debugs the semaphore's checker; {args.replay} runs the {design} design"
            )
        if fixes:
            case, tolerated = with_design_fixes(case, tolerated, fixes)
    report, run = run_case(case, tolerated, full_checks=bool(args.full_checks))
    on = f", fixes: {', '.join(case.config.holder.fixes)}" if case.config.holder.fixes else ""
    if design != "semaphore":
        spec = case.config.design.gate if design == "gate" else case.config.design.leased
        on = f", design {design}" + (f", fixes: {', '.join(spec.fixes)}" if spec.fixes else "")
    if variant != REFERENCE and design == "semaphore":
        on += f", variant {case.variant} (judged by: {', '.join(variant.judges())})"
    elif variant != REFERENCE:
        on += f", variant {case.variant} (judged by: {', '.join(('items_end', *judges_for(design)))})"
    if checkers:
        on += f", with invariants {', '.join(checker.name for checker in checkers)}"
    print(
        f"replayed {read_from(args.replay)}: seed {case.seed}, {plural(case_length(case), 'plan step')}{on}, "
        f"outcome {report.outcome}"
    )
    if args.trace is not None:
        if run is None:
            print(f"no trace written to {args.trace}: the run crashed before it could end")
        else:
            run.trace.write(args.trace)
            print(f"trace written to {written_to(args.trace)}")
    if report.findings:
        print("known findings (tolerated):", _counts(report.findings))
    if report.documented:
        print("documented behaviour:", _counts(report.documented))
    if out is not None:
        out.update(
            {
                "replayed": str(args.replay),
                "seed": case.seed,
                "design": design,
                "variant": case.variant,
                "invariants": list(case.invariants),
                "fixes": list(case.config.holder.fixes),
                "held": not report.failed,
                "outcome": report.outcome,
                "findings": dict(sorted(report.findings.items())),
                "documented": dict(sorted(report.documented.items())),
                "failure": _report_json(report) if report.failed else None,
                "trace": None if args.trace is None or run is None else str(args.trace),
            }
        )
    if not report.failed:
        print("every invariant held")
        return EXIT_OK
    print(f"VIOLATED {report.failure_name} at {report.sim_ms} ms: {report.detail}")
    return EXIT_VIOLATION


def with_fixes(case: Case, tolerated: frozenset[str], fixes: tuple[str, ...]) -> tuple[Case, frozenset[str]]:
    """``case`` with ``fixes`` also on, tolerating no finding those fixes correct."""
    holder = case.config.holder
    on = tuple(sorted(set(holder.fixes) | set(fixes)))
    fixed = attrs.evolve(case, config=attrs.evolve(case.config, holder=attrs.evolve(holder, fixes=on)))
    return fixed, tolerated & tolerated_for(on)


def with_design_fixes(
    case: Case, tolerated: frozenset[str], fixes: tuple[str, ...]
) -> tuple[Case, frozenset[str]]:
    """A gate's or leased worker's ``case`` with its design's ``fixes`` also on, tolerating no finding
    they correct."""
    design = case.config.design
    if design.name == "gate":
        on = tuple(sorted(set(design.gate.fixes) | set(fixes)))
        fixed = attrs.evolve(design, gate=attrs.evolve(design.gate, fixes=on))
    else:
        on = tuple(sorted(set(design.leased.fixes) | set(fixes)))
        fixed = attrs.evolve(design, leased=attrs.evolve(design.leased, fixes=on))
    return (
        attrs.evolve(case, config=attrs.evolve(case.config, design=fixed)),
        tolerated & design_tolerated_for(design.name, on),
    )
