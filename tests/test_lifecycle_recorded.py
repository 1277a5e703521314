"""``lifecycle_recorded``: retries due as the policy says, rows as their events say, ends emitted."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
from semaphore_core.durability import AttemptSettled, AttemptStarted, OperationEntity, Registered, Terminal
from semaphore_core.durability.calls import insert_call, migrate_calls
from semaphore_core.durability.errors import SerializedError
from semaphore_core.durability.policy import ExponentialBackoff
from semsim.check.attempts_in_turn import AttemptsInTurn
from semsim.check.events import Operation
from semsim.check.lifecycle_recorded import LifecycleRecorded, js_round
from semsim.harness.run import run_world
from semsim.scenarios import SCENARIOS
from semsim.scenarios.operations import one_job
from semsim.world.faults import FaultPlan
from semsim.world.operations import OperationsSpec

ENTITY = OperationEntity(operation="run", id="item-1", generation="gen-1")
ERROR = SerializedError(name="Error", message="boom")


class Found:
    def __init__(self) -> None:
        self.details: list[str] = []

    def fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        assert name == "lifecycle_recorded", name
        self.details.append(detail)


def _client(status: str = "pending", attempt: int = 1, next_attempt_at: int = 0) -> Any:
    conn = sqlite3.connect(":memory:")
    migrate_calls(conn)
    conn.execute(
        "INSERT INTO durability_calls (id, operation, payload, status, attempt, next_attempt_at, created_at, "
        "generation_id) VALUES ('item-1', 'run', '{}', ?, ?, ?, 0, 'gen-1')",
        (status, attempt, next_attempt_at),
    )
    return SimpleNamespace(storage=conn)


def _retry(attempt: int, at: int, next_at: int) -> Operation:
    event = AttemptSettled(
        entity=ENTITY,
        timestamp=at,
        attempt=attempt,
        duration_ms=10,
        outcome="retry_scheduled",
        error=ERROR,
        next_attempt_at=next_at,
    )
    return Operation(at, "client-0", event)


def _started(*attempts: int, generation: str = "gen-1") -> list[Operation]:
    entity = attrs.evolve(ENTITY, generation=generation)
    return [Operation(0, "client-0", AttemptStarted(entity=entity, timestamp=0, attempt=n)) for n in attempts]


def _judge(client: Any, *operations: Operation, attempt_timeout_ms: int | None = None) -> list[str]:
    """``operations`` judged, then the run's end; where they start no attempt, the attempts the
    row counts are told started first, as the engine tells them."""
    found = Found()
    checker = LifecycleRecorded(found.fail, {"client-0": client}, ExponentialBackoff(), attempt_timeout_ms)
    if not any(isinstance(operation.event, AttemptStarted) for operation in operations):
        [(counted,)] = client.storage.execute("SELECT attempt FROM durability_calls").fetchall()
        began = {
            op.event.attempt: op.event.timestamp - op.event.duration_ms
            for op in operations
            if isinstance(op.event, AttemptSettled)
        }
        told = [
            Operation(0, "client-0", AttemptStarted(entity=ENTITY, timestamp=began.get(n, 0), attempt=n))
            for n in range(1, counted + 1)
        ]
        operations = (*told, *operations)
    for operation in operations:
        checker.on_operation(operation)
    checker.judge({"client-0": client})
    return found.details


def test_a_retry_due_when_the_policy_says_with_its_row_due_then_passes() -> None:
    assert _judge(_client(attempt=2, next_attempt_at=7_000), _retry(2, 5_000, 7_000)) == []


def test_a_retry_a_doubling_early_is_caught_on_the_event() -> None:
    # delay(attempt - 1): 1 s after the second attempt, where the policy says 2 s.
    [detail] = _judge(_client(attempt=2, next_attempt_at=6_000), _retry(2, 5_000, 6_000))
    assert "scheduled its retry at 6000, but the policy's delay(2) makes it 7000" in detail


def test_a_row_left_due_at_an_earlier_time_is_caught() -> None:
    [detail] = _judge(_client(attempt=2, next_attempt_at=3_000), _retry(2, 5_000, 7_000))
    assert "scheduled its retry at 7000, but its row is due at 3000" in detail


def test_a_row_that_moved_on_is_not_held_to_an_older_event() -> None:
    # Claimed again (attempt 3) by the time the event is heard: its due time is the claim's.
    assert _judge(_client(attempt=3, next_attempt_at=3_000), _retry(2, 5_000, 7_000)) == []


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_row_that_ended_with_no_event_is_caught_once_settled(status: str) -> None:
    [detail] = _judge(_client(status=status, attempt=3))
    assert f"1 operations ended with no event telling of it: client-0/item-1 ({status})" in detail


def test_a_row_whose_events_tell_another_end_is_caught() -> None:
    settled = AttemptSettled(
        entity=ENTITY, timestamp=9_000, attempt=1, duration_ms=5, outcome="failed", error=ERROR
    )
    [detail] = _judge(_client(status="completed"), Operation(9_000, "client-0", settled))
    assert "client-0/item-1 (completed, though its events said failed)" in detail


def test_a_row_whose_end_was_emitted_passes() -> None:
    terminal = Terminal(entity=ENTITY, timestamp=9_000, attempt=3, error=ERROR)
    assert _judge(_client(status="failed", attempt=3), Operation(9_000, "client-0", terminal)) == []
    settled = AttemptSettled(
        entity=ENTITY, timestamp=9_000, attempt=1, duration_ms=5, outcome="completed", error=None
    )
    assert _judge(_client(status="completed"), Operation(9_000, "client-0", settled)) == []


TIMEOUT = SerializedError(name="DurableAttemptTimeoutError", message="timed out")


def _attempt(
    started: int, settled: int, *, duration_ms: int | None = None, error: Any = None
) -> list[Operation]:
    start = AttemptStarted(entity=ENTITY, timestamp=started, attempt=1)
    end = AttemptSettled(
        entity=ENTITY,
        timestamp=settled,
        attempt=1,
        duration_ms=settled - started if duration_ms is None else duration_ms,
        outcome="failed" if error is not None else "completed",
        error=error,
    )
    return [Operation(started, "client-0", start), Operation(settled, "client-0", end)]


@pytest.mark.parametrize(
    ("settled", "duration_ms", "error"),
    [(1_500, None, None), (61_000, None, None), (61_000, None, TIMEOUT), (61_000, None, ERROR)],
)
def test_an_attempt_within_its_timeout_with_its_duration_passes(
    settled: int, duration_ms: int | None, error: Any
) -> None:
    status = "failed" if error is not None else "completed"
    operations = _attempt(1_000, settled, duration_ms=duration_ms, error=error)
    assert _judge(_client(status=status), *operations, attempt_timeout_ms=60_000) == []


def test_an_attempt_past_its_timeout_is_caught() -> None:
    [detail] = _judge(_client(status="completed"), *_attempt(1_000, 61_001), attempt_timeout_ms=60_000)
    assert "attempt 1 started at 1000 and settled completed at 61001, 60001 ms later" in detail


def test_a_timeout_before_attempt_timeout_ms_is_caught() -> None:
    operations = _attempt(1_000, 31_000, error=TIMEOUT)
    [detail] = _judge(_client(status="failed"), *operations, attempt_timeout_ms=60_000)
    assert "30000 ms later with the timeout's error (attemptTimeoutMs 60000" in detail


def test_a_duration_that_is_not_the_time_since_the_start_is_caught() -> None:
    operations = _attempt(1_000, 5_000, duration_ms=3_000)
    [detail] = _judge(_client(status="completed"), *operations)
    assert "started at 1000 and settled at 5000, but its durationMs is 3000" in detail


def test_math_round_halves_go_up() -> None:
    assert [js_round(x) for x in (0.5, 1.5, 2.5, -0.5, 2.4999)] == [1, 2, 3, 0, 2]


def test_the_worlds_policy_is_the_engines() -> None:
    delay = OperationsSpec().retry_delay()
    assert [delay(n) for n in (1, 2, 3, 7, 8)] == [1_000, 2_000, 4_000, 60_000, 60_000]


def _backoff_one_attempt_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    decide = engine_module.Engine._decide_retry

    def behind(self: Any, spec: Any, attempt: int, error: BaseException) -> Any:
        return decide(self, spec, attempt - 1, error) if attempt > 1 else decide(self, spec, attempt, error)

    monkeypatch.setattr(engine_module.Engine, "_decide_retry", behind)


def _run(name: str) -> Any:
    story = SCENARIOS[name]
    return run_world(story.config, story.faults, story.seed, tolerated=story.tolerated)


def test_a_world_whose_retries_come_early_stops_on_lifecycle_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _run(STORY).result.outcome == "completed"
    _backoff_one_attempt_behind(monkeypatch)
    run = _run(STORY)
    assert run.result.invariant == "lifecycle_recorded", run.result


STORY = "failed-last-attempt-returns-by-finished"  # a retried operations world


def test_a_world_whose_attempts_time_out_early_stops_on_lifecycle_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attempt's timer set a millisecond short of ``attemptTimeoutMs``."""
    config, faults = one_job(30_000, idempotent=True, attempt_timeout_ms=10_000), FaultPlan()
    reference = run_world(config, faults, seed=1)
    assert reference.result.outcome == "completed", reference.result
    assert any(
        e["type"] == "attempt_settled" and e.get("error", {}).get("name") == "DurableAttemptTimeoutError"
        for e in reference.trace.of_kind("operation")
    )
    original = engine_module.Engine._set_timeout

    def short(self: Any, delay_ms: int, kind: Any, *args: Any, **kwargs: Any) -> int:
        return original(self, delay_ms - 1 if kind == "attempt_timeout" else delay_ms, kind, *args, **kwargs)

    monkeypatch.setattr(engine_module.Engine, "_set_timeout", short)
    run = run_world(config, faults, seed=1)
    assert run.result.invariant == "lifecycle_recorded", run.result
    assert "with the timeout's error" in run.result.detail


