"""Memos (``semaphore_core/durability/memos.py``), one test per behaviour; line numbers are seed 002's.

The seed shows where memos come from (``createMemoize``, lines 781-785) and
where they go (``deleteMemos`` with a terminal write, lines 1698-1704, 1762,
1802; ``deleteStaleMemos`` in a purge, line 1405). How they are stored is the
oracle stand-in's guess, which the differential holds the port to.
"""

from __future__ import annotations

import pytest

from semaphore_core.durability import Attempt, Memo, NonRetryableError, Step
from tests.durability_shell import Shell


def memos(shell: Shell) -> list[tuple[str, str, str, str, int]]:
    rows = shell.conn.execute(
        "SELECT record_key, generation_id, memo_key, value, attempt FROM durability_memos ORDER BY memo_key"
    ).fetchall()
    return [(str(k), str(g), str(m), str(v), int(a)) for k, g, m, v, a in rows]


def started(step: Step) -> Attempt:
    [attempt] = step.started
    return attempt


def test_a_retry_finds_what_an_earlier_attempt_memoized() -> None:
    """A memo outlives a retryable failure: the next attempt of the same generation reads it."""
    shell = Shell(delay=lambda attempt: 10)
    first = started(shell.register("a", now=0))
    memoize = shell.durability.memoize(first)
    assert memoize.lookup("upload") is None
    memoize.store("upload", {"url": "u"})
    shell.engine.fail(first, RuntimeError("flaky"), 5)

    second = started(shell.engine.advance(15))
    assert second.attempt == 2
    assert shell.durability.memoize(second).lookup("upload") == Memo(value={"url": "u"}, attempt=1)
    assert memos(shell) == [("a", "gen-1", "upload", '{"url":"u"}', 1)]


def test_a_completion_deletes_the_calls_memos_in_its_transaction() -> None:
    """Lines 1698-1704: ``deleteMemos`` in the completion's ``transactionSync``."""
    shell = Shell()
    attempt = started(shell.register("a", now=0))
    shell.durability.memoize(attempt).store("step", 1)
    shell.engine.complete(attempt, "done", 5)
    assert memos(shell) == []


def test_a_completion_whose_fence_failed_keeps_the_memos() -> None:
    """Only a completion that wrote deletes (``completedAt !== undefined``): a zombie of a purged
    generation that succeeds late leaves the new generation's memos, though both share the id."""
    shell = Shell(alarm_concurrency=2)
    zombie = started(shell.register("a", now=0))
    shell.durability.purge_before(1, 10)
    fresh = started(shell.register("a", now=20))
    shell.durability.memoize(fresh).store("step", 2)
    shell.engine.complete(zombie, "late", 30)
    assert [(m[1], m[2]) for m in memos(shell)] == [(fresh.generation, "step")]


@pytest.mark.parametrize("how", ["non-retryable", "exhausted"])
def test_a_terminal_failure_deletes_the_calls_memos(how: str) -> None:
    """Line 1802 (``settleFailure``, terminal) and line 1762 (``failExhausted``)."""
    shell = Shell(max_attempts=1)
    attempt = started(shell.register("a", now=0))
    shell.durability.memoize(attempt).store("step", 1)
    if how == "non-retryable":
        shell.engine.fail(attempt, NonRetryableError("bad"), 5)
    else:
        # The instance dies mid-attempt; the next one finds the row at maxAttempts and exhausts it.
        shell.evict()
        shell.alarm.set_alarm(15_000)
        assert shell.platform_alarm(15_000).started == ()
    assert shell.row("a").status == "failed"
    assert memos(shell) == []


def test_a_terminal_failure_whose_fence_failed_keeps_the_memos() -> None:
    """Line 1801 (``owned && decision.terminal``): a zombie of a purged generation failing for good
    leaves the new generation's memos."""
    shell = Shell(alarm_concurrency=2)
    zombie = started(shell.register("a", now=0))
    shell.durability.purge_before(1, 10)
    fresh = started(shell.register("a", now=20))
    shell.durability.memoize(fresh).store("step", 2)
    shell.engine.fail(zombie, NonRetryableError("late and bad"), 30)
    assert [(m[1], m[2]) for m in memos(shell)] == [(fresh.generation, "step")]


def test_a_claim_of_a_replaced_generation_keeps_the_new_ones_memos() -> None:
    """Line 1761 (``exhaustedAttempt !== undefined``): an execution that waited for a permit while
    its row was purged and registered again claims nothing and exhausts nothing; the new
    generation's memos stay."""
    shell = Shell(alarm_concurrency=1, live_timers=True)
    hold = started(shell.register("hold", now=0))  # the only permit, until its handler reports
    shell.register("a", now=10)  # no permit: pending, picked up by the alarm
    pass_step = shell.platform_alarm(15_000)
    assert pass_step.started == ()  # a's execution waits for the permit
    shell.durability.purge_before(11, 15_001)  # both rows go; hold's handler is aborted
    shell.register("a", now=15_002)  # generation 2, waiting for the permit too
    [fresh] = [row for row in shell.rows() if row.id == "a"]
    shell.durability.memoize(
        Attempt("durability_calls", "a", "run", fresh.generation_id, 1, None, 0, 1)
    ).store("step", 2)
    shell.engine.fail(hold, RuntimeError("aborted"), 15_003)  # the permit comes back
    assert [(m[1], m[2]) for m in memos(shell)] == [(fresh.generation_id, "step")]


def test_a_purge_deletes_the_memos_of_purged_rows_only() -> None:
    """Line 1405: ``deleteStaleMemos``: memos whose record is gone (or of another generation)."""
    shell = Shell(alarm_concurrency=2)
    old = started(shell.register("old", now=0))
    new = started(shell.register("new", now=100))
    shell.durability.memoize(old).store("step", 1)
    shell.durability.memoize(new).store("step", 2)
    shell.durability.purge_before(50, 200)
    assert [(m[0], m[2]) for m in memos(shell)] == [("new", "step")]


def test_a_purge_deletes_a_memo_of_another_generation_than_its_row() -> None:
    """``deleteStaleMemos``: a memo of the old generation beside a re-registered row is stale."""
    shell = Shell(alarm_concurrency=2)
    zombie = started(shell.register("a", now=0))
    shell.durability.purge_before(1, 10)
    shell.register("a", now=20)
    shell.durability.memoize(zombie).store("step", "stale")  # the zombie writes after all
    assert [m[1] for m in memos(shell)] == [zombie.generation]
    shell.durability.purge_before(5, 30)  # purges no row
    assert memos(shell) == []


def test_a_new_generation_does_not_see_the_old_ones_memo() -> None:
    """Memos belong to one generation: a zombie of a purged generation that writes one after the id
    was registered again does not hand it to the new generation."""
    shell = Shell(alarm_concurrency=2)
    zombie = started(shell.register("a", now=0))
    shell.durability.purge_before(1, 10)
    fresh = started(shell.register("a", now=20))
    assert fresh.generation != zombie.generation
    shell.durability.memoize(zombie).store("step", "stale")
    assert shell.durability.memoize(fresh).lookup("step") is None


def test_memoize_is_for_operation_attempts_and_string_keys() -> None:
    shell = Shell()
    attempt = started(shell.register("a", now=0))
    with pytest.raises(TypeError, match="memo keys are strings"):
        shell.durability.memoize(attempt).lookup(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not an attempt of durable operations"):
        shell.durability.memoize(Attempt("other_table", "a", "run", "g", 1, None, 0, 1))
