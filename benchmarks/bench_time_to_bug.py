"""Time to bug: how fast the fuzzer's campaigns find each planted bug of the mutant catalog.

    python benchmarks/bench_time_to_bug.py [--seeds 1,2,3] [--runs 150] [--mode drawn,scenarios]
        [--only NAME,NAME | --variants MODULE:ATTR,...] [--workers N] [--json F.json]
    python benchmarks/bench_time_to_bug.py --render docs/time_to_bug.json   # docs/MUTANTS.md's section

For every catalog mutant (``semsim.world.mutant_catalog``), every campaign seed and every
mode, it runs what ``semsim mutants`` runs for its fuzz column (the reference campaign, its
known findings tolerated, then, if that found nothing, the every-fix campaign), without
shrinking, and records whether a run broke an invariant, after how many runs and how many
CPU seconds (this process's ``process_time()``, counted from the campaign's start to the end
of the failing run: the machine is shared, so wall time is noise), and which invariant.

- ``drawn``: drawn runs only (``examples=()``): what a user's change meets when no named
  scenario tells the story it breaks (issue 27's measure);
- ``scenarios``: the named scenarios' worlds first, then drawn runs, as ``semsim fuzz`` and
  ``semsim mutants`` run them.

``--variants`` measures a team's own planted bugs instead of the catalog: holder variants by
the reference ``semsim fuzz --variant`` takes (``module:attribute``; the module importable by
the worker processes, e.g. with ``PYTHONPATH=.``), each run as a catalog mutant is. That is
how planted bugs the fuzzer was not tuned on are measured the same way.

Each (mutant, seed, mode) is a job of its own, spread over ``--workers`` processes
(default: every core); a job's numbers are its own process's, whatever else runs. The
summary says, per mode and seed, how many were killed within ``--runs`` runs per campaign,
and the median and 90th percentile (nearest rank) of CPU seconds to a kill; then the
survivors. ``--json`` writes every cell, whole or not at all, as they come in.

``--render F.json`` writes docs/MUTANTS.md's "Time to bug" section from such a file (between
its markers, which ``semsim mutants --markdown`` keeps): a row per mutant, a column per mode
and seed. ``tests/test_benchmarks.py`` renders it again from docs/time_to_bug.json to check
that the page still says what the runs found.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, NoReturn

import attrs

from semsim.cli.main import runs_arg
from semsim.explore.campaigns import default_workers, local_pool
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import Campaign, RunReport, campaign
from semsim.explore.mutants import fuzz_campaigns, why_drawn_runs_miss
from semsim.harness.catalog import MUTANTS, mutant
from semsim.harness.variants import find_variant
from semsim.inputs.commands import UsageError, output_file, run_printing
from semsim.inputs.files import write_text_whole

MODES = ("drawn", "scenarios")
#: docs/MUTANTS.md's section lies between these lines.
START = "<!-- time to bug: written by benchmarks/bench_time_to_bug.py --render docs/time_to_bug.json -->"
END = "<!-- time to bug: end -->"
MUTANTS_MD = Path(__file__).resolve().parent.parent / "docs" / "MUTANTS.md"


@attrs.frozen
class Cell:
    """One mutant under one seed and mode: killed or not, and what it took."""

    mutant: str
    seed: int
    mode: str
    killed: bool
    #: Runs until the failing one, included (both campaigns'); all the runs made if none failed.
    runs: int
    #: CPU seconds until the end of the failing run (or of every run made).
    cpu_s: float
    #: The invariant (or outcome) of the failing run, and the campaign it was in.
    caught_by: str | None
    campaign: str | None


def planted_variant(name: str) -> str:
    """The variant a job runs: a catalog mutant's, or a team's ``module:attribute`` (or the
    reference) as it is named."""
    return name if name == "reference" or ":" in name else mutant(name).variant.name


def time_to_bug(name: str, seed: int, mode: str, runs: int) -> Cell:
    """One job: the mutant ``name``'s campaigns under ``seed`` in ``mode`` (module docstring);
    a ``module:attribute`` name is a team's variant, run as it is."""
    planted = planted_variant(name)
    design = "semaphore" if name == "reference" or ":" in name else mutant(name).design
    started = time.process_time()
    total = 0
    for label, fixes, tolerated in fuzz_campaigns(design):
        failed: list[tuple[int, float, str]] = []

        def heard(
            state: Campaign,
            report: RunReport,
            shrinking: bool,
            failed: list[tuple[int, float, str]] = failed,
        ) -> None:
            if report.failed and not shrinking and not failed:
                failed.append((state.runs, time.process_time() - started, report.failure_name))

        examples = (
            [attrs.evolve(example, variant=planted) for example in fuzz_examples(fixes, design=design)]
            if mode == "scenarios"
            else []
        )
        result = campaign(
            runs,
            seed,
            fixes=fixes,
            tolerated=tolerated,
            on_run=heard,
            shrink=False,
            examples=examples,
            variant=planted,
            design=design,
        )
        if failed:
            (at, cpu_s, caught_by) = failed[0]
            return Cell(name, seed, mode, True, total + at, round(cpu_s, 3), caught_by, label)
        total += result.runs
    return Cell(name, seed, mode, False, total, round(time.process_time() - started, 3), None, None)


