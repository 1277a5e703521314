"""The queue client (semaphore_core.queue) against a real holder: the docs' promises, one per test."""

from __future__ import annotations

import sqlite3

from semaphore_core import Holder, HolderConfig, LeaseOptions, Strict
from semaphore_core.protocol import (
    Demand,
    GrantReport,
    LeaseReport,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
)
from semaphore_core.queue import Admission, QueueClient, QueueItem
from tests.helpers import ids


class Pair:
    """A holder and one queue client, with a hand-turned clock."""

    def __init__(self, limit: int = 10, leases: LeaseOptions | None = None, timeout_ms: int = 10_000) -> None:
        self.holder = Holder(
            sqlite3.connect(":memory:"),
            HolderConfig(limit=limit, leases=leases, grant_timeout_ms=timeout_ms),
            new_id=ids("g"),
        )
        self.queue = QueueClient(sqlite3.connect(":memory:"), "c1")
        self.now = 0

    def enqueue(self, n: int, group: str = "wf", key: str = "k") -> None:
        start = self._count()
        self.queue.enqueue(
            [QueueItem(id=f"item-{start + i}", key=key, group=group) for i in range(n)], self.now
        )

    def _count(self) -> int:
        """Items ever enqueued: open ones, and finished ones (whose ids stay taken)."""
        return int(
            self.queue._conn.execute(
                "SELECT (SELECT count(*) FROM durability_semaphore_queue_items) + "
                "(SELECT count(*) FROM durability_semaphore_queue_done)"
            ).fetchone()[0]
        )

    def ask(self, key: str = "k") -> tuple[PermitGrant, object]:
        request = self.queue.build_request(key, self.now)
        changes = self.queue.sent(key, self.now)
        [reply] = self.holder.round([request], self.now).replies
        step = self.queue.on_grant(key, reply, self.now)
        self.queue.acked(key, changes)
        return reply, step

    def sync(self, key: str = "k") -> tuple[PermitSyncResult, object]:
        message = self.queue.build_sync(key, self.now)
        changes = self.queue.sent(key, self.now)
        reply = self.holder.sync_message(message, self.now)
        step = self.queue.on_synced(key, reply, self.now)
        self.queue.acked(key, changes)
        return reply, step

    def statuses(self) -> list[str]:
        rows = self.queue._conn.execute("SELECT status FROM durability_semaphore_queue_items ORDER BY seq")
        return [status for (status,) in rows]


def test_enqueue_is_idempotent_by_item_id_and_demand_counts_queued_items_per_group() -> None:
    p = Pair()
    assert p.queue.enqueue([QueueItem("a", "k", "g1"), QueueItem("b", "k", "g2")], now=5) == 2
    assert p.queue.enqueue([QueueItem("a", "k", "g1")], now=9) == 0
    p.now = 7
    p.queue.enqueue([QueueItem("c", "k", "g1")], now=7)
    request = p.queue.build_request("k", now=10)
    assert [(d.group, d.count, d.oldest_at) for d in request.demand] == [("g1", 2, 5), ("g2", 1, 5)]


def test_items_are_admitted_only_through_a_confirmed_claim() -> None:
    p = Pair(limit=2)
    p.enqueue(3)
    reply, step = p.ask()
    assert [g.permits for g in reply.grants] == [2]
    assert step.claims == ((reply.grants[0].grant_id, 2),)  # type: ignore[attr-defined]
    assert step.admitted == ()  # type: ignore[attr-defined]
    assert p.statuses() == ["claiming", "claiming", "queued"]
    _, synced = p.sync()
    assert [a.item_id for a in synced.admitted] == ["item-0", "item-1"]  # type: ignore[attr-defined]
    assert p.statuses() == ["running", "running", "queued"]


