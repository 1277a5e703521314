"""Sync, the alarm's reclaim, next_alarm_at, usage, and eviction (a new Holder on the same storage)."""

from __future__ import annotations

import math
import sqlite3

import pytest

from semaphore_core import (
    Event,
    GrantReclaimed,
    GroupUsage,
    Holder,
    HolderConfig,
    LeaseOptions,
    SemaphoreConfigError,
    SemaphoreProtocolError,
    Strict,
)
from tests.helpers import holder, ids, request, rows, sync


def test_sync_applies_reports_at_once_without_a_round() -> None:
    h = holder(limit=3)
    [reply] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    synced = h.sync(sync("a", [(grant, 3, 2)]), now=10)
    assert synced == {
        "type": "synced",
        "v": 1,
        "grantResults": [{"grantId": grant, "claimed": 3, "status": "ok"}],
    }
    assert h.usage(10).granted == 1


def test_sync_echoes_leases_only_when_the_holder_leases_and_the_sync_reports_leases() -> None:
    plain = holder(limit=3)
    assert "leases" not in plain.sync(sync("a", leases=[]), now=0)
    leasing = holder(limit=3, leases=LeaseOptions(provisioning=Strict()))
    assert leasing.sync(sync("a", leases=[]), now=0)["leases"] == []
    assert "leases" not in leasing.sync(sync("a"), now=0)


def test_sync_rejects_malformed_messages_and_requests() -> None:
    conn = sqlite3.connect(":memory:")
    h = holder(conn)
    before = rows(conn)
    with pytest.raises(SemaphoreProtocolError):
        h.sync({"type": "sync", "v": 1, "clientId": 3, "grants": []}, now=0)
    with pytest.raises(SemaphoreProtocolError):
        h.sync(request("a"), now=0)
    assert rows(conn) == before


def test_reclaim_expired_returns_and_emits_events() -> None:
    events: list[Event] = []
    h = holder(limit=5, grant_timeout_ms=1_000, events=events)
    [reply] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    events.clear()
    assert h.reclaim_expired(now=999) == []
    reclaimed = h.reclaim_expired(now=1_000)
    assert reclaimed == [GrantReclaimed(timestamp=1_000, grant_id=grant, client_id="a", group="g", permits=3)]
    assert events == reclaimed
    assert h.store.get(grant) is None


def test_reclaim_order_is_oldest_grant_first() -> None:
    h = holder(limit=10, grant_timeout_ms=1_000)
    h.run_round([request("b", [("g", 1, 0)])], now=0)
    h.run_round([request("a", [("g", 1, 0)])], now=5)
    assert [e.client_id for e in h.reclaim_expired(now=2_000)] == ["b", "a"]


def test_next_alarm_at_follows_the_earliest_unclaimed_deadline() -> None:
    h = holder(limit=10, grant_timeout_ms=1_000)
    assert h.next_alarm_at() is None
    [first] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    h.run_round([request("b", [("g", 2, 0)])], now=500)
    assert h.next_alarm_at() == 1_000
    # Fully claimed grants need no alarm: the deadline moves to b's.
    h.sync(sync("a", [(first["grants"][0]["grantId"], 2, 0)]), now=600)
    assert h.next_alarm_at() == 1_500


def test_usage_reports_limit_grants_leases_room_and_groups() -> None:
    h = holder(limit=10, group_limit=lambda g: 4 if g == "capped" else None, grant_timeout_ms=1_000)
    h.run_round([request("a", [("capped", 3, 0), ("free", 2, 1)])], now=0)
    usage = h.usage(10)
    assert (usage.limit, usage.granted, usage.leased, usage.available) == (10, 5, 0, 5)
    assert usage.groups == {"capped": GroupUsage(3, 4), "free": GroupUsage(2, None)}


