"""A round's grant behaviour, one test per documented rule of the reference."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from semaphore_core import BlockedEvent, Event, GrantReclaimed, RoundEvent, SemaphoreProtocolError
from tests.helpers import holder, request, rows


def grants_of(reply: dict[str, Any]) -> list[tuple[str, int]]:
    return [(g["group"], g["permits"]) for g in reply["grants"]]


def blocked_of(reply: dict[str, Any]) -> list[tuple[str, str]]:
    return [(b["group"], b["reason"]) for b in reply["blocked"]]


def results_of(reply: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(r["grantId"], r["claimed"], r["status"]) for r in reply["grantResults"]]


# --- reports -----------------------------------------------------------------


def test_reports_are_applied_before_allocation_so_released_permits_are_reusable() -> None:
    h = holder(limit=3)
    [first] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    grant = first["grants"][0]["grantId"]
    [second] = h.run_round(
        [request("a", [("g", 3, 1)], grants=[(grant, 3, 3)])],
        now=100,
    )
    assert results_of(second) == [(grant, 3, "ok")]
    assert grants_of(second) == [("g", 3)]


def test_claims_are_clamped_to_the_grant_and_never_move_backwards() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    [r1] = h.run_round([request("a", grants=[(grant, 9, 0)])], now=10)
    assert results_of(r1) == [(grant, 4, "ok")]
    [r2] = h.run_round([request("a", grants=[(grant, 1, 0)])], now=20)
    assert results_of(r2) == [(grant, 4, "ok")]
    assert h.store.get(grant) is not None
    assert h.store.get(grant).claimed == 4  # type: ignore[union-attr]


def test_released_is_clamped_to_claimed_and_monotone() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 2, 3)])], now=10)
    row = h.store.get(grant)
    assert row is not None
    assert (row.claimed, row.released) == (2, 2)
    h.run_round([request("a", grants=[(grant, 2, 0)])], now=20)
    row = h.store.get(grant)
    assert row is not None
    assert row.released == 2  # a replayed older report did not lower it


def test_a_replayed_release_never_frees_capacity_twice() -> None:
    h = holder(limit=2)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 2, 1)])], now=10)
    # The same report again, and again from a sync: still one permit free.
    h.run_round([request("a", grants=[(grant, 2, 1)])], now=20)
    h.sync(
        {
            "type": "sync",
            "v": 1,
            "clientId": "a",
            "grants": [{"grantId": grant, "claimed": 2, "released": 1}],
        },
        25,
    )
    [after] = h.run_round([request("b", [("g", 5, 1)])], now=30)
    assert grants_of(after) == [("g", 1)]


def test_fully_released_grants_are_deleted() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    [done] = h.run_round([request("a", grants=[(grant, 2, 2)])], now=10)
    assert results_of(done) == [(grant, 2, "ok")]
    assert h.store.get(grant) is None


def test_unknown_grants_and_other_clients_grants_are_not_found() -> None:
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    [forged] = h.run_round([request("b", grants=[(grant, 2, 2), ("nope", 1, 0)])], now=10)
    assert results_of(forged) == [(grant, 0, "not_found"), ("nope", 0, "not_found")]
    row = h.store.get(grant)
    assert row is not None
    assert (row.claimed, row.released) == (0, 0)  # b's report changed nothing


def test_a_late_claim_is_clamped_and_answered_expired() -> None:
    h = holder(limit=5, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 1, 0)])], now=500)  # one claimed in time
    [late] = h.run_round([request("a", grants=[(grant, 4, 0)])], now=1_000)
    assert results_of(late) == [(grant, 1, "expired")]
    # A report that asks for no more than was claimed in time is simply ok.
    [again] = h.run_round([request("a", grants=[(grant, 1, 0)])], now=1_100)
    assert results_of(again) == [(grant, 1, "ok")]


def test_a_late_claim_on_a_reclaimed_grant_with_nothing_claimed_is_not_found() -> None:
    h = holder(limit=5, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.reclaim_expired(now=1_000)
    [late] = h.run_round([request("a", grants=[(grant, 4, 0)])], now=1_200)
    assert results_of(late) == [(grant, 0, "not_found")]


def test_the_claim_deadline_is_grant_timeout_after_the_round() -> None:
    h = holder(limit=5, grant_timeout_ms=7_000)
    [reply] = h.run_round([request("a", [("g", 1, 0)])], now=300)
    row = h.store.get(reply["grants"][0]["grantId"])
    assert row is not None
    assert (row.created_at, row.expires_at, row.claimed, row.released) == (300, 7_300, 0, 0)


# --- reclaim -------------------------------------------------------------------


def test_a_round_reclaims_expired_unclaimed_permits_before_allocating() -> None:
    events: list[Event] = []
    h = holder(limit=4, grant_timeout_ms=1_000, events=events)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 1, 0)])], now=10)
    [later] = h.run_round([request("b", [("g", 9, 1)])], now=1_000)
    assert grants_of(later) == [("g", 3)]  # the three never claimed came back
    reclaimed = [e for e in events if isinstance(e, GrantReclaimed)]
    assert reclaimed == [GrantReclaimed(timestamp=1_000, grant_id=grant, client_id="a", group="g", permits=3)]
    row = h.store.get(grant)
    assert row is not None
    assert (row.permits, row.claimed) == (1, 1)


def test_reclaim_deletes_a_grant_whose_claims_are_all_released() -> None:
    h = holder(limit=4, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 2, 2)])], now=10)
    h.reclaim_expired(now=1_000)
    assert h.store.get(grant) is None


# --- allocation -----------------------------------------------------------------


def test_oldest_demand_is_served_first_whatever_the_arrival_order() -> None:
    h = holder(limit=3)
    replies = h.run_round(
        [request("late", [("g", 3, 50)]), request("early", [("g", 3, 10)])],
        now=100,
    )
    assert grants_of(replies[1]) == [("g", 3)]
    assert grants_of(replies[0]) == []
    assert blocked_of(replies[0]) == [("g", "limit")]


def test_ties_on_age_go_to_the_client_id_first_in_locale_order() -> None:
    # Code point order would put "B" before "a"; localeCompare does not.
    h = holder(limit=1)
    replies = h.run_round([request("B", [("g", 1, 5)]), request("a", [("g", 1, 5)])], now=100)
    assert grants_of(replies[1]) == [("g", 1)]
    assert grants_of(replies[0]) == []


def test_demand_of_several_groups_is_ordered_per_entry() -> None:
    h = holder(limit=4)
    [reply] = h.run_round([request("a", [("young", 3, 20), ("old", 3, 10)])], now=100)
    assert grants_of(reply) == [("old", 3), ("young", 1)]
    assert blocked_of(reply) == [("young", "limit")]


def test_the_group_limit_caps_a_group_under_the_shared_limit() -> None:
    h = holder(limit=10, group_limit=lambda g: 2 if g == "small" else None)
    [reply] = h.run_round([request("a", [("small", 5, 0), ("big", 5, 1)])], now=0)
    assert grants_of(reply) == [("small", 2), ("big", 5)]
    assert blocked_of(reply) == [("small", "group_limit")]


def test_group_limit_is_named_when_both_gates_are_exhausted() -> None:
    h = holder(limit=2, group_limit=lambda g: 2)
    [reply] = h.run_round([request("a", [("g", 5, 0)])], now=0)
    assert blocked_of(reply) == [("g", "group_limit")]


def test_limit_is_named_when_the_group_still_has_room() -> None:
    h = holder(limit=2, group_limit=lambda g: 4)
    [reply] = h.run_round([request("a", [("g", 5, 0)])], now=0)
    assert blocked_of(reply) == [("g", "limit")]


def test_can_grant_false_blocks_the_group_as_not_permitted() -> None:
    h = holder(limit=10, can_grant=lambda g: g != "banned")
    [reply] = h.run_round([request("a", [("banned", 2, 0), ("ok", 2, 1)])], now=0)
    assert grants_of(reply) == [("ok", 2)]
    assert blocked_of(reply) == [("banned", "not_permitted")]


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, float("nan")])
def test_a_bad_group_limit_value_fails_the_group_closed(bad: Any) -> None:
    h = holder(limit=10, group_limit=lambda g: bad if g == "x" else None)
    [reply] = h.run_round([request("a", [("x", 2, 0), ("y", 2, 1)])], now=0)
    assert grants_of(reply) == [("y", 2)]
    assert blocked_of(reply) == [("x", "limit_resolution_error")]


def test_a_raising_group_limit_fails_the_group_closed() -> None:
    def group_limit(group: str) -> int | None:
        raise RuntimeError("config service down")

    h = holder(limit=10, group_limit=group_limit)
    [reply] = h.run_round([request("a", [("x", 2, 0)])], now=0)
    assert grants_of(reply) == []
    assert blocked_of(reply) == [("x", "limit_resolution_error")]


def test_a_raising_can_grant_also_fails_closed() -> None:
    def can_grant(group: str) -> bool:
        raise RuntimeError("entitlements down")

    h = holder(limit=10, can_grant=can_grant)
    [reply] = h.run_round([request("a", [("x", 2, 0)])], now=0)
    assert blocked_of(reply) == [("x", "limit_resolution_error")]


def test_next_request_at_is_one_round_period_after_the_round() -> None:
    h = holder(limit=1, round_period_ms=2_500)
    replies = h.run_round([request("a", [("g", 1, 0)]), request("b")], now=1_000)
    assert [r["nextRequestAt"] for r in replies] == [3_500, 3_500]


def test_limit_and_group_limits_are_resolved_once_per_round() -> None:
    calls: list[str] = []

    def limit() -> int:
        calls.append("limit")
        return 10

    def group_limit(group: str) -> int | None:
        calls.append(group)
        return None

    h = holder(limit=limit, group_limit=group_limit)
    h.run_round([request(c, [("g", 1, 0), ("h", 1, 0)]) for c in "abc"], now=0)
    assert calls == ["limit", "g", "h"]


def test_lowering_the_limit_never_evicts_but_stops_admissions() -> None:
    current = {"limit": 5}
    h = holder(limit=lambda: current["limit"])
    [reply] = h.run_round([request("a", [("g", 5, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    h.run_round([request("a", grants=[(grant, 5, 0)])], now=10)
    current["limit"] = 2
    [lowered] = h.run_round([request("b", [("g", 1, 1)])], now=20)
    assert grants_of(lowered) == []
    assert h.usage(20).granted == 5  # nothing was taken back
    # Releasing down to the new limit is not enough; below it, admission resumes.
    h.run_round([request("a", grants=[(grant, 5, 3)])], now=30)
    [still] = h.run_round([request("b", [("g", 1, 1)])], now=40)
    assert grants_of(still) == []
    h.run_round([request("a", grants=[(grant, 5, 4)])], now=50)
    [resumed] = h.run_round([request("b", [("g", 1, 1)])], now=60)
    assert grants_of(resumed) == [("g", 1)]


@pytest.mark.parametrize("bad", [-1, 2.5, "10", None, True])
def test_a_bad_limit_fails_the_whole_round_without_writes(bad: Any) -> None:
    conn = sqlite3.connect(":memory:")
    value = {"limit": 5}
    h = holder(conn, limit=lambda: value["limit"])
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    before = rows(conn)
    value["limit"] = bad
    with pytest.raises(ValueError, match="limit must resolve"):
        h.run_round([request("a", [("g", 1, 0)], grants=[(grant, 2, 2)])], now=10)
    assert rows(conn) == before


def test_a_raising_limit_callback_fails_the_round_with_its_error() -> None:
    conn = sqlite3.connect(":memory:")

    def limit() -> int:
        raise LookupError("no such account")

    h = holder(conn, limit=limit)
    before = rows(conn)
    with pytest.raises(LookupError):
        h.run_round([request("a", [("g", 1, 0)])], now=0)
    assert rows(conn) == before


def test_a_malformed_request_fails_the_round_before_anything_is_written() -> None:
    conn = sqlite3.connect(":memory:")
    h = holder(conn, limit=5)
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    before = rows(conn)
    bad = request("b", [("g", 1, 0)])
    bad["demand"][0]["count"] = -1
    with pytest.raises(SemaphoreProtocolError):
        h.run_round([request("a", grants=[(grant, 2, 2)]), bad], now=10)
    assert rows(conn) == before


def test_a_sync_is_not_a_round_request() -> None:
    h = holder()
    with pytest.raises(SemaphoreProtocolError):
        h.run_round([{"type": "sync", "v": 1, "clientId": "a", "grants": []}], now=0)


def test_a_failing_before_commit_hook_rolls_the_round_back() -> None:
    conn = sqlite3.connect(":memory:")
    from semaphore_core import Holder, HolderConfig
    from tests.helpers import ids

    def before_commit(_: sqlite3.Connection) -> None:
        raise OSError("disk full")

    h = Holder(conn, HolderConfig(limit=5), new_id=ids(), before_commit=before_commit)
    with pytest.raises(OSError, match="disk full"):
        h.run_round([request("a", [("g", 2, 0)])], now=0)
    assert rows(conn) == {"durability_semaphore_grants": [], "durability_semaphore_leases": []}


# --- events ------------------------------------------------------------------------


def test_a_round_emits_reclaims_then_the_round_then_blocked_counts() -> None:
    events: list[Event] = []
    h = holder(
        limit=3, grant_timeout_ms=1_000, group_limit=lambda g: 1 if g == "tiny" else None, events=events
    )
    h.run_round([request("a", [("g", 2, 0)])], now=0)
    events.clear()
    h.run_round(
        [request("b", [("g", 5, 1), ("tiny", 3, 0)]), request("c", [("g", 4, 3)])],
        now=1_000,
    )
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["GrantReclaimed", "RoundEvent", "BlockedEvent", "BlockedEvent"]
    round_event = events[1]
    assert isinstance(round_event, RoundEvent)
    assert (round_event.requested, round_event.granted) == (12, 3)
    assert round_event.usage.granted == 3
    assert round_event.usage.available == 0
    # Oldest first: tiny gets 1 (its group limit), b's g gets the other 2, c's g none.
    # Counts sum per (group, reason) across requests: g 3 + 4 left, tiny 2 left.
    assert events[2:] == [
        BlockedEvent(timestamp=1_000, group="tiny", reason="group_limit", count=2),
        BlockedEvent(timestamp=1_000, group="g", reason="limit", count=7),
    ]


def test_a_failed_round_emits_nothing() -> None:
    events: list[Event] = []
    h = holder(limit=lambda: -1, events=events)
    with pytest.raises(ValueError, match="limit must resolve"):
        h.run_round([request("a", [("g", 1, 0)])], now=0)
    assert events == []


def test_round_outcome_returns_the_events_and_usage() -> None:
    h = holder(limit=3)
    outcome = h.round([request("a", [("g", 2, 0)])], now=0)
    assert outcome.usage.granted == 2
    assert isinstance(outcome.events[-1], RoundEvent)
    assert outcome.replies[0].grants[0].permits == 2
