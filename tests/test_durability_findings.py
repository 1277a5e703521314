"""Findings in durable operations (docs/FINDINGS.md, "Durable operations"): each fails on the
faithful reference and passes with its opt-in fix."""

from __future__ import annotations

import pytest

from semaphore_core.durability import ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION
from tests.durability_shell import Shell


def purge_and_reuse_while_the_old_handler_runs(fixes: frozenset[str]) -> Shell:
    """D1's shrunk case: liveTimers; purge a running call whose handler ignores the abort;
    register the same id again (it starts at once); then the old handler settles."""
    shell = Shell(live_timers=True, fixes=fixes)
    [old] = shell.register("a", now=0).started
    shell.engine.advance(0)
    shell.durability.purge_before(1, 10)
    [new] = shell.durability.register("run", "a", {"id": "a"}, 20).step.started
    assert new.generation != old.generation
    shell.engine.complete(old, "late", 30)
    return shell


def test_d1_reference_loops_on_a_zero_delay_timer() -> None:
    """scheduler.ts: ``settled.finally`` calls ``releaseActive`` unconditionally (seed 002, lines 1729-1733),
    although ``spec.active`` still holds the newer execution; ``pendingTimes`` (1255-1277) then offers the
    running row to the timer, the pass skips it (``#runDue``, 611-613), and the refresh re-arms at once."""
    shell = purge_and_reuse_while_the_old_handler_runs(frozenset())
    assert [t.kind for t in shell.engine.timers()][:1] == ["early_alarm"]
    with pytest.raises(RuntimeError, match="timer loop"):
        shell.engine.advance(30)


def test_d1_fixed_the_running_row_arms_no_timer() -> None:
    shell = purge_and_reuse_while_the_old_handler_runs(frozenset({ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION}))
    step = shell.engine.advance(30)
    assert len(step.passes_started) <= 1
    [new] = shell.engine.running()
    assert shell.engine.complete(new, "ok", 40).events[0].type == "attempt_settled"
    assert shell.row("a").status == "completed"
