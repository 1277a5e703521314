"""``exact_queue``: the literal queue model beside the client's queue, and what it catches.

Sessions are drawn: a real holder (strict leases, short timeouts), one
client's queue and the model, with enqueues, requests and syncs, replies
delivered late, out of order or lost, releases, cancels, lease draws and
expiries, reclaims, and the client rebuilt on its storage. The model must
answer every call as the queue does; each planted change to the queue (or to
the client's reply parser, which the model does not share) is a difference
some session finds.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import semaphore_core.queue as queue_module
from semaphore_core import Holder, HolderConfig, LeaseOptions, Strict
from semaphore_core.protocol import LeaseReport, PermitGrant, parse_response
from semaphore_core.queue import QueueClient, QueueItem
from semaphore_core.queue_state import GrantRow
from semsim.check.literal_queue import LiteralQueue
from semsim.check.queue_lockstep import EXACT_QUEUE, QueueLockstep, model_for
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.mutant_catalog import mutant
from semsim.world.variant import Variant
from semsim.world.workload import Workload
from tests.helpers import ids

KEYS = ("k1", "k2")
GROUPS = ("a", "b")


class Differ(Exception):
    """The model and the queue disagreed."""


class Judge:
    def fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        assert name == EXACT_QUEUE, name
        raise Differ(detail)


class Session:
    """A holder per key, one client's queue with the model beside it, and a hand-turned clock."""

    def __init__(self, fix: bool = False) -> None:
        config = HolderConfig(
            limit=4,
            grant_timeout_ms=3_000,
            round_wait_ms=1,
            round_period_ms=1,
            leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2, ttl_ms=8_000),
        )
        self.holders = {key: Holder(sqlite3.connect(":memory:"), config, new_id=ids(key)) for key in KEYS}
        self.conn = sqlite3.connect(":memory:")
        self.fix = fix
        self.model = LiteralQueue("c1", fix)
        self.client = self._client()
        self.now = 0
        self.enqueued = 0
        #: Replies not yet applied: (key, kind, changes carried, the wire's dict).
        self.pending: list[tuple[str, str, int, Any]] = []
        #: How many grant results of each status the client applied.
        self.results: Counter[str] = Counter()

    def _client(self, rebuilt: bool = False) -> QueueLockstep:
        return QueueLockstep(QueueClient(self.conn, "c1", self.fix), self.model, "c1", Judge(), rebuilt)

    def step(self, op: tuple[Any, ...]) -> None:
        kind, a, b = op
        client, now = self.client, self.now
        if kind == "enqueue":
            items = [
                QueueItem(f"i{self.enqueued + n}", KEYS[a % 2], GROUPS[n % 2 if b else 0])
                for n in range(a + 1)
            ]
            self.enqueued += len(items)
            client.enqueue(items, now)
        elif kind == "again":  # an id seen before (open or finished) is a no-op
            client.enqueue([QueueItem(f"i{a % max(1, self.enqueued)}", KEYS[0], GROUPS[0])], now)
        elif kind == "tick":
            self.now += (1, 500, 1_500, 4_000)[a]
        elif kind in ("request", "sync"):
            key = KEYS[a % 2]
            if kind == "request":
                request = client.build_request(key, now)
                changes = client.sent(key, now)
                [granted] = self.holders[key].round([request.to_wire()], now).replies
                wire = granted.to_wire()
            else:
                sync = client.build_sync(key, now)
                changes = client.sent(key, now)
                wire = self.holders[key].sync_message(sync.to_wire(), now).to_wire()
            self.pending.append((key, kind, changes, wire))
        elif kind == "deliver" and self.pending:
            key, _, changes, wire = self.pending.pop(a % len(self.pending))
            self.results.update(result["status"] for result in wire["grantResults"])
            parsed = parse_response(wire)
            client.heard(wire)
            if isinstance(parsed, PermitGrant):
                client.on_grant(key, parsed, now)
            else:
                client.on_synced(key, parsed, now)
            client.acked(key, changes)
        elif kind == "lose" and self.pending:
            self.pending.pop(a % len(self.pending))
        elif kind == "release":
            running = client.running()
            if running:
                client.release(running[a % len(running)][0])
            client.release("never-enqueued")
        elif kind == "cancel":
            newest = client.newest_queued(a)
            if newest:
                client.cancel(newest[-1])
        elif kind == "draw":
            client.retire_expired(now)
            client.draw_leases(now)
        elif kind == "reclaim":
            self.holders[KEYS[a % 2]].reclaim_expired(now)
        elif kind == "evict":  # a new instance on the same storage meets the same model
            self.client = self._client(rebuilt=True)
        client = self.client
        client.keys_due(now)
        client.dirty_keys()
        client.heartbeat_keys(now)
        client.next_wakeup()
        client.status(f"i{a}")


