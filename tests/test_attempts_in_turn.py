"""``attempts_in_turn``: an operation's next attempt starts only once its last one settled, and not
before its retry time (docs/INVARIANTS.md); a retry before its time is the reference's F8
(docs/FINDINGS.md).

Held on the reference in a world whose passes find rows due while their
executions wait for the pool's one permit, every call failing (so each
operation retries), and in one whose client is evicted during an attempt;
failing there on an engine that registers executions where ``#execute``
never looks, so a due row waiting for a permit is started twice.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import semaphore_core.durability.operations as operations_module
from semaphore_core.durability import AttemptSettled, AttemptStarted, OperationEntity
from semaphore_core.fixes import RETRIES_WAIT_THEIR_TIME
from semsim.check.attempts_in_turn import AttemptsInTurn
from semsim.check.events import Operation
from semsim.harness.run import WorldRun, run_world
from semsim.scenarios import SCENARIOS
from semsim.scenarios.operations import one_job
from semsim.world.faults import FaultPlan

ENTITY = OperationEntity(operation="run", id="item-1", generation="gen-1")


def _crowded_pool(fixes: tuple[str, ...] = ()) -> WorldRun:
    """Four jobs at once through a pool of one permit, every call failing until 100 s."""
    config = one_job(2_000, idempotent=True, limit=4, count=4)
    assert config.operations is not None
    config = attrs.evolve(
        config,
        holder=attrs.evolve(config.holder, fixes=fixes),
        operations=attrs.evolve(config.operations, alarm_concurrency=1),
    )
    return run_world(config, FaultPlan(api_error=1.0, faults_until_ms=100_000), seed=1)


def test_the_reference_holds_with_retries_and_an_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    judge = AttemptsInTurn.on_operation

    def seeing(self: AttemptsInTurn, operation: Operation) -> None:
        if isinstance(operation.event, AttemptStarted):
            started.append(operation.event.attempt)
        judge(self, operation)

    monkeypatch.setattr(AttemptsInTurn, "on_operation", seeing)
    assert _crowded_pool().result.outcome == "completed"
    assert max(started) >= 3, started  # retries, each after the last settled
    scenario = SCENARIOS["eviction-mid-attempt"]
    run = run_world(scenario.config, scenario.faults, scenario.seed, tolerated=scenario.tolerated)
    assert run.result.outcome == "completed", run.result


@pytest.mark.parametrize("fixes", [(), (RETRIES_WAIT_THEIR_TIME,)])
def test_a_row_started_twice_while_it_waits_for_a_permit_is_caught(
    monkeypatch: pytest.MonkeyPatch, fixes: tuple[str, ...]
) -> None:
    real = operations_module.Durability._spec

    def unregistered(self: Any, call: Any) -> Any:
        """Executions registered in a map of their own, where ``#execute`` never finds them."""
        return attrs.evolve(real(self, call), active={})

    monkeypatch.setattr(operations_module.Durability, "_spec", unregistered)
    run = _crowded_pool(fixes)
    assert run.result.invariant == "attempts_in_turn", run.result


def _event(t_ms: int, event: Any) -> Operation:
    return Operation(t_ms, "client-0", event)


def test_the_rule() -> None:
    failed: list[tuple[str, str | None]] = []
    instance = [1]
    check = AttemptsInTurn(
        lambda name, detail, finding=None, **state: failed.append((detail, finding)), lambda _: instance[0]
    )
    retry = AttemptSettled(ENTITY, 10, 1, 10, "retry_scheduled", next_attempt_at=100)
    check.on_operation(_event(0, AttemptStarted(ENTITY, 0, 1)))
    check.on_operation(_event(10, retry))
    check.on_operation(_event(100, AttemptStarted(ENTITY, 100, 2)))
    assert failed == []
    check.on_operation(_event(120, AttemptStarted(ENTITY, 120, 3)))  # attempt 2 never settled
    instance[0] = 2  # a new instance: attempt 3's never settles, and 4 may start
    check.on_operation(_event(130, AttemptStarted(ENTITY, 130, 4)))
    check.on_operation(_event(140, attrs.evolve(retry, attempt=4, next_attempt_at=200)))
    check.on_operation(_event(150, AttemptStarted(ENTITY, 150, 5)))  # before its retry time: F8
    assert failed == [
        (
            "client-0: operation item-1 started attempt 3 at 120 while its attempt 2 had not settled,"
            " in the same instance",
            None,
        ),
        ("client-0: operation item-1 started attempt 5 at 150, before its retry time 200", "F8"),
    ]
