"""The named scenarios as a campaign's first, explicit examples.

A campaign runs these before it draws: a protocol change that breaks an
invariant in a documented story is caught at once, whatever the draws reach.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from semsim.explore.strategies import Case
from semsim.harness.run import WorldConfig
from semsim.scenarios import SCENARIOS, Scenario
from semsim.world.design import DesignName


def fuzz_examples(
    fixes: tuple[str, ...] = (),
    scenarios: Mapping[str, Scenario] = SCENARIOS,
    design: DesignName = "semaphore",
) -> list[Case]:
    """Every scenario's world, fault plan and seed of ``design`` as a fuzz case, with ``fixes`` (the
    holder's for the semaphore, the design's own for the others), in order.

    ``scenarios``: semsim's own by default; ``semsim fuzz`` passes the installed
    ones too (:func:`semsim.scenarios.registry.every_scenario`). The
    account-concurrency stories are among semsim's: on the reference their F5
    is tolerated by name, and with every fix they hold (docs/FINDINGS.md, F5).
    """
    return [
        Case(config=_with_fixes(s.config, fixes), faults=s.faults, seed=s.seed)
        for s in scenarios.values()
        if s.config.design.name == design
    ]


def _with_fixes(config: WorldConfig, fixes: tuple[str, ...]) -> WorldConfig:
    """``config`` with ``fixes`` on: the holder's for the semaphore, the design's own otherwise."""
    design = config.design
    if design.name == "gate":
        return attrs.evolve(config, design=attrs.evolve(design, gate=attrs.evolve(design.gate, fixes=fixes)))
    if design.name == "leased-worker":
        leased = attrs.evolve(design.leased, fixes=fixes)
        return attrs.evolve(config, design=attrs.evolve(design, leased=leased))
    return attrs.evolve(config, holder=attrs.evolve(config.holder, fixes=fixes))
