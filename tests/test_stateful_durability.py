"""Run the durable-operations state machine (``tests/stateful_durability.py``) in its variants.

The faithful reference runs with and without ``liveTimers``, with one
permit and with a few, and with a hand-off shorter than an attempt.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.stateful_durability import REACH, DurabilityMachine

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "one-permit": {"concurrency": 1},
    "live-timers": {"live_timers": True},
    "short-handoff": {"handoff_ms": 10_000, "concurrency": 1},
}


#: The variants run in this process (``REACH`` counts only what ran here).
_RAN: set[str] = set()


def _run_variant(name: str) -> None:
    machine = type(f"Durability_{name.replace('-', '_')}", (DurabilityMachine,), VARIANTS[name])
    profile = settings.default
    assert profile is not None
    run_state_machine_as_test(
        machine,
        settings=settings(profile, max_examples=max(20, profile.max_examples // 2), stateful_step_count=40),
    )
    _RAN.add(name)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_durability_keeps_its_promises(name: str) -> None:
    _run_variant(name)


#: Every path the promises are checked on must be taken at least once over the variants.
MUST_REACH = (
    "event:registered:",
    "event:attempt_started:",
    "event:attempt_settled:completed",
    "event:attempt_settled:retry_scheduled",
    "event:attempt_settled:failed",
    "event:terminal:",
    "abort",
    "alarm:early:completed",
    "alarm:platform:completed",
    "alarm:platform:retrying",
    "alarm:early:handed_off",
    "report:live:zombie",
    "report:stale:old",
    "stale report landed",
)


def test_the_machine_reaches_every_path() -> None:
    """A rule that never fires checks nothing. Serially the variants above ran already (pytest
    keeps file order); under xdist they may have run on another worker, so they run here."""
    for name in sorted(set(VARIANTS) - _RAN):
        _run_variant(name)
    missing = [name for name in MUST_REACH if not REACH[name]]
    assert not missing, (missing, dict(REACH))


def test_a_zombie_report_whose_permit_starts_its_rows_next_attempt_is_still_fenced() -> None:
    """Drawn by the ``semsim-ci`` profile in one process (2026-12-04; the draws move with the
    modules loaded). With one permit, op-1's first attempt takes it as it is registered; the
    alarm pass that runs then listed op-0 and op-1 as due, and its one lane waits for the permit.
    op-1's attempt times out and its handler runs on (a zombie) holding it. Its report frees the
    permit, the lane finds op-0 settled and claims op-1's next attempt (claimAttempt does not look
    at next_attempt_at): the row moves by the claim, not by the report, which the fence keeps out."""
    machine = type("OnePermit", (DurabilityMachine,), VARIANTS["one-permit"])()
    machine.register_new(id="op-0", n=0)
    machine.evict()  # op-0's attempt runs on in the retired instance
    machine.register_new(id="op-1", n=0)
    [attempt] = [live for live in machine.running_here() if live.id == "op-1"]
    machine.now = attempt.timeout_at_ms
    machine.absorb(machine.shell.engine.advance(machine.now))
    assert machine.shell.engine.is_zombie(attempt)
    before = REACH["report freed a permit for the same row"]
    machine.teardown()  # the stale report, then the zombie's, then the drain
    assert REACH["report freed a permit for the same row"] == before + 1
    row = machine.shell.row("op-1")
    assert (row.status, row.attempt, row.result) == ("completed", 2, '"op-1#2"')
