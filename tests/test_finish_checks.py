"""The checks judged once a run settled (``capacity_returns``, ``reclaimed``, ``operation_progress``)
can fail, and judge the run's own holders and clients (not a copy made before the world was built)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from semaphore_core.durability import CALLS
from semsim.check.capacity_returns import CapacityReturns
from semsim.check.events import Finish
from semsim.check.operation_progress import OperationProgress
from semsim.check.reclaimed import Reclaimed
from semsim.harness.run import run_world
from semsim.scenarios import SCENARIOS
from tests.helpers import without_queue_model


def test_capacity_returns_fails_on_lease_permits_still_charged_once_settled() -> None:
    """lease-heartbeat tolerates F4: an idle client's live lease keeps its headroom past the
    story. Not tolerated, the same run is a ``capacity_returns`` violation on its lease permits,
    which only the clients' known leases tell from the documented leak."""
    story = SCENARIOS["lease-heartbeat"]
    assert story.tolerated == frozenset({"F4"})
    run = run_world(story.config, story.faults, story.seed)
    assert (run.result.invariant, run.result.finding) == ("capacity_returns", "F4"), run.result
    assert "0 granted and 2 leased permits are still charged" in run.result.detail


def test_operation_progress_fails_on_an_operation_still_pending() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(f"CREATE TABLE {CALLS.name} (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
    conn.executemany(
        f"INSERT INTO {CALLS.name} VALUES (?, ?)",
        [(f"job-{n}", "pending" if n % 2 else "completed") for n in range(14)],
    )
    broken: list[tuple[str, str]] = []

    def fail(name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        broken.append((name, detail))

    client = SimpleNamespace(storage=conn)
    OperationProgress(fail, {"client-0": client}).on_finish(Finish(0, {}, {}, 0))  # type: ignore[dict-item]
    [(name, detail)] = broken
    assert name == "operation_progress"
    assert detail.startswith("7 operations still pending once the run settled: client-0/job-1, ")
    assert detail.endswith(" ...")  # five named, the rest elided


@pytest.mark.parametrize("checker", [CapacityReturns, OperationProgress])
def test_the_finish_checks_read_the_clients_of_the_world(
    checker: type[CapacityReturns | OperationProgress], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monitor is built before the world's clients: what it judges once the run settled must be
    the map the world filled in, not an empty stand-in (which would judge nobody and never fail)."""
    seen: Counter[int] = Counter()
    judge = checker.judge

    def counted(self: Any, *args: Any) -> None:
        clients = next(arg for arg in args if isinstance(arg, dict))
        seen[len(clients)] += 1
        judge(self, *args)

    monkeypatch.setattr(checker, "judge", counted)
    story = SCENARIOS["eviction-mid-attempt"]
    run = run_world(story.config, story.faults, story.seed, tolerated=story.tolerated)
    assert run.result.outcome == "completed", run.result
    assert seen == Counter({len(run.world.clients): 1}), seen
    assert len(run.world.clients) > 0


def test_each_keys_checks_run_together_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reclaimed`` then ``capacity_returns`` for one key, then the next key: the order the
    first violation is reported in, and the order of their trace events, as it always was."""
    order: list[tuple[str, str]] = []
    for checker, name in ((Reclaimed, "reclaimed"), (CapacityReturns, "capacity_returns")):
        judge = checker.judge

        def spied(
            self: Any, finish: Finish, key: str, *rest: Any, _judge: Any = judge, _name: str = name
        ) -> None:
            order.append((key, _name))
            _judge(self, finish, key, *rest)

        monkeypatch.setattr(checker, "judge", spied)
    story = SCENARIOS["strict-burst"]
    config = attrs.evolve(story.config, workload=attrs.evolve(story.config.workload, keys=("a", "b")))
    run = run_world(config, story.faults, story.seed, tolerated=story.tolerated)
    assert run.result.outcome == "completed", run.result
    assert order == [
        ("a", "reclaimed"),
        ("a", "capacity_returns"),
        ("b", "reclaimed"),
        ("b", "capacity_returns"),
    ]


def test_capacity_returns_counts_the_documented_leak_by_name() -> None:
    story = SCENARIOS["lease-lost-in-reply"]
    run = run_world(story.config, story.faults, story.seed, tolerated=story.tolerated)
    assert run.result.outcome == "completed", run.result
    assert run.monitor.leaks == Counter({"lease_lost_in_reply": 1})


def _forget_retired_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted client bug: a lease is forgotten as soon as it is retired, before the holder has
    heard its last releases and settled it."""
    from semaphore_core.queue import QueueClient

    echoes = QueueClient._echoes

    def forgetful(self: QueueClient, key: str, leases: Any, now: int) -> tuple[str, ...]:
        settled = echoes(self, key, leases, now)
        for lease in [lease for lease in self._state.leases.values() if lease.retired and lease.key == key]:
            self._conn.execute(
                "DELETE FROM durability_semaphore_queue_leases WHERE lease_id = ?", (lease.lease_id,)
            )
            self._state.remove_lease(lease)
        return settled

    monkeypatch.setattr(QueueClient, "_echoes", forgetful)


def test_a_lease_a_client_drew_on_and_forgot_is_not_the_documented_leak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``capacity_returns`` excuses a lease no client knows as one granted in a lost reply. A lease
    some client drew items on was not lost in a reply: still charged once settled, it is a
    violation (it was counted as the documented leak, so a client that forgot a lease passed)."""
    story = SCENARIOS["retired-report-settles"]
    assert run_world(story.config, story.faults, story.seed).result.outcome == "completed"
    _forget_retired_leases(monkeypatch)
    without_queue_model(monkeypatch)  # which names the queue's bug first (exact_queue)
    run = run_world(story.config, story.faults, story.seed)
    assert run.result.invariant == "capacity_returns", run.result
    assert "no client knows it, though client-0 drew items on it" in run.result.detail


def test_a_lease_lost_in_its_reply_stays_the_documented_leak() -> None:
    story = SCENARIOS["lease-lost-in-reply"]
    run = run_world(story.config, story.faults, story.seed)
    assert run.result.outcome == "completed", run.result
    assert run.monitor.leaks["lease_lost_in_reply"] >= 1