def test_a_claim_that_arrives_after_the_deadline_admits_nothing_and_requeues_everything() -> None:
    p = Pair(limit=3, timeout_ms=1_000)
    p.enqueue(3)
    p.ask()
    p.now = 1_000  # the claim arrives at the deadline: nothing was claimed in time
    reply, step = p.sync()
    assert (reply.grant_results[0].claimed, reply.grant_results[0].status) == (0, "expired")
    assert step.admitted == ()  # type: ignore[attr-defined]
    assert p.statuses() == ["queued", "queued", "queued"]


def test_an_expired_claim_requeues_only_what_was_not_honoured() -> None:
    p = Pair(limit=3, timeout_ms=1_000)
    p.enqueue(2)
    reply, _ = p.ask()
    grant = reply.grants[0].grant_id
    # A claim of one reached the holder in time; the client's claim of both arrives late.
    p.holder.sync_message(PermitSync(client_id="c1", grants=(GrantReport(grant, 1, 0),)), 500)
    p.now = 1_500
    result, step = p.sync()
    assert (result.grant_results[0].claimed, result.grant_results[0].status) == (1, "expired")
    assert [a.item_id for a in step.admitted] == ["item-0"]  # type: ignore[attr-defined]
    assert step.requeued == ("item-1",)  # type: ignore[attr-defined]


def test_a_grant_the_holder_does_not_know_requeues_its_claimed_items() -> None:
    p = Pair(limit=3, timeout_ms=1_000)
    p.enqueue(2)
    p.ask()
    p.holder.reclaim_expired(1_000)  # nothing claimed in time: the grant is deleted
    p.now = 1_200
    result, step = p.sync()
    assert result.grant_results[0].status == "not_found"
    assert step.requeued == ("item-0", "item-1")  # type: ignore[attr-defined]
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_grants").fetchone()[0] == 0


def test_a_release_is_reported_and_returns_the_permit() -> None:
    p = Pair(limit=2)
    p.enqueue(2)
    p.ask()
    p.sync()
    assert p.holder.usage(p.now).granted == 2
    assert p.queue.release("item-0")
    assert not p.queue.release("item-0")  # only once
    assert p.queue.dirty_keys() == ["k"]
    p.sync()
    assert p.holder.usage(p.now).granted == 1
    assert p.queue.dirty_keys() == []


def test_a_release_made_while_a_report_is_in_flight_is_still_reported() -> None:
    # Found by the simulator: the reply to a report sent *before* the release must not
    # let the client forget the grant, or the release is never reported.
    p = Pair(limit=1)
    p.enqueue(1)
    p.ask()
    p.sync()
    message = p.queue.build_sync("k", p.now)  # in flight: claimed 1, released 0
    changes = p.queue.sent("k", p.now)
    p.queue.release("item-0")  # finishes meanwhile
    reply = p.holder.sync_message(message, p.now)
    p.queue.on_synced("k", reply, p.now)
    p.queue.acked("k", changes)
    assert p.queue.dirty_keys() == ["k"]
    final = p.queue.build_sync("k", p.now)
    assert [(g.claimed, g.released) for g in final.grants] == [(1, 1)]
    p.holder.sync_message(final, p.now)
    assert p.holder.usage(p.now).granted == 0


def test_the_client_does_not_ask_before_next_request_at() -> None:
    p = Pair(limit=1)
    p.enqueue(2)
    assert p.queue.keys_due(p.now) == ["k"]
    reply, _ = p.ask()
    assert p.queue.keys_due(p.now) == []
    assert p.queue.next_request_at() == reply.next_request_at
    assert p.queue.keys_due(reply.next_request_at) == ["k"]


LEASES = LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=60_000)


def test_lease_permits_are_drawn_one_per_item_and_are_one_shot() -> None:
    p = Pair(limit=2, leases=LEASES)
    p.queue.build_request("k", 0)
    p.ask()  # no demand yet, but a lease-capable client with nothing queued gets nothing
    p.enqueue(1)
    reply, _ = p.ask()
    assert [lease.permits for lease in reply.leases or ()] == [1]  # grant 1, lease the other
    p.enqueue(2)
    admitted = p.queue.draw_leases(p.now)
    assert [a.item_id for a in admitted] == ["item-1"]
    assert p.queue.draw_leases(p.now) == []  # the lease is fully drawn
    p.queue.release("item-1")
    assert p.queue.draw_leases(p.now) == []  # released permits never become drawable again


