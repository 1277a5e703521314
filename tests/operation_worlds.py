"""Worlds that reach the durable operations' lifecycle promises, and the mutant that breaks each.

Shared by ``tests/test_operation_lifecycle.py`` (the invariants) and
``tests/test_mutant_catalog.py`` (each mutant changes what it claims).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from semaphore_core.durability.storage import DurableTable
from semsim.harness.run import WorldConfig, WorldRun, run_world
from semsim.scenarios import SCENARIOS
from semsim.scenarios.operations import CLIENT, one_job
from semsim.world.faults import Eviction, FaultPlan


def handoff_world() -> WorldConfig:
    """A 30 s call run by alarm passes that hand off after 5 s (the drawn worlds' short hand-off)."""
    config = one_job(30_000, idempotent=True)
    assert config.operations is not None
    return attrs.evolve(config, operations=attrs.evolve(config.operations, alarm_handoff_ms=5_000))


def repeating(config: WorldConfig) -> WorldConfig:
    """``config`` with each admission registered again, keys reversed (as drawn worlds are)."""
    assert config.operations is not None
    return attrs.evolve(config, operations=attrs.evolve(config.operations, repeat_registration=True))


def every_attempt_fails() -> tuple[WorldConfig, FaultPlan]:
    return one_job(5_000, idempotent=True), FaultPlan(api_error=1.0, faults_until_ms=100_000)


def evicted_at(t_ms: int) -> FaultPlan:
    return FaultPlan(evictions=(Eviction(target=CLIENT, at_ms=t_ms),))


def run_story(story: str) -> WorldRun:
    found = SCENARIOS[story]
    return run_world(found.config, found.faults, found.seed, tolerated=found.tolerated)


#: Per mutant: the world that reaches the promise it breaks, and the invariant that says so.
WORLDS: dict[str, tuple[Callable[[], WorldRun], str]] = {
    "retry-after-last-attempt": (lambda: run_world(*every_attempt_fails(), seed=1), "retry_before_last"),
    "claim-one-attempt-too-many": (lambda: run_story("last-attempt-evicted-terminal"), "attempts_bounded"),
    "handoff-arms-no-alarm": (
        lambda: run_world(handoff_world(), evicted_at(40_000), seed=1),
        "handoff_alarm",
    ),
    "payload-compared-as-text": (
        lambda: run_world(repeating(one_job(5_000, idempotent=True)), FaultPlan(), seed=1),
        "registration_idempotent",
    ),
    "idempotency-key-per-attempt": (
        lambda: run_world(one_job(10_000, idempotent=True), evicted_at(5_000), seed=1),
        "effect_once",
    ),
}


def heads_by_creation(conn: Any, table: DurableTable, limit: int) -> list[tuple[str, int]]:
    """``pendingTimes``' query ordered by creation, not due time: the oldest pending row's time
    (a planted bug: every other list of rows in the reference is read in creation order)."""
    rows = conn.execute(
        f"SELECT {table.key} AS pk, next_attempt_at FROM {table.name}"
        " WHERE status = 'pending' ORDER BY created_at ASC LIMIT ?",
        (limit,),
    ).fetchall()
    return [(str(pk), int(at)) for pk, at in rows]
