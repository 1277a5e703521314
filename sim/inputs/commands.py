"""What every ``semsim`` command shares: exit statuses, ``UsageError``, output paths, the wall clock,
and what to do when the reader of standard output goes away.

The commands live with their concepts in several packages (``semsim.cli.scenario_commands``,
``semsim.report.plot``, ``semsim.report.replay``, ``semsim.explore.mutants``,
``semsim.cli.fuzz_command``); what they all need sits here, below every layer
that holds a command, so no package imports the CLI's dispatcher
(``semsim.cli.main``) to report a bad argument. Exit statuses are described in
docs/CLI.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from semsim.inputs.files import InputError, check_output_dir, check_output_file, is_stdio, same_file

EXIT_OK: Final = 0
EXIT_VIOLATION: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130
EXIT_BROKEN_PIPE: Final = 141


class UsageError(Exception):
    """A user's mistake (bad argument, unreadable or malformed file): exit 2, one line, no traceback."""


def wall_clock() -> float:
    """Wall-clock seconds, for progress lines and summaries only.

    The one place semsim reads real time: what it returns is printed, never
    fed to a run, so it cannot make two runs of a seed differ.
    """
    return time.perf_counter()


#: Formats matplotlib lists but writes only with outside programs (pgf needs LaTeX).
_NEEDS_OUTSIDE_PROGRAMS: Final = frozenset({"pgf"})


def image_formats() -> list[str]:
    """The file extensions matplotlib can write here on its own (``png``, ``svg``, ``pdf``, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(set(FigureCanvasBase.get_supported_filetypes()) - _NEEDS_OUTSIDE_PROGRAMS)


def output_file(path: Path, option: str, image: bool = False) -> Path:
    """``path`` if a file can be written there (with ``image``, in a format matplotlib writes).

    Checked before any work starts; the check leaves nothing behind.
    """
    formats = None
    if image:
        formats = image_formats()
    try:
        return check_output_file(path, option, formats)
    except InputError as error:
        raise UsageError(str(error)) from None


def plural(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``: a count and its noun, as a sentence needs them."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def distinct_files(inputs: Sequence[tuple[str, Path]], outputs: Sequence[tuple[str, Path]]) -> None:
    """Refuse outputs that would overwrite an input or each other, before any work starts.

    Each entry is ``(what, path)``, ``what`` as the message should name it
    (an option, or the argument's metavar). Writing a trace over the case
    file being replayed, or a plot over the trace just written, would lose
    the user's file without a word.
    """
    inputs = [(what, path) for what, path in inputs if not is_stdio(path)]
    outputs = [(option, path) for option, path in outputs if not is_stdio(path)]  # main() checks those
    for index, (option, path) in enumerate(outputs):
        for what, other in inputs:
            if same_file(path, other):
                raise UsageError(f"{option} {path} is {what}, which it would overwrite: choose another path")
        for other_option, other in outputs[:index]:
            if same_file(path, other):
                raise UsageError(
                    f"{other_option} and {option} both name {path}: one would overwrite the other; "
                    "choose two paths"
                )


def output_dir(path: Path, option: str) -> Path:
    """``path`` if a directory there can be made (if needed) and written in."""
    try:
        return check_output_dir(path, option)
    except InputError as error:
        raise UsageError(str(error)) from None


def run_printing(main: Callable[[], None]) -> None:
    """Run a script's ``main`` (the benchmarks'): a closed pipe (``| head``) ends it quietly
    with ``EXIT_BROKEN_PIPE``, as a semsim command ends."""
    try:
        main()
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at exit
    except BrokenPipeError:
        discard_stdout()
        sys.exit(EXIT_BROKEN_PIPE)


def discard_stdout() -> None:
    """The reader went away: send what is still buffered nowhere, so exiting prints no error.

    Python's documented way (the ``signal`` module's note on SIGPIPE).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a file descriptor (a test's capture): nothing is buffered at OS level


@contextlib.contextmanager
def json_result(enabled: bool) -> Iterator[dict[str, Any] | None]:
    """``--json``: the command's result as one JSON object on standard output, and nothing else.

    While the command runs, what it would print for a person goes to standard
    error instead (progress, the report), so a script reads standard output
    whole; the object is printed once the command has its verdict. A command
    that fails on bad input prints its one-line error and no object. Yields
    the dict to fill, or None without ``--json``.
    """
    if not enabled:
        yield None
        return
    result: dict[str, Any] = {}
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield result
    out.write(json.dumps(result, indent=1) + "\n")
