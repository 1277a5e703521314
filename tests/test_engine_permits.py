"""``engine_permits``: the engine's permits out of its pool are the attempt handlers running
(docs/INVARIANTS.md).

Shown on the reference in a world whose jobs queue for one permit (so the
pool is empty while handlers run, and eager starts happen), failing on an
eager permit given back as it is handed over (too few out), and on a
permit that never comes back (too many).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import semaphore_core.durability.engine as engine_module
from semsim.check.engine_permits import EnginePermits
from semsim.harness.run import WorldRun, run_world
from semsim.runtime.scheduler import EngineReading
from semsim.scenarios.operations import one_job
from semsim.world.faults import FaultPlan


def _queued_jobs(alarm_concurrency: int) -> WorldRun:
    """Three 5 s jobs at once under an account limit of 3, on ``alarm_concurrency`` permits."""
    config = one_job(5_000, idempotent=True, limit=3, count=3)
    assert config.operations is not None
    operations = attrs.evolve(config.operations, alarm_concurrency=alarm_concurrency)
    return run_world(attrs.evolve(config, operations=operations), FaultPlan(), seed=1)


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> list[EngineReading]:
    """Every reading the check judged in the test's runs."""
    seen: list[EngineReading] = []
    judge = EnginePermits.on_reading

    def recording(self: EnginePermits, object: str, t_ms: int, reading: EngineReading) -> None:
        seen.append(reading)
        judge(self, object, t_ms, reading)

    monkeypatch.setattr(EnginePermits, "on_reading", recording)
    return seen


@pytest.mark.parametrize("alarm_concurrency", [1, 2, 10])
def test_the_reference_holds_and_is_judged(alarm_concurrency: int, readings: list[EngineReading]) -> None:
    run = _queued_jobs(alarm_concurrency)
    assert run.result.outcome == "completed", run.result
    running = max(reading.handlers_running for reading in readings)
    assert running == min(alarm_concurrency, 3)
    assert any(reading.permits_held >= min(alarm_concurrency, 3) for reading in readings)


def test_the_check_on_its_edge() -> None:
    failures: list[str] = []

    def fail(name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        failures.append(f"{name}: {detail}")

    check = EnginePermits(fail)
    options = engine_module.SchedulerOptions(alarm_concurrency=2)
    check.on_reading("client-0", 10, EngineReading(options, permits_held=2, handlers_running=2))
    check.on_reading("client-0", 10, EngineReading(options, permits_held=0, handlers_running=0))
    assert failures == []
    check.on_reading("client-0", 20, EngineReading(options, permits_held=1, handlers_running=2))
    check.on_reading("client-0", 30, EngineReading(options, permits_held=1, handlers_running=0))
    assert failures == [
        "engine_permits: client-0: at 20, 2 attempt handlers are running but the engine holds 1 of "
        "its 2 permits (alarmConcurrency): each running handler holds one until it settles",
        "engine_permits: client-0: at 30, the engine holds 1 of its 2 permits (alarmConcurrency) but "
        "only 0 attempt handlers are running: a permit out of the pool with no handler to give it back",
    ]


def test_an_eager_permit_returned_at_hand_over_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run``'s eager permit given back as ``startExecution`` takes it (a ``finally`` that forgets
    the permit was transferred): the execution's own release is then a no-op, and the pool has
    one permit too many while its handler runs."""
    original = engine_module.Engine.start_execution

    def planted(self: engine_module.Engine, spec: Any, eager_permit: Any = None) -> Any:
        execution = original(self, spec, eager_permit)
        if eager_permit is not None:
            eager_permit()
        return execution

    monkeypatch.setattr(engine_module.Engine, "start_execution", planted)
    run = _queued_jobs(1)
    assert run.result.invariant == "engine_permits", run.result
    assert "1 attempt handlers are running but the engine holds 0 of its 1 permits" in run.result.detail


def test_a_permit_that_never_comes_back_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the first permit given back is dropped (a release that forgets the pool), so the
    pool is a permit short for good; the step after its handler settled shows it."""
    original = engine_module.Engine._give_back
    dropped: list[bool] = []

    def planted(self: engine_module.Engine) -> None:
        if not dropped:
            dropped.append(True)
            return
        original(self)

    monkeypatch.setattr(engine_module.Engine, "_give_back", planted)
    run = _queued_jobs(2)
    assert dropped
    assert run.result.invariant == "engine_permits", run.result
    assert "holds 2 of its 2 permits (alarmConcurrency) but only 1 attempt handlers" in run.result.detail
