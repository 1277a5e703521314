"""The ``semsim`` command line (CONTRACT section 3).

Exit status: 0 when every expectation held, 1 when one did not, 2 on bad
usage or bad input (a one-line message, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2


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
    return parser


def _demo(args: argparse.Namespace) -> int:
    from sim.demo import plot, print_timeline, run_demo

    plot_path: Path | None = args.plot
    if plot_path is not None and not plot_path.parent.exists():
        print(f"semsim: error: cannot write {plot_path}: no directory {plot_path.parent}", file=sys.stderr)
        return EXIT_USAGE
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
    if args.command == "demo":
        return _demo(args)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
