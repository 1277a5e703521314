"""Print the trace digest of each seed's run, one per line: ``python -m tests.determinism_worker 0 50``.

Run by tests/test_sim_determinism.py in separate processes with different
``PYTHONHASHSEED`` values; every line must match. After the semaphore's
seeds, the gate's and the leased worker's runs (``DESIGN_SEEDS`` each, under
loss, duplicates, reordering and evictions), as ``DESIGN:SEED DIGEST``.
"""

from __future__ import annotations

import sys
from typing import Literal

import attrs

from semsim.harness.designs import run_design
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.design import DesignName, DesignSpec
from semsim.world.faults import Eviction, FaultPlan, random_plan
from semsim.world.operations import OperationsSpec
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


#: Seeds per design of the gate's and the leased worker's runs.
DESIGN_SEEDS = 6
DESIGNS: tuple[DesignName, ...] = ("gate", "leased-worker")


def design_digest(design: DesignName, seed: int) -> str:
    config = WorldConfig(
        holder=HolderSpec(limit=3),
        operations=OperationsSpec(),
        workload=Workload(
            clients=3, keys=("a", "b"), items_per_minute=20, until_ms=60_000, paced_by_intake=False
        ),
        duration_ms=60_000,
        design=DesignSpec(name=design),
    )
    plan = FaultPlan(
        request_loss=0.1,
        reply_loss=0.1,
        duplicate=0.1,
        reorder=0.2,
        reorder_ms=500,
        evictions=(Eviction("client-1", 20_000 + 1_000 * seed),),
    )
    if design == "gate":
        plan = attrs.evolve(plan, gate_error=0.1, evictions=(*plan.evictions, Eviction("gate:a", 30_000)))
    return run_design(config, plan, seed).trace.digest()


if __name__ == "__main__":
    first, count = int(sys.argv[1]), int(sys.argv[2])
    for seed in range(first, first + count):
        print(seed, digest(seed), flush=True)
    for design in DESIGNS:
        for seed in range(DESIGN_SEEDS):
            print(f"{design}:{seed}", design_digest(design, seed), flush=True)
