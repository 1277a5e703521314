"""Reports never free capacity twice: replayed, reordered, duplicated and forged reports.

Seed 001's headline promise, told as stories. Each check first asserts the
fault really happened (a copy delivered, a stale report overtaken, a lie
sent), then what the reference answers, then the promise itself through
:func:`_frees_once`: at every round the holder charged at least what was
actually running (the oracle of admitted, unreleased items), and no more
than the limit ever ran.

Timings: a message takes 5 ms; the first round runs at 2.010 s; the forger
(``semsim.world.forger``) lies every 3 s from 3 s on.
"""

from __future__ import annotations

import math
from typing import Any

from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, WorldRun
from semsim.scenarios.base import (
    HOLDER,
    Check,
    Expect,
    Scenario,
    answers,
    events,
    in_use_series,
    lease_echoes,
    peak_in_use,
    rounds,
    sends,
)
from semsim.world.faults import Cancel, FaultPlan
from semsim.world.workload import Arrival, Workload

GRANT_TIMEOUT_MS = 10_000
LIMIT = 2


def _release_story() -> WorldConfig:
    """Client 0 runs a 10 s and a 25 s item (limit 2); client 1 queues two more at 3 s.

    Client 0's first release report frees exactly one permit while its other
    item runs on: a report that freed it twice would let client 1 run two.
    """
    return WorldConfig(
        holder=HolderSpec(limit=LIMIT, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=10_000),
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=25_000),
                Arrival(at_ms=3_000, client=1, count=2, duration_ms=5_000),
            ),
        ),
        duration_ms=60_000,
    )


def _frees_once(run: WorldRun, expect: Expect, limit: int) -> None:
    """The promise: every round charged at least what ran, and no more than ``limit`` ever ran."""
    series = in_use_series(run)

    def running_at(t: int) -> int:
        return next((n for at, n in reversed(series) if at <= t), 0)

    short = [
        (r["t"], r["usage"]["granted"] + r["usage"]["leased"], running_at(r["t"]))
        for r in rounds(run)
        if r["usage"]["granted"] + r["usage"]["leased"] < running_at(r["t"])
    ]
    expect.that(not short, "no round charged less than was running (nothing freed twice)", short[:3])
    expect.that(peak_in_use(run) <= limit, f"never more than {limit} ran", peak_in_use(run))
    admitted, released = len(run.trace.of_kind("admit")), len(run.trace.of_kind("release"))
    expect.that(admitted == released > 0, "every admitted item ran and was released", (admitted, released))


def _released(body: dict[str, Any]) -> dict[str, int]:
    return {g["grantId"]: g["released"] for g in body.get("grants", [])}


def _held_at_grants(run: WorldRun, client: str) -> list[tuple[int, int]]:
    """At each grant to ``client``: ``(t, permits it then held)``, this grant's included.

    A grant is held from the round that made it until the item admitted on it
    is released, or the alarm reclaims it unclaimed; a copy of a late request
    may well be granted a permit the client already gave back, and reclaimed.
    """
    item_grant = {e["item"]: e["grant"] for e in events(run, "admit", client=client)}
    ended: dict[str, float] = {}
    for e in events(run, "release", client=client):
        ended.setdefault(item_grant[e["item"]], e["t"])
    for e in events(run, "grant_reclaimed", clientId=client):
        ended.setdefault(e["grantId"], e["t"])
    grants = events(run, "grant", client=client)
    return [
        (g["t"], sum(h["permits"] for h in grants if h["t"] <= g["t"] < ended.get(h["grant"], math.inf)))
        for g in grants
    ]


def _running_at(run: WorldRun, client: str, t: int) -> int:
    """How many of ``client``'s items ran at ``t`` (admitted, not yet released)."""
    released = {e["item"]: e["t"] for e in events(run, "release", client=client)}
    return sum(
        1 for e in events(run, "admit", client=client) if e["t"] <= t < released.get(e["item"], math.inf)
    )


