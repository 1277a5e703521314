"""The named scenarios as a campaign's first, explicit examples.

A campaign runs these before it draws: a protocol change that breaks an
invariant in a documented story is caught at once, whatever the draws reach.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from semsim.explore.strategies import Case
from semsim.scenarios import SCENARIOS, Scenario
from semsim.world.design import DesignName


def fuzz_examples(
    fixes: tuple[str, ...] = (),
    scenarios: Mapping[str, Scenario] = SCENARIOS,
    design: DesignName = "semaphore",
) -> list[Case]:
    """Every scenario's world, fault plan and seed of ``design`` as a fuzz case (with ``fixes``, for
    the semaphore), in order.

    ``scenarios``: semsim's own by default; ``semsim fuzz`` passes the installed
    ones too (:func:`semsim.scenarios.registry.every_scenario`). The
    account-concurrency stories are among semsim's: on the reference their F5
    is tolerated by name, and with every fix they hold (docs/FINDINGS.md, F5).
    """
    return [
        Case(
            config=attrs.evolve(s.config, holder=attrs.evolve(s.config.holder, fixes=fixes)),
            faults=s.faults,
            seed=s.seed,
        )
        for s in scenarios.values()
        if s.config.design.name == design
    ]