def test_contended_returns_the_undrawn_headroom_of_idle_groups() -> None:
    p = Pair(limit=4, leases=LEASES)
    p.enqueue(1, group="idle")
    p.ask()
    p.sync()  # admit the granted item; the client now holds a lease of 2 in "idle"
    lease_id = p.queue._conn.execute("SELECT lease_id FROM durability_semaphore_queue_leases").fetchone()[0]
    busy = PermitRequest(client_id="c2", demand=(Demand("busy", 5, 0),), grants=(), leases=())
    [other] = p.holder.round([busy], p.now).replies
    assert other.contended
    p.sync()
    retired = p.queue._conn.execute(
        "SELECT retired FROM durability_semaphore_queue_leases WHERE lease_id = ?", (lease_id,)
    ).fetchone()
    assert retired == (1,)  # the contended sync made the client return the idle lease
    p.sync()  # reported retired with nothing drawn: the holder settles it
    assert p.holder.usage(p.now).leased == 0
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_leases").fetchone() == (0,)


def _one_item_drawn_from_a_1_s_lease() -> tuple[Pair, Admission]:
    """A strict lease of 2 with a 1 s ttl, granted beside a 1-permit grant; one item drawn from it at 0."""
    p = Pair(limit=4, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=1_000))
    p.enqueue(1)
    p.ask()
    p.enqueue(1)
    [admitted] = p.queue.draw_leases(p.now)
    return p, admitted


def test_a_lease_the_holder_stopped_is_reported_retired_until_settled() -> None:
    p, admitted = _one_item_drawn_from_a_1_s_lease()
    p.now = 1_000  # the lease expires unreported; the holder's next round retires it
    p.holder.round([], p.now)
    reply, _ = p.sync()
    assert reply.leases
    assert reply.leases[0].expires_at <= p.now
    report = p.queue.build_sync("k", p.now).leases
    assert report
    assert report[0].retired is True
    p.queue.release(admitted.item_id)
    p.sync()  # retired with drawn 1, released 1: the holder settles it
    p.sync()
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_leases").fetchone()[0] == 0
    assert p.holder.usage(p.now).leased == 0


def test_a_release_made_while_the_retired_report_is_in_flight_is_reported_before_the_lease_is_dropped() -> (
    None
):
    # Found by the fuzzer (no faults at all): the client reports its stopped lease
    # (drawn 1, released 0); while that report is in flight the item finishes. The
    # holder's reply echoes the lease as stopped with 1 permit. Judged against the
    # local released mark (1), that looked settled: the client dropped the lease and
    # the holder kept its footprint of 1 forever.
    p, admitted = _one_item_drawn_from_a_1_s_lease()
    p.now = 1_000
    p.holder.round([], p.now)  # the lease expired unreported: retired
    p.sync()  # the client hears it stopped
    message = p.queue.build_sync("k", p.now)  # retired, drawn 1, released 0
    assert message.leases is not None
    [report] = message.leases
    changes = p.queue.sent("k", p.now)
    p.queue.release(admitted.item_id)  # finishes while the report is in flight
    reply = p.holder.sync_message(message, p.now)
    p.queue.on_synced("k", reply, p.now)
    p.queue.acked("k", changes)
    assert p.holder.usage(p.now).leased == 1
    assert p.queue.build_sync("k", p.now).leases == (LeaseReport(report.lease_id, 1, 1, True),)
    p.sync()  # now the holder hears the release and settles the lease
    assert p.holder.usage(p.now).leased == 0
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_leases").fetchone() == (0,)