def reports_duplicated() -> Scenario:
    """Seed 001, "Grants and reports": "Counts only move forward and are clamped to the grant,
    so lost, repeated, or reordered reports can never free capacity twice."

    Every message is delivered twice, the copy up to 15 s late, so each release report
    reaches the holder again, often long after the grant it releases was settled. The
    copies change nothing: while an item of client 0 runs, client 1 never holds more than
    the one permit left.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        delivered: dict[str, int] = {}
        for event in run.trace.of_kind("deliver"):
            delivered[event["msg"]] = delivered.get(event["msg"], 0) + 1
        releasing = [s["msg"] for s in sends(run, "client-0") if any(_released(s["body"]).values())]
        twice = [msg for msg in releasing if delivered.get(msg, 0) == 2]
        expect.that(bool(twice), "a report releasing permits reached the holder twice", len(twice))
        held = [permits for t, permits in _held_at_grants(run, "client-1") if _running_at(run, "client-0", t)]
        expect.that(
            max(held, default=0) <= 1,
            "while an item of client 0 ran, client 1 held at most the one permit left",
            held,
        )
        _frees_once(run, expect, LIMIT)

    return Scenario(
        name="reports-duplicated",
        description="every report is delivered twice, copies up to 15 s late: none frees a permit twice",
        seed=11,
        config=_release_story(),
        faults=FaultPlan(duplicate=1.0, reorder_ms=15_000, faults_until_ms=40_000),
        check=Check(judge),
    )


def reports_reordered() -> Scenario:
    """Seed 001, "Behind the scenes": "High-water marks only move forward and are clamped, so
    repeated or reordered reports cannot return the same capacity twice."

    Half the messages are held back up to 9 s, past the client's 5 s call timeout: the
    client sends newer reports, which overtake the held one, and the held one arrives
    second (in about half of all seeds; this seed is one). The stale report rewinds
    nothing: no answer about a grant goes back on a claim, and what ran stays charged
    until its release.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        stale = []
        for client in ("client-0", "client-1"):
            trips = [
                (s["t"], d["t"], s["msg"])
                for s in sends(run, client)
                if s["body"].get("grants")
                for d in run.trace.of_kind("deliver")
                if d["msg"] == s["msg"]
            ]
            stale += [
                (older, newer)
                for sent, at, older in trips
                for sent_later, at_later, newer in trips
                if sent < sent_later and at_later < at
            ]
        expect.that(bool(stale), "a report sent earlier reached the holder after one sent later", stale[:2])
        claimed: dict[str, int] = {}
        rewound = []
        for client in ("client-0", "client-1"):
            for reply in answers(run, client):
                for result in (reply.get("body") or {}).get("grantResults", []):
                    if result["status"] != "not_found" and result["claimed"] < claimed.get(
                        result["grantId"], 0
                    ):
                        rewound.append(result)
                    claimed[result["grantId"]] = max(claimed.get(result["grantId"], 0), result["claimed"])
        expect.that(not rewound, "no answer about a grant went back on a claim", rewound[:2])
        _frees_once(run, expect, LIMIT)

    return Scenario(
        name="reports-reordered",
        description="reports overtake each other: the stale one arriving second rewinds nothing",
        seed=12,
        config=_release_story(),
        faults=FaultPlan(reorder=0.5, reorder_ms=9_000, faults_until_ms=40_000),
        check=Check(judge),
    )


