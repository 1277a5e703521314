"""Print the trace digest of each seed's run, one per line: ``python -m tests.determinism_worker 0 50``.

Run by tests/test_sim_determinism.py in separate processes with different
``PYTHONHASHSEED`` values; every line must match.
"""

from __future__ import annotations

import sys
from typing import Literal

from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import random_plan
from semsim.world.workload import Workload

MODES: tuple[Literal["strict", "under", "over"], ...] = ("strict", "under", "over")


def config_for(seed: int) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(
            limit=6,
            grant_timeout_ms=4_000,
            leases=LeaseSpec(provisioning=MODES[seed % 3], amount=2, permits_per_lease=2, ttl_ms=20_000),
        ),
        workload=Workload(
            clients=3,
            plain_clients=1,
            keys=("a", "b"),
            items_per_minute=40,
            duration_ms=(500, 8_000),
            until_ms=40_000,
        ),
        duration_ms=60_000,
    )


def digest(seed: int) -> str:
    config = config_for(seed)
    targets = [f"holder:{key}" for key in config.workload.keys] + config.workload.client_names()
    run = run_world(config, random_plan(seed, targets, config.duration_ms), seed)
    return run.trace.digest()


if __name__ == "__main__":
    first, count = int(sys.argv[1]), int(sys.argv[2])
    for seed in range(first, first + count):
        print(seed, digest(seed), flush=True)
