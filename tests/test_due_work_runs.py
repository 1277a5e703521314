"""``due_work_runs``: an alarm pass hands every due row it read to an attempt before its work ends
(docs/INVARIANTS.md).

Held on the reference in a world whose passes read more due rows than the
pool has permits (so its lanes each take several), and failing there on a
``runConcurrent`` whose lanes take one row each, on a ``#runDue`` that reads
only the first due row, and on one that reads the latest first.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
import semaphore_core.durability.operations as operations_module
from semaphore_core.durability import DueRun, Step
from semaphore_core.durability.microtasks import JsPromise, js_async
from semsim.check.due_work_runs import DueWorkRuns
from semsim.harness.run import WorldRun, run_world
from semsim.runtime.pending_rows import DueRead
from semsim.scenarios.operations import one_job
from semsim.world.faults import FaultPlan


def _crowded_pool() -> WorldRun:
    """Four jobs at once through a pool of one permit, every call failing: passes find several
    rows due (the registrations waiting, then retries falling due together)."""
    config = one_job(2_000, idempotent=True, limit=4, count=4)
    assert config.operations is not None
    config = attrs.evolve(config, operations=attrs.evolve(config.operations, alarm_concurrency=1))
    return run_world(config, FaultPlan(api_error=1.0, faults_until_ms=100_000), seed=1)


async def _one_row_per_lane(self: engine_module.Engine, items: Any, worker: Any) -> None:
    """``runConcurrent`` with ``if`` for ``while``: each lane takes one row and stops."""
    count = min(self.options.alarm_concurrency, len(items))
    await JsPromise.all(self.tasks, [worker(items[index]) for index in range(count)])


def _due_ids(query: str) -> Any:
    """``calls.due_ids`` with another query (the pass's ``now_ms`` bound to its one ``?``)."""

    def due_ids(conn: sqlite3.Connection, now_ms: int) -> list[str]:
        return [str(id) for (id,) in conn.execute(query, (now_ms,))]

    return due_ids


def test_the_reference_holds_and_its_passes_read_more_rows_than_lanes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[DueRun] = []
    reads: list[DueRead] = []
    judge, judge_reads = DueWorkRuns.on_step, DueWorkRuns.on_due_reads

    def counting(self: DueWorkRuns, object: str, step: Step) -> None:
        runs.extend(step.due_runs)
        judge(self, object, step)

    def reading(self: DueWorkRuns, object: str, due_reads: Any) -> None:
        reads.extend(due_reads)
        judge_reads(self, object, due_reads)

    monkeypatch.setattr(DueWorkRuns, "on_step", counting)
    monkeypatch.setattr(DueWorkRuns, "on_due_reads", reading)
    run = _crowded_pool()
    assert run.result.outcome == "completed", run.result
    assert any(due.listed > 1 for due in runs), runs
    # Every pass's read was judged, and some read several rows due at different times.
    assert len(reads) >= len(runs) > 0
    assert any(len({at for at, _ in read.due}) > 1 for read in reads), reads


@pytest.mark.parametrize(
    ("order_and_limit", "caught"),
    [
        ("ASC LIMIT 1", "read 1 rows as due where"),  # the pending head's query, filtered by time
        ("DESC LIMIT 100", "out of next_attempt_at order"),  # the latest first
    ],
)
def test_a_pass_that_misreads_its_due_rows_is_caught(
    monkeypatch: pytest.MonkeyPatch, order_and_limit: str, caught: str
) -> None:
    misread = _due_ids(
        "SELECT id FROM durability_calls WHERE status = 'pending' AND next_attempt_at <= ?"
        f" ORDER BY next_attempt_at {order_and_limit}"
    )
    monkeypatch.setattr(operations_module, "due_ids", misread)
    run = _crowded_pool()
    assert run.result.invariant == "due_work_runs", run.result
    assert caught in run.result.detail


def test_lanes_that_take_one_row_each_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module.Engine, "run_concurrent", js_async(_one_row_per_lane))
    run = _crowded_pool()
    assert run.result.invariant == "due_work_runs", run.result
    assert "having handed 1 of the" in run.result.detail


def test_the_rule() -> None:
    failed: list[str] = []
    check = DueWorkRuns(lambda name, detail, *args, **kwargs: failed.append(detail))
    check.on_step("client-0", Step(now_ms=5, due_runs=(DueRun(5, "durability_calls", 3, 3),)))
    check.on_step("client-0", Step(now_ms=5, due_runs=(DueRun(5, "durability_calls", 0, 0),)))
    assert failed == []
    check.on_step("client-0", Step(now_ms=9, due_runs=(DueRun(9, "durability_calls", 3, 1),)))
    assert failed == [
        "client-0: a pass's due work on durability_calls ended at 9 having handed 1 of the 3 due rows"
        " it read to #execute"
    ]


def test_the_rule_of_the_read() -> None:
    failed: list[str] = []
    check = DueWorkRuns(lambda name, detail, *args, **kwargs: failed.append(detail))
    due = ((3, "b"), (4, "a"))
    check.on_due_reads("client-0", [DueRead(5, "t", ("b", "a"), due), DueRead(5, "t", (), ())])
    assert failed == []
    check.on_due_reads("client-0", [DueRead(5, "t", ("b",), due)])
    check.on_due_reads("client-0", [DueRead(5, "t", ("a", "b"), due)])
    check.on_due_reads("client-0", [DueRead(5, "t", ("b", "a", "c"), due)])
    assert failed == [
        "client-0: a pass's #runDue on t at 5 read 1 rows as due where 2 were to be read (of 2 due);"
        " not read: ['a']",
        "client-0: a pass's #runDue on t at 5 read its due rows out of next_attempt_at order: [4, 3]",
        "client-0: a pass's #runDue on t at 5 read ['c'] as due, which were not pending and due then",
    ]


def test_at_the_batch_s_edge_rows_due_at_its_last_millisecond_are_interchangeable() -> None:
    failed: list[str] = []
    check = DueWorkRuns(lambda name, detail, *args, **kwargs: failed.append(detail))
    due = (*((1, f"r{i:03}") for i in range(99)), (2, "x"), (2, "y"))
    read = tuple(f"r{i:03}" for i in range(99))
    check.on_due_reads("client-0", [DueRead(5, "t", (*read, "y"), due), DueRead(5, "t", (*read, "x"), due)])
    assert failed == []
    check.on_due_reads("client-0", [DueRead(5, "t", (*read[1:], "x", "y"), due)])
    assert len(failed) == 1, failed
    assert "not read: ['r000']" in failed[0]
