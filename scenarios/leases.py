"""Leases: permits a client draws locally, counted by the holder until the client settles them.

Timings: a message takes 5 ms; items submitted at 1 s are requested at
1.005 s and the round runs at 2.010 s; a round grants first, then leases
what is left (strict mode). The holder learns what a lease drew only from
its client's reports, so it charges a lease's whole footprint (permits not
yet released) until the client itself says how much it drew.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from semaphore_core.store import HolderStore
from semsim.check.invariants import DOCUMENTED_LEAK
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, WorldRun
from semsim.scenarios.base import (
    HOLDER,
    Check,
    Expect,
    Scenario,
    answers,
    delivered_at,
    events,
    first_t,
    lease_echoes,
    peak_in_use,
    rounds,
    sends,
)
from semsim.world.faults import Drop, FaultPlan
from semsim.world.workload import Arrival, Workload

TTL_MS = 20_000


def _lease_reports(run: WorldRun, client: str, lease: str) -> list[dict[str, Any]]:
    """Messages from ``client`` that reported ``lease`` and reached the holder, with their report."""
    found: list[dict[str, Any]] = []
    for send in sends(run, client):
        at = delivered_at(run, send["msg"])
        for report in send["body"].get("leases") or []:
            if report["leaseId"] == lease and at is not None:
                found.append({"t": at, **report})
    return found


def _first_lease(run: WorldRun, client: str) -> dict[str, Any] | None:
    return next(iter(events(run, "lease_granted", clientId=client)), None)


def lease_heartbeat() -> Scenario:
    """Seed 001, "Leases": "Reports (`drawn`, `released` high-water marks) heartbeat a lease,
    and the queue reports a lease with permits in use at half its lifetime even when nothing
    else is happening, so long-running work keeps its permits counted".

    The client gets a grant and a 4-permit lease (ttl 20 s) at 2.010 s, draws 2 items from
    the lease at 5 s with no round trip, and runs them for 60 s: three lifetimes. Its reports
    every half lifetime keep the lease alive; the holder never retires it. The tolerance is
    the protocol's own: a report sent at ``s`` renews the lease to ``s + latency + ttl``, so
    the next is due ``(ttl + latency) / 2`` later (10.002 s here), and no gap may exceed it.

    The story ends with client 0 idle and its lease's undrawn permits still charged: it has
    nothing to ask, so it never hears ``contended``. That is finding F4 (docs/FINDINGS.md),
    which ``capacity_returns`` reports; this story tolerates it.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=10, leases=LeaseSpec(permits_per_lease=4, ttl_ms=TTL_MS)),
        workload=Workload(
            clients=1,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=60_000),
                Arrival(at_ms=5_000, client=0, count=2, duration_ms=60_000),
            ),
        ),
        duration_ms=80_000,
    )

    def judge(run: WorldRun, expect: Expect) -> None:
        lease = _first_lease(run, "client-0")
        if not expect.that(lease is not None, "the client was leased permits"):
            return
        assert lease is not None
        lease_id = lease["leaseId"]
        drawn = [e for e in run.trace.of_kind("admit") if e["lease"] == lease_id]
        expect.that(len(drawn) == 2, "two items were drawn from the lease", len(drawn))
        drawn_at = first_t(drawn)
        asked = [s["t"] for s in sends(run, "client-0", "request") if drawn_at and 2_015 < s["t"] <= drawn_at]
        expect.that(not asked, "drawing needed no round trip", asked)
        released = [e["t"] for e in run.trace.of_kind("release") if e["item"] in {d["item"] for d in drawn}]
        if not expect.that(len(released) == 2, "both drawn items ran to the end and were released"):
            return
        busy_from, busy_until = drawn_at or 0, max(released)
        expect.that(busy_until - busy_from > 2 * TTL_MS, "the work outlived the lease's ttl twice over")
        beats = [
            r["t"] for r in _lease_reports(run, "client-0", lease_id) if busy_from <= r["t"] <= busy_until
        ]
        gaps = [b - a for a, b in pairwise([busy_from, *beats])]
        # A report sent at s reaches the holder at s + latency, which renews the lease to
        # s + latency + ttl; the client's next report is due at half that remaining lifetime,
        # (ttl + latency) / 2 after s, and arrives as late after it as this one did.
        cadence = (TTL_MS + config.latency_ms) // 2
        expect.that(
            bool(gaps) and max(gaps) <= cadence,
            f"while permits were in use the holder heard of the lease at least every "
            f"(ttl + latency) / 2 = {cadence} ms",
            gaps,
        )
        idle_beats = sum(1 for gap in gaps if gap == cadence)
        expect.that(
            idle_beats >= (busy_until - busy_from) // cadence - 1,
            f"with nothing else to report, the heartbeats came exactly {cadence} ms apart",
            f"{idle_beats} of {len(gaps)} gaps",
        )
        retired = events(run, "lease_retired", leaseId=lease_id)
        expect.that(not retired, "the holder never retired the lease", retired)
        echoes = [int(e["expiresAt"]) for _, e in lease_echoes(run, "client-0", lease_id)]
        expect.that(
            bool(echoes) and echoes[-1] > busy_until,
            "each report pushed the lease's expiry out, past the end of the work",
            echoes,
        )

    return Scenario(
        name="lease-heartbeat",
        description="reports heartbeat a lease, so work running for several ttls keeps its permits",
        seed=11,
        config=config,
        faults=FaultPlan(),
        check=Check(judge),
        tolerated=frozenset({"F4"}),
    )