def nearest_rank(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summary(cells: Sequence[Cell], runs: int) -> list[str]:
    lines = [f"{'mode':<10} {'seed':>6} {'killed':>9} {'share':>6} {'median CPU s':>13} {'p90 CPU s':>10}"]
    for mode in dict.fromkeys(cell.mode for cell in cells):
        for seed in dict.fromkeys(cell.seed for cell in cells):
            mine = [cell for cell in cells if cell.mode == mode and cell.seed == seed]
            kills = [cell.cpu_s for cell in mine if cell.killed]
            median = statistics.median(kills) if kills else None
            p90 = nearest_rank(kills, 0.9)
            lines.append(
                f"{mode:<10} {seed:>6} {len(kills):>4}/{len(mine):<4} {len(kills) / len(mine):>6.0%} "
                f"{'-' if median is None else f'{median:.2f}':>13} {'-' if p90 is None else f'{p90:.2f}':>10}"
            )
    survivors: dict[str, list[str]] = {}
    for cell in cells:
        if not cell.killed:
            survivors.setdefault(cell.mutant, []).append(f"{cell.mode} seed {cell.seed}")
    count = len(survivors)
    lines.append(f"survived {runs} runs per campaign ({count} mutant{'' if count == 1 else 's'}):")
    lines += [f"  {name}: {', '.join(where)}" for name, where in survivors.items()]
    return lines


def cannot_write(parser: argparse.ArgumentParser, what: str, error: OSError) -> NoReturn:
    """A write that failed (a full disk): the user's machine, exit 2 in one line, no traceback;
    the file is as it was (``write_text_whole`` writes whole or not at all)."""
    parser.exit(2, f"{parser.prog}: error: cannot write {what}: {error.strerror}\n")


def _modes_text(modes: list[str]) -> str:
    said = {"drawn": "with drawn runs only", "scenarios": "with the named scenarios' worlds first"}
    return " and ".join(said[mode] for mode in modes)


def render(record: dict[str, Any]) -> str:
    """The "Time to bug" section of docs/MUTANTS.md, markers included, from a ``--json`` record."""
    cells = [Cell(**cell) for cell in record["cells"]]
    runs, seeds, modes = record["runs"], record["seeds"], record["modes"]
    by = {(cell.mutant, cell.mode, cell.seed): cell for cell in cells}
    names = list(dict.fromkeys(cell.mutant for cell in cells))
    heads = [
        f"{'drawn' if mode == 'drawn' else 'with scenarios'}, seed {seed}" for mode in modes for seed in seeds
    ]
    lines = [
        START,
        "## Time to bug",
        "",
        f"How soon the fuzz finds each planted bug: the ci campaigns (reference, then every fix; {runs} "
        f"runs each, no shrinking) per campaign seed, {_modes_text(modes)}. A cell is the run that "
        "first broke an invariant (both "
        "campaigns' runs counted), the CPU seconds to the end of it, and the invariant; "
        f"**survived** when neither campaign broke one in {runs} runs. "
        '`python benchmarks/bench_time_to_bug.py` reruns it (docs/BENCHMARKS.md, "Time to bug").',
        "",
        "```",
        *summary(cells, runs),
        "```",
        "",
        "| mutant | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for name in names:
        row = []
        for mode in modes:
            for seed in seeds:
                cell = by.get((name, mode, seed))
                if cell is None:
                    row.append("not run")
                elif cell.killed:
                    row.append(f"{cell.runs}, {cell.cpu_s:.1f} s, `{cell.caught_by}`")
                else:
                    row.append("**survived**")
        lines.append(f"| `{name}` | " + " | ".join(row) + " |")
    survivors = [name for name in names if any(not cell.killed for cell in cells if cell.mutant == name)]
    if survivors:
        lines += ["", "Why each survivor survives the draws:", ""]
        lines += [f"- `{name}`: {why_drawn_runs_miss(name) or 'not explained yet.'}" for name in survivors]
    return "\n".join([*lines, END]) + "\n"


def with_section(page: str, section: str) -> str:
    """``page`` with its time-to-bug section replaced by ``section`` (appended if it has none)."""
    if START in page and END in page:
        before, rest = page.split(START, 1)
        _, after = rest.split(END, 1)
        return before + section.rstrip("\n") + after
    return page.rstrip("\n") + "\n\n" + section


def variant_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """What ``--only`` or ``--variants`` asks for (the whole catalog if neither), each checked
    to be found before any job runs."""
    if args.variants is not None:
        if args.only is not None:
            parser.error("--only picks catalog mutants; --variants replaces the catalog: give one")
        names = [n.strip() for n in args.variants.split(",") if n.strip()]
        for name in names:
            try:
                find_variant(name)
            except LookupError as error:  # VariantLookupError: a clear line, not a traceback
                parser.error(f"--variants: {error}")
        return names
    names = [m.name for m in MUTANTS] if args.only is None else [n.strip() for n in args.only.split(",")]
    for name in names:
        try:
            mutant(name)
        except (LookupError, ValueError):
            parser.error(f"--only: unknown mutant {name!r}; docs/MUTANTS.md names them")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="campaign seeds, comma-separated (default 1,2,3)")
    parser.add_argument("--runs", type=runs_arg, default=150, help="runs per campaign (default 150)")
    parser.add_argument("--mode", default="drawn,scenarios", help="drawn, scenarios or both (default both)")
    parser.add_argument("--only", help="these mutants only, comma-separated")
    parser.add_argument(
        "--variants", help="these holder variants (module:attribute, comma-separated) instead of the catalog"
    )
    parser.add_argument("--workers", type=runs_arg, help="processes (default: every core)")
    parser.add_argument("--json", type=Path, help="write every cell here")
    parser.add_argument(
        "--render", type=Path, metavar="F.json", help="write docs/MUTANTS.md's section from F"
    )
    args = parser.parse_args()
    if args.render is not None:
        try:
            record = json.loads(args.render.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            parser.error(f"--render: {error}")
        page = MUTANTS_MD.read_text(encoding="utf-8")
        try:
            write_text_whole(MUTANTS_MD, with_section(page, render(record)))
        except OSError as error:
            cannot_write(parser, str(MUTANTS_MD), error)
        print(f"written to {MUTANTS_MD}")
        return
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: integers separated by commas, got {args.seeds!r}")
    modes = [mode.strip() for mode in args.mode.split(",")]
    if any(mode not in MODES for mode in modes):
        parser.error(f"--mode: {', '.join(MODES)}, got {args.mode!r}")
    names = variant_names(parser, args)
    if args.json is not None:
        try:  # before any job runs: an hour of cells must not end in a traceback
            output_file(args.json, "--json")
        except UsageError as error:
            parser.error(str(error))
    jobs = [(name, seed, mode) for mode in modes for seed in seeds for name in names]
    workers = args.workers or default_workers()
    print(
        f"{len(jobs)} jobs ({len(names)} mutants x {len(seeds)} seeds x {len(modes)} modes) on {workers} "
        f"processes, {args.runs} runs per campaign",
        flush=True,
    )
    cells: dict[tuple[str, int, str], Cell] = {}
    with local_pool(workers) as pool:
        futures = {
            pool.submit(time_to_bug, name, seed, mode, args.runs): (name, seed, mode)
            for name, seed, mode in jobs
        }
        for done, future in enumerate(as_completed(futures), start=1):
            cell = future.result()
            cells[futures[future]] = cell
            verdict = (
                f"{cell.caught_by} at run {cell.runs}, {cell.cpu_s:.2f} CPU s" if cell.killed else "survived"
            )
            print(f"[{done}/{len(jobs)}] {cell.mutant} seed {cell.seed} {cell.mode}: {verdict}", flush=True)
            if args.json is not None:  # as the cells come in: a long benchmark cut short keeps them
                try:
                    _write(args.json, args.runs, seeds, modes, [cells[job] for job in jobs if job in cells])
                except OSError as error:  # the record keeps the last write's cells; workers end
                    cannot_write(parser, f"--json {args.json}", error)
    ordered = [cells[job] for job in jobs]
    print("\n".join(summary(ordered, args.runs)))
    if args.json is not None:
        print(f"written to {args.json}", file=sys.stderr)


def _write(path: Path, runs: int, seeds: list[int], modes: list[str], cells: list[Cell]) -> None:
    record: dict[str, Any] = {
        "runs": runs,
        "seeds": seeds,
        "modes": modes,
        "cells": [attrs.asdict(cell) for cell in cells],
    }
    write_text_whole(path, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    run_printing(main)
