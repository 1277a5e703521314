"""Limits: resolved live every round, never revoking running work, and held in memory.

``limit`` comes from the deployment (``env.ACCOUNT_CONCURRENCY``, which
outlives every instance); ``groupLimit`` reads a map on the live instance
(the reference example's ``workflowLimits``), which eviction forgets.
"""

from __future__ import annotations

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun
from semsim.scenarios.base import HOLDER, Check, Expect, Scenario, events, first_t, rounds
from semsim.world.faults import Eviction, FaultPlan, GroupLimitChange, LimitChange
from semsim.world.workload import Arrival, Workload


def lowered_limit_stops_admissions() -> Scenario:
    """Seed 001: "Lowering a limit never evicts running work; it stops new admissions until
    usage is below the new ceiling" ("Limits are live", resolved once per round), and "After
    failure": "Lowering a limit stops new admissions rather than revoking running work."

    Under a limit of 4, client 0 runs two 10-second items and client 1 two 40-second ones.
    At 5 s the operator lowers the limit to 2. Nothing is stopped; client 2, queued since
    3 s, gets nothing while usage is at or above 2 (once the short items end, usage is 2:
    not below) and is admitted only once the long items end.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=None),
        workload=Workload(
            clients=3,
            plain_clients=3,
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=10_000),
                Arrival(at_ms=1_000, client=1, count=2, duration_ms=40_000),
                Arrival(at_ms=3_000, client=2, count=2, duration_ms=5_000),
            ),
        ),
        duration_ms=60_000,
    )
    lowered_ms = 5_000

    def judge(run: WorldRun, expect: Expect) -> None:
        ops = [(e["t"], e["limit"]) for e in events(run, "operator", action="limit")]
        expect.that(ops == [(lowered_ms, 2)], "the operator lowered the limit to 2 at 5 s", ops)
        early = [e["item"] for e in run.trace.of_kind("admit") if e["t"] < lowered_ms]
        expect.that(len(early) == 4, "four items were running before the change", early)
        done = {e["item"]: e["t"] for e in run.trace.of_kind("job_done")}
        cut_short = [
            e["item"]
            for e in run.trace.of_kind("release")
            if e["item"] not in done or e["t"] < done[e["item"]]
        ]
        expect.that(not cut_short, "no running item was released before its job finished", cut_short)
        long_done = max((t for item, t in done.items() if item.startswith("client-1/")), default=None)
        first_for_2 = first_t(g for g in run.trace.of_kind("grant") if g["client"] == "client-2")
        expect.that(
            long_done is not None and first_for_2 is not None and first_for_2 > long_done,
            "client 2 was admitted only after the long items ended",
            f"long items done at {long_done}, client 2's first grant at {first_for_2}",
        )
        held_back = rounds(run, lowered_ms, first_for_2)
        expect.that(
            bool(held_back) and all(r["granted"] == 0 and r["usage"]["granted"] >= 2 for r in held_back),
            "every round in between had usage at or above the new limit and granted nothing",
            [(r["t"], r["usage"]["granted"], r["granted"]) for r in held_back],
        )
        at_two = [r["t"] for r in held_back if r["usage"]["granted"] == 2]
        expect.that(bool(at_two), "usage equal to the new limit still admitted nothing", at_two)
        granted_after = [r for r in rounds(run, lowered_ms) if r["granted"]]
        expect.that(
            all(r["usage"]["granted"] <= 2 for r in granted_after),
            "admissions resumed within the new ceiling",
            [(r["t"], r["usage"]["granted"]) for r in granted_after],
        )

    return Scenario(
        name="lowered-limit-stops-admissions",
        description="the limit is lowered: running work continues, admissions wait for usage to fall",
        seed=7,
        config=config,
        faults=FaultPlan(limit_changes=(LimitChange(at_ms=lowered_ms, limit=2),)),
        check=Check(judge),
    )


def group_limits_reset_after_eviction() -> Scenario:
    """Seed 001, "How it uses your Durable Object": "The live instance holds the requests
    waiting for a round, the round timer, and whatever your `limit` and `groupLimit`
    callbacks read." The example's `groupLimit` reads `this.workflowLimits`, in memory.

    The operator caps group wf-1 at 1 on the live holder. Client 0 asks for 3 in wf-1 at 1 s:
    it gets 1, blocked by `group_limit`. The holder is evicted at 3.5 s; the new instance
    starts with no caps, so the client's next request gets the other 2.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=10, leases=None),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=3, duration_ms=30_000),)
        ),
        duration_ms=40_000,
    )
    evict_ms = 3_500

    def judge(run: WorldRun, expect: Expect) -> None:
        before = [g["permits"] for g in run.trace.of_kind("grant") if g["t"] < evict_ms]
        expect.that(before == [1], "under the cap, the first round granted 1", before)
        reasons = [(e["group"], e["reason"]) for e in run.trace.of_kind("blocked") if e["t"] < evict_ms]
        expect.that(reasons == [("wf-1", "group_limit")], "the rest was blocked by `group_limit`", reasons)
        after = [g["permits"] for g in run.trace.of_kind("grant") if g["t"] > evict_ms]
        expect.that(after == [2], "after the eviction the cap was gone: the other 2 were granted", after)
        later = [e["reason"] for e in run.trace.of_kind("blocked") if e["t"] > evict_ms]
        expect.that(not later, "nothing was blocked after the eviction", later)
        peak = max((r["usage"]["groups"].get("wf-1", {}).get("granted", 0) for r in rounds(run)), default=0)
        expect.that(peak == 3, "group wf-1 ran 3 at once, above the forgotten cap of 1", peak)
        generations = [e["generation"] for e in events(run, "instance", object=HOLDER)]
        expect.that(generations == [0, 1], "a fresh holder instance served the second round", generations)

    return Scenario(
        name="group-limits-reset-after-eviction",
        description="a group cap held in memory is forgotten when the holder is evicted",
        seed=8,
        config=config,
        faults=FaultPlan(
            group_limit_changes=(GroupLimitChange(at_ms=0, key="acct", group="wf-1", limit=1),),
            evictions=(Eviction(HOLDER, evict_ms),),
        ),
        check=Check(judge),
    )


ALL = (lowered_limit_stops_admissions, group_limits_reset_after_eviction)
