"""The queue client's state in memory (issue 10, item 2): evicted at every step, it answers as its twin.

A Hypothesis state machine drives three queue clients on three connections
with the same operations and the same replies: ``evicted`` is rebuilt from
its storage (a new ``QueueClient`` on the same connection, as a client
object is after an eviction) before every step, ``kept`` never is, and
``model`` is the client as it was when every answer was a query
(``tests/queue_sql_model.py``). After every step every answer must be the
same, the three databases must hold the same rows and count the same
changed rows (``total_changes``, which the checkers watch), and the memory
of both ``evicted`` and ``kept`` must be what their storage holds
(``check_memory``). Replies are drawn, not computed by a holder: any grant
ids, results, lease echoes and ``contended`` flags a holder could send,
including stale and unknown ids, late results and stopped leases.

Then the other half of the promise: an error inside a write (a constraint
that fails, an error injected half-way through a reply) leaves memory
equal to storage, and storage as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from semaphore_core.protocol import (
    GrantedPermits,
    GrantResult,
    LeaseGrant,
    PermitGrant,
    PermitSyncResult,
)
from semaphore_core.queue import QueueClient, QueueItem
from semaphore_core.queue_state import QueueState
from tests.queue_sql_model import SqlQueueClient

KEYS = ("acct", "b")
GROUPS = ("g", "h")
ITEM_IDS = tuple(f"i{n}" for n in range(24))
GRANT_IDS = tuple(f"G{n}" for n in range(6))
LEASE_IDS = tuple(f"L{n}" for n in range(4))
TABLES = (
    "durability_semaphore_queue_items",
    "durability_semaphore_queue_done",
    "durability_semaphore_queue_grants",
    "durability_semaphore_queue_leases",
    "durability_semaphore_queue_keys",
)

items = st.builds(
    QueueItem,
    id=st.sampled_from(ITEM_IDS),
    key=st.sampled_from(KEYS),
    group=st.sampled_from(GROUPS),
    body=st.sampled_from(("", '{"duration_ms": 5}')),
)
#: A lease's expiry from now: mostly live (a heartbeat or a lifetime away), sometimes stopped.
lease_expiry = st.sampled_from((-1_000, 0, 1, 999, 30_000, 60_000, 60_000, 90_000))


def rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {table: conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() for table in TABLES}


class QueueTwins(RuleBasedStateMachine):
    """``evicted``, ``kept`` and ``model``: the same calls, the same answers, the same rows."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        #: Messages sent and not yet answered or lost: (key, kind, the change count they carry).
        self.in_flight: list[tuple[str, str, int]] = []

    @initialize(return_idle_leases=st.booleans())
    def start(self, return_idle_leases: bool) -> None:
        self.fix = return_idle_leases
        self.conns = {name: sqlite3.connect(":memory:") for name in ("evicted", "kept", "model")}
        self.evicted = QueueClient(self.conns["evicted"], "c", return_idle_leases)
        self.kept = QueueClient(self.conns["kept"], "c", return_idle_leases)
        self.model: Any = SqlQueueClient(self.conns["model"], "c", return_idle_leases)

    def all(self, call: Callable[[Any], Any]) -> Any:
        """``call`` on each client; the same answer, or the same error, from all three."""
        outcomes = []
        for queue in (self.evicted, self.kept, self.model):
            try:
                outcomes.append(("ok", call(queue)))
            except Exception as error:  # compared across the three, then reported below
                outcomes.append(("error", type(error)))
        assert outcomes[0] == outcomes[1] == outcomes[2], outcomes
        kind, value = outcomes[0]
        assert kind == "ok", value
        return value

    # --- time, items ------------------------------------------------------------------

    @rule(ms=st.sampled_from((1, 500, 1_000, 15_000, 31_000, 61_000)), wake=st.booleans())
    def advance(self, ms: int, wake: bool) -> None:
        self.now += ms
        if wake:  # as the client object does when it wakes
            self.retire_expired()
            self.draw_leases()

    @rule(batch=st.lists(items, min_size=1, max_size=4))
    def enqueue(self, batch: list[QueueItem]) -> None:
        self.all(lambda q: q.enqueue(batch, self.now))

    @rule(batch=st.lists(items, min_size=1, max_size=3), at=st.integers(0, 3))
    def enqueue_fails_half_way(self, batch: list[QueueItem], at: int) -> None:
        """An item without a key (NOT NULL) fails the batch after the items before it went in."""
        broken = [*batch[:at], QueueItem("bad", None, "g"), *batch[at:]]  # type: ignore[arg-type]
        for queue in (self.evicted, self.kept, self.model):
            with pytest.raises(sqlite3.IntegrityError):
                queue.enqueue(broken, self.now)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Mostly a running item; sometimes any id (a repeat, or one that never ran)."""
        running = [item for item, _ in self.kept.running()]
        item = data.draw(st.sampled_from(running or ITEM_IDS) | st.sampled_from(ITEM_IDS))
        self.all(lambda q: q.release(item))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """Mostly the newest queued item, as a user withdraws; sometimes any id."""
        newest = self.kept.newest_queued(3)
        item = data.draw(st.sampled_from(newest or ITEM_IDS) | st.sampled_from(ITEM_IDS))
        self.all(lambda q: q.cancel(item))

    @rule()
    def draw_leases(self) -> None:
        self.all(lambda q: q.draw_leases(self.now))

    @rule()
    def retire_expired(self) -> None:
        self.all(lambda q: q.retire_expired(self.now))

    # --- messages and replies -----------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), kind=st.sampled_from(("request", "sync")))
    def send(self, key: str, kind: str) -> None:
        build = "build_request" if kind == "request" else "build_sync"
        self.all(lambda q: getattr(q, build)(key, self.now))
        changes = self.all(lambda q: q.sent(key, self.now))
        self.in_flight.append((key, kind, changes))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def reply(self, data: st.DataObject) -> None:
        """The reply to one message in flight (not necessarily the oldest)."""
        self.answer(data, *self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1))))

    @rule(data=st.data(), key=st.sampled_from(KEYS), kind=st.sampled_from(("request", "request", "sync")))
    def round_trip(self, data: st.DataObject, key: str, kind: str) -> None:
        """A message and its reply, nothing in between: the common case."""
        self.send(key, kind)
        self.answer(data, *self.in_flight.pop())

    def answer(self, data: st.DataObject, key: str, kind: str, changes: int) -> None:
        """A reply drawn around what the client holds, with stale and unknown ids too."""
        contended = data.draw(st.booleans())
        next_request_in = data.draw(st.sampled_from((0, 1_000, 2_000)))
        state = self.kept._state
        grant_ids = st.sampled_from(sorted({*state.grants, *GRANT_IDS}))
        claiming = sorted(grant for grant in state.by_grant if grant in state.grants)
        reported = st.sampled_from(claiming) | grant_ids if claiming else grant_ids
        groups = st.sampled_from(sorted(state.queued.get(key, {})) or GROUPS) | st.sampled_from(GROUPS)
        results = data.draw(
            st.lists(
                st.builds(
                    GrantResult,
                    grant_id=reported,
                    claimed=st.integers(0, 4),
                    status=st.sampled_from(("ok", "ok", "ok", "expired", "not_found")),
                ),
                max_size=3,
            )
        )
        leases = data.draw(
            st.none()
            | st.lists(
                st.builds(
                    LeaseGrant,
                    lease_id=st.sampled_from(sorted({*state.leases, *LEASE_IDS})),
                    group=groups,
                    permits=st.sampled_from((0, 1, 2, 3, 3)),
                    expires_at=lease_expiry.map(lambda at: self.now + at),
                ),
                max_size=2,
            ).map(tuple)
        )
        if kind == "request":
            granted = st.builds(GrantedPermits, grant_id=grant_ids, group=groups, permits=st.integers(1, 3))
            grant = PermitGrant(
                grants=tuple(data.draw(st.lists(granted, max_size=2))),
                blocked=(),
                grant_results=tuple(results),
                next_request_at=self.now + next_request_in,
                leases=leases,
                contended=contended,
            )
            self.all(lambda q: q.on_grant(key, grant, self.now))
        else:
            synced = PermitSyncResult(grant_results=tuple(results), leases=leases, contended=contended)
            self.all(lambda q: q.on_synced(key, synced, self.now))
        self.all(lambda q: q.acked(key, changes))
        if data.draw(st.booleans()):
            self.draw_leases()  # as the client object does when it next wakes

    # --- after every step: the same answers and rows; then the eviction ---------------------

    @invariant()
    def the_same_answers_and_rows_then_evict(self) -> None:
        now = self.now
        self.all(lambda q: q.keys_due(now))
        self.all(lambda q: q.next_request_at())
        self.all(lambda q: q.dirty_keys())
        self.all(lambda q: q.next_wakeup())
        self.all(lambda q: q.lease_expiry_at())
        self.all(lambda q: q.heartbeat_at())
        self.all(lambda q: q.heartbeat_keys(now))
        self.all(lambda q: q.running())
        self.all(lambda q: [q.status(item) for item in (*ITEM_IDS, "bad")])
        self.all(lambda q: [q.newest_queued(count) for count in (-1, 0, 3)])
        for key in KEYS:
            self.all(lambda q: (q.build_request(key, now), q.build_sync(key, now)))  # noqa: B023
        stored = [rows(conn) for conn in self.conns.values()]
        assert stored[0] == stored[1] == stored[2]
        changed = [conn.total_changes for conn in self.conns.values()]
        assert changed[0] == changed[1] == changed[2], changed
        self.kept.check_memory()
        self.evicted.check_memory()
        # The eviction: a new instance on the same storage, for the next step.
        self.evicted = QueueClient(self.conns["evicted"], "c", self.fix)


TestQueueTwins = QueueTwins.TestCase
_PROFILE = settings.default
assert _PROFILE is not None
#: Twice the profile's examples: an example is cheap (about 20 ms), and a reply that admits
#: or settles needs the right few steps before it.
TestQueueTwins.settings = settings(_PROFILE, max_examples=2 * _PROFILE.max_examples, stateful_step_count=50)


# --- an error inside a write ------------------------------------------------------------------


def _queue_with_claims_and_a_lease() -> QueueClient:
    """Four items of one group: two claimed on G1, one drawn through L1, one queued."""
    queue = QueueClient(sqlite3.connect(":memory:"), "c")
    queue.enqueue([QueueItem(f"i{n}", "acct", "g") for n in range(4)], now=0)
    changes = queue.sent("acct", 0)
    reply = PermitGrant(
        grants=(GrantedPermits("G1", "g", 2),),
        blocked=(),
        grant_results=(),
        next_request_at=1_000,
        leases=(LeaseGrant("L1", "g", 1, 60_000),),
    )
    queue.on_grant("acct", reply, now=10)
    queue.acked("acct", changes)
    assert len(queue.draw_leases(now=20)) == 1
    return queue


def test_a_constraint_failing_half_way_leaves_memory_equal_to_storage_and_storage_as_it_was() -> None:
    queue = _queue_with_claims_and_a_lease()
    before, state = rows(queue._conn), QueueState.load(queue._conn)
    with pytest.raises(sqlite3.IntegrityError):
        queue.enqueue([QueueItem("new", "b", "h"), QueueItem("bad", None, "g")], now=30)  # type: ignore[arg-type]
    queue.check_memory()
    assert rows(queue._conn) == before
    assert queue._state == state
    assert queue.keys_due(2_000) == ["acct"]  # not "b": its item was rolled back
    assert queue.status("new") is None


def test_an_error_injected_half_way_through_a_reply_leaves_memory_equal_to_storage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply confirms G1's claim (two items run) and stops L1; the echo fails after that."""
    queue = _queue_with_claims_and_a_lease()
    before, state = rows(queue._conn), QueueState.load(queue._conn)
    sent = queue.sent("acct", 30)

    def fail(*_: object) -> tuple[str, ...]:
        raise RuntimeError("injected")

    monkeypatch.setattr(QueueClient, "_echoes", fail)
    reply = PermitSyncResult(
        grant_results=(GrantResult("G1", 2, "ok"),), leases=(LeaseGrant("L1", "g", 0, 0),)
    )
    with pytest.raises(RuntimeError, match="injected"):
        queue.on_synced("acct", reply, now=40)
    queue.check_memory()
    monkeypatch.undo()
    # Only ``sent`` is left in storage; memory agrees, and the reply can be applied again.
    assert rows(queue._conn) != before
    assert queue._state != state
    assert queue.running() == [("i2", 20)]
    assert len(queue.on_synced("acct", reply, now=40).admitted) == 2
    queue.acked("acct", sent)
    queue.check_memory()
    assert [item for item, _ in queue.running()] == ["i2", "i0", "i1"]


