"""``requests_prompt``: a client asks for its queued items as soon as it may (docs/INVARIANTS.md).

Held on the reference in a world whose requests are lost (so keys wait out
retries) and whose client is evicted with items queued; failing on a submit
that leaves the loop asleep and on a loop that forgets a failed call's
retry time. Each planted loop still sends its request later (the next
wakeup, or the durable alarm), so nothing else fails where this does.

The check's first find was in semsim's own client loop: with several keys,
the loop slept until the earliest ``nextRequestAt`` of any key with items
queued, and a key already due whose call was out hid a later key's time,
so that key waited for the other call's reply.
"""

from __future__ import annotations

from typing import Any

import pytest

from semsim.check.requests_prompt import RequestsPrompt
from semsim.harness.run import HolderSpec, WorldConfig, WorldRun, run_world
from semsim.world import client_object
from semsim.world.client_object import ClientObject
from semsim.world.faults import Eviction, FaultPlan
from semsim.world.workload import Workload
from tests.helpers import three_key_world


def _lossy(request_loss: float = 0.3) -> WorldRun:
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None),
        workload=Workload(clients=2, items_per_minute=40.0, until_ms=40_000),
        duration_ms=90_000,
    )
    faults = FaultPlan(
        request_loss=request_loss, faults_until_ms=40_000, evictions=(Eviction("client-1", 12_000),)
    )
    return run_world(config, faults, seed=2)


def test_the_reference_holds_through_lost_calls_and_an_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[int] = []
    judge = RequestsPrompt.moment_over

    def judging(self: RequestsPrompt) -> None:
        judged.append(self._sim.now())
        judge(self)

    monkeypatch.setattr(RequestsPrompt, "moment_over", judging)
    run = _lossy()
    assert run.result.outcome == "completed", run.result
    failed = run.trace.of_kind("call_failed")
    assert failed, "the world loses requests, so keys wait out retries"
    # Each failed call's retry time is a moment judged, whether or not anything else happens then.
    assert {event["t"] + 1_000 for event in failed} <= set(judged)


def test_a_submit_that_leaves_the_loop_asleep_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def asleep(self: ClientObject) -> None:
        self._arm_alarm(self._next_wakeup(self.sim.now(), due_now=True))  # no wake for the loop

    monkeypatch.setattr(ClientObject, "_after_call", asleep)
    run = _lossy(request_loss=0.0)
    assert run.result.invariant == "requests_prompt", run.result
    assert "no call for them is out" in run.result.detail


def test_a_loop_that_forgets_a_failed_calls_retry_time_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    wakeup = ClientObject._next_wakeup

    def forgetting(self: ClientObject, now: int, due_now: bool = False) -> Any:
        kept, self._retry_at = self._retry_at, {}
        try:
            return wakeup(self, now, due_now)
        finally:
            self._retry_at = kept

    monkeypatch.setattr(ClientObject, "_next_wakeup", forgetting)
    run = _lossy()
    assert run.result.invariant == "requests_prompt", run.result
    failed = run.trace.of_kind("call_failed")
    # Judged at the retry time itself: the moment the check makes for it.
    assert run.result.end_ms in {event["t"] + 1_000 for event in failed}, run.result


def test_a_keys_time_is_not_hidden_behind_another_keys_call(monkeypatch: pytest.MonkeyPatch) -> None:
    run = three_key_world()
    assert run.result.outcome == "completed", run.result
    # The loop as it was: the earliest nextRequestAt of any key with items queued, and no other.
    monkeypatch.setattr(client_object, "NEXT_REQUEST_AFTER", "SELECT NULL WHERE ? IS NOT NULL")
    hidden = three_key_world()
    assert hidden.result.invariant == "requests_prompt", hidden.result
