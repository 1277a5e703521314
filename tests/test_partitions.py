"""Asymmetric partitions between a client and its holder, in each direction.

A partition that loses only one direction of the link tells a different story each way, and
each has its own observable outcome (seed 001, "After failure"):

- **client to holder lost** (requests dropped, the holder never hears): nothing is allocated
  and nothing is written; the client's calls time out and it retries; once the link heals it
  is served. The holder's accounting never moves during the window.
- **holder to client lost** (replies dropped, the holder hears everything): every round
  commits a grant the client never learns of. Each is charged until its claim deadline, then
  reclaimed ("the round commits but its reply is lost: permits stay reserved until the claim
  deadline"); once the link heals the client gets a new grant.

A third case: claims made, then the client's *reports* are lost (releases unheard): the holder
keeps charging claimed permits until it hears the release, never less than is running.
"""

from __future__ import annotations

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun, run_world
from semsim.scenarios.base import HOLDER, answers, delivered_at, events, in_use_series, rounds, sends
from semsim.world.faults import Drop, FaultPlan
from semsim.world.workload import Arrival, Workload

START_MS, END_MS = 500, 30_000


def _world(leg: str) -> WorldRun:
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=None),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=5_000),)
        ),
        duration_ms=90_000,
    )
    cut = Drop(leg=leg, start_ms=START_MS, end_ms=END_MS, src="client-0", dst=HOLDER, method="permits")
    return run_world(config, FaultPlan(drops=(cut,)), seed=5)


def test_requests_lost_the_holder_hears_nothing_allocates_nothing_and_serves_after_healing() -> None:
    run = _world("request")
    assert run.result.outcome == "completed", run.result.detail
    during = [s for s in sends(run, "client-0") if s["t"] < END_MS]
    assert len(during) >= 2, "the client kept asking during the window"
    assert all(delivered_at(run, s["msg"]) is None for s in during), "none of them reached the holder"
    timed_out = {e["msg"] for e in run.trace.of_kind("timeout") if e["src"] == "client-0"}
    assert timed_out == {s["msg"] for s in during}, "each call timed out at the client"
    # Nothing was allocated or written while the holder heard nothing.
    assert rounds(run, 0, END_MS) == []
    assert events(run, "grant") == [] or min(g["t"] for g in events(run, "grant")) >= END_MS
    assert [e["t"] for e in events(run, "instance", object=HOLDER)][:1] >= [END_MS]
    # Once healed, the client was served: both items ran, after the window.
    admits = run.trace.of_kind("admit")
    assert len(admits) == 2
    assert min(a["t"] for a in admits) >= END_MS
    assert run.trace.of_kind("grant_reclaimed") == []


def test_replies_lost_every_round_commits_a_grant_that_is_charged_until_reclaimed() -> None:
    run = _world("reply")
    assert run.result.outcome == "completed", run.result.detail
    grants = [g for g in events(run, "grant") if g["t"] < END_MS]
    assert len(grants) >= 2, "the holder heard the requests and committed grants"
    heard = [a for a in answers(run, "client-0") if a["t"] < END_MS and "body" in a]
    assert heard == [], "the client heard none of them"
    lost = {e["msg"] for e in run.trace.of_kind("drop") if e["leg"] == "reply"}
    assert {s["msg"] for s in sends(run, "client-0") if s["t"] < grants[-1]["t"]} <= lost
    assert run.trace.of_kind("claim") == [] or min(c["t"] for c in run.trace.of_kind("claim")) >= END_MS
    # Each orphaned grant stayed charged until its claim deadline, then came back in full.
    timeout_ms = 10_000
    reclaimed = {e["grantId"]: e for e in run.trace.of_kind("grant_reclaimed")}
    for grant in grants:
        back = reclaimed.get(grant["grant"])
        assert back is not None, grant
        assert back["permits"] == grant["permits"]
        assert back["t"] == grant["t"] + timeout_ms
        charged = [r["usage"]["granted"] for r in rounds(run, grant["t"], back["t"])]
        assert all(n >= grant["permits"] for n in charged)
    # While the grants were charged, nothing actually ran: the holder over-counted, safely.
    assert all(n == 0 for t, n in in_use_series(run) if t < END_MS)
    # Once healed, a new grant reached the client and both items ran.
    admits = run.trace.of_kind("admit")
    assert len(admits) == 2
    assert min(a["t"] for a in admits) >= END_MS
    assert {a["grant"] for a in admits}.isdisjoint(g["grant"] for g in grants)


def test_reports_lost_after_claiming_keep_the_permits_charged_until_a_release_is_heard() -> None:
    # The first round's reply arrives (claims made); from 3 s the client's messages are
    # lost until 30 s, so the holder hears no release although the items end at 8 s.
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=None),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=5_000),)
        ),
        duration_ms=90_000,
    )
    cut = Drop(leg="request", start_ms=3_000, end_ms=END_MS, src="client-0", dst=HOLDER, method="permits")
    run = run_world(config, FaultPlan(drops=(cut,)), seed=5)
    assert run.result.outcome == "completed", run.result.detail
    released = [e["t"] for e in run.trace.of_kind("release")]
    assert len(released) == 2
    assert max(released) < END_MS
    # No reclaim: the permits were claimed in time; they stay charged until a report arrives.
    assert run.trace.of_kind("grant_reclaimed") == []
    # The holder heard no release until the link healed, so it charged both permits (it
    # could not know they had ended); the first report that got through released both.
    heard = [
        (at, s["body"]["grants"])
        for s in sends(run, "client-0")
        if (at := delivered_at(run, s["msg"])) is not None and s["body"]["grants"]
    ]
    assert all(report["released"] == 0 for at, reports in heard if at < END_MS for report in reports)
    after = [reports for at, reports in heard if at >= END_MS]
    assert after
    assert [r["released"] for r in after[0]] == [2]
    holder_rows = (
        run.world.holders["acct"]
        .storage.execute("SELECT count(*) FROM durability_semaphore_grants")
        .fetchone()
    )
    assert holder_rows == (0,), "the release heard after healing settled the grant"
