"""The ``semsim`` command line (docs/CLI.md).

Exit status: 0 when every expectation and invariant held, 1 when one did
not, 2 on bad usage or bad input (a one-line message, no traceback), 130
when interrupted (Ctrl-C), and 141 when the reader of the output went away
(``semsim list | head -1``): the command stops quietly, as a program killed
by SIGPIPE would.

This module only parses arguments and dispatches; each command's work lives
with its concept (``semsim.cli.scenario_commands``, ``semsim.report.plot``, ``semsim.report.replay``,
``semsim.cli.fuzz_command``, ``semsim.explore.mutants``) and is imported when the
command runs, so ``semsim --help`` stays fast. What the commands share (exit
statuses, ``UsageError``, output-path checks) is in ``semsim.inputs.commands``,
below them all. Options are checked here or at the top of each command,
before any work starts: an output path that cannot be written is reported
before the run it would record, not after.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple, cast

from semsim import __version__
from semsim.inputs.commands import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
    UsageError,
    discard_stdout,
    json_result,
    output_file,
)
from semsim.inputs.files import forget_stdin, stdout_for_data, written_to

#: The largest seed accepted on the command line: ``semsim.inputs.validation.MAX_SEED``, the largest a
#: run takes (not imported from there, so ``semsim --help`` loads neither attrs nor the core).
MAX_SEED: Final = 2**63 - 1
#: ``--variant`` of ``run`` and ``fuzz``.
VARIANT_HELP: Final = (
    "the holder variant to run: reference (the default), a name installed packages register, "
    "or module:attribute naming a semsim.world.variant.Variant"
)
#: ``--invariant`` of ``run``, ``fuzz`` and ``compare``.
INVARIANT_HELP: Final = (
    "judge an invariant of your own too (repeat for more): a name installed packages register, "
    "or module:attribute naming a semsim.check.checker.Checker subclass"
)
#: ``--json`` of the commands that have a result.
JSON_HELP: Final = (
    "print the result as one JSON object on standard output (the report goes to standard error)"
)
#: Per command, the options whose file may be ``-``, standard output (argparse dests).
STDOUT_OPTIONS: Final = {
    "demo": ("plot",),
    "run": ("trace", "plot"),
    "fuzz": ("trace",),
    "mutants": ("markdown",),
    "compare": ("markdown", "plot"),
    "plot": ("output",),
}
#: Options naming what cannot be a stream: a database, a directory (by dest: what it is).
NO_STDIO: Final = {
    "db": "a results database",
    "merge": "a results database",
    "out": "a directory",
    "cases": "a directory",
}
#: The most runs one campaign may be asked for.
MAX_RUNS: Final = 1_000_000
#: The most local processes one campaign may be spread over.
MAX_WORKERS: Final = 1024


def _integer(text: str) -> int:
    # Plain decimal digits, perhaps negative (for the range check to name what is allowed):
    # int() would also take " 5", "1_0" and other scripts' digits.
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"not a decimal integer: {text!r}")
    return int(text, 10)


def _path(text: str) -> Path:
    """A file or directory argument; ``Path("")`` would quietly be ``.``, the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path; give a file name")
    return Path(text)


def seed_arg(text: str) -> int:
    """``--seed``: an integer in [0, MAX_SEED]."""
    value = _integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SEED}: {text}")
    return value


def runs_arg(text: str) -> int:
    """``--runs``: an integer in [1, MAX_RUNS]."""
    value = _integer(text)
    if not 1 <= value <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_RUNS:,}: {text}")
    return value


def workers_arg(text: str) -> int:
    """``--workers``: an integer in [1, MAX_WORKERS]."""
    value = _integer(text)
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_WORKERS}: {text}")
    return value


def _judging_options(parser: argparse.ArgumentParser) -> None:
    """What ``run`` and ``fuzz`` share: the holder judged and the invariants of the user's own."""
    parser.add_argument("--variant", metavar="V", help=VARIANT_HELP)
    parser.add_argument("--invariant", action="append", metavar="I", help=INVARIANT_HELP)


def _db_options(parser: argparse.ArgumentParser, what: str) -> None:
    """What ``fuzz`` and ``compare`` share: where the result is recorded, or that it is not."""
    parser.add_argument(
        "--db",
        type=_path,
        metavar="F.sqlite",
        help=f"record the {what} in this results database (default semsim-results.sqlite)",
    )
    parser.add_argument("--no-db", action="store_true", help="record nothing")


