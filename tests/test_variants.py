"""A holder variant is a subclass, not a monkeypatch, and its judges are chosen explicitly.

The variant here over-admits: its rounds allocate as if the limit were one
higher. Judged with the literal model or by the invariants alone, it stops
at the ceiling it breaks; with a model of its own that makes the same
change, the model agrees and the ceiling still breaks. A variant whose
change no invariant can see (usage() reports one permit fewer) passes when
judged by the invariants alone and fails against the literal model: which
judges ran is the verdict's to say, and the run and its trace say it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from semaphore_core import Holder, HolderConfig
from semaphore_core.holder import RoundOutcome
from semaphore_core.policy import resolve_limit
from semaphore_core.usage import Usage
from semsim.check.literal_holder import LiteralHolder
from semsim.harness.run import HolderSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.variant import REFERENCE, Variant
from semsim.world.workload import Workload

#: Busy enough that grant room is the limit: a room one larger over-admits at once.
CONFIG = WorldConfig(
    holder=HolderSpec(limit=3),
    workload=Workload(clients=3, items_per_minute=40, until_ms=60_000),
    duration_ms=90_000,
)


class OverAdmittingHolder(Holder):
    """Allocates each round as if the limit were one higher: it grants a permit past the limit."""

    def round(self, requests: Sequence[Any], now: int) -> RoundOutcome:
        honest = self.config
        self.config = attrs.evolve(honest, limit=resolve_limit(honest) + 1)
        try:
            return super().round(requests, now)
        finally:
            self.config = honest


class OverAdmittingModel(LiteralHolder):
    """The literal model with the same change."""

    def round(self, messages: Sequence[object], now: int) -> tuple[list[Any], list[Any]]:
        honest = self._limit
        limit = self._resolve_limit()
        self._limit = lambda: limit + 1
        try:
            return super().round(messages, now)
        finally:
            self._limit = honest


class ReserveShowingHolder(Holder):
    """Reports one permit fewer available than the room it grants from: an operator's reserve."""

    def usage(self, now: int) -> Usage:
        usage = super().usage(now)
        return attrs.evolve(usage, available=max(0, usage.available - 1))


def _violation(variant: Variant, seed: int = 1) -> str | None:
    run = run_world(CONFIG, FaultPlan(), seed, variant=variant)
    assert run.variant is variant
    return run.result.invariant


def test_the_reference_holds_in_this_world() -> None:
    assert _violation(REFERENCE) is None


def test_over_admitting_judged_with_the_literal_model_stops_at_the_first_judge_to_see_it() -> None:
    # The commit's ceiling check sees it before the model compares the round's replies.
    assert _violation(Variant("over-admitting", holder=OverAdmittingHolder)) == "ceiling"


def test_judged_by_the_invariants_alone_it_stops_at_the_ceiling_it_breaks() -> None:
    assert _violation(Variant("over-admitting", holder=OverAdmittingHolder, model=None)) == "ceiling"


def test_a_model_of_its_own_agrees_with_it_and_the_invariants_still_judge() -> None:
    variant = Variant("over-admitting", holder=OverAdmittingHolder, model=OverAdmittingModel)
    assert _violation(variant) == "ceiling"
    assert (
        variant.judges()[0]
        == "exact_accounting against its own model (tests.test_variants.OverAdmittingModel)"
    )


def test_a_change_no_invariant_sees_passes_on_the_invariants_alone_and_the_verdict_says_so() -> None:
    literal = Variant("reserve-showing", holder=ReserveShowingHolder)
    alone = Variant("reserve-showing", holder=ReserveShowingHolder, model=None)
    assert _violation(literal) == "exact_accounting"
    run = run_world(CONFIG, FaultPlan(), 1, variant=alone)
    assert run.result.outcome == "completed"
    assert run.trace.header["variant"] == {"name": "reserve-showing", "judges": ["safety", "liveness"]}
    assert "variant" not in run_world(CONFIG, FaultPlan(), 1).trace.header


def test_a_factory_that_builds_no_holder_is_refused_naming_the_variant() -> None:
    def not_a_holder(conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> Any:
        return object()

    # A crash inside the world comes out of its nursery, as every crash of a run does.
    with pytest.raises(ExceptionGroup) as caught:
        run_world(CONFIG, FaultPlan(), 1, variant=Variant("broken", holder=not_a_holder))
    assert caught.group_contains(
        TypeError, match=r"variant 'broken' built a object, not a semaphore_core\.Holder"
    )


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"name": ""}, ValueError, "a non-empty string without spaces"),
        ({"name": "two words"}, ValueError, "a non-empty string without spaces"),
        ({"name": "v", "holder": 3}, TypeError, "builds a Holder"),
        ({"name": "v", "model": "exact"}, TypeError, "'literal', a model factory"),
    ],
)
def test_a_malformed_variant_is_refused_naming_the_field(
    arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        Variant(**arguments)


def test_run_world_refuses_what_is_not_a_variant() -> None:
    with pytest.raises(TypeError, match=r"variant must be a semsim\.world\.variant\.Variant"):
        run_world(CONFIG, FaultPlan(), 1, variant=OverAdmittingHolder)  # type: ignore[arg-type]
