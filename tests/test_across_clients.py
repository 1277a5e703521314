"""``AcrossClients``: totals over every client, kept from the clients whose storage changed, equal
at every moment to asking each client (the functions the debug mode still uses)."""

from __future__ import annotations

import sqlite3
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from semaphore_core.queue import QueueClient
from semsim.check import client_reads
from semsim.check.across_clients import AcrossClients
from semsim.runtime.durable import DurableObject

KEYS = ("a", "b")
GROUPS = ("g1", "g2")


class _Client:
    """What ``AcrossClients`` needs of a client object: its storage."""

    def __init__(self, name: str) -> None:
        self.storage = sqlite3.connect(":memory:", isolation_level=None)
        self.name = name
        self.checker_reads: dict[Any, Any] | None = None  # read every time
        self.checker_reads_checked = False
        QueueClient(self.storage, name)


def _write(conn: sqlite3.Connection, op: tuple[Any, ...], serial: int) -> None:
    kind = op[0]
    if kind == "item":
        _, key, group, status, at = op
        conn.execute(
            "INSERT INTO durability_semaphore_queue_items (id, key, grp, body, status, enqueued_at) "
            "VALUES (?, ?, ?, '{}', ?, ?)",
            (f"i{serial}", key, group, status, at),
        )
    elif kind == "finish":
        conn.execute(
            "DELETE FROM durability_semaphore_queue_items WHERE seq = "
            "(SELECT min(seq) FROM durability_semaphore_queue_items)"
        )
    elif kind == "lease":
        _, key, group, drawn, released = op
        conn.execute(
            "INSERT INTO durability_semaphore_queue_leases (lease_id, key, grp, permits, drawn, released, "
            "retired, expires_at, reported_at) VALUES (?, ?, ?, 8, ?, ?, 0, 0, 0)",
            (f"l{serial}", key, group, drawn, min(drawn, released)),
        )
    elif kind == "draw":
        conn.execute("UPDATE durability_semaphore_queue_leases SET drawn = drawn + 1")
    else:
        assert kind == "drop_lease"
        conn.execute(
            "DELETE FROM durability_semaphore_queue_leases WHERE lease_id = "
            "(SELECT min(lease_id) FROM durability_semaphore_queue_leases)"
        )


writes = st.one_of(
    st.tuples(
        st.just("item"),
        st.sampled_from(KEYS),
        st.sampled_from(GROUPS),
        st.sampled_from(["queued", "claiming", "running"]),
        st.integers(0, 50),
    ),
    st.tuples(st.just("finish")),
    st.tuples(
        st.just("lease"), st.sampled_from(KEYS), st.sampled_from(GROUPS), st.integers(0, 8), st.integers(0, 8)
    ),
    st.tuples(st.just("draw")),
    st.tuples(st.just("drop_lease")),
)
steps = st.lists(
    st.tuples(st.integers(0, 3), writes, st.sampled_from(["commit", "rollback", "open"])), max_size=40
)


def _expected(clients: dict[str, DurableObject]) -> tuple[Any, ...]:
    return (
        {key: client_reads.lease_in_use(clients, key) for key in KEYS},
        {key: client_reads.waiting_by_group(clients, key) for key in KEYS},
        client_reads.known_leases(clients),
    )


def _kept(across: AcrossClients, clients: dict[str, DurableObject]) -> tuple[Any, ...]:
    across.refresh(clients)
    return (
        {key: across.lease_in_use(key) for key in KEYS},
        {key: across.waiting_by_group(key) for key in KEYS},
        set(across.known),
    )


@settings(max_examples=150, deadline=None)
@given(steps=steps)
def test_the_kept_totals_are_what_every_client_holds_after_every_step(
    steps: list[tuple[int, tuple[Any, ...], str]],
) -> None:
    clients = cast(dict[str, DurableObject], {f"c{i}": _Client(f"c{i}") for i in range(4)})
    across = AcrossClients()
    assert _kept(across, clients) == _expected(clients)
    for serial, (index, op, end) in enumerate(steps):
        conn = clients[f"c{index}"].storage
        conn.execute("SAVEPOINT step")
        _write(conn, op, serial)
        if end == "open":
            # Read inside the open transaction (what a rollback may still undo), then decide.
            assert _kept(across, clients) == _expected(clients)
            end = "rollback" if serial % 2 else "commit"
        if end == "rollback":
            conn.execute("ROLLBACK TO step")
        conn.execute("RELEASE step")
        assert _kept(across, clients) == _expected(clients)


def test_a_read_inside_an_open_transaction_is_read_again_after_its_rollback() -> None:
    clients = cast(dict[str, DurableObject], {"c0": _Client("c0")})
    across = AcrossClients()
    conn = clients["c0"].storage
    conn.execute("SAVEPOINT step")
    _write(conn, ("lease", "a", "g1", 3, 0), 1)
    assert _kept(across, clients)[0] == {"a": 3, "b": 0}
    conn.execute("ROLLBACK TO step")
    conn.execute("RELEASE step")
    # The rollback leaves total_changes where the insert put it: only "read again" catches it.
    assert _kept(across, clients)[0] == {"a": 0, "b": 0}


def test_the_oldest_waiting_item_survives_many_replacements() -> None:
    """The heap of oldest arrivals stays bounded and right as clients' oldest items come and go."""
    clients = cast(dict[str, DurableObject], {f"c{i}": _Client(f"c{i}") for i in range(3)})
    across = AcrossClients()
    # c0's item stays the oldest, so the values c1 and c2 leave behind are never at the heap's top.
    _write(clients["c0"].storage, ("item", "a", "g1", "queued", 0), 0)
    for serial in range(1, 300):
        conn = clients[f"c{1 + serial % 2}"].storage
        _write(conn, ("item", "a", "g1", "queued", serial), serial)
        if serial > 2:
            _write(conn, ("finish",), serial)
        assert _kept(across, clients) == _expected(clients)
    heap, live = across._waiting_oldest["a", "g1"]
    assert len(heap) <= 2 * len(live) + 16
