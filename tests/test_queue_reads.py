"""The questions checkers ask of a client's queue (semaphore_core.queue_reads) fit its schema.

They live beside the schema so that a migration that renames a column fails
here, by name, rather than turning a check into one that reads nothing."""

from __future__ import annotations

import sqlite3

import pytest

from semaphore_core import queue_reads
from semaphore_core.queue import QueueClient, QueueItem


def _queue() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    queue = QueueClient(conn, "client-0")
    queue.enqueue([QueueItem("i1", "acct", "wf-1"), QueueItem("i2", "acct", "wf-2")], now=5)
    return conn


@pytest.mark.parametrize("name", sorted(queue_reads.ALL))
def test_every_question_runs_on_a_new_queue_and_only_reads(name: str) -> None:
    conn = _queue()
    sql, params = queue_reads.ALL[name]
    assert sql.lstrip().upper().startswith("SELECT")
    changes = conn.total_changes
    conn.execute(sql, params).fetchall()
    assert conn.total_changes == changes


def test_the_answers_say_what_the_queue_holds() -> None:
    conn = _queue()
    assert conn.execute(queue_reads.OUTSTANDING_ITEMS).fetchall() == [(2,)]
    assert conn.execute(queue_reads.WAITING_BY_GROUP, ("acct",)).fetchall() == [
        ("wf-1", 1, 5),
        ("wf-2", 1, 5),
    ]
    assert conn.execute(queue_reads.KEY_HAS_WAITING_ITEMS, ("acct",)).fetchall() == [(1,)]
    assert conn.execute(queue_reads.KEY_HAS_WAITING_ITEMS, ("other",)).fetchall() == []
    assert conn.execute(queue_reads.UNREPORTED_CHANGES).fetchall() == []  # demand is asked, not reported
    assert conn.execute(queue_reads.LEASE_IN_USE, ("acct",)).fetchall() == [(None,)]  # no lease: NULL
    assert conn.execute(queue_reads.RUNNING_ITEMS_BY_KEY).fetchall() == []
    assert conn.execute(queue_reads.QUEUED_NEWEST_FIRST).fetchall() == [
        ("acct", "wf-2", "i2"),  # the same millisecond: the later in the batch is the newer
        ("acct", "wf-1", "i1"),
    ]


def test_a_renamed_column_is_caught_here() -> None:
    conn = _queue()
    conn.execute("ALTER TABLE durability_semaphore_queue_items RENAME COLUMN grp TO group_name")
    with pytest.raises(sqlite3.OperationalError, match="no such column: grp"):
        conn.execute(queue_reads.WAITING_BY_GROUP, ("acct",))
