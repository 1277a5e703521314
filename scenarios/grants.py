"""Grants: committed before the client hears, claimed within a deadline, charged until released.

Timings: a message takes 5 ms; one plain client's items submitted at 1 s
reach it at 1.005 s and its request the holder at 1.010 s; the round runs
1 s later (2.010 s); grants must be claimed within ``grant_timeout_ms``
(10 s, so by 12.010 s); an unanswered call times out after 5 s and is
retried 1 s later.
"""

from __future__ import annotations

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun
from semsim.scenarios.base import (
    HOLDER,
    Check,
    Expect,
    Scenario,
    answers,
    delivered_at,
    events,
    first_t,
    grant_results,
    rounds,
    sends,
)
from semsim.world.faults import Drop, Eviction, FaultPlan
from semsim.world.workload import Arrival, Workload

GRANT_TIMEOUT_MS = 10_000
FIRST_ROUND_MS = 2_010


def _one_client(duration_ms: int = 40_000, item_ms: int = 30_000) -> WorldConfig:
    """One plain client (no leases) submits two items at 1 s; the limit is 2."""
    return WorldConfig(
        holder=HolderSpec(limit=2, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=item_ms),)
        ),
        duration_ms=duration_ms,
    )


def reply_lost_after_commit() -> Scenario:
    """Seed 001, "After failure": "A response lost after allocation does not free capacity.
    Unclaimed grant permits expire". "Every round applies reports and writes new grants and
    leases in one storage transaction, before any client hears back."

    The round at 2.010 s commits a grant of 2 whose reply is lost. The client's call times
    out and it asks again; until the lost grant's claim deadline (12.010 s) its permits stay
    reserved, so with a limit of 2 the retry gets nothing; after it, a new grant.
    """
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")

    def judge(run: WorldRun, expect: Expect) -> None:
        grants = run.trace.of_kind("grant")
        if not expect.that(len(grants) == 2, "two grants: the lost one and the retry's", len(grants)):
            return
        first, second = grants
        expect.that(first["t"] == FIRST_ROUND_MS, "the first round committed its grant", first["t"])
        drops = [e["leg"] for e in run.trace.of_kind("drop")]
        expect.that(drops == ["reply"], "its reply was lost", drops)
        deadline = first["t"] + GRANT_TIMEOUT_MS
        reserved = rounds(run, first["t"] + 1, deadline)
        expect.that(
            bool(reserved) and all(r["usage"]["granted"] == 2 and r["granted"] == 0 for r in reserved),
            "rounds before the claim deadline saw the 2 permits reserved and granted nothing",
            [(r["t"], r["usage"]["granted"], r["granted"]) for r in reserved],
        )
        reclaimed = [(e["grantId"], e["permits"], e["t"]) for e in run.trace.of_kind("grant_reclaimed")]
        expect.that(
            reclaimed[:1] == [(first["grant"], 2, deadline)],
            "the lost grant's 2 permits came back at its deadline",
            reclaimed,
        )
        expect.that(
            second["grant"] != first["grant"] and second["permits"] == 2 and second["t"] >= deadline,
            "the retried request got a new grant of 2 after the deadline",
            (second["grant"], second["permits"], second["t"]),
        )
        admitted = {e["grant"] for e in run.trace.of_kind("admit")}
        expect.that(admitted == {second["grant"]}, "items ran only under the new grant", admitted)

    return Scenario(
        name="reply-lost-after-commit",
        description="the round commits but its reply is lost: permits stay reserved until the claim deadline",
        seed=1,
        config=_one_client(),
        faults=FaultPlan(drops=(lost,)),
        check=Check(judge),
    )


def _late_claim_plan(evict_holder: bool) -> FaultPlan:
    # The grant's reply arrives at 2.015 s, but the client's claim (a sync) and its retry are
    # lost until 13 s; the second retry reaches the holder at 14.020 s, after the deadline.
    claims_lost = Drop(leg="request", start_ms=2_012, end_ms=13_000, src="client-0", dst=HOLDER)
    evictions = (Eviction(HOLDER, 5_000),) if evict_holder else ()
    return FaultPlan(drops=(claims_lost,), evictions=evictions)


