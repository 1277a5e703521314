"""A failed simulation as a test failure: what broke, the case file written, the replay command.

The case file is the one ``semsim fuzz`` writes (docs/WIRE.md, "Case
files"), so the command printed with the failure replays the very run the
test saw, with its trace, from a shell.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from semsim.explore.fuzz import RunReport, save_case
from semsim.explore.strategies import Case

#: The longest file name stem a failure's case is saved under (the test's name, shortened).
MAX_STEM_CHARS = 100


class SemsimFailure(AssertionError):
    """A run that broke an invariant or an expectation; ``str()`` says what, and how to replay it.

    An ``AssertionError``, so pytest reports it as a failed assertion, and
    ``pytest.raises(SemsimFailure)`` can expect one.
    """

    def __init__(self, lines: Sequence[str], case_path: Path | None, replay: str | None) -> None:
        super().__init__("\n".join(lines))
        self.case_path = case_path
        self.replay = replay


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to paste), quoted."""
    with suppress(ValueError):  # not below it: shown whole
        path = path.resolve().relative_to(Path.cwd().resolve())
    return shlex.quote(os.fspath(path))


def case_file(out_dir: Path, test_name: str, failure_name: str) -> Path:
    """Where a test's failing case goes: one file per test and failure, overwritten when it fails again."""
    stem = re.sub(r"[^\w.-]+", "_", f"{test_name}-{failure_name}").strip("_")[:MAX_STEM_CHARS]
    return out_dir / f"{stem}.json"


def failure(
    headline: Sequence[str],
    case: Case,
    tolerated: frozenset[str],
    report: RunReport | None,
    out_dir: Path,
    test_name: str,
    replay_hint: str | None = None,
) -> SemsimFailure:
    """Save ``case`` under ``out_dir`` and build the failure that names it and its replay command.

    ``report`` is what broke, recorded as the case's ``expect`` (None when only
    a scenario's expectations failed: its invariants held). ``replay_hint``
    replaces the ``semsim fuzz --replay`` command, for what a case cannot
    hold (a scenario's own expectations).
    """
    name = report.failure_name if report is not None else "expectations"
    path = case_file(out_dir, test_name, name)
    lines = list(headline)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        save_case(case, tolerated, path, report)
    except OSError as error:
        lines.append(f"(the case could not be saved to {path}: {error.strerror or error})")
        return SemsimFailure(lines, None, replay_hint)
    replay = (
        replay_hint or f"semsim fuzz --replay {_shown(path)} --trace {_shown(path.with_suffix('.jsonl'))}"
    )
    lines += [f"case: {_shown(path)} (seed {case.seed})", f"replay: {replay}"]
    return SemsimFailure(lines, path, replay)
