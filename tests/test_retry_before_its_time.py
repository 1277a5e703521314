"""A candidate finding, pinned until it is written up: the reference can start an operation's
retry before the retry time its last failure named.

``#runDue`` reads a table's due rows once (seed 002, lines 594-621) and hands
them to ``runConcurrent``'s lanes, each of which awaits one row's execution
before it takes the next (lines 1484-1504). A lane can so reach a row it read
as due after that row's running attempt has failed and scheduled its retry:
``#execute`` (lines 705-740) checks only that the row is pending and not
active, and ``startExecution`` (lines 1628-1660) claims the next attempt
without looking at ``next_attempt_at``. The retry runs as soon as a permit
frees, ignoring its backoff.

``tests/fixtures/candidates/`` keeps the case a campaign shrank it to (seed 3
of the reference, with a check of attempts' spacing that is not shipped: it
fires on this, so it waits for the finding's write-up and opt-in fix). Not
yet confirmed against the TypeScript under Node; the port's runDue, lanes
and ``#execute`` match it in the durability differential.
"""

from __future__ import annotations

from pathlib import Path

from semsim.explore.fuzz import load_case
from semsim.harness.run import run_world

CASE = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "candidates"
    / "retry-before-its-time-after-a-stale-due-read.json"
)
ITEM = "Client-0/item-19"


def test_a_lane_that_reaches_a_stale_due_row_starts_its_retry_early() -> None:
    case, tolerated = load_case(CASE)
    run = run_world(case.config, case.faults, case.seed, tolerated=tolerated)
    assert run.result.outcome == "completed", run.result
    events = [e for e in run.trace.of_kind("operation") if e["id"] == ITEM]
    settled = [(e["t"], e.get("nextAttemptAt")) for e in events if e["type"] == "attempt_settled"]
    started = [(e["t"], e["attempt"]) for e in events if e["type"] == "attempt_started"]
    assert settled[0] == (31_734, 32_734)  # attempt 1 failed: the retry is due at 32.734 s
    assert started[:2] == [(31_513, 1), (31_797, 2)]  # attempt 2 started 937 ms before that