def _late_claim_judge(status: str) -> Check:
    def judge(run: WorldRun, expect: Expect) -> None:
        grants = run.trace.of_kind("grant")
        if not expect.that(len(grants) >= 2, "a grant, then another after the late claim", len(grants)):
            return
        first = grants[0]
        deadline = first["t"] + GRANT_TIMEOUT_MS
        results = grant_results(run, "client-0", first["grant"])
        expect.that(
            [r["status"] for _, r in results] == [status],
            f"the late claim was answered `{status}`",
            results,
        )
        if results:
            t, result = results[0]
            expect.that(
                t > deadline, "the answer came after the claim deadline", f"t={t}, deadline {deadline}"
            )
            expect.that(result["claimed"] == 0, "the claim was clamped to what was claimed in time (0)")
        requeued = sorted(e["item"] for e in run.trace.of_kind("requeue"))
        expect.that(
            requeued == ["client-0/item-1", "client-0/item-2"], "the client requeued both items", requeued
        )
        under_first = [e for e in run.trace.of_kind("admit") if e["grant"] == first["grant"]]
        expect.that(not under_first, "nothing ran under the expired grant", len(under_first))
        later = {e["grant"] for e in run.trace.of_kind("admit")}
        expect.that(
            len(run.trace.of_kind("admit")) == 2 and first["grant"] not in later,
            "the client asked again and both items ran under a new grant",
            later,
        )

    return Check(judge)


def late_claim_expired() -> Scenario:
    """Seed 001, "Grants and reports": "Permits a client never claims within `grantTimeoutMs`
    are reclaimed; a later claim is answered with the clamped count and `status: 'expired'`".

    The claim reaches the holder at 14.020 s, past the 12.010 s deadline. The holder was
    evicted at 5 s, so its in-memory early timer died and the reclaim waits for the stored
    alarm (commit + 15 s = 17.010 s): the grant row is still there, and the claim is clamped
    to the 0 permits claimed in time and answered `expired`.
    """
    check = _late_claim_judge("expired")

    def judge(run: WorldRun, expect: Expect) -> None:
        check.judge(run, expect)
        reclaimed = run.trace.of_kind("grant_reclaimed")
        expect.that(not reclaimed, "no reclaim ran first (the early timer died with the instance)", reclaimed)

    return Scenario(
        name="late-claim-expired",
        description="a claim after the deadline, before reclaim ran, is clamped and answered `expired`",
        seed=3,
        config=_one_client(),
        faults=_late_claim_plan(evict_holder=True),
        check=Check(judge),
    )


def late_claim_not_found() -> Scenario:
    """Seed 001, "Grants and reports": a later claim is answered "with `status: 'not_found'` if
    nothing was claimed and reclaim already deleted the grant."

    As ``late-claim-expired`` but the holder stays up: its early timer reclaims the unclaimed
    grant at the 12.010 s deadline and deletes it, so the claim at 14.020 s finds nothing.
    """
    check = _late_claim_judge("not_found")

    def judge(run: WorldRun, expect: Expect) -> None:
        check.judge(run, expect)
        grants = run.trace.of_kind("grant")
        reclaimed = [(e["grantId"], e["permits"], e["t"]) for e in run.trace.of_kind("grant_reclaimed")]
        expected = [(grants[0]["grant"], 2, grants[0]["t"] + GRANT_TIMEOUT_MS)] if grants else []
        expect.that(reclaimed[:1] == expected, "reclaim deleted the grant at its deadline", reclaimed)

    return Scenario(
        name="late-claim-not-found",
        description="a claim arriving after reclaim deleted its grant is answered `not_found`",
        seed=4,
        config=_one_client(),
        faults=_late_claim_plan(evict_holder=False),
        check=Check(judge),
    )


