"""The ``semsim`` command line (docs/CLI.md).

Exit status: 0 when every expectation held, 1 when one did not, 2 on bad
usage or bad input (a one-line message, no traceback).

This module only parses arguments and dispatches; each command's work lives
with its concept (``scenarios.cli``, ``sim.plot``, ``sim.replay``,
``sim.fuzz``, ``sim.mutants``) and is imported when the command runs, so
``semsim --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2

#: The largest seed accepted on the command line (seeds feed ``random.Random``).
MAX_SEED = 2**63 - 1


class UsageError(Exception):
    """A user's mistake (bad argument, unreadable or malformed file): exit 2, one line, no traceback."""


def wall_clock() -> float:
    """Wall-clock seconds, for progress lines and summaries only.

    The one place semsim reads real time: what it returns is printed, never
    fed to a run, so it cannot make two runs of a seed differ.
    """
    return time.perf_counter()


def seed_arg(text: str) -> int:
    """``--seed``: a non-negative integer."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SEED}: {text}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def writable_path(path: Path) -> Path:
    """Fail early, before a long run, when an output file cannot be written."""
    if not path.parent.exists():
        raise UsageError(f"cannot write {path}: no directory {path.parent}")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semsim",
        description="Deterministic simulation and fuzzing of the DurabilitySemaphore protocol.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="a scripted allocation story on the core: lost reply, alarm, lowered limit",
        description="Run a scripted allocation story on the pure core and check every step.",
    )
    demo.add_argument("--plot", type=Path, metavar="F.png", help="write a usage plot to this file")

    commands.add_parser(
        "list", help="the failure scenarios, one line each", description="List the failure scenarios."
    )

    run = commands.add_parser(
        "run",
        help="run a failure scenario and check what it asserts",
        description="Run a named failure scenario; exit 1 if an expectation or invariant fails.",
    )
    run.add_argument("name", metavar="NAME", help="a scenario name (see `semsim list`)")
    run.add_argument("--seed", type=seed_arg, help="override the scenario's seed")
    run.add_argument("--trace", type=Path, metavar="F.jsonl", help="write the run's trace here")
    run.add_argument("--plot", type=Path, metavar="F.png", help="write a usage plot here")
    run.add_argument("--per-group", action="store_true", help="plot one panel per group")

    fuzz = commands.add_parser(
        "fuzz",
        help="whole-system runs under random fault plans",
        description=(
            "Run simulations under random (swarm) fault plans with every invariant checked; "
            "print a summary with coverage counters. Exit 1 on an unexpected violation."
        ),
    )
    fuzz.add_argument("--runs", type=positive_int, default=100, help="how many runs (default 100)")
    fuzz.add_argument("--seed", type=seed_arg, default=0, help="campaign seed (default 0)")
    fuzz.add_argument(
        "--fixes",
        default="",
        metavar="A,B",
        help="opt-in fixes to run with ('all' for every known fix; default: the faithful reference)",
    )
    fuzz.add_argument("--replay", type=Path, metavar="PLAN.json", help="replay one recorded case")
    fuzz.add_argument("--trace", type=Path, metavar="F.jsonl", help="with --replay: write the trace")
    fuzz.add_argument("--out", type=Path, metavar="DIR", help="write each violating case's plan here")
    fuzz.add_argument("--quiet", action="store_true", help="no progress bar")

    mutants = commands.add_parser(
        "mutants",
        help="run the fuzz budget against each protocol mutant and print the kill table",
        description="Apply each catalogued mutant of semaphore_core and check the fuzzer kills it.",
    )
    mutants.add_argument("--only", default="", metavar="A,B", help="run only these mutants")
    mutants.add_argument("--markdown", type=Path, metavar="F.md", help="write the table here")

    replay = commands.add_parser(
        "replay",
        help="recorded wire traffic through the holder model, invariants checked",
        description="Replay recorded wire traffic through the holder model and check invariants.",
    )
    replay.add_argument("traffic", type=Path, metavar="TRAFFIC.jsonl")

    plot = commands.add_parser(
        "plot",
        help="plot usage over simulated time from a trace",
        description="Plot usage over simulated time from a trace file.",
    )
    plot.add_argument("trace", type=Path, metavar="TRACE.jsonl")
    plot.add_argument("-o", "--output", type=Path, metavar="F.png", required=True)
    plot.add_argument("--per-group", action="store_true", help="one panel per group")
    return parser


#: command -> "module:function"; the function takes the parsed arguments and returns the exit code.
HANDLERS = {
    "demo": "sim.cli:_demo",
    "list": "scenarios.cli:cmd_list",
    "run": "scenarios.cli:cmd_run",
    "fuzz": "sim.fuzz:cmd_fuzz",
    "mutants": "sim.mutants:cmd_mutants",
    "replay": "sim.replay:cmd_replay",
    "plot": "sim.plot:cmd_plot",
}


def _demo(args: argparse.Namespace) -> int:
    from sim.demo import plot, print_timeline, run_demo

    plot_path: Path | None = args.plot
    if plot_path is not None:
        writable_path(plot_path)
    result = run_demo()
    print_timeline(result)
    if plot_path is not None:
        plot(result, plot_path)
        print(f"\nplot written to {plot_path}")
    if result.failures:
        for failure in result.failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        return EXIT_VIOLATION
    print("\nevery expectation held")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    module_name, function_name = HANDLERS[args.command].split(":")
    handler = cast(
        Callable[[argparse.Namespace], int], getattr(importlib.import_module(module_name), function_name)
    )
    try:
        return handler(args)
    except UsageError as error:
        print(f"semsim {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"semsim {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