def _forger_story() -> WorldConfig:
    """One plain client running 2 items of 4 s at 1, 9 and 17 s, limit 4, beside the forger."""
    return WorldConfig(
        holder=HolderSpec(limit=4, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        workload=Workload(
            clients=1,
            plain_clients=1,
            script=tuple(
                Arrival(at_ms=t, client=0, count=2, duration_ms=4_000) for t in (1_000, 9_000, 17_000)
            ),
        ),
        duration_ms=60_000,
    )


def forged_grant_reports() -> Scenario:
    """Seed 001, "Grants and reports": "Counts only move forward and are clamped to the grant".

    A forging client asks for 3 permits at a time and every report it sends lies:
    released above claimed, a claim above the grant, or a rewind. The holder answers a
    claim above the grant with the grant's permits, and the honest client beside it runs
    within the limit throughout.
    """
    config = _forger_story()

    def judge(run: WorldRun, expect: Expect) -> None:
        lies = [e for e in run.trace.of_kind("fault") if e["fault"] == "forged_report"]
        kinds = {e["lie"] for e in lies}
        expect.that(
            kinds == {"released_above_claimed", "claim_above_permits", "rewind"},
            "the forger told every kind of lie about its grants",
            sorted(kinds),
        )
        permits = {g["grant"]: g["permits"] for g in run.trace.of_kind("grant")}
        over = [
            r
            for reply in answers(run, "forger")
            for r in (reply.get("body") or {}).get("grantResults", [])
            if r["claimed"] > permits.get(r["grantId"], 0)
        ]
        expect.that(not over, "no answer honoured a claim above its grant", over[:2])
        honoured = [
            r
            for reply in answers(run, "forger")
            for r in (reply.get("body") or {}).get("grantResults", [])
            if r["status"] == "ok" and r["claimed"] == permits.get(r["grantId"], -1)
        ]
        expect.that(bool(honoured), "claims above a grant were clamped to its permits", len(honoured))
        _frees_once(run, expect, 4)

    return Scenario(
        name="forged-grant-reports",
        description="every grant report of one client lies: the clamps hold, the honest one stays in bounds",
        seed=13,
        config=config,
        faults=FaultPlan(
            forged_reports=1.0,
            forged_lies=("released_above_claimed", "claim_above_permits", "rewind"),
            faults_until_ms=30_000,
        ),
        check=Check(judge),
    )


def malformed_report_rejected() -> Scenario:
    """Seed 001, "Grants and reports": reports are cumulative counts (non-negative integers);
    the reference's parser rejects a message with a negative count before anything is
    applied, so a malformed message changes nothing, not even its honest parts.

    One plain client works as in ``forged-grant-reports``. The forger holds a grant of 2 and
    every report it sends claims the whole grant but carries a -1 (in ``claimed`` or
    ``released``), with fresh demand beside it. Each such message is answered with an
    error; the grant is never claimed, so the alarm reclaims both permits at its deadline;
    the demand in those messages gets nothing.
    """
    config = _forger_story()

    def judge(run: WorldRun, expect: Expect) -> None:
        lying = {
            s["msg"]
            for s in sends(run, "forger")
            if any(r["claimed"] < 0 or r["released"] < 0 for r in s["body"]["grants"])
        }
        if not expect.that(len(lying) >= 2, "the forger sent reports with a negative count", len(lying)):
            return
        replies = [e for e in run.trace.of_kind("reply") if e["msg"] in lying]
        expect.that(
            bool(replies) and all("error" in e and "body" not in e for e in replies),
            "every message with a negative count was answered with an error",
            [sorted(e) for e in replies[:3]],
        )
        granted = [g for g in run.trace.of_kind("grant") if g["client"] == "forger"]
        if not expect.that(
            len(granted) == 1, "the forger's demand beside its lies got nothing", len(granted)
        ):
            return
        grant = granted[0]
        reclaimed = events(run, "grant_reclaimed", grantId=grant["grant"])
        expect.that(
            [(e["t"], e["permits"]) for e in reclaimed]
            == [(grant["t"] + GRANT_TIMEOUT_MS, grant["permits"])],
            "the grant was never claimed: the alarm took back every permit at its deadline",
            ([(e["t"], e["permits"]) for e in reclaimed], grant["t"] + GRANT_TIMEOUT_MS),
        )
        _frees_once(run, expect, 4)

    return Scenario(
        name="malformed-report-rejected",
        description="a message with a negative count is rejected whole: its honest parts change nothing",
        seed=13,
        config=config,
        faults=FaultPlan(forged_reports=1.0, forged_lies=("negative_count",), faults_until_ms=30_000),
        check=Check(judge),
    )


def _lease_story() -> WorldConfig:
    """Strict leases, limit 10, three permits a lease: client 0 is served at 2.010 s (a grant of
    2 and a lease of 3 it then draws), client 1 asks at 3 s and is served with the forger's lie."""
    return WorldConfig(
        holder=HolderSpec(
            limit=10, grant_timeout_ms=GRANT_TIMEOUT_MS, leases=LeaseSpec(permits_per_lease=3, ttl_ms=60_000)
        ),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=2, duration_ms=20_000),
                Arrival(at_ms=2_500, client=0, count=3, duration_ms=20_000),
                Arrival(at_ms=3_000, client=1, count=2, duration_ms=20_000),
                Arrival(at_ms=6_000, client=1, count=3, duration_ms=5_000),
            ),
        ),
        duration_ms=60_000,
    )


def _lease_lies(run: WorldRun, lie: str) -> list[dict[str, Any]]:
    return [e for e in run.trace.of_kind("fault") if e["fault"] == "forged_lease_report" and e["lie"] == lie]