def test_a_stopped_echo_for_a_lease_already_retired_here_asks_for_no_new_report() -> None:
    # Found by a scenario: with an item still running from a retired lease, every
    # stopped echo marked the key dirty again, so the client resent the same report
    # every round trip (1,195 syncs in 12 s). Only a release has news for the holder.
    p, admitted = _one_item_drawn_from_a_1_s_lease()
    p.now = 1_000
    p.holder.round([], p.now)  # the lease expired unreported: retired
    p.sync()  # the client hears it stopped and retires it: news for the holder
    assert p.queue.dirty_keys() == ["k"]
    p.sync()  # retired, drawn 1, released 0: the holder keeps the running permit
    assert p.holder.usage(p.now).leased == 1
    assert p.queue.dirty_keys() == []
    p.queue.release(admitted.item_id)
    assert p.queue.dirty_keys() == ["k"]
    p.sync()
    assert p.holder.usage(p.now).leased == 0


def test_a_lease_with_permits_in_use_is_due_a_report_at_half_its_lifetime() -> None:
    p = Pair(limit=4, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=60_000))
    p.enqueue(1)
    p.ask()
    assert p.queue.heartbeat_at() is None  # nothing drawn: nothing to keep alive
    p.enqueue(1)
    p.queue.draw_leases(p.now)
    assert p.queue.heartbeat_at() == 30_000
    assert p.queue.heartbeat_keys(29_999) == []
    assert p.queue.heartbeat_keys(30_000) == ["k"]
    p.now = 30_000
    p.sync()
    assert p.queue.heartbeat_at() == 60_000  # reported at 30 s, refreshed to expire at 90 s


# --- a lease's expiry, noticed by the client itself ----------------------------------------------


def _idle_lease(ttl_ms: int = 60_000) -> tuple[Pair, str]:
    """Limit 4: the client's one item runs on a grant and is released; its lease of 2 sits undrawn.

    Nothing is queued, so the client sends no request and hears no reply: only
    its own clock can tell it the lease expired. Returns the pair and the lease id.
    """
    p = Pair(limit=4, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=ttl_ms))
    p.enqueue(1)
    p.ask()
    p.sync()  # claim confirmed: the item runs
    p.queue.release("item-0")
    p.sync()  # the release reported: the grant is gone, the lease stays
    [(lease_id,)] = p.queue._conn.execute("SELECT lease_id FROM durability_semaphore_queue_leases")
    assert p.holder.usage(p.now).leased == 2
    assert p.queue.dirty_keys() == []
    assert p.queue.keys_due(p.now) == []
    return p, str(lease_id)


def test_the_client_knows_when_its_next_lease_expires() -> None:
    p, _ = _idle_lease(ttl_ms=60_000)
    assert p.queue.lease_expiry_at() == 60_000  # the holder's expiresAt, as echoed at t=0
    assert p.queue.next_wakeup()[3] == 60_000
    assert p.queue.retire_expired(59_999) == []
    assert p.queue.dirty_keys() == []


def test_an_idle_clients_lease_is_retired_at_its_expiry_and_reported_with_what_it_drew() -> None:
    p, lease_id = _idle_lease(ttl_ms=60_000)
    p.now = 60_000
    assert p.queue.retire_expired(p.now) == [("k", lease_id)]
    assert p.queue.retire_expired(p.now) == []  # once
    assert p.queue.lease_expiry_at() is None  # nothing live is left to wake for
    assert p.queue.dirty_keys() == ["k"]  # due a report though nothing is queued
    assert p.queue.build_sync("k", p.now).leases == (LeaseReport(lease_id, 0, 0, True),)
    _, step = p.sync()  # retired with nothing drawn: the holder shrinks it to 0 and forgets it
    assert step.settled == (lease_id,)  # type: ignore[attr-defined]
    assert p.holder.usage(p.now).leased == 0
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_leases").fetchone() == (0,)
    assert p.queue.dirty_keys() == []


