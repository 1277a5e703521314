"""What survives an eviction, piece by piece, and what does not.

Seed 001's walkthrough says for every step what is durable and what is in memory: "Grant and
lease rows from earlier rounds are untouched. In memory: The waiting requests, the round
timer, and the contended flag are lost." Seed 002: the alarm lives in storage and "brings the
object back after eviction"; the in-memory timer dies with the instance. The walkthrough's
``workflowLimits`` (``limit_workflow``) live on the instance.

Each piece of state gets a test that says which side it is on and checks it:

| piece | where | survives |
|---|---|---|
| every grant row, every column | holder storage | yes |
| every lease row (live and retired), every column | holder storage | yes |
| the per-group totals (semsim's 0002) | holder storage | yes |
| the schema version | holder storage | yes |
| the stored alarm | holder storage | yes |
| every table and column of the client's queue | client storage | yes |
| ``contended`` of the last round | holder memory | no |
| requests waiting for a round | holder memory | no (they fail ``evicted``) |
| the round timer and the last round's time | holder memory | no |
| the engine's early timer | holder memory | no |
| group limits set by ``limit_workflow`` | holder memory | no |
| the limit (``env``) | deployment | yes |
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from semaphore_core import LeaseOptions, Strict
from semaphore_core.queue import QueueClient, QueueItem
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.runtime.durable import _ALARM_TABLE as ALARM_TABLE
from semsim.runtime.durable import DurableObject
from semsim.scenarios.base import HOLDER, events
from semsim.world.faults import Drop, Eviction, FaultPlan, GroupLimitChange
from semsim.world.workload import Arrival, Workload
from tests.helpers import holder, request, sync

#: Every table the holder keeps, classified: a new table must be added here, with a test.
HOLDER_TABLES = {
    "durability_semaphore_grants",
    "durability_semaphore_leases",
    "durability_semaphore_grant_totals",
    "durability_semaphore_lease_totals",
    "durability_migrations",
}


def snapshot(conn: sqlite3.Connection) -> dict[str, Any]:
    """Every table's columns and rows, and every other schema object."""
    objects = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    tables = [name for kind, name, _ in objects if kind == "table"]
    return {
        "objects": objects,
        "columns": {t: conn.execute(f"PRAGMA table_info({t})").fetchall() for t in tables},
        "rows": {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables},
    }


# --- the holder's storage, at the core ----------------------------------------------------------


def _busy_holder(conn: sqlite3.Connection) -> Any:
    """Grants claimed, released and unclaimed; leases live, drawn, retired; an unknown lease."""
    h = holder(conn, limit=10, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=1_000))
    replies = h.run_round(
        [request("a", [("g", 3, 0)], leases=[]), request("b", [("h", 2, 1)], leases=[])], now=0
    )
    grant_a = replies[0]["grants"][0]["grantId"]
    lease_b = replies[1]["leases"][0]["leaseId"]
    h.sync(sync("a", [(grant_a, 2, 1)], leases=[]), now=10)
    h.sync(sync("b", [], leases=[(lease_b, 1, 0)]), now=20)
    # At 1.5 s every lease has expired: the round retires them and leaves demand unserved.
    h.run_round([request("c", [("k", 20, 5)], leases=[("ghost", 1, 0)])], now=1_500)
    return h


def test_the_holders_tables_are_the_ones_classified_here() -> None:
    conn = sqlite3.connect(":memory:")
    _busy_holder(conn)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == HOLDER_TABLES


def test_every_row_and_column_of_the_holders_storage_survives_a_new_instance() -> None:
    conn = sqlite3.connect(":memory:")
    h = _busy_holder(conn)
    before = snapshot(conn)
    assert all(before["rows"][t] for t in HOLDER_TABLES)  # every table holds something to lose
    assert {row.retired for row in h.store.list_leases()} == {1}
    rebuilt = holder(conn, limit=10, leases=h.config.leases)
    assert snapshot(conn) == before
    assert rebuilt.usage(1_500) == h.usage(1_500)
    assert rebuilt.next_alarm_at() == h.next_alarm_at()


def test_contended_is_in_memory_and_a_new_instance_forgets_it() -> None:
    conn = sqlite3.connect(":memory:")
    h = _busy_holder(conn)
    assert h.contended
    assert h.sync(sync("c", [], leases=[]), now=1_600).get("contended") is True
    rebuilt = holder(conn, limit=10, leases=h.config.leases)
    assert not rebuilt.contended
    assert "contended" not in rebuilt.sync(sync("c", [], leases=[]), now=1_600)


