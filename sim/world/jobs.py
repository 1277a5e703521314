"""The external job service admitted items run on (``JOB_API`` in the reference example).

It is outside every Durable Object, so it outlives evictions: an item keeps
running whatever happens to the client that admitted it. Starting an item
twice is a no-op (the reference keys operations by item id). When an item
finishes, the service notifies its client with a ``release`` call, which
the network may lose; the client's ``finished`` check asks the service
directly and reconciles.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from semsim.runtime.kernel import Sim
from semsim.runtime.network import Network, RemoteError


@attrs.frozen
class Job:
    item: str
    client: str
    key: str
    group: str
    started_at: int
    ends_at: int


class Jobs:
    """Runs items for their duration and tells their clients when they are done."""

    name = "jobs"

    def __init__(self, sim: Sim, network: Network, nursery: trio.Nursery) -> None:
        self._sim = sim
        self._network = network
        self._nursery = nursery
        self.running: dict[str, Job] = {}
        self.finished: dict[str, Job] = {}
        network.register(self.name, self)

    def start(self, item: str, client: str, key: str, group: str, duration_ms: int) -> None:
        if item in self.running or item in self.finished:
            return
        now = self._sim.now()
        job = Job(item, client, key, group, now, now + duration_ms)
        self.running[item] = job
        self._sim.event("job_start", item=item, client=client, key=key, group=group, until=job.ends_at)
        self._sim.call_at(job.ends_at, lambda: self._finish(job))

    def _finish(self, job: Job) -> None:
        del self.running[job.item]
        self.finished[job.item] = job
        self._sim.event("job_done", item=job.item, client=job.client)
        # Best effort, nobody waits: the client's finished check reconciles a lost notice.
        self._network.notify(self.name, job.client, "release", job.item)

    def dispatch(self, method: str, payload: Any) -> Any:
        if method == "finished":
            return [item for item in payload if item in self.finished]
        raise RemoteError("protocol", f"jobs: unknown method {method!r}")