def _registered(at: int, generation: str = "gen-1") -> Operation:
    return Operation(
        at, "client-0", Registered(entity=attrs.evolve(ENTITY, generation=generation), timestamp=at)
    )


def test_a_row_told_registered_twice_before_its_end_is_caught() -> None:
    [detail] = _judge(_client(), _registered(1_000), _registered(1_000))
    assert "item-1 (generation gen-1) was told registered again at 1000" in detail


def test_a_row_registered_again_after_its_end_or_as_another_generation_passes() -> None:
    completed = AttemptSettled(
        entity=ENTITY, timestamp=5_000, attempt=1, duration_ms=5, outcome="completed", error=None
    )
    ended = Operation(5_000, "client-0", completed)
    assert _judge(_client(status="completed"), _registered(1_000), ended, _registered(6_000)) == []
    assert _judge(_client(), _registered(1_000), _registered(2_000, generation="gen-2")) == []


def test_a_repeated_registration_told_as_a_new_row_stops_the_world_on_lifecycle_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every job registered twice (the second time with its keys reversed, as drawn worlds do);
    planted: the insert is taken as having made a row though the row was there."""
    config = one_job(5_000, count=2, limit=2)
    assert config.operations is not None
    config = attrs.evolve(config, operations=attrs.evolve(config.operations, repeat_registration=True))
    reference = run_world(config, FaultPlan(), seed=1)
    assert reference.result.outcome == "completed", reference.result
    registered = [e for e in reference.trace.of_kind("operation") if e["type"] == "registered"]
    assert len(registered) == 2, registered  # one per job, though each was registered twice

    def always_new(*args: Any, **kwargs: Any) -> bool:
        insert_call(*args, **kwargs)
        return True

    monkeypatch.setattr("semaphore_core.durability.operations.insert_call", always_new)
    run = run_world(config, FaultPlan(), seed=1)
    assert run.result.invariant == "lifecycle_recorded", run.result
    assert "was told registered again" in run.result.detail


def test_attempts_told_one_after_another_pass() -> None:
    assert _judge(_client(attempt=3), *_started(1, 2, 3)) == []
    # Another generation counts from 1 again.
    assert _judge(_client(attempt=2), *_started(1, 2), *_started(1, generation="gen-2")) == []


def test_an_attempt_counted_and_never_told_is_caught_when_the_next_is_told() -> None:
    [detail] = _judge(_client(attempt=3), *_started(1, 3))
    assert "operation item-1 started attempt 3 at 0, but the last attempt told started was 1" in detail


def test_exhaustion_after_an_attempt_never_told_is_caught() -> None:
    terminal = Terminal(entity=ENTITY, timestamp=9_000, attempt=3, error=ERROR)
    on_the_event, once_settled = _judge(
        _client(status="failed", attempt=3), *_started(1, 2), Operation(9_000, "client-0", terminal)
    )
    assert "was declared exhausted after 3 at 9000, but the last attempt told started was 2" in on_the_event
    assert "client-0/item-1 (attempt 3, told 2)" in once_settled


def test_a_row_counting_an_attempt_never_told_is_caught_once_settled() -> None:
    [detail] = _judge(_client(attempt=2), *_started(1))
    assert "1 operations counted attempts never told started: client-0/item-1 (attempt 2, told 1)" in detail


def test_a_world_whose_engine_counts_an_attempt_it_never_starts_stops_on_lifecycle_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: every claim counts one attempt more than the one it starts (what a claim made before
    a wait its instance dies in leaves behind)."""
    config, faults = one_job(5_000), FaultPlan()
    assert run_world(config, faults, seed=1).result.outcome == "completed"
    from semaphore_core.durability.storage import claim_attempt as real

    def counts_two(*args: Any) -> int | None:
        attempt = real(*args)
        real(*args)
        return attempt

    monkeypatch.setattr(engine_module, "claim_attempt", counts_two)
    # The attempt counted twice fences out the first one's settlement, so the next attempt
    # starts with the first never settled: ``attempts_in_turn`` sees that first.
    run = run_world(config, faults, seed=1)
    assert run.result.invariant == "attempts_in_turn", run.result
    assert "while its attempt 1 had not settled" in run.result.detail
    monkeypatch.setattr(AttemptsInTurn, "on_operation", lambda self, operation: None)
    run = run_world(config, faults, seed=1)
    assert run.result.invariant == "lifecycle_recorded", run.result
    assert "never told" in run.result.detail
