"""``semsim compare``: the designs × fault plans × seeds matrix, as a table, JSON and a plot.

Everything asked for is checked before the first run: the designs and plans
by name (a design may be a variant of one, ``DESIGN@VARIANT``, loaded now:
``semsim.explore.compare.Contender``), the config file (a world's ``config`` object; it may not name a
design, since the comparison runs each design itself), that each plan fits
the config, the user's invariants (``--invariant``, each heard by every row's
design), and every output path. Runs go over local processes
(``--workers``) or a Dask cluster (``--scheduler``), as ``semsim fuzz``'s do,
and the result is the same whichever ran them: cells come back in matrix
order. Exit 0 when every run was judged and held, 1 when one broke an
invariant (each design's known findings are tolerated, unless the row's
variant fixes them, and named in the table), 2 on bad input.

The comparison is recorded in the results database (``--db``, default
``semsim-results.sqlite``, as ``semsim fuzz``'s campaigns; ``--no-db``
records nothing), checked before the first run and written whole, in one
transaction, once every cell is in; ``semsim report`` prints it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Final

from semsim.cli.loading import load_invariants, load_variant
from semsim.explore.campaigns import ClusterError, dask_pool, default_workers, local_pool
from semsim.explore.compare import (
    PLANS,
    Cell,
    check_matrix,
    compare,
    contender,
    default_config,
    markdown,
    matrix,
    summarise,
)
from semsim.explore.results import DEFAULT_DB, ResultsError, check_db, open_db, record_comparison
from semsim.harness.run import WorldConfig
from semsim.inputs.commands import EXIT_OK, EXIT_VIOLATION, UsageError, json_result, output_file, plural
from semsim.inputs.files import InputError, parse_json, read_text, write_text_whole
from semsim.inputs.progress import Progress
from semsim.world.design import DESIGNS

#: The most bytes a config file may hold.
MAX_CONFIG_BYTES: Final = 1_000_000
#: Seeds per (design, plan) unless told.
DEFAULT_SEEDS: Final = 20


def _names(text: str | None, known: Sequence[str], what: str) -> list[str]:
    if text is None:
        return list(known)
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in known:
            raise UsageError(f"--{what}: unknown {what[:-1]} {name!r}: the {what} are {', '.join(known)}")
    if len(set(names)) != len(names):
        raise UsageError(f"--{what}: {text!r} names one twice")
    return names


def _config(path: Path | None) -> WorldConfig:
    if path is None:
        return default_config()
    try:
        data = parse_json(read_text(path, MAX_CONFIG_BYTES, "a config file"))
        config = WorldConfig.from_dict(data)
    except (InputError, ValueError) as error:
        raise UsageError(f"--config {path}: {error}") from None
    if isinstance(data, dict) and "design" in data:
        raise UsageError(
            f"--config {path}: the config names a design; compare runs each design itself (--designs)"
        )
    return config


@contextmanager
def _executor(args: argparse.Namespace) -> Iterator[tuple[Executor | None, str, int]]:
    """Where the runs go: ``(executor or None, "serial" | "local" | "dask", workers)``."""
    if args.scheduler is not None:
        if args.workers is not None:
            raise UsageError("--workers and --scheduler: a comparison runs on one or the other")
        try:
            with dask_pool(args.scheduler) as (executor, workers):
                yield executor, "dask", workers
        except ClusterError as error:
            raise UsageError(str(error)) from None
        return
    workers = default_workers() if args.workers is None else args.workers
    if workers == 1:
        yield None, "serial", 1
        return
    with local_pool(workers) as pool:
        yield pool, "local", workers


def _db(args: argparse.Namespace) -> Path | None:
    """The results database to record the comparison in (checked now), or None (``--no-db``)."""
    if args.no_db:
        if args.db is not None:
            raise UsageError("--db does not go with --no-db")
        return None
    path: Path = DEFAULT_DB if args.db is None else args.db
    try:
        check_db(path)
    except ResultsError as error:
        raise UsageError(str(error)) from None
    return path


def _designs(text: str | None) -> list[str]:
    """The rows ``--designs`` names, each ``DESIGN`` or ``DESIGN@VARIANT``, as their labels."""
    if text is None:
        return list(DESIGNS)
    labels: list[str] = []
    for name in (name.strip() for name in text.split(",")):
        try:
            row = contender(name)
        except ValueError as error:
            raise UsageError(f"--designs: {error}") from None
        if row.label in labels:
            also = "" if row.label == name else f" ({name} is {row.label})"
            raise UsageError(f"--designs: {text!r} names one twice{also}")
        if row.loads() and row.variant is not None:
            # Said now, and a module:attribute found as python -m finds it.
            variant = load_variant(row.variant, f"--designs {name}")
            try:
                variant.check_design(row.design)
            except ValueError as error:
                raise UsageError(f"--designs {name}: {error}") from None
        labels.append(row.label)
    return labels


def cmd_compare(args: argparse.Namespace) -> int:
    designs = _designs(args.designs)
    plans = _names(args.plans, PLANS, "plans")
    first = 1 if args.seed is None else args.seed
    seeds = list(range(first, first + (DEFAULT_SEEDS if args.seeds is None else args.seeds)))
    config = _config(args.config)
    invariants = tuple(args.invariant or ())
    load_invariants(invariants, "--invariant")  # one that cannot be loaded: said now, as run's and fuzz's
    try:
        check_matrix(config, designs, plans, seeds, invariants)
    except ValueError as error:
        raise UsageError(str(error)) from None
    markdown_path = None if args.markdown is None else output_file(args.markdown, "--markdown")
    plot_path = None if args.plot is None else output_file(args.plot, "--plot", image=True)
    db_path = _db(args)
    total = len(matrix(designs, plans, seeds))
    with json_result(args.json) as result:
        yours = f", judged by yours too: {', '.join(invariants)}" if invariants else ""
        print(
            f"comparing {', '.join(designs)} under {plural(len(plans), 'fault plan')}, "
            f"{plural(len(seeds), 'seed')} each ({plural(total, 'run')}){yours}",
            flush=True,
        )
        done = 0
        with (
            Progress("compare", total, "runs", quiet=args.quiet) as progress,
            _executor(args) as (executor, kind, workers),
        ):

            def heard(cell: Cell) -> None:
                nonlocal done
                done += 1
                progress.update(done, f"{cell.design} {cell.plan} seed {cell.seed}: {cell.outcome}")

            cells = compare(config, designs, plans, seeds, executor, heard, invariants)
        if db_path is not None:
            # Recorded before anything is printed: a reader that goes away must not cost the record.
            try:
                with closing(open_db(db_path)) as db:
                    record_comparison(
                        db,
                        db_path,
                        config=config.to_dict(),
                        designs=designs,
                        plans=plans,
                        seeds=seeds,
                        cells=[cell.to_dict() for cell in cells],
                        executor=kind,
                        workers=workers,
                        invariants=invariants,
                    )
            except ResultsError as error:  # a full disk, a locked file
                raise UsageError(str(error)) from None
        summaries = summarise(cells)
        table = markdown(summaries)
        print(table, end="")
        failed = [cell for cell in cells if not cell.judged]
        for cell in failed:
            print(
                f"{cell.design} under {cell.plan}, seed {cell.seed}: {cell.outcome}"
                f"{f' ({cell.invariant})' if cell.invariant else ''}: {cell.detail}"
            )
        cpu_s = sum(cell.cpu_s for cell in cells)
        print(f"{plural(total, 'run')}, {cpu_s:.1f} CPU s in the runs")
        if db_path is not None:
            print(f"recorded in {db_path}")
        if markdown_path is not None:
            write_text_whole(markdown_path, table)
        if plot_path is not None:
            from semsim.explore.compare_plot import plot_comparison

            plot_comparison(summaries, plot_path)
        if result is not None:
            result.update(
                {
                    "designs": designs,
                    "plans": plans,
                    "seeds": seeds,
                    "invariants": list(invariants),
                    "config": config.to_dict(),
                    "summary": [summary.to_dict() for summary in summaries],
                    "cells": [cell.to_dict() for cell in cells],
                    "verdict": "violation" if failed else "ok",
                    "db": None if db_path is None else str(db_path),
                }
            )
    return EXIT_VIOLATION if failed else EXIT_OK