class Parsers(NamedTuple):
    """semsim's parser and each command's own, by name (argparse keeps no public list of them)."""

    top: argparse.ArgumentParser
    commands: dict[str, argparse.ArgumentParser]


def parsers() -> Parsers:
    """Every parser of the command line, built afresh."""
    made: dict[str, argparse.ArgumentParser] = {}
    return Parsers(_parser(made), made)


def _parser(made: dict[str, argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semsim",
        description="Deterministic simulation and fuzzing of the DurabilitySemaphore protocol.",
    )
    parser.add_argument("--version", action="version", version=f"semsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        made[name] = subparsers.add_parser(name, **kwargs)
        made[name].add_argument("--json", action="store_true", help=JSON_HELP)  # every command's result
        return made[name]

    demo = command(
        "demo",
        help="a scripted allocation story on the core: lost reply, alarm, lowered limit",
        description="Run a scripted allocation story on the pure core and check every step.",
    )
    demo.add_argument("--plot", type=_path, metavar="F.png", help="write a usage plot to this file")

    listing = command(
        "list",
        help="the failure scenarios, one line each",
        description="List the failure scenarios (or the holder variants, or the invariants), one line each.",
    )
    shown = listing.add_mutually_exclusive_group()
    shown.add_argument(
        "--variants", action="store_true", help="the holder variants --variant finds by name instead"
    )
    shown.add_argument(
        "--invariants",
        action="store_true",
        help="the invariants instead: semsim's own, then those installed packages register",
    )

    run = command(
        "run",
        help="run a failure scenario and check what it asserts",
        description="Run a named failure scenario; exit 1 if an expectation or invariant fails.",
    )
    run.add_argument(
        "name", metavar="NAME", help="a scenario name (see `semsim list`), or module:function naming your own"
    )
    run.add_argument("--seed", type=seed_arg, help="override the scenario's seed")
    _judging_options(run)
    run.add_argument("--trace", type=_path, metavar="F.jsonl", help="write the run's trace here")
    run.add_argument("--plot", type=_path, metavar="F.png", help="write a usage plot here")
    run.add_argument("--per-group", action="store_true", help="plot one panel per group")
    run.add_argument(
        "--full-checks",
        action="store_true",
        help="debug the checker: judge every commit from every row, not from what changed (slower)",
    )

    fuzz = command(
        "fuzz",
        help="whole-system runs under random fault plans",
        description=(
            "Run simulations under random (swarm) fault plans with every invariant checked; "
            "print a summary with coverage counters. Exit 1 on an unexpected violation."
        ),
    )
    # Defaults are applied by the command, so it can tell an option given from one left out.
    fuzz.add_argument("--runs", type=runs_arg, help="how many runs (default 100)")
    fuzz.add_argument("--seed", type=seed_arg, help="campaign seed (default 0)")
    fuzz.add_argument(
        "--fixes",
        metavar="A,B",
        help="opt-in fixes to run with ('all' for every known fix; default: the faithful reference); "
        "with --replay, turned on in the replayed case",
    )
    fuzz.add_argument(
        "--design",
        metavar="NAME",
        help="the design every drawn run runs: semaphore (the default), gate or leased-worker, under a "
        "swarm of the faults it meets, judged by what its seed promises",
    )
    fuzz.add_argument("--replay", type=_path, metavar="CASE.json", help="replay one recorded case")
    _judging_options(fuzz)
    fuzz.add_argument("--trace", type=_path, metavar="F.jsonl", help="with --replay: write the trace")
    fuzz.add_argument(
        "--full-checks",
        action="store_true",
        help="with --replay: debug the checker, judging every commit from every row (slower)",
    )
    fuzz.add_argument(
        "--out", type=_path, metavar="DIR", help="write the violating case here (default semsim-failures)"
    )
    fuzz.add_argument("--quiet", action="store_true", help="no progress lines")
    fuzz.add_argument(
        "--workers",
        type=workers_arg,
        metavar="N",
        help="spread the runs over N processes (default: every core; 1 runs them here, serially); "
        "the results are the serial campaign's",
    )
    fuzz.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786) instead of local "
        "processes; needs the dask extra",
    )
    _db_options(fuzz, "campaign")

    compare = command(
        "compare",
        help="every design under the same workload, fault plans and seeds: what each trades",
        description=(
            "Run the semaphore, the gate and the leased worker under each fault plan and seed, "
            "measured alike at the external API (docs/DESIGNS.md); print the table. "
            "Exit 1 if a run breaks an invariant."
        ),
    )
    compare.add_argument(
        "--designs",
        metavar="A,B",
        help="the designs to run, each DESIGN or DESIGN@VARIANT: semaphore@every-fix, semaphore@module:attr, "
        "gate@every-fix, gate@module:attr (a ledger), leased-worker@module:attr (a store) "
        "(default: all three as their seeds have them)",
    )
    compare.add_argument("--plans", metavar="A,B", help="the fault plans to run (default: all six)")
    compare.add_argument(
        "--invariant",
        action="append",
        metavar="I",
        help=INVARIANT_HELP + "; every row's design must call what it hears (the gate and the leased "
        "worker call on_api and on_finish)",
    )
    compare.add_argument("--seeds", type=runs_arg, metavar="N", help="seeds per design and plan (default 20)")
    compare.add_argument("--seed", type=seed_arg, help="the first seed (default 1)")
    compare.add_argument(
        "--config",
        type=_path,
        metavar="F.json",
        help="the world to run (a config object; default: compare's own)",
    )
    compare.add_argument("--markdown", type=_path, metavar="F.md", help="write the table here")
    compare.add_argument("--plot", type=_path, metavar="F.png", help="write the trade-offs plot here")
    compare.add_argument("--quiet", action="store_true", help="no progress")
    compare.add_argument(
        "--workers",
        type=workers_arg,
        metavar="N",
        help="spread the runs over N processes (default: every core; 1 runs them here)",
    )
    compare.add_argument(
        "--scheduler", metavar="ADDRESS", help="run on the Dask cluster whose scheduler is at ADDRESS"
    )
    _db_options(compare, "comparison")

    mutants = command(
        "mutants",
        help="run every layer of the suite against each protocol mutant and print the kill table",
        description=(
            "Apply each catalogued mutant (a planted bug in semaphore_core, the world or the "
            "checkers) and report which layers kill it."
        ),
    )
    mutants.add_argument("--only", metavar="A,B", help="run only these mutants")
    mutants.add_argument("--markdown", type=_path, metavar="F.md", help="write the table here")
    mutants.add_argument(
        "--expected",
        type=_path,
        metavar="F.md",
        help="the table to compare the verdicts with (default: docs/MUTANTS.md)",
    )
    mutants.add_argument(
        "--layers",
        metavar="L,M",
        help="run only these layers: unit, state-machine, scenarios, fuzz (default: all)",
    )
    mutants.add_argument(
        "--workers", type=_integer, default=1, metavar="N", help="score N mutants at once (default 1)"
    )
    mutants.add_argument(
        "--cpu-budget",
        type=_integer,
        default=20 * 60,
        metavar="S",
        help="CPU seconds a pytest layer may take per mutant before it is timed out (default 1200)",
    )

    replay = command(
        "replay",
        help="recorded wire traffic through the holder model, invariants checked",
        description="Replay recorded wire traffic through the holder model and check invariants.",
    )
    replay.add_argument("traffic", type=_path, metavar="TRAFFIC.jsonl", nargs="?")
    replay.add_argument(
        "--example",
        action="store_true",
        help="replay the example recording semsim ships (examples/traffic.jsonl in its repository)",
    )

    report = command(
        "report",
        help="summarise a results database: campaigns, runs, violations, coverage, cases to replay",
        description=(
            "Summarise the campaigns recorded in a results database (semsim fuzz --db). "
            "With --merge, first copy into it the campaigns of other databases that it lacks."
        ),
    )
    report.add_argument("db", type=_path, metavar="DB.sqlite")
    report.add_argument(
        "--merge",
        type=_path,
        nargs="+",
        metavar="OTHER.sqlite",
        help="copy these databases' campaigns into DB first (all or nothing; a campaign already there is "
        "skipped)",
    )
    report.add_argument(
        "--cases", type=_path, metavar="DIR", help="write each failure's shrunk case here, to replay anywhere"
    )

    plot = command(
        "plot",
        help="plot usage over simulated time from a trace",
        description="Plot usage over simulated time from a trace file.",
    )
    plot.add_argument("trace", type=_path, metavar="TRACE.jsonl")
    plot.add_argument("-o", "--output", type=_path, metavar="F.png", required=True)
    plot.add_argument("--per-group", action="store_true", help="one panel per group")
    return parser