def claims_stay_charged() -> Scenario:
    """Seed 001, "After failure": "Confirmed claims stay charged until released." Reports are
    cumulative high-water marks; the holder learns of a release only from its client.

    Client 0 claims both permits (limit 2) at 2.015 s for two 30-second items, then is cut
    off from the holder from 20 s to 45 s: its items finish at 32 s but the release report
    only gets through after 45 s. Client 1, queued since 3 s, waits for that report, not
    for the claim deadline and not for the jobs.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=30_000),
                Arrival(at_ms=3_000, client=1, count=2, duration_ms=5_000),
            ),
        ),
        duration_ms=70_000,
    )
    cut_off = Drop(leg="request", start_ms=20_000, end_ms=45_000, src="client-0", dst=HOLDER)

    def judge(run: WorldRun, expect: Expect) -> None:
        claimed = [
            r
            for g in run.trace.of_kind("grant")
            if g["client"] == "client-0"
            for _, r in grant_results(run, "client-0", g["grant"])
        ]
        expect.that(
            bool(claimed) and claimed[0]["status"] == "ok" and claimed[0]["claimed"] == 2,
            "client 0's claim of 2 was confirmed",
            claimed[:1],
        )
        reclaimed = run.trace.of_kind("grant_reclaimed")
        expect.that(not reclaimed, "claimed permits are not reclaimed at the claim deadline", reclaimed)
        done = [e["t"] for e in events(run, "job_done", client="client-0")]
        released_report = [
            s
            for s in sends(run, "client-0")
            if any(g["released"] == 2 for g in s["body"].get("grants", []))
            and delivered_at(run, s["msg"]) is not None
        ]
        if not expect.that(bool(released_report), "client 0's release report reached the holder"):
            return
        reported_at = delivered_at(run, released_report[0]["msg"])
        assert reported_at is not None
        expect.that(
            bool(done) and reported_at >= 45_000 > max(done),
            "it arrived after the cut-off ended, well after the jobs finished",
            f"jobs done at {done}, report delivered at {reported_at}",
        )
        charged = rounds(run, FIRST_ROUND_MS + 1, reported_at)
        expect.that(
            bool(charged) and all(r["usage"]["granted"] == 2 and r["granted"] == 0 for r in charged),
            "every round until the report saw both permits charged and granted nothing",
            [(r["t"], r["usage"]["granted"], r["granted"]) for r in charged],
        )
        blocked = {e["reason"] for e in run.trace.of_kind("blocked") if e["t"] < reported_at}
        expect.that(blocked == {"limit"}, "client 1's demand was blocked by the limit meanwhile", blocked)
        first_for_1 = first_t(g for g in run.trace.of_kind("grant") if g["client"] == "client-1")
        expect.that(
            first_for_1 is not None and first_for_1 > reported_at,
            "client 1 got permits only after the release report",
            first_for_1,
        )

    return Scenario(
        name="claims-stay-charged",
        description="claimed permits stay charged until their release is reported, long after the deadline",
        seed=5,
        config=config,
        faults=FaultPlan(drops=(cut_off,)),
        check=Check(judge),
    )


def oldest_demand_first() -> Scenario:
    """Seed 001, "Semaphore": "Requests arriving within a round are allocated together in
    arrival order, so the oldest queued work across all clients is admitted first" and
    "An allocation round ... allocates grants in oldest-demand order."

    Client 0 queues 2 items at 1 s, but its first request is lost; it asks again at 7.005 s.
    Client 1 queues 2 items at 6.5 s and asks at once. Both requests wait for the same round
    (7.510 s), client 1's first. The limit is 3: client 0's older demand is served in full
    and client 1 gets the one permit left, whatever order the requests arrived in.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=None),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=20_000),
                Arrival(at_ms=6_500, client=1, count=2, duration_ms=20_000),
            ),
        ),
        duration_ms=30_000,
    )
    first_lost = Drop(leg="request", start_ms=0, end_ms=1_100, src="client-0", dst=HOLDER)

    def judge(run: WorldRun, expect: Expect) -> None:
        shared = rounds(run)
        if not expect.that(bool(shared), "a round ran"):
            return
        round_t = shared[0]["t"]
        arrived = {
            client: [delivered_at(run, s["msg"]) for s in sends(run, client, "request")]
            for client in ("client-0", "client-1")
        }
        in_round = {c: [t for t in ts if t is not None and t <= round_t] for c, ts in arrived.items()}
        expect.that(
            all(len(ts) == 1 for ts in in_round.values()),
            "the first round served one request from each client",
            in_round,
        )
        expect.that(
            all(ts for ts in in_round.values()) and in_round["client-1"][0] < in_round["client-0"][0],
            "the newer demand's request arrived first",
            in_round,
        )
        # Grant events come in reply (arrival) order; what each client got is what counts.
        granted = {g["client"]: g["permits"] for g in run.trace.of_kind("grant") if g["t"] == round_t}
        expect.that(
            granted == {"client-0": 2, "client-1": 1},
            "the older demand was served in full first, the newer got what was left",
            granted,
        )
        blocked = [
            b["reason"]
            for reply in answers(run, "client-1")
            if reply["t"] < round_t + 100
            for b in (reply.get("body") or {}).get("blocked", [])
        ]
        expect.that(blocked == ["limit"], "client 1's remaining demand was blocked by the limit", blocked)

    return Scenario(
        name="oldest-demand-first",
        description="a round serves the oldest queued demand first, not the first request to arrive",
        seed=6,
        config=config,
        faults=FaultPlan(drops=(first_lost,)),
        check=Check(judge),
    )


