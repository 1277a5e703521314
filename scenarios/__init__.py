"""Named failure scenarios: the reference's documented stories, each run and checked.

``SCENARIOS`` maps each name to a :class:`Scenario` (a world, a fault plan,
a seed, and a check of the documented outcome). The order is deliberate,
the order a reader meets the stories in: what eviction loses, the life of
a grant, limits, the alarm, leases, the provisioning modes, reports, the
callbacks and durable operations, then what each design trades (the gate,
the leased worker and the semaphore, measured alike).
``semsim list`` prints them in that order; ``semsim run NAME`` runs one
through :func:`run_scenario`.

Each topic module holds one concept; each scenario is a function whose
docstring quotes what the reference promises and where (seed 001 is the
DurabilitySemaphore docs and failure walkthrough, seed 002 the alarm
engine), then says how the story provokes it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

import attrs

from semsim.scenarios import (
    alarms,
    callbacks,
    designs,
    eviction,
    grants,
    leases,
    limits,
    modes,
    operations,
    reports,
)
from semsim.scenarios.base import Check, Expect, Outcome, Scenario, ScenarioResult, run_scenario

__all__ = [
    "SCENARIOS",
    "Check",
    "Expect",
    "Outcome",
    "Scenario",
    "ScenarioResult",
    "run_scenario",
]


def _registry(builders: Iterable[Callable[[], Scenario]]) -> dict[str, Scenario]:
    """Build each scenario once, with its defining function's docstring as its promise."""
    registry: dict[str, Scenario] = {}
    for build in builders:
        scenario = attrs.evolve(build(), promise=inspect.getdoc(build) or "")
        if scenario.name in registry:
            raise ValueError(f"two scenarios are named {scenario.name!r}")
        registry[scenario.name] = scenario
    return registry


SCENARIOS: dict[str, Scenario] = _registry(
    (
        *eviction.ALL,
        *grants.ALL,
        *limits.ALL,
        *alarms.ALL,
        *leases.ALL,
        *modes.ALL,
        *reports.ALL,
        *callbacks.ALL,
        *operations.ALL,
        *designs.ALL,
    )
)
