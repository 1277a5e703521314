"""Progress on long commands: a bar on a terminal, plain lines elsewhere, and no effect on a run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from semsim.harness.run import WorldConfig, run_world
from semsim.inputs import progress as progress_module
from semsim.inputs.progress import Progress
from semsim.report.replay import read_traffic, replay
from semsim.runtime.kernel import PROGRESS_EVERY_EVENTS
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


def test_plain_lines_come_at_each_tenth_once_the_work_has_run_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(progress_module, "wall_clock", lambda: now[0])
    out = io.StringIO()
    shown = Progress("simulating x", 100, "simulated s", stream=out, interactive=False)
    shown.update(35)
    assert out.getvalue() == ""  # short work stays quiet
    now[0] = progress_module.QUIET_S
    shown.update(36, "settling")
    shown.update(38)  # the same tenth: no new line
    shown.update(100)
    shown.say("a line of the caller's")
    shown.close()
    assert out.getvalue().splitlines() == [
        "simulating x: 36/100 simulated s (30%), settling",
        "simulating x: 100/100 simulated s (100%)",
        "a line of the caller's",
    ]
    assert "\r" not in out.getvalue()


def test_a_terminal_gets_rich_s_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    with Progress("fuzz", 10, "runs", stream=out, interactive=True) as shown:
        assert shown._bar is not None  # rich's Progress, live on the stream
        shown.update(4, "0.10 sim-h")
        shown.say("shrinking ceiling: 1 runs")
    assert "fuzz" in out.getvalue()


def test_quiet_prints_nothing() -> None:
    out = io.StringIO()
    with Progress("x", 1, stream=out, quiet=True) as shown:
        shown.update(1)
        shown.say("y")
    assert out.getvalue() == ""


def test_a_run_observed_for_progress_is_the_same_run() -> None:
    config = WorldConfig(workload=Workload(clients=3, items_per_minute=120), duration_ms=120_000)
    told: list[int] = []
    observed = run_world(config, FaultPlan(reply_loss=0.05), 2, progress=told.append)
    plain = run_world(config, FaultPlan(reply_loss=0.05), 2)
    assert observed.trace.to_bytes() == plain.trace.to_bytes()
    assert len(told) == len(plain.trace) // PROGRESS_EVERY_EVENTS >= 1
    assert told == sorted(told)  # virtual time, as it went


def test_a_replay_tells_how_many_lines_it_has_done(monkeypatch: pytest.MonkeyPatch) -> None:
    import semsim.report.replay

    monkeypatch.setattr(semsim.report.replay, "PROGRESS_EVERY_LINES", 10)  # the example is short
    traffic = read_traffic(ROOT / "examples" / "traffic.jsonl")
    told: list[int] = []
    assert replay(traffic, told.append).summary == replay(traffic).summary
    assert len(traffic.lines) >= 50
    assert told == list(range(10, len(traffic.lines) + 1, 10))


def test_an_observer_that_fails_is_dropped_and_the_run_goes_on() -> None:
    config = WorldConfig(workload=Workload(clients=3, items_per_minute=120), duration_ms=120_000)
    calls: list[int] = []

    def broken(now_ms: int) -> None:
        calls.append(now_ms)
        raise BrokenPipeError("stderr went away")

    observed = run_world(config, FaultPlan(reply_loss=0.05), 2, progress=broken)
    plain = run_world(config, FaultPlan(reply_loss=0.05), 2)
    assert len(calls) == 1  # told once, then dropped
    assert observed.trace.to_bytes() == plain.trace.to_bytes()
