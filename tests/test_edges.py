"""Edges at every layer: zero and maximum configuration values, ``usage()`` field by field in
every provisioning mode, and every ordering the reference sorts with ids that differ only in case.

A value that one layer handles and the next does not is the bug these look for: a limit of 0
that policy resolves but the round or the wire mishandles, a group limit of 0 that ``usage``
drops because 0 is falsy, a group or client named ``G`` that storage folds into ``g``.
Each test drives the value through every layer that reads it: the resolved policy, the
budgets, the round (replies as the wire carries them), ``usage()`` and its wire form.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from semaphore_core import Holder, HolderConfig, LeaseOptions, Over, Ratio, Strict, Under
from semaphore_core.collation import locale_key
from semaphore_core.config import budgets
from semaphore_core.numbers import MAX_DELAY_MS, MAX_SAFE_INTEGER
from semaphore_core.policy import GroupPolicy, group_policy, resolve_limit
from semaphore_core.protocol import parse_response
from semaphore_core.usage import GroupUsage, Usage
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.workload import Arrival, Workload
from tests.helpers import holder, ids, request, sync

FIXTURE = Path(__file__).parent / "fixtures" / "collation.json"


def leases(provisioning: Any = None, **options: Any) -> LeaseOptions:
    return LeaseOptions(provisioning=provisioning or Strict(), **options)


def wire_roundtrip(reply: dict[str, Any]) -> dict[str, Any]:
    """What a peer reads: the reply through JSON and the strict parser, back to the wire."""
    text = json.dumps(reply)
    return parse_response(json.loads(text)).to_wire()


# --- a limit of 0 through every layer -----------------------------------------------------------


@pytest.mark.parametrize("limit", [0, lambda: 0], ids=["int", "callable"])
@pytest.mark.parametrize(
    "provisioning", [None, Strict(), Under(reserve=5), Under(reserve=Ratio(1.0)), Over(extra=0)]
)
def test_a_limit_of_0_admits_nothing_at_every_layer(limit: Any, provisioning: Any) -> None:
    config: dict[str, Any] = {"limit": limit}
    if provisioning is not None:
        config["leases"] = leases(provisioning)
    h = holder(**config)
    assert resolve_limit(h.config) == 0
    if provisioning is not None:
        budget = budgets(provisioning, 0)
        assert (budget.grants, budget.leases) == (0, 0)  # the reserve takes no permit it has not got
    lease_capable: list[tuple[Any, ...]] | None = [] if provisioning is not None else None
    [reply] = h.run_round([request("a", [("g", 3, 0)], leases=lease_capable)], now=0)
    assert reply == wire_roundtrip(reply)
    assert reply["grants"] == []
    assert reply["blocked"] == [{"group": "g", "reason": "limit"}]
    if provisioning is not None:
        assert reply["leases"] == []
        # An eligible lease candidate went unserved.
        assert reply.get("contended") is True
    assert h.usage(0) == Usage(limit=0, granted=0, leased=0, available=0, groups={})
    assert h.usage(0).to_wire() == {"limit": 0, "granted": 0, "leased": 0, "available": 0, "groups": {}}
    assert h.store.list_grants() == []
    assert h.store.list_leases() == []


def test_a_limit_lowered_to_0_keeps_running_work_charged_and_admits_nothing() -> None:
    level = {"limit": 3}
    h = holder(limit=lambda: level["limit"])
    [reply] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.sync(sync("a", [(grant, 3, 0)]), now=10)
    level["limit"] = 0
    [reply] = h.run_round([request("b", [("g", 1, 20)])], now=2_000)
    assert (reply["grants"], reply["blocked"]) == ([], [{"group": "g", "reason": "limit"}])
    usage = h.usage(2_000)
    assert (usage.limit, usage.granted, usage.available) == (0, 3, 0)
    assert usage.to_wire()["groups"] == {"g": {"granted": 3}}


@pytest.mark.parametrize("limited_groups", ["exclude", "within_group_limit"])
def test_a_group_limit_of_0_blocks_the_group_and_is_reported_not_dropped(limited_groups: Any) -> None:
    caps = {"g": 2}
    h = holder(
        limit=10,
        group_limit=lambda group: caps.get(group),
        leases=leases(limited_groups=limited_groups),
    )
    [first] = h.run_round([request("a", [("g", 2, 0), ("h", 1, 0)], leases=[])], now=0)
    assert [(g["group"], g["permits"]) for g in first["grants"]] == [("g", 2), ("h", 1)]
    caps["g"] = 0
    assert group_policy(h.config, "g") == GroupPolicy(limit=0)
    replies = h.run_round([request("b", [("g", 1, 10)], leases=[])], now=2_000)
    assert replies == [wire_roundtrip(r) for r in replies]
    [reply] = replies
    assert reply["grants"] == []
    assert reply["blocked"] == [{"group": "g", "reason": "group_limit"}]
    assert [lease["group"] for lease in reply["leases"]] == []  # no lease for a closed group
    usage = h.usage(2_000)
    assert usage.groups["g"] == GroupUsage(granted=2, limit=0)
    # A group limit of 0 is a limit: the wire form keeps it (a falsy-0 check would drop it).
    assert usage.to_wire()["groups"]["g"] == {"granted": 2, "limit": 0}
    assert "limit" not in usage.to_wire()["groups"]["h"]


def test_group_limit_0_from_the_start_never_grants_and_never_leases() -> None:
    h = holder(limit=10, group_limit=lambda group: 0, leases=leases(limited_groups="within_group_limit"))
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    assert (reply["grants"], reply["leases"]) == ([], [])
    assert reply["blocked"] == [{"group": "g", "reason": "group_limit"}]
    assert h.usage(0).groups == {}


# --- the maximum values -------------------------------------------------------------------------


def test_the_largest_limit_and_demand_round_trip_through_storage_usage_and_the_wire() -> None:
    h = holder(limit=MAX_SAFE_INTEGER, grant_timeout_ms=MAX_DELAY_MS, round_period_ms=MAX_DELAY_MS)
    [reply] = h.run_round([request("a", [("g", MAX_SAFE_INTEGER, 0)])], now=0)
    assert reply == wire_roundtrip(reply)
    assert reply["grants"][0]["permits"] == MAX_SAFE_INTEGER
    assert reply["nextRequestAt"] == MAX_DELAY_MS
    grant = reply["grants"][0]["grantId"]
    assert h.next_alarm_at() == MAX_DELAY_MS
    usage = h.usage(0)
    assert (usage.granted, usage.available) == (MAX_SAFE_INTEGER, 0)
    synced = h.sync(sync("a", [(grant, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)]), now=1)
    assert synced["grantResults"] == [{"grantId": grant, "claimed": MAX_SAFE_INTEGER, "status": "ok"}]
    assert h.usage(1) == Usage(
        limit=MAX_SAFE_INTEGER, granted=0, leased=0, available=MAX_SAFE_INTEGER, groups={}
    )


@pytest.mark.parametrize(
    "provisioning",
    [
        Strict(),
        Under(reserve=MAX_SAFE_INTEGER),
        Over(extra=MAX_SAFE_INTEGER),
        Over(extra=Ratio(MAX_SAFE_INTEGER)),
    ],
)
def test_the_largest_lease_options_hand_out_one_capped_lease(provisioning: Any) -> None:
    options = leases(
        provisioning,
        permits_per_lease=MAX_SAFE_INTEGER,
        ttl_ms=MAX_DELAY_MS,
        max_groups=MAX_SAFE_INTEGER,
        max_clients_per_group=MAX_SAFE_INTEGER,
    )
    h = holder(limit=MAX_SAFE_INTEGER, leases=options)
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    assert reply == wire_roundtrip(reply)
    [lease] = reply["leases"]
    assert lease["expiresAt"] == MAX_DELAY_MS
    # One candidate: an equal share of everything left, capped at permits_per_lease.
    budget = budgets(provisioning, MAX_SAFE_INTEGER)
    room = MAX_SAFE_INTEGER - 1 if budget.shared else budget.leases
    assert lease["permits"] == min(MAX_SAFE_INTEGER, room)
    assert h.usage(0).leased == lease["permits"]


def test_the_smallest_lease_options_one_group_one_client_one_permit_one_ms() -> None:
    options = leases(permits_per_lease=1, ttl_ms=1, max_groups=1, max_clients_per_group=1)
    h = Holder(sqlite3.connect(":memory:"), HolderConfig(limit=10, leases=options), new_id=ids())
    replies = h.run_round(
        [
            request("b", [("g", 1, 5), ("h", 1, 9)], leases=[]),
            request("a", [("g", 1, 5)], leases=[]),
        ],
        now=0,
    )
    issued = [(i, lease["group"], lease["permits"]) for i, r in enumerate(replies) for lease in r["leases"]]
    # max_groups 1: only g (oldest demand 5); max_clients_per_group 1: only "a" (ties by id).
    assert issued == [(1, "g", 1)]
    [lease] = h.store.list_leases()
    assert lease.expires_at == 1
    # A ttl of 1 ms: the next round retires it, and its footprint stays until reported.
    h.run_round([request("c", [("x", 0, 0)])], now=1)
    [retired] = h.store.list_leases()
    assert (retired.retired, h.usage(1).leased) == (1, 1)


def test_a_grant_timeout_of_1_ms_expires_a_claim_one_ms_later() -> None:
    h = holder(limit=5, grant_timeout_ms=1)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    assert h.next_alarm_at() == 1
    synced = h.sync(sync("a", [(grant, 2, 0)]), now=1)
    assert synced["grantResults"] == [{"grantId": grant, "claimed": 0, "status": "expired"}]
    assert h.usage(1).granted == 0


@pytest.mark.parametrize("provisioning", [Under(reserve=0), Under(reserve=Ratio(0)), Over(extra=0)])
def test_a_zero_reserve_or_extra_leases_nothing_and_grants_everything(provisioning: Any) -> None:
    h = holder(limit=4, leases=leases(provisioning))
    [reply] = h.run_round([request("a", [("g", 6, 0)], leases=[])], now=0)
    assert [g["permits"] for g in reply["grants"]] == [4]
    assert reply["leases"] == []
    assert h.usage(0) == Usage(limit=4, granted=4, leased=0, available=0, groups={"g": GroupUsage(4, None)})


# --- usage() field by field, in every provisioning mode ---------------------------------------


def _life(provisioning: Any) -> tuple[Holder, dict[str, Any]]:
    """Limit 10, leases of 3 (ttl 1 s): a grant of 2 and a lease, a claim and a draw, then the
    lease expires and is retired by a round whose other client reports a lease nobody knows."""
    h = holder(limit=10, leases=leases(provisioning, permits_per_lease=3, ttl_ms=1_000))
    seen: dict[str, Any] = {}
    [reply] = h.run_round([request("a", [("g", 2, 0)], leases=[])], now=0)
    seen["first"] = h.usage(0)
    seen["first_round"] = h.round([], now=0).usage  # an empty round's view, at the same instant
    grant, lease = reply["grants"][0]["grantId"], reply["leases"][0]["leaseId"]
    seen["lease_permits"] = reply["leases"][0]["permits"]
    h.sync(sync("a", [(grant, 1, 0)], leases=[(lease, 1, 0)]), now=10)
    seen["retire"] = h.round([request("z", [("k", 1, 20)], leases=[("ghost", 2, 0)])], now=1_500)
    seen["later"] = h.usage(1_500)
    return h, seen


@pytest.mark.parametrize(
    ("provisioning", "first_available", "later_leased", "later_available", "deadline_available"),
    [
        # Strict: grants and footprint share 10. Grant 2, lease 3: 10 - 2 - 3 = 5. At 1.5 s
        # "z" gets 1 and a lease of 2 (7 left, less footprint 3 and the unknown debt 2):
        # 10 - 3 - 5 = 2. At the deadline 1 of "a"'s 2 is no longer charged: 10 - 2 - 5 = 3.
        (Strict(), 5, 5, 2, 3),
        # Under, reserve 4: grants get 6, the lease comes from the reserve: 6 - 2 = 4. At 1.5 s
        # footprint 3 and debt 2 exceed the reserve: no lease for "z". 6 - 3 = 3, then 6 - 2.
        (Under(reserve=4), 4, 3, 3, 4),
        # Over, extra 4: grants get 10, the lease sits above the limit: 10 - 2 = 8, 7, 8.
        (Over(extra=4), 8, 3, 7, 8),
    ],
    ids=["strict", "under", "over"],
)
def test_usage_field_by_field(
    provisioning: Any, first_available: int, later_leased: int, later_available: int, deadline_available: int
) -> None:
    h, seen = _life(provisioning)
    assert seen["lease_permits"] == 3
    assert seen["first"] == Usage(
        limit=10, granted=2, leased=3, available=first_available, groups={"g": GroupUsage(2, None)}
    )
    assert seen["first"] == seen["first_round"]  # usage() and a round's usage agree, field by field

    # At 1.5 s the lease has expired: the round retired it, and its whole footprint (3, less 0
    # released) stays. The unknown lease's debt (2) is charged in that round only: usage()
    # reads rows, so it never shows it, and the ghost is echoed as expired.
    retire = seen["retire"]
    assert next((r.retired, r.permits - r.released) for r in h.store.list_leases()) == (1, 3)
    assert seen["later"] == Usage(
        limit=10,
        granted=3,
        leased=later_leased,
        available=later_available,
        groups={"g": GroupUsage(2, None), "k": GroupUsage(1, None)},
    )
    assert seen["later"] == retire.usage
    [ghost] = [e for e in retire.replies[0].leases or () if e.lease_id == "ghost"]
    assert (ghost.permits, ghost.expires_at) == (0, 1_500)

    # After "a"'s claim deadline (10 s) and before any reclaim, usage() already counts only
    # what was claimed (1 of 2): unclaimed permits past their deadline are not charged.
    deadline = h.usage(10_000)
    assert deadline == Usage(
        limit=10,
        granted=2,
        leased=later_leased,
        available=deadline_available,
        groups={"g": GroupUsage(1, None), "k": GroupUsage(1, None)},
    )
    h.reclaim_expired(10_000)
    assert h.usage(10_000) == deadline  # reclaiming changes rows, not what usage() reports


def test_unknown_lease_debt_is_charged_against_that_rounds_lease_budget_only() -> None:
    # Strict, limit 4, leases of 3: a report of a lease nobody knows, drawn 3, takes the
    # whole lease budget of its round, so the eligible candidate gets nothing.
    h = holder(limit=4, leases=leases(permits_per_lease=3))
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[("ghost", 3, 0)])], now=0)
    assert [g["permits"] for g in reply["grants"]] == [1]
    assert reply["leases"] == [{"leaseId": "ghost", "group": "", "permits": 0, "expiresAt": 0}]
    assert reply.get("contended") is True
    assert h.usage(0) == Usage(limit=4, granted=1, leased=0, available=3, groups={"g": GroupUsage(1, None)})
    # The next round without the forged report leases what is free again: 4 less 2 granted.
    [reply] = h.run_round([request("a", [("g", 1, 10)], leases=[])], now=2_000)
    assert [lease["permits"] for lease in reply["leases"]] == [2]


# --- orderings the reference sorts, with ids that differ only in case --------------------------


def test_the_case_pairs_used_here_sort_as_node_icu_sorts_them() -> None:
    data = json.loads(FIXTURE.read_text())
    order = {text: rank for rank, text in enumerate(data["sorted"])}
    pairs = [(a, b) for a in data["input"] for b in data["input"] if a.lower() == b.lower() and a != b]
    for low, high in pairs:
        # Whatever ICU says for the fixture's case-only pairs, the key agrees.
        assert (locale_key(low) < locale_key(high)) == (order[low] < order[high]), (low, high)
    # The pairs below: lowercase first, the reverse of code point order.
    assert locale_key("a") < locale_key("A")
    assert "A" < "a"
    assert locale_key("g") < locale_key("G")
    assert "G" < "g"


@pytest.mark.parametrize("arrival", [["A", "a"], ["a", "A"]])
def test_grant_pass_ties_go_to_the_lowercase_client_whatever_the_request_order(arrival: list[str]) -> None:
    h = holder(limit=1)
    replies = h.run_round([request(c, [("g", 1, 0)]) for c in arrival], now=0)
    winners = [c for c, r in zip(arrival, replies, strict=True) if r["grants"]]
    assert winners == ["a"]
    loser = replies[arrival.index("A")]
    assert loser["blocked"] == [{"group": "g", "reason": "limit"}]


def test_clients_that_differ_only_in_case_are_different_clients() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    assert h.sync(sync("A", [(grant, 2, 2)]), now=1)["grantResults"] == [
        {"grantId": grant, "claimed": 0, "status": "not_found"}
    ]
    assert h.usage(1).granted == 2


@pytest.mark.parametrize("arrival", [["A", "a"], ["a", "A"]])
def test_lease_pass_ranks_clients_by_collation_within_a_group(arrival: list[str]) -> None:
    h = holder(limit=10, leases=leases(permits_per_lease=2, max_clients_per_group=1))
    replies = h.run_round([request(c, [("g", 0, 0)], leases=[]) for c in arrival], now=0)
    leased = [c for c, r in zip(arrival, replies, strict=True) if r["leases"]]
    assert leased == ["a"]


def test_lease_pass_ranks_groups_by_collation_and_echoes_new_leases_in_that_order() -> None:
    # Two groups differing only in case, equally old: max_groups 1 keeps "g" (ICU: g < G).
    h = holder(limit=10, leases=leases(permits_per_lease=2, max_groups=1))
    [reply] = h.run_round([request("a", [("G", 0, 0), ("g", 0, 0)], leases=[])], now=0)
    assert [lease["group"] for lease in reply["leases"]] == ["g"]
    # With room for both, the echoes come in the pass's order: g, then G.
    h2 = holder(limit=10, leases=leases(permits_per_lease=2))
    [reply] = h2.run_round([request("a", [("G", 0, 0), ("g", 0, 0)], leases=[])], now=0)
    assert [lease["group"] for lease in reply["leases"]] == ["g", "G"]


def test_groups_that_differ_only_in_case_keep_separate_totals_usage_and_limits() -> None:
    h = holder(limit=10, group_limit=lambda group: 1 if group == "G" else None)
    [reply] = h.run_round([request("a", [("g", 2, 0), ("G", 3, 0)])], now=0)
    assert [(g["group"], g["permits"]) for g in reply["grants"]] == [("g", 2), ("G", 1)]
    assert reply["blocked"] == [{"group": "G", "reason": "group_limit"}]
    assert h.store.grant_totals() == {"G": (1, 1), "g": (1, 2)}
    usage = h.usage(0)
    assert usage.groups == {"g": GroupUsage(2, None), "G": GroupUsage(1, 1)}
    assert usage.to_wire()["groups"] == {"G": {"granted": 1, "limit": 1}, "g": {"granted": 2}}


def test_reports_and_echoes_keep_the_order_they_were_sent_in() -> None:
    # The reference applies reports in message order (no sort): answers and echoes follow it.
    h = holder(limit=10, leases=leases(permits_per_lease=1))
    [reply] = h.run_round([request("a", [("g", 1, 0), ("G", 1, 0)], leases=[])], now=0)
    grants = {g["group"]: g["grantId"] for g in reply["grants"]}
    held = {lease["group"]: lease["leaseId"] for lease in reply["leases"]}
    order = [("G", "g"), ("g", "G")]
    for first, second in order:
        synced = h.sync(
            sync(
                "a",
                [(grants[first], 0, 0), (grants[second], 0, 0)],
                leases=[(held[first], 0, 0), (held[second], 0, 0)],
            ),
            now=1,
        )
        assert [r["grantId"] for r in synced["grantResults"]] == [grants[first], grants[second]]
        assert [e["leaseId"] for e in synced["leases"]] == [held[first], held[second]]


@pytest.mark.parametrize("lease_spec", [None, LeaseSpec()], ids=["no-leases", "strict-leases"])
def test_a_limit_of_0_in_the_simulator_admits_nothing_and_violates_nothing(lease_spec: Any) -> None:
    config = WorldConfig(
        holder=HolderSpec(limit=0, leases=lease_spec),
        workload=Workload(
            clients=2,
            plain_clients=1,
            script=(Arrival(at_ms=1_000, client=0, count=2), Arrival(at_ms=1_000, client=1, count=1)),
        ),
        duration_ms=20_000,
    )
    run = run_world(config, FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result.detail
    assert run.trace.of_kind("admit") == []
    assert run.trace.of_kind("grant") == []
    assert run.trace.of_kind("lease_granted") == []
    rounds = run.trace.of_kind("round")
    assert rounds
    assert {(r["usage"]["limit"], r["usage"]["available"], r["granted"]) for r in rounds} == {(0, 0, 0)}
    assert {e["reason"] for e in run.trace.of_kind("blocked")} == {"limit"}
