"""``semsim report DB``: what a results database holds, summarised; ``--merge`` folds others into it.

The summary, in a stable order (campaigns by their row in the file, names
sorted, coverage counters in ``semsim.check.coverage.EXPECTED`` order): the
campaigns, the runs and simulated hours, violations by invariant (and
finding), tolerated findings, documented behaviour, every coverage counter
with the expected ones never reached, and the failures' cases with the
commands that replay them, then the comparisons ``semsim compare`` recorded,
each with its table. ``--json`` prints the same as one JSON object.
``--cases DIR`` writes each failure's shrunk case into DIR (the case file
may not exist on this machine: the database holds its text); DIR is checked
first and made only when there is a case to write.

A missing file, a directory, a file that is not SQLite, another
application's SQLite database or a newer schema: exit 2, one line, nothing
changed. ``--merge`` checks every file before it copies anything, then copies
each in one transaction
(``semsim.explore.results.merge``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sqlite3
import sys
import textwrap
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, TextIO

import attrs

from semsim.check.coverage import EXPECTED
from semsim.check.design_coverage import DESIGN_EXPECTED
from semsim.explore.compare import cell_of, markdown, summarise
from semsim.explore.results import ComparisonRow, ResultsError, Summary, merge, open_db, read_db, summary
from semsim.inputs.commands import EXIT_OK, UsageError, output_dir, plural
from semsim.inputs.files import write_text_whole


def cmd_report(args: argparse.Namespace) -> int:
    db_path: Path = args.db
    cases_dir = output_dir(args.cases, "--cases") if args.cases is not None else None
    try:
        if args.merge:
            if not db_path.exists():
                raise ResultsError(f"DB {db_path}: no such file (merge into an existing results database)")
            for path in (db_path, *args.merge):  # ours and readable, before anything is written
                read_db(path, "DB" if path == db_path else "--merge").close()
            with closing(open_db(db_path, "DB")) as db:
                copied = merge(db, args.merge)
            compared = f" and {plural(copied.comparisons, 'comparison')}" if copied.comparisons else ""
            print(
                f"merged {plural(copied.campaigns, 'campaign')}{compared} from "
                f"{plural(len(args.merge), 'file')} into {db_path}",
                file=sys.stderr,
            )
        with closing(read_db(db_path)) as db:
            found = summary(db)
    except ResultsError as error:
        raise UsageError(str(error)) from None
    except sqlite3.Error as error:  # a file damaged after it was checked, say
        raise UsageError(f"DB {db_path}: cannot read it: {error}") from None
    written = _write_cases(found, cases_dir) if cases_dir is not None else {}
    if args.json:
        print(json.dumps(_as_json(found, written), indent=1))
    else:
        print_report(found, written)
    return EXIT_OK


def _write_cases(found: Summary, directory: Path) -> dict[int, Path]:
    """Each failure's case in ``directory``, made (checked before) only if there is a case to write."""
    written = {}
    if found.failures:
        directory.mkdir(parents=True, exist_ok=True)
    for failure in found.failures:
        path = directory / f"campaign-{failure.campaign_id}-{failure.failure_name}.json"
        write_text_whole(path, failure.case_text)
        written[failure.campaign_id] = path
    return written


def _replay(failure_replay: str, written: Path | None) -> str:
    if written is None:
        return failure_replay
    return f"semsim fuzz --replay {shlex.quote(str(written))}"


