"""How a long command shows that it is working, on standard error.

On a terminal, rich's live progress bar (what, a bar, how far, a note, the
time so far), rewritten in place. Anywhere else (CI, a pipe, a log file)
there is no place to rewrite, so plain lines, never a carriage return: one
each time the work passes another tenth, once the command has run for
:data:`QUIET_S` seconds, so a short command prints nothing and a long one
is never silent for minutes. Callers with their own cadence (a campaign
reports every few runs) print their lines through :meth:`Progress.say`.

rich rather than hand-drawn lines: it handles terminal widths, colours,
and a bar beside other output; it is imported only when a terminal shows
one.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, Final, TextIO

from semsim.inputs.commands import wall_clock

#: Plain progress lines start only after this long: short commands stay quiet in logs.
QUIET_S: Final = 5.0
#: Plain lines are printed as the work passes each of this many steps.
STEPS: Final = 10


class Progress:
    """Progress of one piece of work of ``total`` units (see the module docstring)."""

    def __init__(
        self,
        what: str,
        total: float,
        unit: str = "",
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        interactive: bool | None = None,
    ) -> None:
        assert total >= 0, total
        self.what = what
        self.total = total
        self.unit = unit
        self.quiet = quiet
        self.stream = sys.stderr if stream is None else stream
        self.interactive = (not quiet and self.stream.isatty()) if interactive is None else interactive
        self._started = wall_clock()
        self._step = 0
        self._bar: Any = None
        self._task: Any = None
        if self.interactive:
            from rich.console import Console
            from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                # What the command prints to standard output stays there (`> file` keeps it).
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task(what, total=total or None, note="")
            self._bar.start()

    def update(self, done: float, note: str = "") -> None:
        """``done`` units of ``total`` are done (``note``: a word on where, for the bar or the line)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=min(done, self.total), note=note)
            return
        step = int(STEPS * min(done, self.total) / self.total) if self.total else 0
        if step > self._step and wall_clock() - self._started >= QUIET_S:
            self._step = step
            unit = f" {self.unit}" if self.unit else ""
            shown = f"{done:,.0f}/{self.total:,.0f}{unit}"
            print(f"{self.what}: {shown} ({100 * step // STEPS}%){f', {note}' if note else ''}",
                  file=self.stream, flush=True)  # fmt: skip

    def say(self, line: str) -> None:
        """A line of the caller's own: the bar's note on a terminal, a plain line elsewhere."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, note=line)
            return
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """The work is over: the bar stops (its last state stays on the terminal)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
