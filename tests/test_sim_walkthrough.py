"""The reference walkthrough's failure stories, reproduced in the simulator with their documented outcome.

"Lose the object and the reply" (seed 000): evicted before the round; the
round commits but the reply is lost; the alarm brings the holder back and
reclaims. Timings: every message takes 5 ms (items submitted at 1 s reach
the client at 1.005 s, its request the holder at 1.010 s), a round runs
``round_wait_ms`` (1 s) after the first waiting request (2.010 s), grants
must be claimed within ``grant_timeout_ms`` (10 s), the alarm's floor is
``alarm_min_delay_ms`` (15 s).
"""

from __future__ import annotations

from typing import Any

import trio

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun, run_world
from semsim.runtime.durable import DurableObject
from semsim.runtime.kernel import Sim, run
from semsim.runtime.network import Network
from semsim.runtime.trace import Trace
from semsim.world.faults import Drop, Eviction, FaultPlan
from semsim.world.holder_object import HolderObject
from semsim.world.workload import Arrival, Workload

HOLDER = "holder:acct"


def story(faults: FaultPlan, duration_ms: int = 40_000, **holder: Any) -> WorldRun:
    """One plain client (no leases) submits two 30-second items at t=1 s."""
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None, **holder),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=30_000),)
        ),
        duration_ms=duration_ms,
    )
    return run_world(config, faults, seed=1)


def client_requests(run: WorldRun) -> list[dict[str, Any]]:
    return [e for e in run.trace.of_kind("send") if e["src"] == "client-0" and e["body"]["type"] == "request"]


def test_evicted_before_the_round_the_waiting_call_fails_nothing_is_allocated_and_the_client_asks_again() -> (
    None
):
    # The request reaches the holder at 1.010 s and waits for a round at 2.010 s;
    # the holder is evicted at 1.5 s.
    run = story(FaultPlan(evictions=(Eviction(HOLDER, 1_500),)))
    t = run.trace
    first, second = client_requests(run)[:2]
    [failed] = [e for e in t.of_kind("reply") if e["msg"] == first["msg"]]
    assert failed["error"] == "evicted"
    rounds = t.of_kind("round")
    assert rounds[0]["t"] > 1_500  # nothing was allocated for the lost request
    assert second["t"] >= failed["t"] + 1_000  # the client asked again after its retry delay
    grants = t.of_kind("grant")
    assert [(g["client"], g["permits"]) for g in grants] == [("client-0", 2)]
    assert len(t.of_kind("admit")) == 2


def test_the_round_commits_but_the_reply_is_lost_so_permits_stay_reserved_and_a_retry_gets_new_grants() -> (
    None
):
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")
    run = story(FaultPlan(drops=(lost,)))
    t = run.trace
    first, second = (g for g in t.of_kind("grant"))
    assert first["t"] == 2_010  # committed at the first round...
    assert [e["leg"] for e in t.of_kind("drop")] == ["reply"]  # ...but the reply never arrived
    assert second["grant"] != first["grant"]  # the retried request gets a new grant
    # Until the first grant's claim deadline (2.010 + 10 s) its 2 permits stay reserved:
    # with a limit of 2, the retried request gets nothing before then.
    assert second["t"] >= 12_010
    assert second["permits"] == 2
    reserved = [e for e in t.of_kind("round") if first["t"] < e["t"] < 12_010]
    assert reserved
    assert all(e["usage"]["granted"] == 2 and e["granted"] == 0 for e in reserved)
    reclaimed = t.of_kind("grant_reclaimed")[0]
    assert (reclaimed["grantId"], reclaimed["permits"], reclaimed["t"]) == (first["grant"], 2, 12_010)


def test_the_alarm_brings_an_evicted_holder_back_and_reclaims() -> None:
    # As above, but the holder is evicted at 5 s and nobody calls it afterwards: its
    # in-memory early timer died with it, and only the stored alarm is left (claim
    # deadline 12.010 s, floored at commit 2.010 s + 15 s = 17.010 s).
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")
    silent = Drop(leg="request", start_ms=3_000, end_ms=40_000, src="client-0", dst=HOLDER)
    run = story(FaultPlan(drops=(lost, silent), evictions=(Eviction(HOLDER, 5_000),)))
    t = run.trace
    instances = [e for e in t.of_kind("instance") if e["object"] == HOLDER]
    [reclaimed] = t.of_kind("grant_reclaimed")
    alarms = [e for e in t.of_kind("alarm") if e["object"] == HOLDER]
    assert reclaimed["permits"] == 2
    assert alarms
    assert alarms[0]["scheduled"] == 17_010
    assert reclaimed["t"] == 17_010
    assert [(e["t"], e["generation"]) for e in instances] == [(1_010, 0), (17_010, 1)]


def test_limit_callbacks_start_over_after_eviction() -> None:
    # limitWorkflow() caps live in a map on the instance: after eviction they are gone.
    t = Trace(1, {}, {})
    replies: list[dict[str, Any]] = []

    def ask(client: str) -> dict[str, Any]:
        return {
            "type": "request",
            "v": 1,
            "clientId": client,
            "demand": [{"group": "wf", "count": 3, "oldestAt": 0}],
            "grants": [],
        }

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            network = Network(sim, FaultPlan(), nursery)
            env = HolderSpec(limit=10, leases=None).env(0.0)
            holder = DurableObject(sim, HOLDER, lambda ctx: HolderObject(ctx, env), nursery)
            network.register(HOLDER, holder)
            await network.call("operator", HOLDER, "limit_workflow", {"group": "wf", "limit": 1})
            replies.append(await network.call("a", HOLDER, "permits", ask("a")))
            holder.evict()
            replies.append(await network.call("b", HOLDER, "permits", ask("b")))
            nursery.cancel_scope.cancel()

    run(1, main, t)
    capped, uncapped = replies
    assert [g["permits"] for g in capped["grants"]] == [1]
    assert capped["blocked"] == [{"group": "wf", "reason": "group_limit"}]
    assert [g["permits"] for g in uncapped["grants"]] == [3]
    assert uncapped["blocked"] == []