#: Each operation and how often a session draws it: requests, deliveries and enqueues often, so
#: grants, leases and their results come and go.
WEIGHTS: dict[str, int] = {
    "enqueue": 6,
    "again": 1,
    "tick": 5,
    "request": 6,
    "sync": 3,
    "deliver": 8,
    "lose": 1,
    "release": 5,
    "cancel": 1,
    "draw": 4,
    "reclaim": 1,
    "evict": 1,
}


def _session(seed: int, length: int) -> list[tuple[str, int, bool]]:
    """``length`` operations drawn by a ``random.Random(seed)`` (long sessions, which Hypothesis's
    own list draws seldom make; the seed and the length still shrink)."""
    rng = random.Random(seed)
    kinds = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=length)
    return [(kind, rng.randrange(4), rng.random() < 0.5) for kind in kinds]


SESSIONS = st.builds(_session, st.integers(0, 2**32), st.integers(1, 150))


def _play(ops: list[tuple[Any, ...]], fix: bool = False) -> Session:
    session = Session(fix)
    for op in ops:
        session.step(op)
    return session


@settings(
    max_examples=300, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(SESSIONS, st.booleans())
def test_the_literal_model_answers_every_call_as_the_queue_does(
    ops: list[tuple[Any, ...]], fix: bool
) -> None:
    _play(ops, fix)


_search = settings(max_examples=2_000, database=None, derandomize=True, deadline=None)

#: What the drawn sessions must reach, read off the model after a session.
REACHED: dict[str, Callable[[Session], bool]] = {
    "an item running on a grant": lambda s: any(
        i["grant"] and i["status"] == "running" for i in s.model.items
    ),
    "an item running on a lease": lambda s: any(i["lease"] for i in s.model.items),
    "a retired lease": lambda s: any(le["retired"] for le in s.model.leases),
    "a claim answered expired": lambda s: s.results["expired"] > 0,
    "a grant answered not_found": lambda s: s.results["not_found"] > 0,
    "a lease with permits in use": lambda s: any(
        le["drawn"] > le["released"] and not le["retired"] for le in s.model.leases
    ),
}


@pytest.mark.parametrize("what", list(REACHED))
def test_sessions_reach_what_the_queue_does(what: str) -> None:
    """The drawn sessions are not idle: each state a comparison needs is reached by some session."""
    reached = REACHED[what]
    assert find(SESSIONS, lambda ops: reached(_play(ops)), settings=_search)


@contextlib.contextmanager
def _patched(target: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, make(original))
    try:
        yield
    finally:
        setattr(target, name, original)


def _claims_newest(original: Any) -> Any:
    """``_claim`` with the group's queue read from its newest end (a copy: the order is inside)."""

    def claim(self: QueueClient, key: str, grant_id: str, group: str, permits: int) -> int:
        state = self._state
        queued = state.queued.get(key, {}).get(group, [])
        items = [state.items[item_id] for _, _, item_id in queued[::-1][:permits]]
        if grant_id not in state.grants:
            self._conn.execute(
                "INSERT INTO durability_semaphore_queue_grants (grant_id, key, grp, permits, claimed, "
                "confirmed, released, reported) VALUES (?, ?, ?, ?, ?, 0, 0, 0)",
                (grant_id, key, group, permits, len(items)),
            )
            state.add_grant(GrantRow(grant_id, key, group, permits, len(items), 0, 0, 0))
        for item in items:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_items SET status = 'claiming', grant_id = ? WHERE id = ?",
                (grant_id, item.id),
            )
            state.claim(item, grant_id)
        return len(items)

    return claim


def _heartbeat_any_drawn(original: Any) -> Any:
    def heartbeat_at(self: QueueClient) -> int | None:
        times = [
            queue_module._heartbeat(lease)
            for lease in self._state.leases.values()
            if not lease.retired and lease.drawn > 0
        ]
        return min(times, default=None)

    return heartbeat_at


def _release_forgets_lease(original: Any) -> Any:
    def release(self: QueueClient, item_id: str) -> tuple[str, str] | None:
        item = self._state.items.get(item_id)
        lease = None if item is None or item.lease_id is None else self._state.leases.get(item.lease_id)
        before = None if lease is None else lease.released
        result = original(self, item_id)
        if lease is not None and before is not None:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_leases SET released = ? WHERE lease_id = ?",
                (before, lease.lease_id),
            )
            lease.released = before
        return None if result is None else (str(result[0]), str(result[1]))

    return release


def _parser_drops_contended(original: Any) -> Any:
    def parse(value: object) -> Any:
        parsed = original(value)
        return attrs.evolve(parsed, contended=False)

    return parse


def _demand_ages_from_newest(original: Any) -> Any:
    def build_request(self: QueueClient, key: str, now: int) -> Any:
        request = original(self, key, now)
        groups = self._state.queued.get(key, {})
        demand = tuple(attrs.evolve(d, oldest_at=groups[d.group][-1][0]) for d in request.demand)
        return attrs.evolve(request, demand=demand)

    return build_request


