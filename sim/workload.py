"""Workloads: who submits how many items, when, to which key and group, and for how long they run.

Every draw comes from the run's ``workload`` stream, per client in a fixed
order, so a seed fixes the whole arrival schedule.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import attrs

from sim.network import Network, RpcError
from sim.runtime import Sim

MAX_CLIENTS: Final = 1_000


@attrs.frozen
class Arrival:
    """A scripted submission: ``count`` items from client number ``client`` at ``at_ms``."""

    at_ms: int
    client: int
    count: int = 1
    group: str | None = None
    key: str | None = None
    duration_ms: int = 10_000


@attrs.frozen
class Workload:
    """Arrivals per client: ``steady`` (exponential gaps) or ``bursts`` (batches every so often)."""

    clients: int = 4
    #: How many of the clients are plain (send no ``leases``, so are never leased).
    plain_clients: int = 0
    keys: tuple[str, ...] = ("acct",)
    groups: tuple[str, ...] = ("wf-1", "wf-2")
    arrival: Literal["steady", "bursts"] = "steady"
    #: Steady: mean items per minute per client. Bursts: items per burst.
    items_per_minute: float = 20.0
    burst_size: int = 20
    burst_every_ms: int = 60_000
    #: Each item runs for a duration drawn uniformly in this range.
    duration_ms: tuple[int, int] = (2_000, 20_000)
    #: Arrivals stop at this time (the run may go on to let work finish).
    until_ms: int = 600_000
    #: When given, exactly these arrivals replace the random processes.
    script: tuple[Arrival, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ValueError(f"workload.clients must be between 1 and {MAX_CLIENTS}, got {self.clients}")
        if not 0 <= self.plain_clients <= self.clients:
            raise ValueError("workload.plain_clients must be between 0 and workload.clients")
        if not self.keys or not self.groups:
            raise ValueError("workload.keys and workload.groups must not be empty")
        if self.arrival not in ("steady", "bursts"):
            raise ValueError(f"workload.arrival must be 'steady' or 'bursts', got {self.arrival!r}")
        low, high = self.duration_ms
        if not 0 <= low <= high:
            raise ValueError(f"workload.duration_ms must be a range 0 <= low <= high, got {self.duration_ms}")
        if self.items_per_minute <= 0 or self.burst_size <= 0 or self.burst_every_ms <= 0:
            raise ValueError("workload rates must be positive")

    def client_names(self) -> list[str]:
        width = len(str(self.clients - 1))
        return [f"client-{i:0{width}d}" for i in range(self.clients)]

    def is_plain(self, index: int) -> bool:
        return index >= self.clients - self.plain_clients


async def arrivals(sim: Sim, network: Network, workload: Workload, client: str, index: int) -> None:
    """Submit one client's items until ``until_ms``; a failed submission is retried."""
    if workload.script:
        await _scripted(sim, network, workload, client, index)
        return
    rng = sim.rng(f"workload:{client}")
    n = 0
    while True:
        if workload.arrival == "steady":
            gap = max(1, round(rng.expovariate(workload.items_per_minute / 60_000)))
            batch = 1
        else:
            gap = workload.burst_every_ms if n else rng.randint(0, workload.burst_every_ms)
            batch = workload.burst_size
        if sim.now() + gap >= workload.until_ms:
            return
        await sim.sleep(gap)
        items: list[dict[str, Any]] = []
        for _ in range(batch):
            n += 1
            items.append(
                {
                    "id": f"{client}/item-{n}",
                    "key": workload.keys[rng.randrange(len(workload.keys))],
                    "group": workload.groups[rng.randrange(len(workload.groups))],
                    "body": json.dumps({"duration_ms": rng.randint(*workload.duration_ms)}),
                }
            )
        await _submit(sim, network, client, items)


async def _scripted(sim: Sim, network: Network, workload: Workload, client: str, index: int) -> None:
    n = 0
    for arrival in sorted(workload.script, key=lambda a: a.at_ms):
        if arrival.client != index:
            continue
        await sim.sleep_until(arrival.at_ms)
        items = []
        for _ in range(arrival.count):
            n += 1
            items.append(
                {
                    "id": f"{client}/item-{n}",
                    "key": arrival.key or workload.keys[0],
                    "group": arrival.group or workload.groups[0],
                    "body": json.dumps({"duration_ms": arrival.duration_ms}),
                }
            )
        await _submit(sim, network, client, items)


async def _submit(sim: Sim, network: Network, client: str, items: list[dict[str, Any]]) -> None:
    # Enqueueing is idempotent by item id, so retrying a lost submission is safe.
    while True:
        try:
            await network.call("workload", client, "submit", items)
            return
        except RpcError:
            await sim.sleep(1_000)
