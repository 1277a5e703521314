"""The leased worker's store (``semaphore_core.leased.store``), one test per behaviour its callers require.

Seed 004 shows the worker calling the store, not the store: each test
cites the caller's words it rests on. The state machine in
``tests/stateful_leased.py`` checks the store's promises under random
sequences.
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from semaphore_core.leased import RateLimitRule, RateWindow, RateWindowRow
from semaphore_core.leased.store import Lease, LeaseStore
from tests.stateful_leased import LeasedStoreMachine


def store(*ids: str, workflow: str = "w") -> LeaseStore:
    s = LeaseStore(sqlite3.connect(":memory:"))
    for n, id in enumerate(ids):
        assert s.create(id, workflow, now_ms=n)
    return s


def lease(token: str, now: int, until: int, owner: str = "worker-1") -> Lease:
    return Lease(owner=owner, token=token, now_ms=now, until_ms=until)


def ids(instances: list) -> list[str]:  # type: ignore[type-arg]
    return [instance.id for instance in instances]


def test_a_claim_leases_due_instances_oldest_first_up_to_its_limit() -> None:
    """ "Leases due instances of the workflow versions this process runs, under their limits"."""
    s = store("a", "b", "c")
    claimed = s.claim(lease("t1", 10, 100), limit=2, workflows=["w"])
    assert ids(claimed) == ["a", "b"]
    a = s.get("a")
    assert a is not None
    assert (a.status, a.lease_token, a.lease_until_ms, a.runs) == ("running", "t1", 100, 1)
    assert ids(s.claim(lease("t2", 10, 100), limit=5, workflows=["w"])) == ["c"]


def test_a_claim_takes_only_the_workflows_this_process_runs() -> None:
    s = store("a")
    s.create("b", "other", now_ms=5)
    assert ids(s.claim(lease("t1", 10, 100), limit=5, workflows=["other"])) == ["b"]


def test_an_instance_under_a_live_lease_is_never_claimed_again() -> None:
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.claim(lease("t2", 99, 200), limit=1, workflows=["w"]) == []


def test_a_lease_not_renewed_expires_and_the_instance_is_claimed_again() -> None:
    """ "it is retried when its lease expires"; "At worst its lease expires, as if its worker had
    died"."""
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    [again] = s.claim(lease("t2", 100, 200, owner="worker-2"), limit=1, workflows=["w"])
    assert (again.lease_owner, again.lease_token, again.runs) == ("worker-2", "t2", 2)


def test_a_renewal_extends_the_lease_and_keeps_the_instance_from_other_claims() -> None:
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.renew("a", "t1", 50, 300) is True
    assert s.claim(lease("t2", 200, 400), limit=1, workflows=["w"]) == []


def test_a_stale_token_renews_nothing_and_writes_nothing() -> None:
    """ "Lost the lease on ...; another worker took over. Nothing from this execution after that point
    was recorded." """
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    s.claim(lease("t2", 100, 200), limit=1, workflows=["w"])
    before = s.get("a")
    assert s.renew("a", "t1", 150, 500) is False
    assert s.write("a", "t1", "completed", 150, release=True) is False
    assert s.get("a") == before
    assert s.write("a", "t2", "completed", 150, release=True) is True


def test_a_lease_is_lost_when_it_expires_though_no_other_claim_took_it() -> None:
    """Issue 26's reading: a worker that stops renewing loses its instances when the lease expires. Its
    late renewal and its late write do not land (a modelling choice: the seed shows no store)."""
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.renew("a", "t1", 99, 150) is True  # live until 150 now
    assert s.renew("a", "t1", 150, 300) is False
    assert s.write("a", "t1", "completed", 150, release=True) is False
    assert s.hand_back("a", "t1", 150) is False
    a = s.get("a")
    assert a is not None
    assert (a.status, a.lease_until_ms) == ("running", 150)


def test_an_ended_execution_releases_the_lease_and_writes_no_more() -> None:
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.write("a", "t1", "completed", 20, release=True) is True
    a = s.get("a")
    assert a is not None
    assert (a.status, a.lease_token, a.lease_until_ms, a.wake_at_ms) == ("completed", None, None, None)
    assert s.write("a", "t1", "failed", 30, release=True) is False
    assert s.claim(lease("t2", 40, 100), limit=1, workflows=["w"]) == []  # finished: never claimed