def test_check_memory_sees_storage_written_behind_the_queues_back() -> None:
    queue = _queue_with_claims_and_a_lease()
    queue.check_memory()
    queue._conn.execute("UPDATE durability_semaphore_queue_leases SET drawn = 0")
    with pytest.raises(AssertionError, match="memory is not its storage"):
        queue.check_memory()


def test_a_write_inside_a_callers_transaction_is_refused() -> None:
    """Memory follows the queue's own commits: a caller's rollback would leave it ahead."""
    queue = _queue_with_claims_and_a_lease()
    queue._conn.execute("SAVEPOINT caller")
    with pytest.raises(AssertionError, match="outside any transaction"):
        queue.cancel("i3")
    queue._conn.execute("ROLLBACK TO caller")
    queue._conn.execute("RELEASE caller")
    queue.check_memory()


def test_a_heartbeat_rounds_half_a_negative_lifetime_towards_zero_as_sqlite_does() -> None:
    """A lease reported after its expiry but not yet retired: ``(expires_at - reported_at) / 2``
    is SQLite's integer division, which truncates towards zero where Python's ``//`` floors."""
    queues: list[Any] = [
        QueueClient(sqlite3.connect(":memory:"), "c"),
        SqlQueueClient(sqlite3.connect(":memory:"), "c"),
    ]
    lease = LeaseGrant("L1", "g", 1, 1_001)
    reply = PermitGrant(grants=(), blocked=(), grant_results=(), next_request_at=0, leases=(lease,))
    for queue in queues:
        queue.enqueue([QueueItem("i0", "acct", "g")], now=0)
        queue.on_grant("acct", reply, now=0)
        assert len(queue.draw_leases(now=0)) == 1
        queue.sent("acct", 1_004)  # 3 ms after the expiry; nothing retired it yet
    assert [queue.heartbeat_at() for queue in queues] == [1_003, 1_003]  # 1004 + (-3 / 2 = -1)
    assert [queue.heartbeat_keys(1_002) for queue in queues] == [[], []]
    assert [queue.heartbeat_keys(1_003) for queue in queues] == [["acct"], ["acct"]]
