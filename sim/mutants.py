"""The mutation score: does the fuzzer catch real protocol bugs?

Each mutant of ``sim.mutant_catalog`` plants one plausible bug in
``semaphore_core`` (or the alarm engine) for the duration of a campaign. A
mutant is *killed* when the campaign (the ``ci`` budget: the same runs and
seed as the pytest fuzz suite) breaks an invariant that no known finding of
the reference explains; the table reports which invariant caught it, after
how many runs, and the length of the shrunk counterexample in plan steps.
``semsim mutants --markdown docs/MUTANTS.md`` regenerates the committed table.

The committed table is also what the exit status is judged against. Before
it runs anything, ``semsim mutants`` reads the expected table (``--expected``,
by default this checkout's ``docs/MUTANTS.md``) and afterwards compares each
mutant's verdict with its row: killed or survived, and the invariant that
caught it. Exit 0 when every verdict is as in the table; 1 when one is not (a
killed mutant survives, a survivor is killed, or another invariant caught it),
with one line per difference; 2 when a named table is missing or a table is
malformed. ``--only`` compares only the mutants it names; a full run also
reports rows for mutants the catalog no longer has. Runs to kill, steps and
the campaign are reported but not compared: they move whenever the
strategies or the checkers change, and a reviewer needs to hear about
verdicts. When the default table does not exist (an installed copy, say),
the command says so and exits 0 only if every mutant is killed.

The table itself is parsed rather than paired with a JSON sidecar: it is
generated and committed already, so it stays the one record, with no second
file to forget to commit or to drift from what a reader sees. The parser needs
little of it: the rows under the header row (:data:`COLUMNS`), trimmed cells,
a row's first cell and the verdict cells counted from its end, so alignment
padding and a pipe inside a planted bug's text do not confuse it, and anything
else in a row is an error that names the line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from scenarios import fuzz_examples
from semaphore_core.fixes import ALL_FIXES
from sim.fuzz import KNOWN_FINDINGS, Campaign, campaign, case_length
from sim.inputs import InputError, read_text
from sim.mutant_catalog import MUTANTS, Mutant, mutant

#: The ``ci`` profile's budget, and the pytest fuzz suite's seed.
CI_RUNS: Final = 150
CI_SEED: Final = 20261129
#: The target: every counterexample at most this many plan steps.
MAX_COUNTEREXAMPLE_STEPS: Final = 15
#: Without a terminal, a progress line every this many runs (about 10 s of a campaign).
PROGRESS_EVERY_RUNS: Final = 25
#: The table the exit status is judged against, unless ``--expected`` names another.
COMMITTED_TABLE: Final = Path(__file__).resolve().parent.parent / "docs" / "MUTANTS.md"
#: The largest expected table read (``1 << 20``: Hypothesis draws integers from large literals
#: in local modules, so this module adds none; see tests/conftest.py).
MAX_TABLE_BYTES: Final = 1 << 20
#: The kill table's columns, as :func:`markdown` writes them and :func:`read_table` finds them.
COLUMNS: Final = ("mutant", "planted bug", "result", "caught by", "campaign", "runs to kill", "steps")


#: Why a mutant can survive the campaigns, for the table: what no honest or faulty run
#: can show through the invariants (docs/INVARIANTS.md). Printed only for mutants that survived.
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

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.killed, self.caught_by)


@attrs.frozen
class Verdict:
    """What the exit status compares: killed or not, and by which invariant."""

    killed: bool
    caught_by: str | None

    def __str__(self) -> str:
        return f"killed by {self.caught_by}" if self.killed else "survived"


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
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
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


class TableError(ValueError):
    """An expected table that cannot be read as a kill table; the message names the file and line."""


def _cells(line: str) -> list[str] | None:
    """A Markdown table row's trimmed cells, or None when ``line`` is not a row."""
    line = line.strip()
    if len(line) < 2 or not (line.startswith("|") and line.endswith("|")):
        return None
    return [cell.strip() for cell in line[1:-1].split("|")]


def _unquoted(cell: str) -> str:
    return cell.strip("`").strip()