def test_a_suspended_instance_is_due_again_at_its_wake_time() -> None:
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.write("a", "t1", "suspended", 20, release=True, wake_at_ms=50) is True
    assert s.claim(lease("t2", 49, 100), limit=1, workflows=["w"]) == []
    assert ids(s.claim(lease("t2", 50, 100), limit=1, workflows=["w"])) == ["a"]


def test_a_hand_back_makes_the_instance_due_at_once_for_any_worker() -> None:
    """ "Executions that stopped are handed back at once"; "Handed back: due at once, for another worker"."""
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    assert s.hand_back("a", "t1", 20) is True
    [again] = s.claim(lease("t2", 20, 100, owner="worker-2"), limit=1, workflows=["w"])
    assert again.lease_owner == "worker-2"
    assert s.hand_back("a", "t1", 30) is False  # the old token no longer holds it


def test_an_expired_lease_no_longer_counts_against_the_concurrency_limit() -> None:
    s = store("a", "b")
    assert ids(s.claim(lease("t1", 10, 100), limit=5, workflows=["w"], limits={"w": 1})) == ["a"]
    # At 100 a's lease has run out: it is claimable again and holds no place under the limit.
    assert ids(s.claim(lease("t2", 100, 200), limit=5, workflows=["w"], limits={"w": 1})) == ["a"]


def test_a_final_write_must_release_the_lease() -> None:
    s = store("a")
    s.claim(lease("t1", 10, 100), limit=1, workflows=["w"])
    with pytest.raises(ValueError, match="must release its lease"):
        s.write("a", "t1", "completed", 20)
    a = s.get("a")
    assert a is not None
    assert a.status == "running"


def test_a_workflows_concurrency_limit_counts_its_live_leases() -> None:
    """ "until none is left that its workflow's concurrency and rate limits let start"."""
    s = store("a", "b", "c")
    assert ids(s.claim(lease("t1", 10, 100), limit=5, workflows=["w"], limits={"w": 2})) == ["a", "b"]
    assert s.claim(lease("t2", 20, 100), limit=5, workflows=["w"], limits={"w": 2}) == []
    s.write("a", "t1", "completed", 30, release=True)
    assert ids(s.claim(lease("t3", 30, 100), limit=5, workflows=["w"], limits={"w": 2})) == ["c"]


def test_rate_windows_refuse_past_their_max_and_open_again_after_they_end() -> None:
    rules = [RateLimitRule("w", limit=RateWindow(2, 1_000))]
    s = store("a", "b", "c")
    assert ids(s.claim(lease("t1", 10, 100), limit=5, workflows=["w"], rate_limits=rules)) == ["a", "b"]
    assert s.windows() == [RateWindowRow("w", "", 1_010, 2)]
    for id in ("a", "b"):
        assert s.write(id, "t1", "completed", 20, release=True)
    assert s.claim(lease("t2", 500, 900), limit=5, workflows=["w"], rate_limits=rules) == []
    c = s.get("c")
    assert c is not None
    assert c.status == "pending"  # refused: still due, not leased
    assert ids(s.claim(lease("t3", 1_010, 2_000), limit=5, workflows=["w"], rate_limits=rules)) == ["c"]
    assert s.windows() == [RateWindowRow("w", "", 2_010, 1)]


def test_bad_input_is_refused_and_changes_nothing() -> None:
    s = store("a")
    with pytest.raises(ValueError, match="end after it starts"):
        lease("t", 10, 10)
    with pytest.raises(ValueError, match="limit must be"):
        s.claim(lease("t", 10, 20), limit=-1, workflows=["w"])
    assert s.create("a", "w", now_ms=5) is False
    a = s.get("a")
    assert a is not None
    assert (a.status, a.lease_token) == ("pending", None)


def test_the_store_keeps_its_promises_under_random_sequences() -> None:
    run_state_machine_as_test(LeasedStoreMachine, settings=settings(max_examples=100, stateful_step_count=40))
