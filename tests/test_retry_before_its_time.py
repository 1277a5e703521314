"""F8 (docs/FINDINGS.md): the reference can start an operation's retry before the retry time its
last failure named, and ``retries-wait-their-time`` holds the retry to its time.

``#runDue`` reads a table's due rows once (seed 002, lines 594-621) and hands
them to ``runConcurrent``'s lanes, each of which awaits one row's execution
before it takes the next (lines 1484-1504). A lane can so reach a row it read
as due after that row's running attempt has failed and scheduled its retry:
``#execute`` (lines 705-740) checks only that the row is pending and not
active, and ``startExecution`` (lines 1628-1660) claims the next attempt
without looking at ``next_attempt_at``. ``tests/fixtures/findings/F8-*.json``
is the case a reference campaign (seed 3) shrank it to; ``tests/test_fuzz.py``
replays it for the verdicts, and this pins the story.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from semaphore_core.fixes import RETRIES_WAIT_THEIR_TIME
from semsim.explore.fuzz import load_case
from semsim.harness.run import run_world

CASE = Path(__file__).resolve().parent / "fixtures" / "findings" / "F8-retry-before-its-time.json"
ITEM = "Client-0/item-19"


def _attempts(fixes: tuple[str, ...]) -> tuple[list[tuple[int, int | None]], list[tuple[int, int]]]:
    """Item 19's settlements (time, retry time) and starts (time, attempt), F8 tolerated."""
    case, tolerated = load_case(CASE)
    config = attrs.evolve(case.config, holder=attrs.evolve(case.config.holder, fixes=fixes))
    run = run_world(config, case.faults, case.seed, tolerated=tolerated | {"F8"})
    assert run.result.outcome == "completed", run.result
    events = [e for e in run.trace.of_kind("operation") if e["id"] == ITEM]
    settled = [(e["t"], e.get("nextAttemptAt")) for e in events if e["type"] == "attempt_settled"]
    started = [(e["t"], e["attempt"]) for e in events if e["type"] == "attempt_started"]
    return settled, started


def test_a_lane_that_reaches_a_stale_due_row_starts_its_retry_early() -> None:
    settled, started = _attempts(())
    assert settled[0] == (31_734, 32_734)  # attempt 1 failed: the retry is due at 32.734 s
    assert started[:2] == [(31_513, 1), (31_797, 2)]  # attempt 2 started 937 ms before that


def test_with_the_fix_the_retry_waits_for_its_time() -> None:
    settled, started = _attempts((RETRIES_WAIT_THEIR_TIME,))
    assert settled[0] == (31_734, 32_734)
    assert started[0] == (31_513, 1)
    assert started[1][1] == 2
    assert started[1][0] >= 32_734, started