def unknown_lease_report() -> Scenario:
    """Seed 001, "Leases": "A report for a lease the holder never knew is answered retired and
    its live footprint charged against that round."

    The forger reports a lease that never existed, with permits drawn, in the round that
    serves client 1. The holder echoes it retired (``expiresAt`` = now, no group, no
    permits) and charges the drawn permits against that round's lease budget: client 1's
    lease is smaller by exactly that much. Nothing is written, so the next round has the
    full budget again.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        lies = _lease_lies(run, "unknown_lease")
        if not expect.that(bool(lies), "the forger reported a lease that never existed", len(lies)):
            return
        first = lies[0]
        report = next(
            r
            for s in sends(run, "forger")
            for r in s["body"].get("leases", [])
            if r["leaseId"] == first["lease"]
        )
        debt = min(report["drawn"] - report["released"], 3)
        echoes = lease_echoes(run, "forger", first["lease"])
        expect.that(
            [(e["group"], e["permits"], e["expiresAt"] == t - 5) for t, e in echoes] == [("", 0, True)],
            "it was echoed retired: expiresAt now, no group, no permits",
            echoes,
        )
        if not echoes:
            return
        round_t = echoes[0][0] - 5
        leases = [e for e in run.trace.of_kind("lease_granted") if e["t"] == round_t]
        served = rounds(run, round_t, round_t + 1)
        expect.that(bool(served), "the lie was answered by a round", round_t)
        before = rounds(run, 0, round_t)
        used = before[-1]["usage"] if before else None
        # Round two's gross lease budget: the limit less every grant (client 0's 2, client 1's
        # new 2) and client 0's lease of 3; the debt comes off what is left.
        expected = min(3, max(0, 10 - 2 - 2 - 3 - debt))
        expect.that(
            [(e["clientId"], e["permits"]) for e in leases] == ([("client-1", expected)] if expected else []),
            f"client 1's lease that round was short by the {debt} permits charged",
            (leases, used),
        )
        _frees_once(run, expect, 10)

    return Scenario(
        name="unknown-lease-report",
        description="a report for a lease the holder never knew is echoed retired and charged for one round",
        seed=14,
        config=_lease_story(),
        faults=FaultPlan(forged_reports=1.0, forged_lies=("unknown_lease",), faults_until_ms=4_000),
        check=Check(judge),
    )


def foreign_lease_report() -> Scenario:
    """Seed 001, "Leases": "A report for a lease the holder never knew is answered retired and
    its live footprint charged against that round"; semaphore-leases.ts answers another
    client's lease the same way (``lease.client_id !== clientId``), with that lease's group
    and permits.

    The forger reports client 0's live lease as its own, drawn and released in full (or
    drawn and running). The holder echoes it to the forger retired, with the lease's own
    group and permits, and leaves the lease alone: client 0 goes on drawing from it, its
    later echoes stay live, and its footprint stays charged until client 0 reports.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        lies = _lease_lies(run, "foreign_lease")
        if not expect.that(bool(lies), "the forger reported another client's lease", len(lies)):
            return
        lease, victim = lies[0]["lease"], lies[0]["victim"]
        granted = [e for e in run.trace.of_kind("lease_granted") if e["leaseId"] == lease]
        echoes = lease_echoes(run, "forger", lease)
        expect.that(
            bool(granted)
            and bool(echoes)
            and all(
                (e["group"], e["permits"], e["expiresAt"])
                == (granted[0]["group"], granted[0]["permits"], t - 5)
                for t, e in echoes
            ),
            "the forger heard it retired, with the lease's own group and permits",
            (granted[:1], echoes[:2]),
        )
        after = [(t, e) for t, e in lease_echoes(run, victim, lease) if t > lies[0]["t"]]
        expect.that(
            bool(after) and after[0][1]["expiresAt"] > after[0][0],
            f"{victim}'s next echo of its lease was still live",
            after[:1],
        )
        retired = [e for e in run.trace.of_kind("lease_retired") if e["leaseId"] == lease]
        expect.that(not retired, "the holder did not retire the lease", retired)
        _frees_once(run, expect, 10)

    return Scenario(
        name="foreign-lease-report",
        description="a client reports another's lease: echoed retired to it, the lease itself untouched",
        seed=15,
        config=_lease_story(),
        faults=FaultPlan(forged_reports=1.0, forged_lies=("foreign_lease",), faults_until_ms=10_000),
        check=Check(judge),
    )


