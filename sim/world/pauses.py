"""A worker's process stalling (a GC pause): what it would do waits until the pause is over.

A pause (``faults.pauses``) stops a process, not the world: requests it
already sent are served, calls it made to the external API run on, and
leases it holds run out on the store's clock. What waits is the process's
own next step: a heartbeat, a claim, a write, a release. Each worker awaits
:func:`awake` before each such step, so a step due during a pause happens
as the pause ends, in the order the steps were due.
"""

from __future__ import annotations

from collections.abc import Sequence

from semsim.runtime.kernel import Sim
from semsim.world.faults import Pause


def paused_until(pauses: Sequence[Pause], name: str, t_ms: int) -> int | None:
    """When the pause of ``name`` covering ``t_ms`` ends, or None if none covers it."""
    ends = [
        pause.end_ms for pause in pauses if pause.target == name and pause.start_ms <= t_ms < pause.end_ms
    ]
    return max(ends, default=None)


async def awake(sim: Sim, pauses: Sequence[Pause], name: str) -> None:
    """Return once ``name`` is not paused (at once, if it is not), noting the stall in the trace."""
    while (end := paused_until(pauses, name, sim.now())) is not None:
        sim.event("paused", target=name, until=end)
        await sim.sleep_until(end)
