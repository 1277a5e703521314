"""``replies_applied`` (docs/INVARIANTS.md): a client's leases follow each reply it applies.

On the wire's dict, apart from the client's parser: a queue that drops a
sync's lease echoes, or keeps an idle lease on ``contended`` because
something else of the key is queued, stops a named scenario on this check;
the reference holds in the same scenarios. The stopping-echo rule is shown
on a queue built by hand.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
import pytest

from semaphore_core.protocol import LeaseGrant, PermitGrant, PermitSyncResult
from semaphore_core.queue import QueueClient
from semsim.check.replies_applied import RepliesApplied
from semsim.harness.run import WorldRun
from tests.helpers import without_queue_model
from tests.operation_worlds import run_story

KEY = "acct"


class Failed(Exception):
    pass


def fail(name: str, detail: str, finding: str | None = None, **state: Any) -> None:
    raise Failed(f"{name}: {detail}")


def _synced_without_leases(self: QueueClient, key: str, reply: PermitSyncResult, now: int) -> Any:
    return ON_SYNCED(self, key, attrs.evolve(reply, leases=None), now)


def _idle_by_key(self: QueueClient, key: str) -> Any:
    """Idle leases only when nothing at all of the key is queued (not per group)."""
    return [] if self._state.queued.get(key) else IDLE_LEASES(self, key)


ON_SYNCED = QueueClient.on_synced
IDLE_LEASES = QueueClient._idle_leases


@pytest.mark.parametrize(
    ("story", "attribute", "broken", "detail"),
    [
        ("lease-heartbeat", "on_synced", _synced_without_leases, "the reply echoed lease"),
        ("contended-returns-idle-headroom", "_idle_leases", _idle_by_key, "the reply said contended"),
    ],
    ids=["a-syncs-echoes-dropped", "idle-leases-judged-by-key"],
)
def test_a_client_that_does_not_follow_a_reply_stops_the_scenario(
    monkeypatch: pytest.MonkeyPatch, story: str, attribute: str, broken: Any, detail: str
) -> None:
    faithful: WorldRun = run_story(story)
    assert faithful.result.outcome == "completed", faithful.result
    monkeypatch.setattr(QueueClient, attribute, broken)
    without_queue_model(monkeypatch)  # which may name the queue's bug first (exact_queue)
    run = run_story(story)
    assert run.result.invariant == "replies_applied", run.result
    assert detail in run.result.detail


def _queue_with_a_lease(expires_at: int) -> QueueClient:
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    lease = LeaseGrant(lease_id="l-1", group="g", permits=2, expires_at=expires_at)
    reply = PermitGrant(grants=(), blocked=(), grant_results=(), next_request_at=0, leases=(lease,))
    queue.on_grant(KEY, reply, now=0)
    return queue


def _echo(expires_at: int, contended: bool = False) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "grantResults": [],
        "leases": [{"leaseId": "l-1", "group": "g", "permits": 2, "expiresAt": expires_at}],
    }
    return {**wire, "contended": True} if contended else wire


def test_a_live_echo_must_leave_the_lease_at_its_expiry() -> None:
    queue = _queue_with_a_lease(expires_at=10_000)
    check = RepliesApplied(fail)
    check.on_reply_applied(5, "a", KEY, _echo(10_000), queue._conn)
    with pytest.raises(Failed, match="live until 12000, but the client holds it until 10000"):
        check.on_reply_applied(5, "a", KEY, _echo(12_000), queue._conn)


def test_a_stopping_echo_must_leave_the_lease_retired_or_gone() -> None:
    queue = _queue_with_a_lease(expires_at=10_000)
    check = RepliesApplied(fail)
    with pytest.raises(Failed, match=r"stopped lease l-1 .* but the client still draws on it"):
        check.on_reply_applied(5, "a", KEY, _echo(5), queue._conn)
    queue.on_synced(KEY, PermitSyncResult(grant_results=(), leases=(LeaseGrant("l-1", "g", 2, 5),)), now=5)
    check.on_reply_applied(5, "a", KEY, _echo(5), queue._conn)  # applied: retired


def test_contended_must_leave_no_idle_lease_where_nothing_is_queued() -> None:
    queue = _queue_with_a_lease(expires_at=10_000)
    check = RepliesApplied(fail)
    with pytest.raises(Failed, match="contended, but the client keeps undrawn permits of lease l-1 in g"):
        check.on_reply_applied(5, "a", KEY, _echo(10_000, contended=True), queue._conn)
    check.on_reply_applied(5, "a", KEY, _echo(10_000), queue._conn)  # not contended: it may keep it
