"""F5's fix's durable log (``semsim.world.call_log``): when an operation's last call may still run."""

from __future__ import annotations

import sqlite3

import pytest

from semsim.world.call_log import CallLog


def log() -> CallLog:
    return CallLog(sqlite3.connect(":memory:", isolation_level=None))


def test_a_sent_call_may_run_until_its_deadline_and_not_after() -> None:
    calls = log()
    assert calls.running_until("op", 0) is None
    calls.sent("op", deadline_at=100, now_ms=0)
    assert calls.running_until("op", 0) == 100
    assert calls.running_until("op", 100) == 100  # the API may still end it at 100
    assert calls.running_until("op", 101) is None
    assert calls.running_until("other", 0) is None


def test_an_answered_call_is_over_but_an_older_calls_answer_changes_nothing() -> None:
    calls = log()
    calls.sent("op", deadline_at=100, now_ms=0)
    calls.answered("op", deadline_at=100)
    assert calls.running_until("op", 1) is None
    calls.sent("op", deadline_at=300, now_ms=200)
    calls.answered("op", deadline_at=100)  # a stale handler's late answer
    assert calls.running_until("op", 200) == 300


def test_a_second_call_while_the_first_may_run_is_a_bug_caught_at_once() -> None:
    calls = log()
    calls.sent("op", deadline_at=100, now_ms=0)
    with pytest.raises(AssertionError, match="may still run"):
        calls.sent("op", deadline_at=200, now_ms=50)


def test_the_log_survives_the_instance_and_forgets_a_released_operation() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    CallLog(conn).sent("op", deadline_at=100, now_ms=0)
    rebuilt = CallLog(conn)  # an evicted object's next instance, on the same storage
    assert rebuilt.running_until("op", 10) == 100
    rebuilt.forget("op")
    assert rebuilt.running_until("op", 10) is None
    assert conn.execute("SELECT COUNT(*) FROM semsim_api_calls").fetchone() == (0,)


def test_the_unanswered_calls_are_listed_with_their_deadlines_by_operation() -> None:
    calls = log()
    calls.sent("b", deadline_at=200, now_ms=0)
    calls.sent("a", deadline_at=100, now_ms=0)
    calls.sent("c", deadline_at=300, now_ms=0)
    calls.answered("c", deadline_at=300)
    assert calls.unanswered() == [("a", 100), ("b", 200)]