def _cut_off_lease(extra: tuple[Arrival, ...] = ()) -> WorldConfig:
    """Limit 4: client 0 gets a grant of 1 and a lease of 3, draws 2; client 1 queues 2 at 8 s."""
    return WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(permits_per_lease=4, ttl_ms=TTL_MS)),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=30_000),
                Arrival(at_ms=5_000, client=0, count=2, duration_ms=30_000),
                Arrival(at_ms=8_000, client=1, count=2, duration_ms=5_000),
                *extra,
            ),
        ),
        duration_ms=80_000,
    )


#: Client 0's messages to the holder are lost from 6 s to 50 s.
CUT_OFF = Drop(leg="request", start_ms=6_000, end_ms=50_000, src="client-0", dst=HOLDER)


def unreported_lease_retired() -> Scenario:
    """Seed 001, "Leases": "A client that stops talking to the holder keeps its lease until
    `ttlMs`. ... a lease unreported for `ttlMs` is retired rather than forgotten: its client
    may be cut off from the holder with work still running, so, like a claimed grant permit,
    its footprint stays counted until the client reports what it drew and released."
    "Lease expiry is checked when rounds and reports run, not on the alarm."

    Client 0 holds a grant of 1 and a 3-permit lease (limit 4), draws 2, reports at 5.5 s,
    and is cut off from 6 s to 50 s. The first round after the lease expires (client 1 keeps
    asking) retires it, and it stays counted in full: client 1 gets nothing until client 0
    is heard from again, though client 0's jobs ended at 35 s.

    The story ends with client 0 idle and its lease's undrawn permits still charged: it has
    nothing to ask, so it never hears ``contended``. That is finding F4 (docs/FINDINGS.md),
    which ``capacity_returns`` reports; this story tolerates it.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        lease = _first_lease(run, "client-0")
        if not expect.that(lease is not None, "client 0 was leased permits"):
            return
        assert lease is not None
        lease_id, permits = lease["leaseId"], lease["permits"]
        reports = [r["t"] for r in _lease_reports(run, "client-0", lease_id)]
        last_heard = max((t for t in reports if t < CUT_OFF.end_ms), default=0)
        retired = [e["t"] for e in events(run, "lease_retired", leaseId=lease_id)]
        expect.that(
            len(retired) == 1 and last_heard + TTL_MS <= retired[0] < CUT_OFF.end_ms,
            "the holder retired the lease at a round after it went unreported for its ttl",
            f"last report {last_heard}, retired at {retired}",
        )
        heard_again = min((t for t in reports if t >= CUT_OFF.end_ms), default=None)
        after = rounds(run, retired[0] if retired else 0, heard_again)
        expect.that(
            bool(after) and all(r["usage"]["leased"] >= permits and r["granted"] == 0 for r in after),
            f"every round after retirement still counted its {permits} permits in full and granted nothing",
            [(r["t"], r["usage"]["leased"], r["granted"]) for r in after],
        )
        done = max((e["t"] for e in events(run, "job_done", client="client-0")), default=None)
        expect.that(
            done is not None and bool(after) and after[-1]["t"] > done,
            "it stayed counted after client 0's work had ended, as the holder cannot know that",
            f"jobs done at {done}",
        )
        first_for_1 = first_t(g for g in run.trace.of_kind("grant") if g["client"] == "client-1")
        expect.that(
            first_for_1 is not None and heard_again is not None and first_for_1 > heard_again,
            "client 1 was admitted only after client 0 was heard from again",
            f"client 0 heard again at {heard_again}, client 1's first grant at {first_for_1}",
        )

    return Scenario(
        name="unreported-lease-retired",
        description="a lease unreported for its ttl is retired, but its footprint stays counted",
        seed=12,
        config=_cut_off_lease(),
        faults=FaultPlan(drops=(CUT_OFF,)),
        check=Check(judge),
        tolerated=frozenset({"F4"}),
    )


def retired_report_settles() -> Scenario:
    """Seed 001, "Leases": "A retired lease stops drawing at once but stays counted in full
    until its client confirms how much it drew, since it may have drawn after its last
    report." "The queue keeps reporting a stopped lease until the holder settles it."
    Seed 000, ``applyLeaseReports``: a retired report sets ``permits = max(released, drawn)``.

    As ``unreported-lease-retired``, but of the 2 items client 0 draws at 5 s one runs 30 s
    and the other 60 s, so when client 0 gets through after 50 s it has drawn 2 and released
    only 1 (it retired the lease itself at its expiry, 25.51 s, the ``expiresAt`` last
    echoed, and reports it retired until settled). It also queues one more item at 30 s,
    after its lease expired: that item is not
    drawn from the stopped lease but waits for a grant. Its retired report (drew 2, released
    1) shrinks the lease to what it drew, 2 permits, not to the 1 released nor the full 3:
    the running item stays counted (footprint 1) while the undrawn permit comes back, enough
    for client 1's 2 items beside client 0's new one. The lease settles for good only when
    the long item ends at 65 s and its release is reported.
    """
    long_item_ends_ms = 5_000 + 60_000
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(permits_per_lease=4, ttl_ms=TTL_MS)),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=30_000),
                Arrival(at_ms=5_000, client=0, count=1, duration_ms=30_000),
                Arrival(at_ms=5_000, client=0, count=1, duration_ms=60_000),
                Arrival(at_ms=8_000, client=1, count=2, duration_ms=5_000),
                Arrival(at_ms=30_000, client=0, count=1, duration_ms=5_000),
            ),
        ),
        duration_ms=100_000,
    )

    def judge(run: WorldRun, expect: Expect) -> None:
        lease = _first_lease(run, "client-0")
        if not expect.that(lease is not None, "client 0 was leased permits"):
            return
        assert lease is not None
        lease_id = lease["leaseId"]
        expect.that(lease["permits"] == 3, "client 0 was leased 3 permits", lease["permits"])
        drawn = [e for e in run.trace.of_kind("admit") if e["lease"] == lease_id]
        expect.that(len(drawn) == 2, "client 0 drew 2 from the lease before it was cut off", len(drawn))
        late_admits = [e for e in run.trace.of_kind("admit") if e["item"] == "client-0/item-4"]
        expect.that(
            len(late_admits) == 1
            and late_admits[0]["lease"] is None
            and late_admits[0]["t"] > CUT_OFF.end_ms,
            "the item queued after the lease expired was not drawn from it: it waited for a grant",
            late_admits,
        )
        reports = _lease_reports(run, "client-0", lease_id)
        settle = [r for r in reports if r.get("retired") is True]
        first = settle[0] if settle else None
        expect.that(
            first is not None
            and CUT_OFF.end_ms <= first["t"] < long_item_ends_ms
            and (first["drawn"], first["released"]) == (2, 1),
            "its first retired report, once it got through, said: drew 2, released 1",
            settle[:1],
        )
        shrunk_at = first["t"] if first is not None else None
        echoes = [(t, e["permits"]) for t, e in lease_echoes(run, "client-0", lease_id)]
        answer = next((n for t, n in echoes if shrunk_at is not None and t > shrunk_at), None)
        expect.that(
            answer == 2,
            "the holder shrank the lease to what it drew (2), not to what was released (1)",
            [(t, n) for t, n in echoes if shrunk_at is None or t > shrunk_at][:1],
        )
        kept = [n for t, n in echoes if shrunk_at is not None and shrunk_at < t < long_item_ends_ms]
        while_running = rounds(run, shrunk_at or 0, long_item_ends_ms)
        expect.that(
            bool(kept)
            and set(kept) == {2}
            and bool(while_running)
            and all(r["usage"]["leased"] == 1 for r in while_running),
            "while the long item ran, the holder kept the lease and charged exactly its 1 running permit",
            f"echoed permits {sorted(set(kept))}, "
            f"leased {[(r['t'], r['usage']['leased']) for r in while_running]}",
        )
        cut_off = rounds(run, CUT_OFF.start_ms, CUT_OFF.end_ms)
        expect.that(
            bool(cut_off) and all(r["usage"]["leased"] == 3 for r in cut_off),
            "while client 0 was cut off, its 3 permits were counted in full",
            [(r["t"], r["usage"]["leased"]) for r in cut_off],
        )
        late_at = late_admits[0]["t"] if late_admits else None
        freed = [r for r in rounds(run, shrunk_at or 0, long_item_ends_ms) if r["granted"]]
        expect.that(
            late_at is not None
            and shrunk_at is not None
            and late_at > shrunk_at
            and bool(freed)
            and freed[0]["usage"]["granted"] + freed[0]["usage"]["leased"] == config.holder.limit,
            "the undrawn permit the shrink freed went to client 0's new item, filling the limit",
            f"shrunk at {shrunk_at}, new item admitted at {late_at}, "
            f"round after: {[(r['t'], r['usage']['granted'], r['usage']['leased']) for r in freed[:1]]}",
        )
        final = next((r for r in reports if r["t"] >= long_item_ends_ms and r["released"] == 2), None)
        rows = [row.lease_id for row in HolderStore(run.world.holders["acct"].storage).list_leases()]
        expect.that(
            final is not None and lease_id not in rows,
            "after the long item ended its release settled the lease, and the holder forgot it",
            f"release reported: {final}, leases left {rows}",
        )
        admitted = len(run.trace.of_kind("admit"))
        expect.that(admitted == 6, "every item was admitted in the end", admitted)

    return Scenario(
        name="retired-report-settles",
        description="a retired lease stays counted until its client's report shrinks it to what it drew",
        seed=13,
        config=config,
        faults=FaultPlan(drops=(CUT_OFF,)),
        check=Check(judge),
    )


def lease_lost_in_reply() -> Scenario:
    """Seed 001, "After failure": "a lease in a lost response stays counted after it expires
    until its client settles it, which a client that never received it cannot do; nothing
    reconciles such leases." The contract's ``capacity_returns`` counts it by name
    (``lease_lost_in_reply``) instead of calling it a violation.

    Limit 4: the round at 2.010 s grants client 0 one permit and leases it 3, and the reply
    is lost. The grant is reclaimed at its deadline and client 0's retry is served; the
    lease is retired after its ttl but its 3 permits stay charged for good. Client 1's burst
    of 3 at 40 s runs one item at a time: the limit is 4 but only 1 permit is left.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(permits_per_lease=3, ttl_ms=TTL_MS)),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=5_000),
                Arrival(at_ms=40_000, client=1, count=3, duration_ms=10_000),
            ),
        ),
        duration_ms=120_000,
    )
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")

    def judge(run: WorldRun, expect: Expect) -> None:
        lease = _first_lease(run, "client-0")
        if not expect.that(lease is not None, "client 0 was leased permits"):
            return
        assert lease is not None
        lease_id, permits = lease["leaseId"], lease["permits"]
        drops = [e["t"] for e in run.trace.of_kind("drop") if e["leg"] == "reply"]
        expect.that(drops == [lease["t"]], "the reply carrying the lease was lost", drops)
        told = [r["t"] for r in answers(run, "client-0") if lease_id in str(r.get("body"))]
        expect.that(not told, "client 0 never heard of the lease", told)
        retired = [e["t"] for e in events(run, "lease_retired", leaseId=lease_id)]
        expect.that(len(retired) == 1, "the holder retired it once it expired", retired)
        store = HolderStore(run.world.holders["acct"].storage)
        left = [(row.lease_id, row.permits - row.released) for row in store.list_leases()]
        expect.that(
            left == [(lease_id, permits)],
            f"at the end its {permits} permits were still charged, and nothing else",
            left,
        )
        leaks = run.monitor.leaks[DOCUMENTED_LEAK]
        expect.that(leaks == 1, f"the monitor counted one `{DOCUMENTED_LEAK}`", dict(run.monitor.leaks))
        settled = [e["waiting"] for e in run.trace.of_kind("settled")]
        expect.that(settled == [0], "liveness was judged once, with every client idle", settled)
        peak = peak_in_use(run, 40_000)
        limit = config.holder.limit
        expect.that(
            peak == limit - permits,
            f"client 1's burst ran with only {limit - permits} of {limit} permits",
            f"peak in use {peak}",
        )
        blocked = {e["reason"] for e in run.trace.of_kind("blocked") if e["t"] > 40_000}
        expect.that(blocked == {"limit"}, "the rest of the burst was blocked by the limit", blocked)

    return Scenario(
        name="lease-lost-in-reply",
        description="a lease whose reply is lost is never settled: its capacity leaks for good (documented)",
        seed=14,
        config=config,
        faults=FaultPlan(drops=(lost,), faults_until_ms=10_000),
        check=Check(judge),
    )