def read_table(path: Path) -> dict[str, Verdict]:
    """Each mutant's verdict in the kill table of the Markdown file ``path``, in table order.

    Raises :class:`~sim.inputs.InputError` when the file cannot be read and
    :class:`TableError` when it holds no well-formed kill table.
    """
    lines = read_text(path, MAX_TABLE_BYTES, "an expected mutation table").splitlines()
    header = next((i for i, line in enumerate(lines) if _cells(line) == list(COLUMNS)), None)
    if header is None:
        raise TableError(f"{path}: no kill table (no row of headers {' | '.join(COLUMNS)})")
    rule = _cells(lines[header + 1]) if header + 1 < len(lines) else None
    if rule is None or not all("-" in cell and set(cell) <= set(":-") for cell in rule):
        raise TableError(f"{path}, line {header + 2}: the kill table's header has no |---| line under it")
    verdicts: dict[str, Verdict] = {}
    for number, line in enumerate(lines[header + 2 :], start=header + 3):
        cells = _cells(line)
        if cells is None:
            break
        if len(cells) < len(COLUMNS):
            raise TableError(f"{path}, line {number}: {len(cells)} cells, not {len(COLUMNS)}")
        # The verdict's cells counted from the end: a planted bug's text may hold a pipe.
        quoted_name, *_planted_bug, result_cell, caught_cell, _campaign, _runs, _steps = cells
        name, result, caught_by = (
            _unquoted(quoted_name),
            result_cell.strip("*").strip(),
            _unquoted(caught_cell),
        )
        if not name:
            raise TableError(f"{path}, line {number}: no mutant name")
        if name in verdicts:
            raise TableError(f"{path}, line {number}: {name} has a row already")
        if result not in ("killed", "survived"):
            raise TableError(f"{path}, line {number}: {name}: result {result_cell!r}, not killed or survived")
        if (result == "killed") != bool(caught_by):
            missing = (
                "killed by no invariant" if result == "killed" else f"survived, yet caught by {caught_by}"
            )
            raise TableError(f"{path}, line {number}: {name}: {missing}")
        verdicts[name] = Verdict(result == "killed", caught_by or None)
    if not verdicts:
        raise TableError(f"{path}, line {header + 1}: the kill table has no rows")
    return verdicts


def differences(
    results: Sequence[MutantResult], expected: Mapping[str, Verdict], complete: bool
) -> list[str]:
    """One line per mutant whose verdict is not the one ``expected``, in the order of ``results``.

    With ``complete`` (every mutant of the catalog ran), a mutant the table has and the
    run did not is a difference too.
    """
    lines = []
    for result in results:
        was = expected.get(result.name)
        if was is None:
            lines.append(f"{result.name}: not in the table; this run: {result.verdict}")
        elif was != result.verdict:
            lines.append(f"{result.name}: the table says {was}; this run: {result.verdict}")
    if complete:
        ran = {result.name for result in results}
        lines += [f"{name}: in the table, not in the catalog" for name in expected if name not in ran]
    return lines


def cmd_mutants(args: argparse.Namespace) -> int:
    from sim.cli import EXIT_OK, EXIT_VIOLATION, UsageError, output_file, wall_clock

    names = list(dict.fromkeys(name.strip() for name in (args.only or "").split(",") if name.strip()))
    if args.only is not None and not names:
        raise UsageError("--only names no mutant (give A,B; leave it out to run them all)")
    try:
        chosen = [mutant(name) for name in names] if names else list(MUTANTS)
    except ValueError as error:
        raise UsageError(str(error)) from None
    out: Path | None = args.markdown
    if out is not None:
        output_file(out, "--markdown")
    # Read before any run, so a bad table fails at once and --markdown may overwrite it.
    named: Path | None = args.expected
    table = COMMITTED_TABLE if named is None else named
    expected: dict[str, Verdict] | None = None
    if named is not None or table.exists():
        try:
            expected = read_table(table)
        except (InputError, TableError) as error:
            raise UsageError(f"expected table: {error}") from None
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
    if expected is None:
        print(f"no expected table at {table}: exit 0 only if every mutant is killed", flush=True)
        return EXIT_OK if killed == len(results) else EXIT_VIOLATION
    changed = differences(results, expected, complete=not names)
    if not changed:
        print(f"every verdict as in {table}", flush=True)
        return EXIT_OK
    print(f"{len(changed)} {'difference' if len(changed) == 1 else 'differences'} from {table}:")
    for line in changed:
        print(f"  {line}", flush=True)
    return EXIT_VIOLATION
