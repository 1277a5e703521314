"""``semsim.check.queued_counts``: the kept count of a client's queued items is the table's count."""

from __future__ import annotations

import sqlite3
from collections import Counter

from semaphore_core.protocol import GrantedPermits, GrantResult, PermitGrant
from semaphore_core.queue import QueueClient, QueueItem
from semsim.check.queued_counts import COUNT_QUEUED_SQL, QueuedCounts

KEY = "acct"


def _counted(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key, group, n in conn.execute(COUNT_QUEUED_SQL):
        out.setdefault(key, {})[group] = n
    return out


def _kept(counts: QueuedCounts, keys: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key in keys:
        rows = counts.by_group(key)
        assert rows is not None
        if rows:
            out[key] = dict(rows)
    return out


def test_the_kept_count_follows_enqueue_claim_requeue_cancel_and_release() -> None:
    conn = sqlite3.connect(":memory:")
    queue = QueueClient(conn, "a")
    # Items already queued when the count is first asked for are counted from the table.
    queue.enqueue([QueueItem(f"early-{n}", KEY, "g") for n in range(3)], now=0)
    counts = QueuedCounts(conn)
    keys = [KEY, "other"]
    assert _kept(counts, keys) == _counted(conn) == {KEY: {"g": 3}}
    queue.enqueue([QueueItem(f"item-{n}", KEY, "h") for n in range(4)], now=1)
    queue.enqueue([QueueItem("x-0", "other", "g")], now=1)
    assert _kept(counts, keys) == _counted(conn) == {KEY: {"g": 3, "h": 4}, "other": {"g": 1}}
    grants = (GrantedPermits(grant_id="g-1", group="h", permits=3),)
    queue.on_grant(KEY, PermitGrant(grants=grants, blocked=(), grant_results=(), next_request_at=0), now=2)
    assert _kept(counts, keys) == _counted(conn) == {KEY: {"g": 3, "h": 1}, "other": {"g": 1}}
    # The holder honours 2 of the 3 claimed and says the grant expired: one goes back to the queue.
    results = (GrantResult(grant_id="g-1", status="expired", claimed=2),)
    queue.on_grant(KEY, PermitGrant(grants=(), blocked=(), grant_results=results, next_request_at=0), now=3)
    assert _kept(counts, keys) == _counted(conn) == {KEY: {"g": 3, "h": 2}, "other": {"g": 1}}
    assert queue.cancel("early-0")
    for item_id, _ in queue.running():
        queue.release(item_id)
    assert queue.cancel("x-0")
    assert _kept(counts, keys) == _counted(conn) == {KEY: {"g": 2, "h": 2}}


def test_a_rolled_back_write_rolls_the_count_back_and_a_schema_change_recounts() -> None:
    conn = sqlite3.connect(":memory:")
    queue = QueueClient(conn, "a")
    counts = QueuedCounts(conn)
    assert counts.by_group(KEY) == []
    conn.execute("BEGIN")
    queue._conn.execute(
        "INSERT INTO durability_semaphore_queue_items (id, key, grp, body, status, enqueued_at) "
        "VALUES ('r', ?, 'g', '', 'queued', 0)",
        (KEY,),
    )
    assert counts.by_group(KEY) == [("g", 1)]  # installed already: read inside the transaction
    conn.execute("ROLLBACK")
    assert counts.by_group(KEY) == []
    queue.enqueue([QueueItem(f"item-{n}", KEY, "g") for n in range(2)], now=0)
    # A schema change drops the triggers with their table; the count is made again from the rows.
    conn.execute("ALTER TABLE durability_semaphore_queue_items RENAME TO old_items")
    conn.execute("CREATE TABLE durability_semaphore_queue_items AS SELECT * FROM old_items")
    conn.execute("DROP TABLE old_items")
    assert counts.by_group(KEY) == [("g", 2)]
    conn.execute(
        "INSERT INTO durability_semaphore_queue_items (seq, id, key, grp, body, status, enqueued_at) "
        "VALUES (9, 'late', ?, 'h', '', 'queued', 5)",
        (KEY,),
    )
    assert Counter(dict(counts.by_group(KEY) or [])) == Counter({"g": 2, "h": 1})


def test_no_count_is_kept_on_a_connection_without_the_items_table_or_inside_a_first_transaction() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    counts = QueuedCounts(conn)
    assert counts.by_group(KEY) is None
    QueueClient(conn, "a")
    conn.execute("BEGIN")
    assert counts.by_group(KEY) is None  # not installed inside a transaction that could roll back
    conn.execute("COMMIT")
    assert counts.by_group(KEY) == []


def test_no_overask_counts_from_the_table_until_the_backlog_is_long_then_keeps_the_count() -> None:
    from semaphore_core.protocol import Demand, PermitRequest
    from tests.helpers import OveraskJudge

    conn = sqlite3.connect(":memory:", isolation_level=None)
    queue = QueueClient(conn, "a")
    judge = OveraskJudge(conn, full=True, keep_counts_from=5)  # the debug mode compares the two counts
    checks = judge.checker
    asked = PermitRequest(client_id="a", demand=(Demand(group="g", count=1, oldest_at=0),), grants=())
    for n in range(8):
        queue.enqueue([QueueItem(f"item-{n}", KEY, "g")], now=n)
        assert judge(KEY, asked, now=n) is None
        # Kept from the request that saw five queued: no triggers before, for a short run.
        assert (conn in checks._counts) == (n >= 4), n
    too_many = PermitRequest(client_id="a", demand=(Demand(group="g", count=9, oldest_at=0),), grants=())
    broken = judge(KEY, too_many, now=9)
    assert broken is not None
    assert "g" in broken