def contended_returns_idle_headroom() -> Scenario:
    """Seed 001, "Leases": "When a round leaves demand unserved, the holder marks its replies
    `contended`, and each client returns the undrawn permits of leases in groups where it has
    nothing queued, so an idle lease cannot keep other clients waiting."

    Limit 4: client 0 gets a grant of 1 and a 3-permit lease in wf-1 at 2.010 s and draws
    nothing from it. Client 1 queues 2 in wf-1 at 5 s and is blocked: the idle lease holds
    the room. Client 0 asks for an item of another group at 8 s; its reply is `contended`, so
    it retires the wf-1 lease (nothing queued there) and reports it; the holder settles it
    and the next round serves client 1, long before the lease would have expired (62 s).
    """
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(permits_per_lease=3, ttl_ms=60_000)),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=60_000),
                Arrival(at_ms=5_000, client=1, count=2, duration_ms=10_000),
                Arrival(at_ms=8_000, client=0, count=1, group="wf-2", duration_ms=5_000),
            ),
        ),
        duration_ms=40_000,
    )

    def judge(run: WorldRun, expect: Expect) -> None:
        lease = _first_lease(run, "client-0")
        if not expect.that(lease is not None, "client 0 was leased permits in wf-1"):
            return
        assert lease is not None
        lease_id = lease["leaseId"]
        drawn = [e for e in run.trace.of_kind("admit") if e["lease"] == lease_id]
        expect.that(not drawn, "client 0 drew nothing from it", len(drawn))
        blocked_1 = [r["t"] for r in answers(run, "client-1") if (r.get("body") or {}).get("blocked")]
        expect.that(bool(blocked_1), "client 1 was blocked while the idle lease held the room", blocked_1)
        contended = [r["t"] for r in answers(run, "client-0") if (r.get("body") or {}).get("contended")]
        if not expect.that(bool(contended), "client 0 heard a `contended` reply"):
            return
        returned = [
            r
            for r in _lease_reports(run, "client-0", lease_id)
            if r.get("retired") is True and r["t"] > contended[0]
        ]
        expect.that(
            bool(returned) and returned[0]["drawn"] == 0,
            "then it reported the idle lease retired, undrawn",
            returned[:1],
        )
        echoes = [(t, e["permits"]) for t, e in lease_echoes(run, "client-0", lease_id)]
        settled_at = next((t for t, n in echoes if n == 0), None)
        expect.that(settled_at is not None, "the holder settled it to nothing", echoes)
        first_for_1 = events(run, "grant", client="client-1")
        expect.that(
            bool(first_for_1)
            and settled_at is not None
            and first_for_1[0]["t"] > settled_at
            and first_for_1[0]["permits"] == 2,
            "the next round served client 1's 2 permits",
            [(g["t"], g["permits"]) for g in first_for_1[:1]],
        )
        expires_at = lease["t"] + 60_000
        expect.that(
            bool(first_for_1) and first_for_1[0]["t"] < expires_at,
            "long before the idle lease would have expired",
            f"lease expiry {expires_at}",
        )

    return Scenario(
        name="contended-returns-idle-headroom",
        description="a `contended` reply makes a client return an idle lease's headroom to the others",
        seed=15,
        config=config,
        faults=FaultPlan(),
        check=Check(judge),
    )


ALL = (
    lease_heartbeat,
    unreported_lease_retired,
    retired_report_settles,
    lease_lost_in_reply,
    contended_returns_idle_headroom,
)
