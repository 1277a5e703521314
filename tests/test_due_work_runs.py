"""``due_work_runs``: an alarm pass hands every due row it read to an attempt before its work ends
(docs/INVARIANTS.md).

Held on the reference in a world whose passes read more due rows than the
pool has permits (so its lanes each take several), and failing there on a
``runConcurrent`` whose lanes take one row each.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
from semaphore_core.durability import DueRun, Step
from semaphore_core.durability.microtasks import JsPromise, js_async
from semsim.check.due_work_runs import DueWorkRuns
from semsim.harness.run import WorldRun, run_world
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


def test_the_reference_holds_and_its_passes_read_more_rows_than_lanes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[DueRun] = []
    judge = DueWorkRuns.on_step

    def counting(self: DueWorkRuns, object: str, step: Step) -> None:
        runs.extend(step.due_runs)
        judge(self, object, step)

    monkeypatch.setattr(DueWorkRuns, "on_step", counting)
    run = _crowded_pool()
    assert run.result.outcome == "completed", run.result
    assert any(due.listed > 1 for due in runs), runs


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
