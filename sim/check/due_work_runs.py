"""``due_work_runs``: an alarm pass hands every due row it read to an attempt before its work ends.

Seed 002's ``#runDue`` (lines 594-621) reads the table's due rows (the
first 100, earliest first) and runs them through ``runConcurrent`` (lines
1484-1504): ``min(alarmConcurrency, n)`` lanes, each taking the next row
until none is left, so every row read is handed to ``#execute`` before
``runDue`` resolves. A lane that stops early leaves due rows for a later
pass, after the slowest of the first: work delayed while a permit may be
free, which no check of the pool, the timers or the lifecycle sees.

Judged from what each engine step records (``Step.due_runs``: each table's
``runDue`` that ran its ``runConcurrent`` to its end, with the rows it read
and the rows it handed on, counted by ``#runDue``'s own worker apart from
``runConcurrent``). A ``runConcurrent`` that rejects is not judged: the pass
failed, and ``alarm_follows_work`` and the platform's retry speak for it
(docs/INVARIANTS.md).
"""

from __future__ import annotations

from semaphore_core.durability import Step
from semsim.check.checker import Checker, Fail


class DueWorkRuns(Checker):
    name = "due_work_runs"
    description = "an alarm pass hands every due row it read to an attempt before its work ends"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_step(self, object: str, step: Step) -> None:
        for run in step.due_runs:
            if run.handed != run.listed:
                self.fail(
                    self.name,
                    f"{object}: a pass's due work on {run.table} ended at {run.now_ms} having handed"
                    f" {run.handed} of the {run.listed} due rows it read to #execute",
                )
