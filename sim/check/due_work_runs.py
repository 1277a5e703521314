"""``due_work_runs``: an alarm pass reads every due row and hands each to an attempt before its work
ends.

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

And what it reads: every pending row due at its now (lines 601-603), earliest
first, the first 100 when more are due (line 604). A read of fewer rows, or
of rows not yet due, leaves due work to a later pass. Judged against the due
rows read apart from the engine at the moment ``#runDue`` reads
(``semsim.runtime.pending_rows.rows_due``, through the engine's
``due_observer``). Rows due at one millisecond are read in any order among
themselves, as SQLite's ``ORDER BY next_attempt_at`` leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from semaphore_core.durability import Step
from semsim.check.checker import Checker, Fail
from semsim.runtime.pending_rows import DueRead

#: Seed 002's ``LIMIT 100`` (line 604): at most this many due rows a pass. The checker's own
#: copy: a port whose batch constant is wrong must disagree with it.
REFERENCE_DUE_BATCH: Final = 100


class DueWorkRuns(Checker):
    name = "due_work_runs"
    description = "an alarm pass reads every due row and hands each to an attempt before its work ends"

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

    def on_due_reads(self, object: str, reads: Sequence[DueRead]) -> None:
        for read in reads:
            due_at = {id: at for at, id in read.due}
            taken = read.due[:REFERENCE_DUE_BATCH]
            # At the batch's edge, rows due at the same millisecond as its last are interchangeable.
            edge = taken[-1][0] if len(read.due) > REFERENCE_DUE_BATCH else None
            must = [id for at, id in taken if edge is None or at < edge]
            may = {id for at, id in read.due if at == edge}
            got = set(read.read)
            missing = [id for id in must if id not in got]
            extra = [id for id in read.read if id not in due_at]
            times = [due_at[id] for id in read.read if id in due_at]
            problem = None
            if extra:
                problem = f"read {extra[:5]} as due, which were not pending and due then"
            elif missing or len(read.read) != len(taken) or not got <= set(must) | may:
                problem = (
                    f"read {len(read.read)} rows as due where {len(taken)} were to be read"
                    f" (of {len(read.due)} due); not read: {missing[:5]}"
                )
            elif times != sorted(times):
                problem = f"read its due rows out of next_attempt_at order: {times[:10]}"
            if problem is not None:
                self.fail(self.name, f"{object}: a pass's #runDue on {read.table} at {read.now_ms} {problem}")
