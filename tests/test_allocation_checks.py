"""``reuse``, ``lease_fairness`` and ``no_overask`` (sim/check/allocation_checks.py) fail when they should.

Each check is fed hand-made histories first (a round's requests, replies,
the lease rows before and after it, the holder's usage after it; a request
and its client's own queue), one that breaks the rule and one that keeps
it. Then a bug is planted in the core with a catalogued mutant and a
simulated run must stop on the check's name, while the same world without
the bug completes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import semsim.check.lockstep
from semaphore_core import LeaseOptions, Over, Strict, Under
from semaphore_core.fixes import UNDER_SHARES_THE_LIMIT
from semaphore_core.protocol import (
    Blocked,
    Demand,
    GrantedPermits,
    LeaseGrant,
    LeaseReport,
    PermitGrant,
    PermitRequest,
)
from semaphore_core.queue import QueueClient, QueueItem
from semaphore_core.usage import GroupUsage, Usage
from semsim.check.allocation_checks import LEASE_FAIRNESS, NO_OVERASK, REUSE, AllocationChecks, grant_room
from semsim.check.events import Request
from semsim.check.invariants import INVARIANTS
from semsim.check.queue_lockstep import EXACT_QUEUE
from semsim.cli.main import main
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan, GroupLimitChange
from semsim.world.mutant_catalog import mutant
from semsim.world.workload import Arrival, Workload
from tests.helpers import NoLockstep, OveraskJudge, without_queue_model

KEY = "acct"
NOW = 10_000
TTL = 60_000


def _request(client: str, demand: Sequence[tuple[str, int, int]], leases: Any = ()) -> PermitRequest:
    """``demand``: (group, count, oldestAt); ``leases``: lease reports, or None for a plain client."""
    return PermitRequest(
        client_id=client,
        demand=tuple(Demand(group=g, count=n, oldest_at=t) for g, n, t in demand),
        grants=(),
        leases=None if leases is None else tuple(leases),
    )


def _reply(*blocked: tuple[str, str]) -> PermitGrant:
    return PermitGrant(
        grants=(),
        blocked=tuple(Blocked(group=g, reason=r) for g, r in blocked),  # type: ignore[arg-type]
        grant_results=(),
        next_request_at=NOW + 2_000,
    )


def _usage(limit: int, granted: int = 0, leased: int = 0, groups: dict[str, int] | None = None) -> Usage:
    return Usage(
        limit=limit,
        granted=granted,
        leased=leased,
        available=0,  # never read by the checks: they compute the room themselves
        groups={g: GroupUsage(granted=n, limit=None) for g, n in (groups or {}).items()},
    )


def _lease(
    lease_id: str, client: str, permits: int, group: str = "g", created_at: int = NOW
) -> tuple[Any, ...]:
    """A lease row as ``SELECT *`` returns it."""
    return (lease_id, client, group, permits, 0, created_at, created_at + TTL, 0)


def _judge(
    requests: Sequence[PermitRequest],
    replies: Sequence[PermitGrant],
    usage: Usage,
    options: LeaseOptions | None = None,
    before: dict[str, tuple[Any, ...]] | None = None,
    after: dict[str, tuple[Any, ...]] | None = None,
    caps: dict[str, int | None] | None = None,
    fixes: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    checks = AllocationChecks()
    before = before or {}
    checks.committed(KEY, {"leases": before}, {"leases": {**before, **(after or {})}}, usage, caps or {})
    return checks.round(KEY, options, fixes, requests, replies, NOW)


def test_the_three_names_are_invariants_of_every_run() -> None:
    assert {REUSE, LEASE_FAIRNESS, NO_OVERASK} <= set(INVARIANTS)


# --- reuse ------------------------------------------------------------------------------------------


def test_reuse_fails_when_a_round_keeps_demand_waiting_on_the_limit_with_room_left() -> None:
    # Limit 3, one permit outstanding after the round, and b's demand blocked on the limit:
    # the two permits a report released were not offered.
    found = _judge([_request("b", [("g", 2, 5)], None)], [_reply(("g", "limit"))], _usage(3, granted=1))
    assert [name for name, _ in found] == [REUSE]
    assert "2 permits of the grants' pool were left unoffered" in found[0][1]
    assert "b/g" in found[0][1]


def test_reuse_holds_when_the_round_used_the_room() -> None:
    assert _judge([_request("b", [("g", 2, 5)], None)], [_reply(("g", "limit"))], _usage(3, granted=3)) == []


def test_reuse_holds_above_a_lowered_limit() -> None:
    assert _judge([_request("b", [("g", 2, 5)], None)], [_reply(("g", "limit"))], _usage(3, granted=5)) == []


@pytest.mark.parametrize("reason", ["group_limit", "not_permitted", "limit_resolution_error"])
def test_reuse_ignores_demand_that_waits_for_something_other_than_the_limit(reason: str) -> None:
    assert _judge([_request("b", [("g", 2, 5)], None)], [_reply(("g", reason))], _usage(3)) == []


@pytest.mark.parametrize(
    ("provisioning", "fixes", "room"),
    [
        (None, frozenset(), 10 - 4),  # no leases: the limit less grants
        (Strict(), frozenset(), 10 - 4 - 3),  # strict: lease footprint shares the pool
        (Over(extra=5), frozenset(), 10 - 4),  # over: leases have their own budget
        (Under(reserve=4), frozenset(), 10 - 4 - 4),  # under: the grants' pool is limit - reserve
        (Under(reserve=2), frozenset({UNDER_SHARES_THE_LIMIT}), 10 - 4 - 3),  # F2 fix: and the whole limit
    ],
)
def test_the_grants_pool_per_mode(provisioning: Any, fixes: frozenset[str], room: int) -> None:
    options = None if provisioning is None else LeaseOptions(provisioning=provisioning)
    assert grant_room(options, fixes, limit=10, granted=4, leased=3) == room


# --- lease_fairness ------------------------------------------------------------------------------------


def _three_candidates() -> list[PermitRequest]:
    return [_request(c, [("g", 0, t)]) for c, t in (("young", 9), ("old", 1), ("mid", 5))]


def test_lease_fairness_holds_for_the_references_equal_capped_shares() -> None:
    # 10 permits, three candidates, permits_per_lease 2: min(2, 10 // 3) = 2 each.
    after = {"l1": _lease("l1", "old", 2), "l2": _lease("l2", "mid", 2), "l3": _lease("l3", "young", 2)}
    found = _judge(
        _three_candidates(),
        [_reply()] * 3,
        _usage(10, leased=6),
        LeaseOptions(permits_per_lease=2),
        after=after,
    )
    assert found == []


def test_lease_fairness_fails_on_a_share_above_permits_per_lease() -> None:
    after = {"l1": _lease("l1", "old", 3)}
    found = _judge(
        [_request("old", [("g", 0, 1)])],
        [_reply()],
        _usage(10),
        LeaseOptions(permits_per_lease=2),
        after=after,
    )
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "share above permits_per_lease 2" in found[0][1]
    assert "expected [old/g:2], issued [old/g:3]" in found[0][1]


def test_lease_fairness_fails_when_the_newest_demand_is_served_first_when_short() -> None:
    # Two permits, three candidates: the two oldest get one each.
    after = {"l1": _lease("l1", "young", 1), "l2": _lease("l2", "mid", 1)}
    options = LeaseOptions(permits_per_lease=4)
    found = _judge(_three_candidates(), [_reply()] * 3, _usage(2), options, after=after)
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "oldest first when short" in found[0][1]
    assert "expected [mid/g:1, old/g:1]" in found[0][1]


def test_lease_fairness_fails_on_unequal_shares() -> None:
    after = {"l1": _lease("l1", "old", 3), "l2": _lease("l2", "mid", 1), "l3": _lease("l3", "young", 1)}
    found = _judge(
        _three_candidates(), [_reply()] * 3, _usage(6), LeaseOptions(permits_per_lease=4), after=after
    )
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "equal share" in found[0][1]


def test_lease_fairness_fails_on_a_lease_beyond_max_clients_per_group() -> None:
    after = {"l1": _lease("l1", "old", 2), "l2": _lease("l2", "mid", 2)}
    options = LeaseOptions(permits_per_lease=2, max_clients_per_group=1)
    found = _judge(_three_candidates(), [_reply()] * 3, _usage(10), options, after=after)
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "a lease to mid in g, though it is not a candidate, or beyond max_groups" in found[0][1]


def test_lease_fairness_fails_on_a_lease_to_a_client_that_holds_usable_headroom() -> None:
    # old's lease l0 has 4 permits and old reports 1 drawn: it may still draw 3, so no new lease.
    before = {"l0": _lease("l0", "old", 4, created_at=0)}
    request = _request("old", [("g", 2, 1)], [LeaseReport("l0", drawn=1, released=0)])
    after = {"l1": _lease("l1", "old", 2)}
    found = _judge(
        [request], [_reply()], _usage(10, leased=6), LeaseOptions(permits_per_lease=2), before, after
    )
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "though it holds usable headroom there" in found[0][1]
    # Fully drawn, the lease leaves no headroom: a new lease is the reference's answer.
    drawn = _request("old", [("g", 2, 1)], [LeaseReport("l0", drawn=4, released=0)])
    assert (
        _judge([drawn], [_reply()], _usage(10, leased=6), LeaseOptions(permits_per_lease=2), before, after)
        == []
    )


def test_lease_fairness_fails_on_a_lease_past_the_groups_room() -> None:
    # within_group_limit, group capped at 3 with 2 granted: room for one leased permit.
    options = LeaseOptions(permits_per_lease=4, limited_groups="within_group_limit")
    usage = _usage(10, granted=2, groups={"g": 2})
    request = [_request("old", [("g", 0, 1)])]
    assert (
        _judge(request, [_reply()], usage, options, after={"l1": _lease("l1", "old", 1)}, caps={"g": 3}) == []
    )
    found = _judge(request, [_reply()], usage, options, after={"l1": _lease("l1", "old", 4)}, caps={"g": 3})
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "group cap: g's grants and leases exceed its limit 3" in found[0][1]


def test_lease_fairness_charges_unknown_leases_and_skips_ineligible_groups() -> None:
    # A report for a lease the holder never knew (3 live, capped at permits_per_lease 2) is
    # charged against the round: 5 - 2 = 3 left for one candidate, capped at 2.
    ghost = _request("old", [("g", 0, 1)], [LeaseReport("ghost", drawn=3, released=0)])
    options = LeaseOptions(permits_per_lease=2)
    assert _judge([ghost], [_reply()], _usage(5), options, after={"l1": _lease("l1", "old", 2)}) == []
    ghost3 = _request("old", [("g", 0, 1)], [LeaseReport("ghost", drawn=9, released=0)])
    assert _judge([ghost3], [_reply()], _usage(3), options, after={"l1": _lease("l1", "old", 1)}) == []
    # A capped group is excluded by default; a group blocked by policy always is.
    capped = _judge(
        [ghost], [_reply()], _usage(5), options, after={"l1": _lease("l1", "old", 2)}, caps={"g": 5}
    )
    assert "its group is not eligible" in capped[0][1]
    blocked = _judge(
        [ghost], [_reply(("g", "not_permitted"))], _usage(5), options, after={"l1": _lease("l1", "old", 2)}
    )
    assert "its group is not eligible" in blocked[0][1]


def test_lease_fairness_fails_when_a_candidate_goes_without() -> None:
    found = _judge([_request("old", [("g", 0, 1)])], [_reply()], _usage(4), LeaseOptions(permits_per_lease=2))
    assert [name for name, _ in found] == [LEASE_FAIRNESS]
    assert "expected [old/g:2], issued []" in found[0][1]


def test_a_plain_client_is_never_a_lease_candidate() -> None:
    assert _judge([_request("old", [("g", 0, 1)], None)], [_reply()], _usage(4), LeaseOptions()) == []


# --- no_overask ------------------------------------------------------------------------------------------


def _queue_with_a_claimed_grant() -> QueueClient:
    """Three items queued, then a grant of 2 claimed: one item is still queued."""
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    queue.enqueue([QueueItem(f"item-{n}", KEY, "g") for n in range(3)], now=0)
    grant = GrantedPermits(grant_id="g-1", group="g", permits=2)
    queue.on_grant(KEY, PermitGrant(grants=(grant,), blocked=(), grant_results=(), next_request_at=0), now=1)
    return queue


def test_no_overask_holds_for_what_the_queue_asks() -> None:
    queue = _queue_with_a_claimed_grant()
    request = queue.build_request(KEY, now=2)
    assert [(d.group, d.count) for d in request.demand] == [("g", 1)]
    assert OveraskJudge(queue._conn)(KEY, request, now=2) is None


def test_no_overask_fails_on_demand_a_grant_already_covers() -> None:
    queue = _queue_with_a_claimed_grant()
    found = OveraskJudge(queue._conn)(KEY, _request("a", [("g", 3, 0)]), now=2)
    assert found == (
        f"{KEY}: a asked for 3 permits in g but only 1 of its queued items are uncovered "
        "(1 queued, 0 undrawn lease headroom)"
    )


def test_no_overask_counts_a_groups_entries_together() -> None:
    queue = _queue_with_a_claimed_grant()
    twice = _request("a", [("g", 1, 0), ("g", 1, 0)])
    assert OveraskJudge(queue._conn)(KEY, twice, now=2) is not None


def test_no_overask_fails_on_demand_a_live_lease_covers_until_it_expires() -> None:
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    lease = LeaseGrant(lease_id="l-1", group="g", permits=2, expires_at=5_000)
    reply = PermitGrant(grants=(), blocked=(), grant_results=(), next_request_at=0, leases=(lease,))
    queue.on_grant(KEY, reply, now=0)
    queue.enqueue([QueueItem(f"item-{n}", KEY, "g") for n in range(3)], now=1)
    checks = OveraskJudge(queue._conn)
    # Two of the three items can be drawn from the lease: asking for 3 asks for what it holds.
    found = checks(KEY, _request("a", [("g", 3, 1)]), now=2)
    assert found is not None
    assert "only 1 of its queued items are uncovered" in found
    assert checks(KEY, _request("a", [("g", 1, 1)]), now=2) is None
    # Expired, the lease covers nothing.
    assert checks(KEY, _request("a", [("g", 3, 1)]), now=5_000) is None


# --- each check sees a bug planted in the core, in a simulated run ---------------------------------------

#: Plain clients competing for two permits with short items: releases ride on requests.
CONTENDED = WorldConfig(
    holder=HolderSpec(limit=2),
    workload=Workload(clients=3, items_per_minute=30, duration_ms=(1_000, 4_000), until_ms=60_000),
    duration_ms=90_000,
)
LEASED = WorldConfig(
    holder=HolderSpec(limit=8, leases=LeaseSpec(provisioning="strict", permits_per_lease=2)),
    workload=Workload(clients=2, items_per_minute=20, until_ms=60_000),
    duration_ms=90_000,
)
#: Four clients' single items reach one round; limit 5: four grants, one permit left to lease.
SHORT_OF_LEASES = WorldConfig(
    holder=HolderSpec(limit=5, leases=LeaseSpec(provisioning="strict", permits_per_lease=1)),
    workload=Workload(clients=4, script=tuple(Arrival(at_ms=100 * n, client=n) for n in range(4))),
    duration_ms=30_000,
)

#: Leases within group limits, and wf-1 capped at 2 from 5 s on: grants fill the cap, leases must not.
CAPPED_GROUP = WorldConfig(
    holder=HolderSpec(
        limit=8,
        leases=LeaseSpec(provisioning="strict", permits_per_lease=2, limited_groups="within_group_limit"),
    ),
    workload=Workload(clients=2, items_per_minute=30, until_ms=60_000),
    duration_ms=90_000,
)
CAP_WF_1 = FaultPlan(group_limit_changes=(GroupLimitChange(5_000, KEY, "wf-1", 2),))
#: The reference's findings: F1 (grants ignore a group's leases) is what CAPPED_GROUP runs into.
FINDINGS = frozenset({"F1", "F2", "F3", "F4"})


@pytest.mark.parametrize(
    ("name", "config", "faults", "invariant"),
    [
        ("reports-after-allocation", CONTENDED, FaultPlan(), REUSE),
        ("lease-share-not-capped", LEASED, FaultPlan(), LEASE_FAIRNESS),
        ("lease-candidates-newest-first", SHORT_OF_LEASES, FaultPlan(), LEASE_FAIRNESS),
        ("lease-ignores-group-room", CAPPED_GROUP, CAP_WF_1, LEASE_FAIRNESS),
        ("client-asks-for-held-capacity", CONTENDED, FaultPlan(), NO_OVERASK),
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_planted_bug_stops_a_simulated_run_on_the_check(
    name: str,
    config: WorldConfig,
    faults: FaultPlan,
    invariant: str,
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # This check is under test: the literal model would name a core mutant first (exact_accounting).
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    without_queue_model(monkeypatch)  # and the queue model a queue mutant (exact_queue)
    faithful = run_world(config, faults, seed=seed, tolerated=FINDINGS)
    assert faithful.result.outcome == "completed", faithful.result
    with mutant(name).patch():
        planted = run_world(config, faults, seed=seed, tolerated=FINDINGS)
    assert (planted.result.outcome, planted.result.invariant) == ("violation", invariant), planted.result
    # The first violation no finding explains (tasks at the same instant may add more).
    first = next(e for e in planted.trace.of_kind("violation") if e["finding"] is None)
    assert first["invariant"] == invariant


@pytest.mark.parametrize(
    ("name", "invariant"),
    [("lease-share-not-capped", LEASE_FAIRNESS), ("reports-after-allocation", REUSE)],
)
def test_replay_judges_every_round_of_recorded_traffic(
    name: str, invariant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    example = str(Path(__file__).resolve().parent.parent / "examples" / "traffic.jsonl")
    assert main(["replay", example]) == 0
    assert "after every round: reuse, lease_fairness: all held" in capsys.readouterr().out
    with mutant(name).patch():
        assert main(["replay", example]) == 1
    assert f"VIOLATED {invariant} at " in capsys.readouterr().out


def test_no_overask_fails_on_demand_dated_by_a_younger_item() -> None:
    """The holder serves oldest demand first across clients: the date must be the oldest item's."""
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    queue.enqueue([QueueItem("item-0", KEY, "g")], now=10)
    queue.enqueue([QueueItem("item-1", KEY, "g")], now=20)
    checks = OveraskJudge(queue._conn)
    assert checks(KEY, queue.build_request(KEY, now=30), now=30) is None
    assert checks(KEY, _request("a", [("g", 2, 20)]), now=30) == (
        f"{KEY}: a dated its demand in g 20, but its oldest queued item there arrived at 10"
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_a_queue_that_dates_demand_by_its_newest_item_stops_a_simulated_run(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's literal model judges the holder, not the queue: beside the queue model
    (exact_queue, which names it first), only this check sees the wrong date."""
    faithful = run_world(CONTENDED, FaultPlan(), seed=seed, tolerated=FINDINGS)
    assert faithful.result.outcome == "completed", faithful.result
    build = QueueClient.build_request

    def newest_first(self: QueueClient, key: str, now: int) -> PermitRequest:
        request = build(self, key, now)
        groups = self._state.queued.get(key) or {}
        demand = tuple(attrs.evolve(d, oldest_at=groups[d.group][-1][0]) for d in request.demand)
        return attrs.evolve(request, demand=demand)

    monkeypatch.setattr(QueueClient, "build_request", newest_first)
    modelled = run_world(CONTENDED, FaultPlan(), seed=seed, tolerated=FINDINGS)
    assert modelled.result.invariant == EXACT_QUEUE, modelled.result
    without_queue_model(monkeypatch)
    planted = run_world(CONTENDED, FaultPlan(), seed=seed, tolerated=FINDINGS)
    assert (planted.result.outcome, planted.result.invariant) == ("violation", NO_OVERASK), planted.result
    assert "dated its demand in" in planted.result.detail


def test_no_overask_judges_the_demand_as_sent_on_the_wire() -> None:
    """The holder receives the wire's dict: a demand serialised wrongly is judged, not the object."""
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    queue.enqueue([QueueItem("item-0", KEY, "g")], now=5_000)
    request = queue.build_request(KEY, now=6_000)
    judge = OveraskJudge(queue._conn)
    assert judge.checker is not None
    wire = request.to_wire()
    judge.found.clear()
    judge.checker.on_request(Request(6_000, KEY, "a", request, wire))
    assert judge.found == []
    in_seconds = {**wire, "demand": [{**wire["demand"][0], "oldestAt": 5}]}
    judge.checker.on_request(Request(6_000, KEY, "a", request, in_seconds))
    found = [detail for _, detail in judge.found]
    assert found == [f"{KEY}: a dated its demand in g 5, but its oldest queued item there arrived at 5000"]
    doubled = {**wire, "demand": [{**wire["demand"][0], "count": 2}]}
    judge.found.clear()
    judge.checker.on_request(Request(6_000, KEY, "a", request, doubled))
    assert "a asked for 2 permits in g but only 1" in judge.found[0][1]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_demand_serialised_in_seconds_stops_a_simulated_run(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        Demand,
        "to_wire",
        lambda self: {"group": self.group, "count": self.count, "oldestAt": self.oldest_at // 1000},
    )
    modelled = run_world(CONTENDED, FaultPlan(), seed=seed, tolerated=FINDINGS)
    assert modelled.result.invariant == EXACT_QUEUE, modelled.result  # the request as sent
    without_queue_model(monkeypatch)
    planted = run_world(CONTENDED, FaultPlan(), seed=seed, tolerated=FINDINGS)
    assert (planted.result.outcome, planted.result.invariant) == ("violation", NO_OVERASK), planted.result
    assert "dated its demand in" in planted.result.detail
