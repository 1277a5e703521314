"""``released_when_done``: a client gives an item's permit back only once its job is done
(docs/INVARIANTS.md).

Held on the reference in a world whose job outlives the client's ``finished``
check (the check asks about it while it runs, and the service says it is not
done), and failing there on a check that releases every item it asked about.
"""

from __future__ import annotations

from typing import Any

import pytest

from semsim.check.events import Release
from semsim.check.released_when_done import ReleasedWhenDone
from semsim.harness.run import HolderSpec, WorldConfig, WorldRun, run_world
from semsim.runtime.network import RpcError
from semsim.world.client_object import ClientObject, ClientSettings
from semsim.world.faults import FaultPlan
from semsim.world.jobs import Job, Jobs
from semsim.world.workload import Arrival, Workload


def _long_job() -> WorldRun:
    """One 90 s job; the client's ``finished`` check asks about it every 20 s while it runs."""
    config = WorldConfig(
        holder=HolderSpec(limit=1, leases=None),
        workload=Workload(
            clients=1,
            plain_clients=1,
            script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=90_000),),
        ),
        client=ClientSettings(finished_check_ms=20_000),
        duration_ms=300_000,
    )
    return run_world(config, FaultPlan(), seed=1)


async def _releases_every_item_asked(self: ClientObject, items: list[str]) -> None:
    """The ``finished`` check releasing every item it asked about, not only those done."""
    try:
        await self.network.call(self.ctx.name, self.jobs.name, "finished", items, 5_000)
    except RpcError:
        return
    finally:
        self._checking = False
    for item in items:
        if self.queue.status(item) == "running":
            self._release(item)


def test_the_reference_holds_with_a_job_that_outlives_the_finished_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked_while_running: list[str] = []
    dispatch = Jobs.dispatch

    def spying(self: Jobs, method: str, payload: Any) -> Any:
        asked_while_running.extend(item for item in payload if item in self.running)
        return dispatch(self, method, payload)

    monkeypatch.setattr(Jobs, "dispatch", spying)
    run = _long_job()
    assert run.result.outcome == "completed", run.result
    assert len(run.trace.of_kind("job_done")) == 2
    assert asked_while_running, "the finished check never asked about a running job"


def test_a_finished_check_that_releases_a_running_job_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientObject, "_finished_check", _releases_every_item_asked)
    run = _long_job()
    assert run.result.invariant == "released_when_done", run.result
    assert "at 41015 while its job runs at the job service until 92025" in run.result.detail


def test_the_rule() -> None:
    failed: list[str] = []

    def fail(name: str, detail: str, *args: Any, **kwargs: Any) -> None:
        failed.append(f"{name}: {detail}")

    job = Job("client-0/item-1", "client-0", "acct", "default", 1_025, 91_025)
    check = ReleasedWhenDone(fail, {job.item: job})
    check.on_release(Release(50_000, "acct", "default", "client-0", "client-0/item-2", 0))
    assert failed == []
    check.on_release(Release(50_000, "acct", "default", "client-0", "client-0/item-1", 0))
    assert failed == [
        "released_when_done: client-0: released client-0/item-1's permit of acct at 50000"
        " while its job runs at the job service until 91025"
    ]
