"""The simulated platform delivers only an alarm that is still stored, at the time stored.

A real platform fires the alarm it keeps, not a time it read once: an alarm
deleted or moved without telling the platform (a bug that loses the stored
alarm) must not fire at the old time, or the simulator hides that bug.
"""

from __future__ import annotations

from typing import Any

import trio

from semsim.runtime.durable import DurableObject, ObjectContext
from semsim.runtime.kernel import Sim, run
from semsim.runtime.trace import Trace


class Recorder:
    def __init__(self, ctx: ObjectContext) -> None:
        self.ctx = ctx

    def handle(self, method: str, payload: Any) -> Any:
        return None

    async def alarm(self) -> None:
        self.ctx.sim.event("ran_alarm")


def _run(change: str) -> Trace:
    """Store an alarm for t=1000 (the platform is told), then at t=500 change the row behind its back."""
    t = Trace(1, {}, {})

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            obj = DurableObject(sim, "obj", Recorder, nursery)
            obj.instance()
            obj.storage.execute("INSERT INTO semsim_alarm (id, at) VALUES (1, 1000)")
            obj.alarm_changed()
            await sim.sleep(500)
            if change == "delete":
                obj.storage.execute("DELETE FROM semsim_alarm")
            elif change == "later":
                obj.storage.execute("UPDATE semsim_alarm SET at = 3000")
            await sim.sleep(10_000)
            nursery.cancel_scope.cancel()

    run(1, main, t)
    return t


def test_an_alarm_still_stored_fires_at_its_time() -> None:
    assert [e["t"] for e in _run("none").of_kind("ran_alarm")] == [1_000]


def test_a_deleted_alarm_does_not_fire() -> None:
    trace = _run("delete")
    assert trace.of_kind("ran_alarm") == []
    assert trace.of_kind("alarm") == []


def test_a_moved_alarm_fires_at_its_new_time_not_the_old_one() -> None:
    trace = _run("later")
    assert [e["t"] for e in trace.of_kind("ran_alarm")] == [3_000]
    assert [e["scheduled"] for e in trace.of_kind("alarm")] == [3_000]
