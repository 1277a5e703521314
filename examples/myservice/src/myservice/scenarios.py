"""The team's failure story: the holder is evicted twice while grants are out."""

from __future__ import annotations

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun
from semsim.scenarios import Check, Expect, Scenario
from semsim.world.faults import Eviction, FaultPlan
from semsim.world.workload import Workload

HOLDER = "holder:acct"


def double_eviction() -> Scenario:
    """Seed 001, "After failure": committed grants survive an eviction, and unclaimed
    permits come back. Here the holder is evicted twice, 3 s apart, while a stream of
    work holds grants: every item must still run (semsim's own invariants judge that
    nothing stays charged)."""

    def judge(run: WorldRun, expect: Expect) -> None:
        live = [event["live"] for event in run.trace.of_kind("evict") if event["object"] == HOLDER]
        expect.that(live == [True, True], "both evictions found a live holder, mid-work", live)
        enqueued, released = len(run.trace.of_kind("enqueue")), len(run.trace.of_kind("release"))
        expect.that(
            enqueued == released > 0, "every item enqueued ran and released its permit", (enqueued, released)
        )

    return Scenario(
        name="double-eviction",
        description="the holder is evicted twice, 3 s apart, while grants are out",
        seed=1,
        config=WorldConfig(
            holder=HolderSpec(limit=4, leases=None),  # plain grants: the claim deadline is the story
            workload=Workload(clients=2, items_per_minute=80, until_ms=30_000),
            duration_ms=60_000,
        ),
        faults=FaultPlan(evictions=(Eviction(HOLDER, 10_000), Eviction(HOLDER, 13_000))),
        check=Check(judge),
    )


#: What the ``semsim.scenarios`` entry point names: every scenario of this project.
ALL = [double_eviction]
