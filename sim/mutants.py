"""The mutation score: does the fuzzer catch real protocol bugs?

Each mutant of ``sim.mutant_catalog`` plants one plausible bug in
``semaphore_core`` (or the alarm engine) for the duration of a campaign. A
mutant is *killed* when the campaign (the ``ci`` budget: the same runs and
seed as the pytest fuzz suite) breaks an invariant that no known finding of
the reference explains; the table reports which invariant caught it, after
how many runs, and the length of the shrunk counterexample in plan steps.
``semsim mutants --markdown docs/MUTANTS.md`` regenerates the committed table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from scenarios import fuzz_examples
from semaphore_core.fixes import ALL_FIXES
from sim.fuzz import KNOWN_FINDINGS, Campaign, campaign, case_length
from sim.mutant_catalog import MUTANTS, Mutant, mutant

#: The ``ci`` profile's budget, and the pytest fuzz suite's seed.
CI_RUNS: Final = 150
CI_SEED: Final = 20261129
#: The target: every counterexample at most this many plan steps.
MAX_COUNTEREXAMPLE_STEPS: Final = 15
#: Without a terminal, a progress line every this many runs (about 10 s of a campaign).
PROGRESS_EVERY_RUNS: Final = 25


#: Why a mutant can survive the campaigns, for the table: what no honest or faulty run
#: can show through the CONTRACT's invariants. Printed only for mutants that survived.
WHY_IT_CAN_SURVIVE: Final = {
    "unknown-lease-debt-dropped": (
        "A lease the holder never knew is charged only against one round's lease budget; no "
        "honest client reports one (the holder never forgets a lease still in use), the forger "
        "forges grant reports only, and a fake lease runs no work: no invariant sees the charge."
    ),
    "reclaim-takes-claimed": (
        "Needs a grant partly claimed at its deadline. The queue client claims a whole grant "
        "(permits <= demand <= queued items); only the F3 fix's clamped claims leave part of a "
        "grant unclaimed, and only when a limit falls while a grant is in flight."
    ),
    "reports-after-allocation": (
        "Applying reports after allocating only delays reuse: a permit released in a report "
        "is handed out one round (2 s) later. The clamps still hold, so no safety invariant "
        "breaks, and progress judges 30-second windows, where a round's delay is cadence."
    ),
    "contended-never-set": (
        "Idle lease headroom that contended would have returned is what finding F4 is about, so "
        "on the reference it is attributed to F4; with the F4 fix clients return idle headroom "
        "without being told, so the flag no longer matters."
    ),
}


@attrs.frozen
class MutantResult:
    name: str
    description: str
    killed: bool
    #: The invariant (or outcome, such as ``crash``) that caught it.
    caught_by: str | None
    #: The campaign that caught it: the faithful ``reference`` or ``every fix``.
    variant: str | None
    runs_to_kill: int
    counterexample_steps: int | None
    shrink_runs: int


def try_mutant(
    candidate: Mutant,
    runs: int = CI_RUNS,
    seed: int = CI_SEED,
    on_run: Callable[[str, Campaign, bool], None] | None = None,
) -> MutantResult:
    """The ci campaigns with ``candidate`` applied: the reference (findings tolerated), then every fix.

    ``on_run(variant, campaign, shrinking)`` is called after every run;
    ``variant`` names the campaign (``reference`` or ``every fix``).
    """
    runs_total = 0
    result = None
    caught_in: str | None = None
    # The fuzz suite's two campaigns, in order: a mutant survives only if neither kills it.
    for variant, fixes, tolerated in (
        ("reference", (), KNOWN_FINDINGS),
        ("every fix", tuple(sorted(ALL_FIXES)), frozenset[str]()),
    ):

        def progress(state: Campaign, _report: object, shrinking: bool, variant: str = variant) -> None:
            if on_run is not None:
                on_run(variant, state, shrinking)

        with candidate.patch():
            result = campaign(
                runs, seed, fixes=fixes, tolerated=tolerated, on_run=progress, examples=fuzz_examples(fixes)
            )
        runs_total += result.runs
        if result.failure is not None:
            caught_in = variant
            break
    assert result is not None
    failure = result.failure
    return MutantResult(
        name=candidate.name,
        description=candidate.description,
        killed=failure is not None,
        caught_by=None if failure is None else failure.failure_name,
        variant=caught_in,
        runs_to_kill=runs_total,
        counterexample_steps=None if failure is None else case_length(failure.case),
        shrink_runs=result.shrink_runs,
    )


def progress_reporter(label: str, interactive: bool) -> Callable[[str, Campaign, bool], None]:
    """Progress on stderr for one mutant's campaigns (``label`` names the mutant).

    On a terminal, one line rewritten in place after every run. Otherwise (CI,
    a pipe, a log file) plain lines, never a carriage return: one every
    :data:`PROGRESS_EVERY_RUNS` runs of a campaign, one when shrinking starts
    and one every :data:`PROGRESS_EVERY_RUNS` shrink runs, so a long run is
    never silent for minutes and a log stays short.
    """

    def report(variant: str, state: Campaign, shrinking: bool) -> None:
        if interactive:
            doing = f"shrinking ({state.shrink_runs} runs)" if shrinking else f"run {state.runs}"
            print(f"\r{label}  {variant}: {doing}\033[K", end="", file=sys.stderr, flush=True)
            return
        if shrinking and state.shrink_runs == 1:
            doing = "shrinking the counterexample"
        elif shrinking and state.shrink_runs % PROGRESS_EVERY_RUNS == 0:
            doing = f"shrinking ({state.shrink_runs} runs)"
        elif not shrinking and state.runs % PROGRESS_EVERY_RUNS == 0:
            doing = f"run {state.runs}"
        else:
            return
        print(f"{label}  {variant}: {doing}", file=sys.stderr, flush=True)

    return report


def markdown(results: Sequence[MutantResult], runs: int, seed: int) -> str:
    killed = sum(r.killed for r in results)
    lines = [
        "# Mutation score",
        "",
        "Generated by `semsim mutants --markdown docs/MUTANTS.md`: each mutant of",
        "`sim/mutant_catalog.py` is applied at run time (nothing is edited) and the fuzz",
        f"suite's campaigns with the `ci` budget ({runs} runs each, seed {seed}) must break an",
        "invariant: first the faithful reference with its known findings tolerated, then,",
        "if the mutant survived it, the variant with every fix, where nothing is tolerated.",
        "Each campaign first runs the named scenarios' worlds as explicit examples.",
        "Runs to kill count both campaigns. Steps are the shrunk counterexample's plan",
        f"steps (target: at most {MAX_COUNTEREXAMPLE_STEPS}).",
        "",
        f"**{killed} of {len(results)} mutants killed.**",
        "",
        "| mutant | planted bug | result | caught by | campaign | runs to kill | steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        status = "killed" if r.killed else "**survived**"
        steps = "" if r.counterexample_steps is None else str(r.counterexample_steps)
        lines.append(
            f"| `{r.name}` | {r.description} | {status} | {f'`{r.caught_by}`' if r.caught_by else ''} "
            f"| {r.variant or ''} | {r.runs_to_kill if r.killed else ''} | {steps} |"
        )
    notes = [r for r in results if not r.killed and r.name in WHY_IT_CAN_SURVIVE]
    if notes:
        lines += ["", "## Why a survivor can survive", ""]
        lines += [f"- `{r.name}`: {WHY_IT_CAN_SURVIVE[r.name]}" for r in notes]
    return "\n".join(lines) + "\n"


def cmd_mutants(args: argparse.Namespace) -> int:
    from sim.cli import EXIT_OK, EXIT_VIOLATION, UsageError, wall_clock, writable_path

    names = [name.strip() for name in args.only.split(",") if name.strip()]
    try:
        chosen = [mutant(name) for name in names] if names else list(MUTANTS)
    except ValueError as error:
        raise UsageError(str(error)) from None
    out: Path | None = args.markdown
    if out is not None:
        writable_path(out)
    interactive = sys.stderr.isatty()
    results: list[MutantResult] = []
    width = max(len(m.name) for m in chosen)
    started = wall_clock()
    for index, candidate in enumerate(chosen, start=1):
        label = f"[{index}/{len(chosen)}] {candidate.name:<{width}}"
        if not interactive:
            print(f"{label}  started", file=sys.stderr, flush=True)
        result = try_mutant(candidate, on_run=progress_reporter(label, interactive))
        results.append(result)
        if interactive:
            print("\r\033[K", end="", file=sys.stderr)
        verdict = (
            f"killed by {result.caught_by} ({result.variant}) after {result.runs_to_kill} runs, "
            f"{result.counterexample_steps} steps"
            if result.killed
            else f"SURVIVED {result.runs_to_kill} runs"
        )
        print(f"{label}  {verdict}", flush=True)
    killed = sum(r.killed for r in results)
    print(f"\n{killed} of {len(results)} mutants killed in {wall_clock() - started:.0f} s")
    if out is not None:
        out.write_text(markdown(results, CI_RUNS, CI_SEED), encoding="utf-8")
        print(f"table written to {out}")
    too_long = [r.name for r in results if (r.counterexample_steps or 0) > MAX_COUNTEREXAMPLE_STEPS]
    if too_long:
        print(f"counterexamples longer than {MAX_COUNTEREXAMPLE_STEPS} steps: {', '.join(too_long)}")
    return EXIT_OK if killed == len(results) else EXIT_VIOLATION
