"""The client's queue run beside the literal queue model: ``exact_queue``.

Every client object of a judged run gets a :class:`QueueLockstep` in place
of its ``QueueClient`` (through ``Monitor.queue_in_lockstep``): each call
goes to the queue, then to the literal model
(:mod:`semsim.check.literal_queue`, no code shared with ``semaphore_core``)
with the same arguments, and the two answers must be the same. Messages are
compared as the wire carries them: the model builds its own requests and
reads the holder's reply from the wire's dict, not from the core's parser.
Any difference ends the run as ``exact_queue``.

The model lives on the durable object (``DurableObject.shadow_model``), so an
evicted client's rebuilt instance meets the model its storage matches, and
there, where the queue reads its memory back from storage, every stored row
must be the model's record (a write that missed storage matters from then
on, not before). Requests and syncs are compared as JSON text, so the types
the wire carries count. The
run goes on with the queue's answers; judging reads no clock, draws nothing
and writes no trace event, so a passing run's trace is the same with or
without it.

The client object knows this class only as something with the queue's
methods (``semsim.world.client_object.ClientQueue``); this module knows the
monitor only as something that can fail a run (:class:`Judge`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from semaphore_core.protocol import PermitGrant, PermitRequest, PermitSync, PermitSyncResult
from semaphore_core.queue import Admission, QueueClient, QueueItem, Step
from semsim.check.literal_holder import first_difference
from semsim.check.literal_queue import LiteralQueue
from semsim.runtime.durable import DurableObject

#: The invariant a difference violates.
EXACT_QUEUE = "exact_queue"


class Judge(Protocol):
    """What ends a run on a difference (``semsim.check.invariants.Monitor`` is one)."""

    def fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None: ...


def model_for(
    obj: DurableObject,
    client_id: str,
    return_idle_leases: bool,
    build: Callable[[str, bool], Any] | None = None,
) -> LiteralQueue:
    """The model kept beside ``obj``'s storage (built by ``build``, a variant's own, or the
    literal one): made with it, kept across evictions."""
    model = obj.shadow_model
    if model is None:
        model = (LiteralQueue if build is None else build)(client_id, return_idle_leases)
        if not isinstance(model, LiteralQueue):
            raise TypeError(
                f"a queue model factory built a {type(model).__name__}, "
                "not a semsim.check.literal_queue.LiteralQueue"
            )
        obj.shadow_model = model
    assert isinstance(model, LiteralQueue), model
    return model


def _text(message: Any) -> str:
    return json.dumps(message, sort_keys=True, separators=(",", ":"))


def queue_conn(queue: QueueClient) -> sqlite3.Connection:
    """The queue's storage (the client object's own)."""
    return queue._conn


#: The queue's tables, read as :meth:`LiteralQueue.rows` lists the model's records.
_STORED: Final = (
    (
        "items",
        "SELECT id, key, grp, body, status, enqueued_at, grant_id, lease_id, admitted_at "
        "FROM durability_semaphore_queue_items ORDER BY seq",
    ),
    ("done", "SELECT id FROM durability_semaphore_queue_done ORDER BY id"),
    (
        "grants",
        "SELECT grant_id, key, grp, permits, claimed, confirmed, released, reported "
        "FROM durability_semaphore_queue_grants ORDER BY grant_id",
    ),
    (
        "leases",
        "SELECT lease_id, key, grp, permits, drawn, released, retired, expires_at, reported_at, reported "
        "FROM durability_semaphore_queue_leases ORDER BY lease_id",
    ),
    (
        "keys",
        "SELECT key, next_request_at, changes, acked FROM durability_semaphore_queue_keys ORDER BY key",
    ),
)


def stored_rows(conn: sqlite3.Connection) -> dict[str, Any]:
    """What the queue's storage holds, as the model lists its records."""
    rows = {name: [list(row) for row in conn.execute(sql)] for name, sql in _STORED}
    rows["done"] = [row[0] for row in rows["done"]]
    return rows


def _plain(value: Any) -> Any:
    """Tuples as lists, all the way down: the model answers in lists."""
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def _admissions(admissions: Iterable[Admission]) -> list[tuple[Any, ...]]:
    return [(a.item_id, a.key, a.group, a.body, a.grant_id, a.lease_id) for a in admissions]


def _step(step: Step) -> dict[str, Any]:
    return {
        "admitted": _admissions(step.admitted),
        "requeued": list(step.requeued),
        "settled": list(step.settled),
        "claims": list(step.claims),
        "needs_sync": step.needs_sync,
    }


