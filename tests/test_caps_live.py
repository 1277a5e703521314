"""``caps_live``: a group cap the operator sets is the cap the holder reads from then on
(docs/INVARIANTS.md).

The drawn operator calls the holder object's own ``limit_workflow`` (seed
000's ``limitWorkflow``). Held on the reference in a world whose operator
caps one group three times (raised, lowered, lifted, set again) across a
holder eviction; failing on an admin method that keeps the first cap.
"""

from __future__ import annotations

from typing import Any

import pytest

from semsim.check.caps_live import CapsLive
from semsim.harness.run import HolderSpec, WorldConfig, WorldRun, run_world
from semsim.world.faults import Eviction, FaultPlan, GroupLimitChange
from semsim.world.holder_object import HolderObject
from semsim.world.workload import Workload

CHANGES = ((5_000, 3), (10_000, 1), (15_000, None), (20_000, 2), (40_000, 4))


def _capped() -> WorldRun:
    config = WorldConfig(
        holder=HolderSpec(limit=5, leases=None),
        workload=Workload(clients=2, items_per_minute=30.0, until_ms=50_000),
        duration_ms=90_000,
    )
    faults = FaultPlan(
        group_limit_changes=tuple(GroupLimitChange(at, "acct", "wf-1", limit) for at, limit in CHANGES),
        evictions=(Eviction("holder:acct", 30_000),),
    )
    return run_world(config, faults, seed=3)


def test_the_reference_holds_and_the_operator_calls_the_object(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int | None] = []
    judge = CapsLive.on_cap

    def seeing(self: CapsLive, t_ms: int, key: str, group: str, limit: int | None, caps: Any) -> None:
        seen.append(limit)
        judge(self, t_ms, key, group, limit, caps)

    monkeypatch.setattr(CapsLive, "on_cap", seeing)
    run = _capped()
    assert run.result.outcome == "completed", run.result
    assert seen == [limit for _, limit in CHANGES]
    # Every cap set went through the object's method, which tells of it.
    told = [event["limit"] for event in run.trace.of_kind("group_limit")]
    assert told == [limit for _, limit in CHANGES if limit is not None]


def test_an_admin_method_that_keeps_the_first_cap_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = HolderObject.handle

    def keeps_first(self: HolderObject, method: str, payload: Any) -> Any:
        if method == "limit_workflow":
            self.group_limits.setdefault(payload["group"], payload["limit"])  # Map.set, ported wrong
            return None
        return real(self, method, payload)

    monkeypatch.setattr(HolderObject, "handle", keeps_first)
    run = _capped()
    assert run.result.invariant == "caps_live", run.result
    assert "set wf-1's cap to 1 at 10000, and the holder reads 3" in run.result.detail