#: command -> "module:function"; the function takes the parsed arguments and returns the exit code.
HANDLERS = {
    "demo": "semsim.cli.main:_demo",
    "list": "semsim.cli.scenario_commands:cmd_list",
    "run": "semsim.cli.scenario_commands:cmd_run",
    "fuzz": "semsim.cli.fuzz_command:cmd_fuzz",
    "compare": "semsim.cli.compare_command:cmd_compare",
    "mutants": "semsim.explore.mutants:cmd_mutants",
    "replay": "semsim.report.replay:cmd_replay",
    "report": "semsim.cli.report_command:cmd_report",
    "plot": "semsim.report.plot:cmd_plot",
}


def _demo(args: argparse.Namespace) -> int:
    with json_result(args.json) as out:
        status = _run_demo(args, out)
    return status


def _run_demo(args: argparse.Namespace, out: dict[str, Any] | None) -> int:
    from semsim.cli.demo import plot, print_timeline, run_demo

    plot_path: Path | None = args.plot
    if plot_path is not None:
        output_file(plot_path, "--plot", image=True)
    result = run_demo()
    print_timeline(result)
    if plot_path is not None:
        plot(result, plot_path)
        print(f"\nplot written to {written_to(plot_path)}")
    if out is not None:
        out.update(
            passed=not result.failures,
            failures=list(result.failures),
            plot=None if plot_path is None else written_to(plot_path),
        )
    if result.failures:
        for failure in result.failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        return EXIT_VIOLATION
    print("\nevery expectation held")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stdout is None:  # started with standard output closed: the verdict still stands
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    forget_stdin()
    parser, commands = parsers()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # What the command's own parser did not take goes with its usage and name, not semsim's;
        # the top level takes nothing but the command, so anything before it is the top level's.
        given = sys.argv[1:] if argv is None else list(argv)
        owner = parser if given[0] != args.command else commands[args.command]
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    to_stdout = [
        f"--{dest}" for dest in STDOUT_OPTIONS.get(args.command, ()) if _is_dash(getattr(args, dest, None))
    ]
    if getattr(args, "json", False):
        to_stdout.append("--json")
    cannot = [dest for dest in NO_STDIO if _is_dash(getattr(args, dest, None))]
    if cannot:
        named = "DB.sqlite" if cannot[0] == "db" and args.command == "report" else f"--{cannot[0]}"
        print(
            f"semsim {args.command}: error: {named} names {NO_STDIO[cannot[0]]}, which cannot be "
            "standard input or output (-): name a path",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if len(to_stdout) > 1:
        print(
            f"semsim {args.command}: error: {' and '.join(to_stdout)} would each write to standard "
            "output (-): send all but one to files",
            file=sys.stderr,
        )
        return EXIT_USAGE
    module_name, function_name = HANDLERS[args.command].split(":")
    try:
        handler = cast(
            Callable[[argparse.Namespace], int], getattr(importlib.import_module(module_name), function_name)
        )
        if to_stdout and to_stdout[0] != "--json":
            # The file written to `-` has standard output to itself; the report goes to stderr.
            with stdout_for_data():
                status = handler(args)
        else:
            status = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at exit
        return status
    except UsageError as error:
        print(f"semsim {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        discard_stdout()
        return EXIT_BROKEN_PIPE
    except sqlite3.Error as error:  # a database the command could not use (each names its file first)
        print(f"semsim {args.command}: error: SQLite: {error}", file=sys.stderr)
        discard_stdout()
        return EXIT_USAGE
    except OSError as error:  # writing a result failed: a full disk, a device that refuses
        where = f" {error.filename}" if error.filename else ""
        print(
            f"semsim {args.command}: error: cannot write{where}: {error.strerror or error}", file=sys.stderr
        )
        discard_stdout()
        return EXIT_USAGE
    except BaseException as error:
        if not interrupted_by(error):
            raise
        print(f"\nsemsim {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _is_dash(value: object) -> bool:
    """Whether an argument's value is ``-`` (or, for a list of paths, holds it)."""
    if isinstance(value, list):
        return any(_is_dash(item) for item in value)
    return isinstance(value, Path) and str(value) == "-"


def interrupted_by(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C, alone or inside (nested) exception groups (Trio wraps it)."""
    if isinstance(error, KeyboardInterrupt):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(interrupted_by(inner) for inner in error.exceptions)
    return False


if __name__ == "__main__":
    sys.exit(main())