# --- the client's queue, at the core ------------------------------------------------------------


def test_every_table_and_column_of_the_queue_survives_a_new_instance() -> None:
    from semaphore_core.protocol import GrantedPermits, LeaseGrant, PermitGrant

    conn = sqlite3.connect(":memory:")
    queue = QueueClient(conn, "c")
    queue.enqueue([QueueItem(f"i{n}", "acct", "g") for n in range(4)], now=0)
    sent = queue.sent("acct", now=0)
    reply = PermitGrant(
        grants=(GrantedPermits("g1", "g", 1),),
        blocked=(),
        grant_results=(),
        next_request_at=2_000,
        leases=(LeaseGrant("l1", "g", 2, 60_000),),
    )
    queue.on_grant("acct", reply, now=10)
    queue.acked("acct", sent)
    drawn = queue.draw_leases(now=20)
    assert len(drawn) == 2
    queue.release(drawn[0].item_id)
    before = snapshot(conn)
    assert all(rows for rows in before["rows"].values())  # items, grants, leases and keys all hold rows
    request_before = queue.build_request("acct", now=30)
    rebuilt = QueueClient(conn, "c")
    assert snapshot(conn) == before
    assert rebuilt.build_request("acct", now=30) == request_before
    assert rebuilt.next_wakeup() == queue.next_wakeup()


# --- in the simulator: storage and the alarm survive, memory does not ----------------------------


def durable_rows(obj: DurableObject) -> dict[str, Any]:
    """An object's storage, without the platform's alarm row (compared on its own)."""
    tables = snapshot(obj.storage)
    del tables["rows"][ALARM_TABLE]
    return tables


def _eviction_world() -> tuple[WorldConfig, FaultPlan]:
    """Limit 4, leases; the holder evicted four times, each client twice, while grants,
    leases and claims are in flight; a group cap set at 3 s; a lost reply at 2 s."""
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(permits_per_lease=2, ttl_ms=20_000)),
        workload=Workload(
            clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=3, duration_ms=8_000),
                Arrival(at_ms=1_500, client=1, count=2, group="wf-2", duration_ms=30_000),
                Arrival(at_ms=6_000, client=1, count=3, duration_ms=4_000),
                Arrival(at_ms=9_000, client=0, count=2, group="wf-2", duration_ms=4_000),
            ),
        ),
        duration_ms=60_000,
    )
    faults = FaultPlan(
        evictions=(
            Eviction(HOLDER, 2_500),
            Eviction("client-0", 2_600),
            Eviction(HOLDER, 5_000),
            Eviction("client-1", 7_000),
            Eviction(HOLDER, 9_500),
            Eviction("client-0", 12_000),
            Eviction("client-1", 13_000),
            Eviction(HOLDER, 20_000),
        ),
        drops=(Drop(leg="reply", start_ms=2_000, end_ms=2_100, src="client-1", dst=HOLDER),),
        group_limit_changes=(GroupLimitChange(at_ms=3_000, key="acct", group="wf-2", limit=1),),
    )
    return config, faults


def test_every_objects_storage_and_alarm_are_unchanged_across_each_eviction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting: dict[str, Any] = {}
    pairs: list[tuple[str, Any, Any]] = []
    evict, instance = DurableObject.evict, DurableObject.instance

    def recording_evict(self: DurableObject) -> None:
        if self.live:  # an object already evicted has nothing more to lose
            waiting[self.name] = (durable_rows(self), self.get_alarm())
        evict(self)

    def recording_instance(self: DurableObject) -> Any:
        fresh = self._instance is None
        built = instance(self)
        if fresh and self.name in waiting:
            seen = (durable_rows(self), self.get_alarm(), self.sim.now())
            pairs.append((self.name, waiting.pop(self.name), seen))
        return built

    monkeypatch.setattr(DurableObject, "evict", recording_evict)
    monkeypatch.setattr(DurableObject, "instance", recording_instance)
    config, faults = _eviction_world()
    run = run_world(config, faults, seed=3, tolerated=frozenset({"F4"}))
    assert run.result.outcome == "completed", run.result.detail
    assert waiting == {}  # every evicted object was built again
    assert len(pairs) == len([e for e in run.trace.of_kind("evict") if e["live"]]) >= 6
    for name, (tables, alarm), (tables_after, alarm_after, rebuilt_ms) in pairs:
        assert tables_after == tables, name
        # The alarm is the same, unless it is what rebuilt the object: the platform clears
        # the stored alarm as it delivers it.
        assert alarm_after == alarm or (alarm_after is None and rebuilt_ms == alarm), name
    assert any(alarm is not None and rebuilt_ms == alarm for _, (_, alarm), (_, _, rebuilt_ms) in pairs)
    # The story put something in storage to lose: grants, leases, queued items, alarms.
    holder_side = [seen for name, seen, _ in pairs if name == HOLDER]
    assert any(tables["rows"]["durability_semaphore_grants"] for tables, _ in holder_side)
    assert any(tables["rows"]["durability_semaphore_leases"] for tables, _ in holder_side)
    assert any(alarm is not None for _, alarm in holder_side)
    client_side = [tables for name, (tables, _), _ in pairs if name != HOLDER]
    assert any(tables["rows"]["durability_semaphore_queue_items"] for tables in client_side)