def print_report(found: Summary, written: dict[int, Path], out: TextIO | None = None) -> None:
    out = sys.stdout if out is None else out
    print(
        f"campaigns: {len(found.campaigns)}, runs: {found.runs}, simulated: {found.sim_ms / 3_600_000:.2f} h",
        file=out,
    )
    for row in found.campaigns:
        fixes = "fixes: " + ", ".join(row.fixes) if row.fixes else "the faithful reference"
        if row.design not in (None, "semaphore"):
            fixes = f"design {row.design}"
        elif row.variant is None:
            fixes = f"variant not recorded (results schema 1), {fixes}"
        elif row.variant != "reference":
            fixes = f"variant {row.variant}, {fixes}"
        if row.invariants:
            fixes += ", with invariants " + ", ".join(row.invariants)
        where = "serial" if row.executor == "serial" else f"{row.executor}, {row.workers} workers"
        status, so_far = row.status, ""
        if status == "running":  # no verdict recorded: the runs recorded so far
            status, so_far = (
                "unfinished (still running, or stopped before its verdict was recorded)",
                " so far",
            )
        asked = row.runs_asked + row.examples
        print(
            f"  #{row.id} seed {row.seed}: {status}, {row.runs} of {asked} runs{so_far} "
            f"({row.examples} named scenarios first), {row.sim_ms / 3_600_000:.2f} h, {fixes}; "
            f"{where}, semsim {row.semsim_version} on {row.host}",
            file=out,
        )
    print("violations by invariant:", _counts(found.violations) or "none", file=out)
    print("known findings (tolerated):", _counts(found.findings) or "none", file=out)
    print("documented behaviour:", _counts(found.documented) or "none", file=out)
    print("coverage:", file=out)
    expected = _expected(found)
    width = max((len(name) for name in (*expected, *found.coverage)), default=0)
    for name in expected:
        print(f"  {name:<{width}}  {found.coverage.get(name, 0)}", file=out)
    others = sorted(set(found.coverage) - set(expected))
    for name in others:
        print(f"  {name:<{width}}  {found.coverage[name]} (not an expected counter)", file=out)
    never = [name for name in expected if not found.coverage.get(name)]
    if never:
        print(f"never reached ({len(never)}): {', '.join(never)}", file=out)
    if found.failures:
        print(f"cases to replay ({len(found.failures)}):", file=out)
        for failure in found.failures:
            print(
                f"  #{failure.campaign_id} {failure.failure_name} (campaign seed {failure.seed}, "
                f"{plural(failure.steps, 'plan step')}): {failure.detail}",
                file=out,
            )
            print(f"    {_replay(failure.replay, written.get(failure.campaign_id))}", file=out)
    else:
        print("cases to replay: none", file=out)
    _print_comparisons(found.comparisons, out)


def _expected(found: Summary) -> tuple[str, ...]:
    """The coverage counters the recorded campaigns' designs are expected to reach, in report
    order: the semaphore's (also for a file with no campaign), then each other design's."""
    designs = {row.design or "semaphore" for row in found.campaigns}
    expected = list(EXPECTED) if "semaphore" in designs or not designs else []
    for design in sorted(designs - {"semaphore"}):
        expected += [name for name in DESIGN_EXPECTED.get(design, ()) if name not in expected]
    return tuple(expected)


def _print_comparisons(comparisons: Sequence[ComparisonRow], out: TextIO) -> None:
    """Each comparison: what it ran, where, its verdict, and its table (``semsim compare``'s)."""
    if not comparisons:
        return
    print(f"comparisons: {len(comparisons)}", file=out)
    for row in comparisons:
        where = "serial" if row.executor == "serial" else f"{row.executor}, {row.workers} workers"
        judged = sum(1 for cell in row.cells if cell["outcome"] == "completed" and cell["trade_offs"])
        yours = f", with invariants {', '.join(row.invariants)}" if row.invariants else ""
        print(
            f"  #{row.id} {', '.join(row.designs)} under {plural(len(row.plans), 'fault plan')}, "
            f"{plural(len(row.seeds), 'seed')} each{yours}: {row.status}, {judged} of "
            f"{plural(len(row.cells), 'run')} judged; {where}, semsim {row.semsim_version} on {row.host}",
            file=out,
        )
        print(
            textwrap.indent(markdown(summarise([cell_of(cell) for cell in row.cells])), "    "),
            file=out,
            end="",
        )


def _as_json(found: Summary, written: dict[int, Path]) -> dict[str, Any]:
    expected = _expected(found)
    never = [name for name in expected if not found.coverage.get(name)]
    return {
        "campaigns": [attrs.asdict(row) for row in found.campaigns],
        "runs": found.runs,
        "sim_hours": round(found.sim_ms / 3_600_000, 6),
        "violations": found.violations,
        "findings": found.findings,
        "documented": found.documented,
        "coverage": {name: found.coverage.get(name, 0) for name in expected}
        | {name: found.coverage[name] for name in sorted(set(found.coverage) - set(expected))},
        "never_reached": never,
        "failures": [
            {
                "campaign": failure.campaign_id,
                "failure": failure.failure_name,
                "seed": failure.seed,
                "steps": failure.steps,
                "detail": failure.detail,
                "replay": _replay(failure.replay, written.get(failure.campaign_id)),
                "case": json.loads(failure.case_text),
            }
            for failure in found.failures
        ],
        "comparisons": [
            {
                **{key: value for key, value in attrs.asdict(row).items() if key != "cells"},
                "summary": [summary.to_dict() for summary in summarise([cell_of(c) for c in row.cells])],
                "cells": row.cells,
            }
            for row in found.comparisons
        ],
    }


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counter.items()))