def replayed_lease_report() -> Scenario:
    """Seed 001, "Leases": "Reports (`drawn`, `released` high-water marks) heartbeat a lease";
    "Counts only move forward", so a replayed report cannot free its permits twice.

    The forger replays, under client 0's own id, an old report on client 0's lease (the
    released mark it had a period earlier). The holder answers with the lease as it
    stands (its permits, live), and the footprint stays what client 0's own reports made it.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        lies = _lease_lies(run, "replayed_lease")
        if not expect.that(bool(lies), "the forger replayed an old lease report", len(lies)):
            return
        lease = lies[0]["lease"]
        granted = [e for e in run.trace.of_kind("lease_granted") if e["leaseId"] == lease]
        echoes = lease_echoes(run, "forger", lease)
        expect.that(
            bool(granted) and bool(echoes) and all(e["permits"] == granted[0]["permits"] for _, e in echoes),
            "the replay was answered with the lease's full permits (nothing settled)",
            echoes[:2],
        )
        settled = [
            e for e in run.trace.of_kind("lease_settled") if e["lease"] == lease and e["t"] < lies[0]["t"]
        ]
        expect.that(not settled, "the lease was live when replayed", settled)
        _frees_once(run, expect, 10)

    return Scenario(
        name="replayed-lease-report",
        description="an old lease report replayed under its client's id changes nothing",
        seed=16,
        config=_lease_story(),
        faults=FaultPlan(forged_reports=1.0, forged_lies=("replayed_lease",), faults_until_ms=12_000),
        check=Check(judge),
    )


def grant_claimed_in_part() -> Scenario:
    """Seed 001, "Grants and reports": "Permits a client never claims within `grantTimeoutMs`
    (default 10 seconds) are reclaimed"; "After failure": "Confirmed claims stay charged until
    released."

    Client 0 queues three 30-second items at 1 s; the round at 2.010 s grants it 3 (limit
    3), and at 2.012 s, before the reply arrives, the user cancels one. Client 0 claims 2 of
    the 3. At the claim deadline (2.010 + 10 s = 12.010 s: the holder's live timer) only the
    unclaimed permit is reclaimed, and client 1, queued since 5 s, gets that one permit;
    the two claimed ones run on until their items end at 32 s.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=3, duration_ms=30_000),
                Arrival(at_ms=5_000, client=1, count=2, duration_ms=5_000),
            ),
        ),
        duration_ms=60_000,
    )

    def judge(run: WorldRun, expect: Expect) -> None:
        grants = [g for g in run.trace.of_kind("grant") if g["client"] == "client-0"]
        if not expect.that(len(grants) == 1 and grants[0]["permits"] == 3, "client 0 was granted 3", grants):
            return
        grant = grants[0]
        cancelled = [e["item"] for e in run.trace.of_kind("cancel")]
        expect.that(cancelled == ["client-0/item-3"], "the newest item was cancelled", cancelled)
        claims = [(e["grant"], e["items"]) for e in run.trace.of_kind("claim") if e["client"] == "client-0"]
        expect.that(claims == [(grant["grant"], 2)], "client 0 claimed 2 of the 3", claims)
        deadline = grant["t"] + GRANT_TIMEOUT_MS
        reclaimed = [(e["grantId"], e["permits"], e["t"]) for e in run.trace.of_kind("grant_reclaimed")]
        expect.that(
            reclaimed == [(grant["grant"], 1, deadline)],
            f"only the unclaimed permit came back, at the deadline ({deadline} ms)",
            reclaimed,
        )
        to_1 = [(g["t"], g["permits"]) for g in run.trace.of_kind("grant") if g["client"] == "client-1"]
        expect.that(
            bool(to_1) and to_1[0][1] == 1 and deadline <= to_1[0][0] < deadline + 2_100,
            "client 1 got that one permit in the next round",
            to_1,
        )
        running = [e["t"] for e in events(run, "release", client="client-0")]
        expect.that(
            len(running) == 2 and min(running) >= grant["t"] + 30_000,
            "the two claimed items ran on to their end",
            running,
        )
        charged = rounds(run, deadline, min(running, default=deadline))
        expect.that(
            bool(charged) and all(r["usage"]["granted"] >= 2 for r in charged),
            "the claimed permits stayed charged after the deadline",
            [(r["t"], r["usage"]["granted"]) for r in charged],
        )
        _frees_once(run, expect, 3)

    return Scenario(
        name="grant-claimed-in-part",
        description="an item cancelled before the claim: only the unclaimed permit is reclaimed",
        seed=17,
        config=config,
        faults=FaultPlan(cancels=(Cancel("client-0", 2_012),)),
        check=Check(judge),
    )


ALL = (
    reports_duplicated,
    reports_reordered,
    forged_grant_reports,
    malformed_report_rejected,
    unknown_lease_report,
    foreign_lease_report,
    replayed_lease_report,
    grant_claimed_in_part,
)

__all__ = ["ALL", "HOLDER"]