def test_waiting_requests_and_group_caps_are_lost_with_the_instance() -> None:
    config, faults = _eviction_world()
    run = run_world(config, faults, seed=3, tolerated=frozenset({"F4"}))
    evictions = [e["t"] for e in events(run, "evict", object=HOLDER)]
    assert evictions == [2_500, 5_000, 9_500, 20_000]
    # Requests waiting for a round fail with the instance.
    failed = [e["t"] for e in run.trace.of_kind("reply") if e.get("error") == "evicted"]
    latency = config.latency_ms
    assert failed
    assert all(t - latency in evictions for t in failed)
    # The cap of 1 on wf-2, set at 3 s, lived on the instance evicted at 5 s: before that no
    # wf-2 grant passes 1; after it, wf-2 runs more than 1 item at once again.
    wf2 = [(g["t"], g["permits"]) for g in events(run, "grant", group="wf-2")]
    assert all(n <= 1 for t, n in wf2 if 3_000 <= t < 5_000)
    running: set[str] = set()
    peak_after = 0
    for e in run.trace.of_kind("admit", "release"):
        if e["kind"] == "admit" and e["group"] == "wf-2":
            running.add(e["item"])
        elif e["kind"] == "release":
            running.discard(e["item"])
        if e["t"] >= 5_000:
            peak_after = max(peak_after, len(running))
    assert peak_after > 1


def _one_round_then(period_ms: int, evict: bool) -> list[int]:
    """Rounds of a holder whose period is long; another client's first request comes at 3 s."""
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=None, round_period_ms=period_ms),
        workload=Workload(
            clients=2,
            plain_clients=2,
            script=(
                Arrival(at_ms=1_000, client=0, count=1, duration_ms=1_000),
                Arrival(at_ms=3_000, client=1, count=1, duration_ms=1_000),
            ),
        ),
        duration_ms=20_000,
    )
    faults = FaultPlan(evictions=(Eviction(HOLDER, 2_500),) if evict else ())
    run = run_world(config, faults, seed=1)
    return [e["t"] for e in events(run, "round", holder=HOLDER)]


def test_the_round_timer_and_the_last_rounds_time_are_lost_with_the_instance() -> None:
    # Kept: the second round waits for round_period_ms after the first (2.010 + 5 s).
    assert _one_round_then(5_000, evict=False)[:2] == [2_010, 7_010]
    # Lost: the new instance has no last round; it waits round_wait_ms from the request.
    assert _one_round_then(5_000, evict=True)[:2] == [2_010, 4_010]


def _silenced(evict: bool) -> Any:
    """A grant whose reply is lost and whose client is never heard again (limit 2)."""
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=1_000),)
        ),
        duration_ms=40_000,
    )
    drops = (
        Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER),
        Drop(leg="request", start_ms=3_000, end_ms=40_000, src="client-0", dst=HOLDER),
    )
    evictions = (Eviction(HOLDER, 5_000),) if evict else ()
    return run_world(config, FaultPlan(drops=drops, evictions=evictions), seed=1)


def test_the_early_timer_is_lost_with_the_instance_and_the_stored_alarm_is_not() -> None:
    kept = _silenced(evict=False)
    assert [e["t"] for e in events(kept, "early_alarm", object=HOLDER)] == [12_010]
    assert [e["t"] for e in kept.trace.of_kind("grant_reclaimed")] == [12_010]
    lost = _silenced(evict=True)
    assert events(lost, "early_alarm", object=HOLDER) == []
    # The stored alarm (commit + alarm_min_delay_ms) survived and brought the holder back.
    assert [e["scheduled"] for e in events(lost, "alarm", object=HOLDER)][:1] == [17_010]
    assert [e["t"] for e in lost.trace.of_kind("grant_reclaimed")] == [17_010]