class QueueLockstep:
    """A ``QueueClient`` and its literal model, called alike; the queue's answers are returned."""

    def __init__(
        self, queue: QueueClient, model: LiteralQueue, client: str, judge: Judge, rebuilt: bool = False
    ) -> None:
        self.queue = queue
        self.model = model
        self.client_id = queue.client_id
        self._client = client
        self._judge = judge
        #: The holder's reply as the wire carried it, for the next ``on_grant`` or ``on_synced``.
        self._reply: Any = None
        if rebuilt:
            # A rebuilt instance reads its memory from storage: what storage holds is what the
            # queue goes on from, so it must be the model's state, row for row. (Before an
            # eviction, a write that missed storage changes nothing the queue answers.)
            self._same("storage as a rebuilt instance reads it", stored_rows(queue_conn(queue)), model.rows())

    def _same_message(self, what: str, core: Any, model: Any) -> None:
        """Messages as JSON text, keys sorted: the types the wire carries count (``1`` is not
        ``true``, ``1.0`` is not ``1``), the order of an object's keys does not."""
        if _text(core) == _text(model):
            return
        if _plain(core) != _plain(model):
            self._same(what, core, model)  # names where the values differ
            return
        self._judge.fail(
            EXACT_QUEUE,
            f"{self._client}: {what}: queue vs literal model, as JSON: {_text(core)[:150]} vs "
            f"{_text(model)[:150]}",
            client=self._client,
        )

    def _same(self, what: str, core: Any, model: Any) -> None:
        # The model answers in the queue's types; a tuple for a list is no difference.
        if core != model and _plain(core) != _plain(model):
            where = first_difference(_plain(core), _plain(model))
            self._judge.fail(
                EXACT_QUEUE, f"{self._client}: {what}: queue vs literal model at {where}", client=self._client
            )

    # --- items ---------------------------------------------------------------------

    def enqueue(self, items: Iterable[QueueItem], now: int) -> int:
        items = list(items)
        added = self.queue.enqueue(items, now)
        model = self.model.enqueue([(i.id, i.key, i.group, i.body) for i in items], now)
        self._same("enqueue", added, model)
        return added

    def release(self, item_id: str) -> tuple[str, str] | None:
        released = self.queue.release(item_id)
        self._same(f"release {item_id}", released, self.model.release(item_id))
        return released

    def cancel(self, item_id: str) -> bool:
        cancelled = self.queue.cancel(item_id)
        self._same(f"cancel {item_id}", cancelled, self.model.cancel(item_id))
        return cancelled

    def status(self, item_id: str) -> str | None:
        status = self.queue.status(item_id)
        self._same(f"status of {item_id}", status, self.model.status(item_id))
        return status

    def running(self) -> list[tuple[str, int]]:
        running = self.queue.running()
        self._same("running items", running, self.model.running())
        return running

    def newest_queued(self, count: int) -> list[str]:
        newest = self.queue.newest_queued(count)
        self._same("newest queued", newest, self.model.newest_queued(count))
        return newest

    # --- leases ---------------------------------------------------------------------

    def draw_leases(self, now: int) -> list[Admission]:
        admitted = self.queue.draw_leases(now)
        self._same("lease draws", _admissions(admitted), self.model.draw_leases(now))
        return admitted

    def retire_expired(self, now: int) -> list[tuple[str, str]]:
        retired = self.queue.retire_expired(now)
        self._same("expired leases", retired, self.model.retire_expired(now))
        return retired

    def heartbeat_keys(self, now: int) -> list[str]:
        keys = self.queue.heartbeat_keys(now)
        self._same("heartbeat keys", keys, self.model.heartbeat_keys(now))
        return keys

    # --- when to ask ------------------------------------------------------------------

    def keys_due(self, now: int) -> list[str]:
        keys = self.queue.keys_due(now)
        self._same("keys due", keys, self.model.keys_due(now))
        return keys

    def dirty_keys(self) -> list[str]:
        keys = self.queue.dirty_keys()
        self._same("dirty keys", keys, self.model.dirty_keys())
        return keys

    def next_wakeup(self) -> tuple[int | None, int | None, int | None, int | None]:
        wakeup = self.queue.next_wakeup()
        self._same(
            "next wakeup (request, heartbeat, running, lease expiry)",
            wakeup,
            self.model.next_wakeup(),
        )
        return wakeup

    # --- messages -----------------------------------------------------------------------

    def build_request(self, key: str, now: int) -> PermitRequest:
        request = self.queue.build_request(key, now)
        self._same_message(f"request for {key}", request.to_wire(), self.model.build_request(key, now))
        return request

    def build_sync(self, key: str, now: int) -> PermitSync:
        sync = self.queue.build_sync(key, now)
        self._same_message(f"sync for {key}", sync.to_wire(), self.model.build_sync(key, now))
        return sync

    def sent(self, key: str, now: int) -> int:
        changes = self.queue.sent(key, now)
        self._same(f"changes sent for {key}", changes, self.model.sent(key, now))
        return changes

    def acked(self, key: str, changes: int) -> None:
        self.queue.acked(key, changes)
        self.model.acked(key, changes)

    def heard(self, reply: Any) -> None:
        """The holder's reply as it came off the wire (the dict the queue's parser read; the model
        reads it itself)."""
        self._reply = reply

    def on_grant(self, key: str, reply: PermitGrant, now: int) -> Step:
        step = self.queue.on_grant(key, reply, now)
        self._same(
            f"reply to the request for {key}", _step(step), self.model.on_grant(key, self._wire(), now)
        )
        return step

    def on_synced(self, key: str, reply: PermitSyncResult, now: int) -> Step:
        step = self.queue.on_synced(key, reply, now)
        model = self.model.on_synced(key, self._wire(), now)
        model.setdefault("claims", [])
        model.setdefault("needs_sync", False)
        self._same(f"reply to the sync for {key}", _step(step), model)
        return step

    def _wire(self) -> Any:
        reply, self._reply = self._reply, None
        assert reply is not None, "a reply is applied only after the client heard it"
        return reply