def test_usage_does_not_count_expired_unclaimed_permits_not_yet_reclaimed() -> None:
    h = holder(limit=10, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    h.sync(sync("a", [(reply["grants"][0]["grantId"], 1, 0)]), now=10)
    assert h.usage(999).granted == 4
    usage = h.usage(1_000)
    assert usage.granted == 1
    assert usage.groups == {"g": GroupUsage(1, None)}


def test_usage_keeps_a_group_whose_only_grant_has_nothing_outstanding_yet() -> None:
    # The reference lists groups of every grant row, even one expired with nothing claimed.
    h = holder(limit=10, grant_timeout_ms=1_000)
    h.run_round([request("a", [("g", 4, 0)])], now=0)
    assert h.usage(5_000).groups == {"g": GroupUsage(0, None)}


def test_a_new_holder_on_the_same_storage_sees_every_committed_row() -> None:
    conn = sqlite3.connect(":memory:")
    config = HolderConfig(limit=5, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2))
    first = Holder(conn, config, new_id=ids("first"))
    first.run_round([request("a", [("g", 3, 0)], leases=[])], now=0)
    before = rows(conn)
    second = Holder(conn, config, new_id=ids("second"))
    assert rows(conn) == before
    assert second.usage(0) == first.usage(0)
    [reply] = second.run_round([request("b", [("g", 5, 1)])], now=10)
    assert reply["grants"] == []  # 3 granted + 2 leased: the rebuilt holder honours them


def test_the_holder_rejects_a_config_that_is_not_a_holder_config() -> None:
    with pytest.raises(TypeError):
        Holder(sqlite3.connect(":memory:"), {"limit": 3}, new_id=ids())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "what"),
    [
        (HolderConfig(limit=8), "grant"),
        (HolderConfig(limit=8, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2)), "lease"),
    ],
)
def test_a_new_id_that_repeats_fails_the_round_and_writes_nothing(config: HolderConfig, what: str) -> None:
    # The reference draws crypto.randomUUID() and inserts with ON CONFLICT DO NOTHING: a repeated
    # id would go out in a reply while no row charged its permits.
    conn = sqlite3.connect(":memory:")
    # Each round draws a grant id, then (with leases) a lease id; the second round repeats one.
    drawn = ["g-1", "l-1", "g-2", "l-1"] if what == "lease" else ["g-1", "g-1"]
    holder = Holder(conn, config, new_id=iter(drawn).__next__)
    holder.run_round([request("a", [("g", 1, 0)], leases=[] if what == "lease" else None)], now=0)
    before = rows(conn)
    with pytest.raises(SemaphoreConfigError, match=rf"new_id returned '\w-1', the id of a stored {what}"):
        holder.run_round([request("b", [("g", 1, 0)], leases=[] if what == "lease" else None)], now=3_000)
    assert rows(conn) == before


@pytest.mark.parametrize("bad", [None, "", 5, "x" * 1_025])
def test_new_id_must_return_an_id_the_wire_can_carry(bad: object) -> None:
    holder = Holder(sqlite3.connect(":memory:"), HolderConfig(limit=8), new_id=lambda: bad)  # type: ignore[arg-type,return-value]
    with pytest.raises(SemaphoreConfigError, match="new_id must return a non-empty string"):
        holder.run_round([request("a", [("g", 1, 0)])], now=0)
    assert holder.usage(0).granted == 0


def test_the_holder_keeps_its_rows_in_a_sqlite_connection() -> None:
    with pytest.raises(TypeError, match=r"conn must be a sqlite3\.Connection, got None"):
        Holder(None, HolderConfig(limit=8), new_id=ids())  # type: ignore[arg-type]


def test_new_id_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="new_id must be a function"):
        Holder(sqlite3.connect(":memory:"), HolderConfig(limit=8), new_id="abc")  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [-5, 1.5, math.nan, 2**53, True, "0", None])
def test_now_is_integer_milliseconds_the_wire_can_carry(now: object) -> None:
    holder = Holder(sqlite3.connect(":memory:"), HolderConfig(limit=8), new_id=ids())
    calls = [
        lambda: holder.run_round([request("a", [("g", 1, 0)])], now=now),  # type: ignore[arg-type]
        lambda: holder.sync(sync("a", [("x", 1, 0)]), now=now),  # type: ignore[arg-type]
        lambda: holder.reclaim_expired(now),  # type: ignore[arg-type]
        lambda: holder.usage(now),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(ValueError, match="now must be an integer of milliseconds from 0 to"):
            call()
    assert holder.usage(0).granted == 0


def test_a_round_takes_a_list_of_requests_not_one_request() -> None:
    holder = Holder(sqlite3.connect(":memory:"), HolderConfig(limit=8), new_id=ids())
    with pytest.raises(TypeError, match="requests must be a list of request messages, got a dict"):
        holder.run_round(request("a", [("g", 1, 0)]), now=0)  # type: ignore[arg-type]