def test_a_lease_expired_with_work_running_is_reported_retired_until_every_release_is_heard() -> None:
    p, admitted = _one_item_drawn_from_a_1_s_lease()
    p.now = 1_000  # every heartbeat lost: the lease expires with its item running
    [(_, lease_id)] = p.queue.retire_expired(p.now)
    p.enqueue(1)
    assert p.queue.draw_leases(p.now) == []  # stopped: it draws no more
    assert p.queue.build_sync("k", p.now).leases == (LeaseReport(lease_id, 1, 0, True),)
    p.sync()
    assert p.holder.usage(p.now).leased == 1  # shrunk to what it drew, still charged for the item
    assert p.queue.lease_expiry_at() is None
    p.queue.release(admitted.item_id)
    assert p.queue.dirty_keys() == ["k"]
    p.sync()
    assert p.holder.usage(p.now).leased == 0
    assert p.queue._conn.execute("SELECT count(*) FROM durability_semaphore_queue_leases").fetchone() == (0,)


def test_a_heartbeat_moves_the_expiry_the_client_wakes_for() -> None:
    p = Pair(limit=4, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=60_000))
    p.enqueue(1)
    p.ask()
    p.enqueue(1)
    p.queue.draw_leases(p.now)
    p.now = 30_000
    p.sync()  # the heartbeat: the holder echoes expiresAt 90 s
    assert p.queue.lease_expiry_at() == 90_000
    assert p.queue.retire_expired(60_000) == []  # the first expiry no longer applies


# --- cost flat in history: finished items leave the open items --------------------------------


def _tables(queue: QueueClient) -> tuple[int, int]:
    conn = queue._conn
    return (
        conn.execute("SELECT count(*) FROM durability_semaphore_queue_items").fetchone()[0],
        conn.execute("SELECT count(*) FROM durability_semaphore_queue_done").fetchone()[0],
    )


def test_finished_items_leave_the_open_items_and_their_ids_stay_taken() -> None:
    p = Pair()
    p.enqueue(3)
    p.ask()
    p.sync()  # the claim confirmed: the three run
    assert len(p.queue.running()) == 3
    for item_id, _ in p.queue.running():
        assert p.queue.release(item_id) is not None
    p.enqueue(2)
    assert p.queue.cancel("item-4")
    # Only the one queued item is open; the three released and the cancelled one are done.
    assert _tables(p.queue) == (1, 4)
    assert [p.queue.status(f"item-{i}") for i in range(5)] == ["done"] * 3 + ["queued", "done"]
    assert p.queue.status("never-enqueued") is None
    # A finished id is never queued again, released or cancelled.
    assert p.queue.enqueue([QueueItem("item-0", "k", "wf"), QueueItem("item-4", "k", "wf")], p.now) == 0
    assert _tables(p.queue) == (1, 4)
    assert p.queue.release("item-0") is None  # a repeat release finds nothing running


def test_a_store_from_before_the_done_table_moves_its_finished_items_when_opened() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE durability_semaphore_queue_items (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
        "key TEXT NOT NULL, grp TEXT NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL, "
        "enqueued_at INTEGER NOT NULL, grant_id TEXT, lease_id TEXT, admitted_at INTEGER)"
    )
    conn.execute(
        "CREATE INDEX durability_semaphore_queue_items_open ON durability_semaphore_queue_items "
        "(key, grp, status) WHERE status != 'done'"
    )
    conn.executemany(
        "INSERT INTO durability_semaphore_queue_items (id, key, grp, body, status, enqueued_at) "
        "VALUES (?, 'k', 'wf', '', ?, 0)",
        [("old-done", "done"), ("old-queued", "queued")],
    )
    queue = QueueClient(conn, "c1")
    assert _tables(queue) == (1, 1)
    assert queue.status("old-done") == "done"
    assert queue.enqueue([QueueItem("old-done", "k", "wf")], 5) == 0
    assert queue.build_request("k", 5).demand == (Demand(group="wf", count=1, oldest_at=0),)
    # Opening it again changes nothing.
    QueueClient(conn, "c1")
    assert _tables(queue) == (1, 1)
