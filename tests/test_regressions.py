"""Bugs the fuzzer found in semsim itself, each kept as the case that showed it.

Each file in ``tests/fixtures/regressions/`` is a saved case (``semsim fuzz
--replay`` reads it) that broke an invariant because of a bug in the
simulator or its checkers, not in the protocol (docs/FINDINGS.md, "Found
in semsim itself"). Each must now hold, and stay short enough to read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from semsim.explore.fuzz import case_length, load_case, run_case

REGRESSIONS = Path(__file__).resolve().parent / "fixtures" / "regressions"
MAX_STEPS = 15


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.json")), ids=lambda p: p.stem)
def test_a_case_that_exposed_a_semsim_bug_now_holds(path: Path) -> None:
    case, tolerated = load_case(path)
    assert case_length(case) <= MAX_STEPS
    report, _ = run_case(case, tolerated)
    assert report.outcome == "completed", report.detail