def equal_age_ties_by_locale() -> Scenario:
    """Seed 001, "Semaphore": "the oldest queued work across all clients is admitted first";
    seed 000's ``allocate`` sorts demand by ``oldestAt``, then ``clientId.localeCompare``.

    Two clients named ``Client-0`` and ``client-0`` (ids that differ only in case) each queue
    2 items at 1 s, so their demand is equally old. ``Client-0``'s request reaches the holder
    first and both wait for the same round. The limit is 3. ``localeCompare`` puts lower case
    first, so ``client-0`` is served in full and ``Client-0`` gets the one permit left. A port
    that compares code points, or treats the two ids as a tie and keeps arrival order, serves
    ``Client-0`` first.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=None),
        workload=Workload(
            clients=2,
            plain_clients=2,
            client_ids="case_twins",
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=20_000),
                Arrival(at_ms=1_000, client=1, count=2, duration_ms=20_000),
            ),
        ),
        duration_ms=30_000,
    )

    def judge(run: WorldRun, expect: Expect) -> None:
        shared = rounds(run)
        if not expect.that(bool(shared), "a round ran"):
            return
        round_t = shared[0]["t"]
        # Both arrive on the same millisecond: arrival order is the trace's order.
        first = {client: sends(run, client, "request")[:1] for client in ("Client-0", "client-0")}
        msgs = {sent[0]["msg"]: client for client, sent in first.items() if sent}
        order = [
            msgs[e["msg"]] for e in run.trace.of_kind("deliver") if e["t"] <= round_t and e["msg"] in msgs
        ]
        expect.that(
            order == ["Client-0", "client-0"],
            "both first requests waited for the same round, Client-0's arriving first",
            order,
        )
        ages = sorted({d["oldestAt"] for sent in first.values() for s in sent for d in s["body"]["demand"]})
        expect.that(len(ages) == 1, "the two demands were equally old", ages)
        granted = {g["client"]: g["permits"] for g in run.trace.of_kind("grant") if g["t"] == round_t}
        expect.that(
            granted == {"client-0": 2, "Client-0": 1},
            "localeCompare served client-0 (lower case first) in full, Client-0 got what was left",
            granted,
        )

    return Scenario(
        name="equal-age-ties-by-locale",
        description="equally old demand goes by localeCompare of clientId: client-0 before Client-0",
        # A seed whose interleaving sends Client-0's request first (the judge checks that it did).
        seed=1,
        config=config,
        faults=FaultPlan(),
        check=Check(judge),
    )


ALL = (
    reply_lost_after_commit,
    late_claim_expired,
    late_claim_not_found,
    claims_stay_charged,
    oldest_demand_first,
    equal_age_ties_by_locale,
)