def _release_misses_storage(original: Any) -> Any:
    """The lease's ``released`` moves on in memory but not in storage (seen only once rebuilt)."""

    def release(self: QueueClient, item_id: str) -> tuple[str, str] | None:
        item = self._state.items.get(item_id)
        lease_id = None if item is None else item.lease_id
        result = original(self, item_id)
        if result is not None and lease_id is not None:
            self._conn.execute(
                "UPDATE durability_semaphore_queue_leases SET released = released - 1 WHERE lease_id = ?",
                (lease_id,),
            )
        return None if result is None else (str(result[0]), str(result[1]))

    return release


def _retired_as_a_number(original: Any) -> Any:
    def to_wire(self: LeaseReport) -> dict[str, Any]:
        wire: dict[str, Any] = original(self)
        if "retired" in wire:
            wire["retired"] = 1
        return wire

    return to_wire


@pytest.mark.parametrize(
    ("target", "name", "make"),
    [
        (QueueClient, "_claim", _claims_newest),
        (QueueClient, "heartbeat_at", _heartbeat_any_drawn),
        (QueueClient, "release", _release_forgets_lease),
        (QueueClient, "build_request", _demand_ages_from_newest),
        (QueueClient, "release", _release_misses_storage),
        (LeaseReport, "to_wire", _retired_as_a_number),
    ],
    ids=[
        "claims-newest",
        "heartbeat-any-drawn",
        "release-forgets-lease",
        "demand-dated-by-newest",
        "release-misses-storage",
        "retired-as-a-number",
    ],
)
def test_a_planted_change_to_the_queue_is_a_difference(
    target: Any, name: str, make: Callable[[Any], Any]
) -> None:
    with _patched(target, name, make):
        found = find(SESSIONS, _differs, settings=_search)
    assert found  # the shortest session that shows it
    assert not _differs(found)  # and the faithful queue agrees on it


def test_the_model_reads_the_reply_off_the_wire_not_through_the_queues_parser() -> None:
    global parse_response
    faithful = parse_response
    parse_response = _parser_drops_contended(faithful)
    try:
        found = find(SESSIONS, _differs, settings=_search)
    finally:
        parse_response = faithful
    assert not _differs(found)


def _differs(ops: list[tuple[Any, ...]]) -> bool:
    try:
        _play(ops)
    except Differ:
        return True
    return False


# --- in a run ------------------------------------------------------------------------


def _world() -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=4, leases=LeaseSpec(provisioning="strict", permits_per_lease=2)),
        workload=Workload(clients=3, items_per_minute=30.0),
        duration_ms=120_000,
    )


def _clients(run: Any) -> list[Any]:
    return [obj._instance for obj in run.world.clients.values() if obj._instance is not None]


def test_a_run_judges_every_clients_queue_and_a_queue_bug_breaks_exact_queue() -> None:
    clean = run_world(_world(), FaultPlan(), 3)
    assert clean.result.outcome == "completed", clean.result
    assert "exact_queue against the literal queue model" in clean.judges()
    broken = run_world(_world(), FaultPlan(), 3, variant=mutant("queue-demand-counts-running").variant)
    assert broken.result.invariant == EXACT_QUEUE, broken.result
    assert "client-" in broken.result.detail
    assert "queue vs literal model" in broken.result.detail


def test_without_a_queue_model_the_client_runs_its_queue_alone() -> None:
    variant = Variant("unmodelled-queue", queue_model=None)
    assert not any(judge.startswith("exact_queue") for judge in variant.judges())
    run = run_world(_world(), FaultPlan(), 3, variant=variant)
    assert run.result.outcome == "completed", run.result
    assert all(isinstance(client.queue, QueueClient) for client in _clients(run))


class CountingModel(LiteralQueue):
    built: ClassVar[list[str]] = []

    def __init__(self, client_id: str, return_idle_leases: bool = False) -> None:
        super().__init__(client_id, return_idle_leases)
        CountingModel.built.append(client_id)


def test_a_variants_own_queue_model_is_the_one_in_lockstep() -> None:
    CountingModel.built.clear()
    variant = Variant("own-queue-model", queue_model=CountingModel)
    assert (
        "exact_queue against its own queue model (tests.test_queue_lockstep.CountingModel)"
        in variant.judges()
    )
    assert run_world(_world(), FaultPlan(), 3, variant=variant).result.outcome == "completed"
    assert sorted(CountingModel.built) == ["client-0", "client-1", "client-2"]


def test_a_queue_model_factory_that_builds_something_else_is_refused_by_name() -> None:
    obj = attrs.make_class("Obj", {"shadow_model": attrs.field(default=None)})()
    with pytest.raises(TypeError, match=r"not a semsim\.check\.literal_queue\.LiteralQueue"):
        model_for(obj, "c1", False, lambda client_id, fix: object())
    with pytest.raises(TypeError, match="queue_model is 'literal', a queue model factory"):
        Variant("bad", queue_model="literally")  # type: ignore[arg-type]
