"""Leases: provisioning budgets, lease reports and the lease pass, one rule per test."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from semaphore_core import Event, LeaseGranted, LeaseOptions, LeaseRetired, Over, Ratio, Strict, Under
from semaphore_core.holder import Holder
from tests.helpers import holder, request, sync

TTL = 60_000


def lease_holder(
    conn: sqlite3.Connection | None = None,
    events: list[Event] | None = None,
    provisioning: Any = None,
    limit: Any = 10,
    **options: Any,
) -> Holder:
    options.setdefault("ttl_ms", TTL)
    lease_options = LeaseOptions(provisioning=provisioning or Strict(), **options)
    return holder(conn, events, limit=limit, leases=lease_options)


def lease_holder_with(**config: Any) -> Holder:
    """A leasing holder with extra HolderConfig fields (group_limit, can_grant...)."""
    lease_kw = config.pop("lease", {})
    lease_kw.setdefault("ttl_ms", TTL)
    return holder(leases=LeaseOptions(**lease_kw), **config)


def leases_of(reply: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(lease["group"], lease["permits"], lease["expiresAt"]) for lease in reply["leases"]]


def lease_id(reply: dict[str, Any], index: int = 0) -> str:
    return str(reply["leases"][index]["leaseId"])


def grants_of(reply: dict[str, Any]) -> list[tuple[str, int]]:
    return [(g["group"], g["permits"]) for g in reply["grants"]]


# --- who gets a lease ----------------------------------------------------------


def test_only_clients_that_send_leases_get_leases_after_grants() -> None:
    h = lease_holder(limit=10)
    plain, capable = h.run_round(
        [request("plain", [("g", 3, 0)]), request("capable", [("g", 2, 1)], leases=[])], now=0
    )
    assert "leases" not in plain
    assert grants_of(plain) == [("g", 3)]
    # Grants first (2), then the rest of the limit as a lease (10 - 3 - 2).
    assert grants_of(capable) == [("g", 2)]
    assert leases_of(capable) == [("g", 5, TTL)]


def test_a_holder_without_leases_answers_an_empty_lease_list() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    assert reply["leases"] == []
    assert "contended" not in reply


def test_a_demand_entry_with_count_zero_is_still_a_lease_candidate() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    assert leases_of(reply) == [("g", 10, TTL)]


# --- provisioning ---------------------------------------------------------------


def test_strict_charges_lease_footprint_against_later_grants() -> None:
    h = lease_holder(limit=10, permits_per_lease=6)
    [first] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    assert grants_of(first) == [("g", 1)]
    assert leases_of(first) == [("g", 6, TTL)]
    [second] = h.run_round([request("b", [("g", 9, 1)])], now=100)
    assert grants_of(second) == [("g", 3)]  # 10 - 1 granted - 6 leased
    usage = h.usage(100)
    assert (usage.granted, usage.leased, usage.available) == (4, 6, 0)


def test_under_keeps_a_reserve_for_leases() -> None:
    h = lease_holder(limit=10, provisioning=Under(reserve=3))
    [plain, capable] = h.run_round(
        [request("p", [("g", 10, 0)]), request("c", [("g", 10, 1)], leases=[])], now=0
    )
    assert grants_of(plain) == [("g", 7)]
    assert grants_of(capable) == []
    assert leases_of(capable) == [("g", 3, TTL)]


def test_under_reserve_never_takes_the_last_permit() -> None:
    h = lease_holder(limit=1, provisioning=Under(reserve=5))
    [reply] = h.run_round([request("p", [("g", 3, 0)])], now=0)
    assert grants_of(reply) == [("g", 1)]


def test_under_ratio_is_floored() -> None:
    h = lease_holder(limit=10, provisioning=Under(reserve=Ratio(0.25)))
    [reply] = h.run_round([request("p", [("g", 10, 0)])], now=0)
    assert grants_of(reply) == [("g", 8)]  # reserve floor(2.5) = 2


def test_over_leases_above_the_limit() -> None:
    h = lease_holder(limit=4, provisioning=Over(extra=6))
    [reply] = h.run_round([request("c", [("g", 10, 0)], leases=[])], now=0)
    assert grants_of(reply) == [("g", 4)]
    assert leases_of(reply) == [("g", 6, TTL)]
    usage = h.usage(0)
    assert (usage.granted, usage.leased) == (4, 6)


def test_over_ratio_extra_scales_with_the_limit() -> None:
    h = lease_holder(limit=10, provisioning=Over(extra=Ratio(0.5)))
    [reply] = h.run_round([request("c", [("g", 10, 0)], leases=[])], now=0)
    assert leases_of(reply) == [("g", 5, TTL)]


# --- lease reports --------------------------------------------------------------


def test_a_report_heartbeats_the_lease() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    synced = h.sync(sync("a", leases=[(lid, 2, 0)]), now=5_000)
    assert synced["leases"] == [{"leaseId": lid, "group": "g", "permits": 10, "expiresAt": 5_000 + TTL}]


def test_release_is_clamped_to_drawn_and_never_moves_back() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    h.sync(sync("a", leases=[(lid, 2, 5)]), now=10)
    row = h.store.get_lease(lid)
    assert row is not None
    assert row.released == 2
    h.sync(sync("a", leases=[(lid, 3, 1)]), now=20)
    row = h.store.get_lease(lid)
    assert row is not None
    assert row.released == 2
    assert h.usage(20).leased == 8


def test_drawn_is_clamped_to_the_lease() -> None:
    h = lease_holder(limit=10, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    h.sync(sync("a", leases=[(lid, 99, 99)]), now=10)
    assert h.store.get_lease(lid) is None  # released 4 of 4: settled


def test_a_report_on_an_expired_lease_retires_it_without_refreshing() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    synced = h.sync(sync("a", leases=[(lid, 2, 0)]), now=TTL)
    assert synced["leases"] == [{"leaseId": lid, "group": "g", "permits": 10, "expiresAt": TTL}]
    row = h.store.get_lease(lid)
    assert row is not None
    assert (row.retired, row.expires_at, row.permits) == (1, TTL, 10)  # full footprint stays


def test_only_the_clients_retired_report_shrinks_the_lease_to_what_it_drew() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    synced = h.sync(sync("a", leases=[(lid, 3, 1, True)]), now=10)
    assert synced["leases"] == [{"leaseId": lid, "group": "g", "permits": 3, "expiresAt": 10}]
    assert h.usage(10).leased == 2


def test_a_settled_lease_is_deleted_and_echoed_with_permits_released() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    synced = h.sync(sync("a", leases=[(lid, 3, 3, True)]), now=10)
    assert synced["leases"] == [{"leaseId": lid, "group": "g", "permits": 3, "expiresAt": 10}]
    assert h.store.get_lease(lid) is None
    assert h.usage(10).leased == 0


def test_an_unknown_lease_is_answered_retired_and_its_live_footprint_charged_this_round() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[("ghost", 7, 3)])], now=0)
    # Echo first; then a lease from 10 minus the 4 permits the ghost may still run.
    assert reply["leases"][0] == {"leaseId": "ghost", "group": "", "permits": 0, "expiresAt": 0}
    assert leases_of(reply)[1:] == [("g", 6, TTL)]


def test_unknown_lease_debt_is_capped_at_permits_per_lease() -> None:
    h = lease_holder(limit=5, permits_per_lease=3)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[("ghost", 9, 0)])], now=0)
    # The ghost claims 9 running permits but is charged at most 3: 5 - 3 = 2 left to lease.
    assert leases_of(reply)[1:] == [("g", 2, TTL)]


def test_another_clients_lease_is_answered_retired_with_its_group_and_permits() -> None:
    h = lease_holder(limit=10, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    synced = h.sync(sync("b", leases=[(lid, 1, 0)]), now=5)
    # Faithful to the reference: the echo reveals the other client's group and size.
    assert synced["leases"] == [{"leaseId": lid, "group": "g", "permits": 4, "expiresAt": 5}]
    row = h.store.get_lease(lid)
    assert row is not None
    assert row.retired == 0  # a's lease is untouched


# --- the lease pass ----------------------------------------------------------------


def test_an_unreported_lease_is_retired_in_a_round_but_stays_counted() -> None:
    events: list[Event] = []
    h = lease_holder(limit=10, events=events, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    events.clear()
    [later] = h.run_round([request("a", leases=[])], now=TTL)
    assert later["leases"] == [{"leaseId": lid, "group": "g", "permits": 4, "expiresAt": TTL}]
    assert events[0] == LeaseRetired(timestamp=TTL, lease_id=lid, client_id="a", group="g", permits=0)
    assert h.usage(TTL).leased == 4


def test_the_alarm_does_not_retire_leases() -> None:
    h = lease_holder(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.reclaim_expired(now=10 * TTL)
    row = h.store.get_lease(lease_id(reply))
    assert row is not None
    assert row.retired == 0


def test_a_group_that_becomes_limited_has_its_leases_retired_under_exclude() -> None:
    limits: dict[str, int] = {}
    h = lease_holder_with(limit=10, group_limit=limits.get, lease={"permits_per_lease": 4})
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    limits["g"] = 3
    [later] = h.run_round([request("b", [("other", 0, 1)])], now=10)
    assert later["grants"] == []
    row = h.store.get_lease(lid)
    assert row is not None
    assert row.retired == 1
    assert h.usage(10).leased == 4


def test_a_limited_group_keeps_its_leases_within_group_limit() -> None:
    limits: dict[str, int] = {}
    h = lease_holder_with(
        limit=10,
        group_limit=limits.get,
        lease={"permits_per_lease": 4, "limited_groups": "within_group_limit"},
    )
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    limits["g"] = 3
    h.run_round([request("b", [("other", 0, 1)])], now=10)
    row = h.store.get_lease(lease_id(reply))
    assert row is not None
    assert row.retired == 0


def test_a_group_no_longer_permitted_has_its_leases_retired() -> None:
    banned: set[str] = set()
    h = lease_holder_with(limit=10, can_grant=lambda g: g not in banned)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    banned.add("g")
    h.run_round([], now=10)
    row = h.store.get_lease(lease_id(reply))
    assert row is not None
    assert row.retired == 1


def test_limited_groups_get_no_new_leases_under_exclude() -> None:
    h = lease_holder_with(limit=10, group_limit=lambda g: 5)
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    assert grants_of(reply) == [("g", 1)]
    assert reply["leases"] == []


def test_within_group_limit_leases_only_the_room_left_in_the_group() -> None:
    h = lease_holder_with(limit=20, group_limit=lambda g: 5, lease={"limited_groups": "within_group_limit"})
    [reply] = h.run_round([request("a", [("g", 2, 0)], leases=[])], now=0)
    assert grants_of(reply) == [("g", 2)]
    assert leases_of(reply) == [("g", 3, TTL)]


def test_a_client_holding_usable_headroom_gets_no_new_lease() -> None:
    h = lease_holder(limit=20, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    [headroom] = h.run_round([request("a", [("g", 1, 1)], leases=[(lid, 3, 0)])], now=10)
    assert [lease["leaseId"] for lease in headroom["leases"]] == [lid]
    [drawn_out] = h.run_round([request("a", [("g", 1, 1)], leases=[(lid, 4, 0)])], now=20)
    assert len(drawn_out["leases"]) == 2  # the echo and a fresh lease


def test_an_unreported_lease_is_assumed_fully_drawn() -> None:
    h = lease_holder(limit=20, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    [again] = h.run_round([request("a", [("g", 0, 1)], leases=[])], now=10)
    assert leases_of(again) == [("g", 4, 10 + TTL)]


def test_the_budget_is_shared_equally_and_capped_per_lease() -> None:
    h = lease_holder(limit=10, permits_per_lease=4)
    replies = h.run_round([request(c, [("g", 0, i)], leases=[]) for i, c in enumerate("abc")], now=0)
    assert [leases_of(r) for r in replies] == [[("g", 3, TTL)]] * 3  # floor(10 / 3)
    h2 = lease_holder(limit=100, permits_per_lease=4)
    replies = h2.run_round([request(c, [("g", 0, i)], leases=[]) for i, c in enumerate("ab")], now=0)
    assert [leases_of(r) for r in replies] == [[("g", 4, TTL)]] * 2


def test_when_short_the_oldest_get_one_each() -> None:
    h = lease_holder(limit=2)
    replies = h.run_round(
        [request(c, [("g", 0, t)], leases=[]) for c, t in (("young", 9), ("old", 1), ("mid", 5))], now=0
    )
    assert [len(r["leases"]) for r in replies] == [0, 1, 1]
    assert replies[0]["contended"] is True


def test_groups_and_clients_beyond_the_caps_wait_oldest_first() -> None:
    h = lease_holder(limit=100, permits_per_lease=1, max_groups=1, max_clients_per_group=2)
    replies = h.run_round(
        [
            request("a", [("g1", 0, 5)], leases=[]),
            request("b", [("g1", 0, 3)], leases=[]),
            request("c", [("g1", 0, 4)], leases=[]),
            request("d", [("g2", 0, 9)], leases=[]),
        ],
        now=0,
    )
    assert [len(r["leases"]) for r in replies] == [0, 1, 1, 0]
    assert all(r.get("contended") for r in replies)


def test_a_client_demanding_twice_in_a_group_is_one_candidate_at_its_oldest() -> None:
    h = lease_holder(limit=100, permits_per_lease=1, max_clients_per_group=1)
    replies = h.run_round(
        [request("a", [("g", 0, 9), ("g", 0, 1)], leases=[]), request("b", [("g", 0, 5)], leases=[])],
        now=0,
    )
    assert [len(r["leases"]) for r in replies] == [1, 0]


def test_a_lowered_budget_retires_undrawn_headroom_newest_first() -> None:
    limit = {"value": 20}
    events: list[Event] = []
    h = lease_holder(limit=lambda: limit["value"], permits_per_lease=5, events=events)
    [old] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    [new] = h.run_round([request("b", [("g", 0, 0)], leases=[])], now=10)
    old_id, new_id = lease_id(old), lease_id(new)
    limit["value"] = 8  # footprint 10 > 8: excess 2
    events.clear()
    replies = h.run_round(
        [request("a", leases=[(old_id, 1, 0)]), request("b", leases=[(new_id, 1, 0)])], now=20
    )
    retired = [e for e in events if isinstance(e, LeaseRetired)]
    assert retired == [LeaseRetired(timestamp=20, lease_id=new_id, client_id="b", group="g", permits=4)]
    assert replies[1]["leases"] == [{"leaseId": new_id, "group": "g", "permits": 5, "expiresAt": 20}]
    old_row = h.store.get_lease(old_id)
    assert old_row is not None
    assert old_row.retired == 0
    assert h.usage(20).leased == 10  # retired headroom stays counted until the client confirms


def test_lease_events_name_each_grant() -> None:
    events: list[Event] = []
    h = lease_holder(limit=10, permits_per_lease=4, events=events)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    assert events[0] == LeaseGranted(
        timestamp=0, lease_id=lease_id(reply), client_id="a", group="g", permits=4
    )


# --- contended -------------------------------------------------------------------------


def test_contended_marks_lease_replies_when_grants_were_blocked_by_the_shared_limit() -> None:
    h = lease_holder(limit=4, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    plain, capable = h.run_round(
        [request("p", [("g", 1, 1)]), request("c", [("g", 0, 2)], leases=[])], now=10
    )
    assert "contended" not in plain  # only lease-capable replies carry it
    assert capable["contended"] is True


def test_syncs_carry_the_last_rounds_contended_flag_until_eviction() -> None:
    conn = sqlite3.connect(":memory:")
    h = lease_holder(conn, limit=4, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.run_round([request("p", [("g", 1, 1)])], now=10)
    assert h.sync(sync("a", leases=[]), now=20)["contended"] is True
    assert "contended" not in h.sync(sync("a"), now=20)  # no leases key: no lease fields
    rebuilt = lease_holder(conn, limit=4, permits_per_lease=4)
    assert "contended" not in rebuilt.sync(sync("a", leases=[]), now=30)


def test_an_uncontended_round_clears_the_flag() -> None:
    h = lease_holder(limit=4, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.run_round([request("p", [("g", 1, 1)])], now=10)
    h.run_round([request("p")], now=20)
    assert "contended" not in h.sync(sync("a", leases=[]), now=30)


@pytest.mark.parametrize("mode", [Under(reserve=2), Over(extra=2)])
def test_blocked_grants_do_not_mark_contended_when_the_pools_are_separate(mode: Any) -> None:
    h = lease_holder(limit=4, provisioning=mode, permits_per_lease=2)
    [reply] = h.run_round([request("c", [("g", 9, 0)], leases=[])], now=0)
    assert reply["blocked"] == [{"group": "g", "reason": "limit"}]
    assert len(reply["leases"]) == 1
    assert "contended" not in reply


def test_the_allocators_view_supersedes_the_report_echo() -> None:
    conn = sqlite3.connect(":memory:")
    [reply] = lease_holder(conn, limit=10).run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    lid = lease_id(reply)
    # The report refreshes the lease, then the lease pass retires it (the group
    # is no longer permitted): one echo, the retired one, in the report's place.
    banned = lease_holder_with(limit=10, can_grant=lambda g: g != "g")
    rebuilt = Holder(conn, banned.config, new_id=lambda: "unused")
    [later] = rebuilt.run_round([request("a", leases=[(lid, 1, 0)])], now=10)
    assert later["leases"] == [{"leaseId": lid, "group": "g", "permits": 10, "expiresAt": 10}]
