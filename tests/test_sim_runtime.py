"""The runtime: integer virtual time, seeded interleavings, bounded runs, Trio left as found."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from trio._core import _run as trio_run

from semsim.runtime.kernel import Limits, Sim, run
from semsim.runtime.trace import Trace, TraceError, read_trace

ROOT = Path(__file__).resolve().parent.parent


def trace() -> Trace:
    return Trace(seed=0, config={}, faults={})


def test_virtual_time_is_integer_milliseconds() -> None:
    seen: list[int] = []

    async def main(sim: Sim) -> None:
        await sim.sleep(1_234)
        seen.append(sim.now())
        await sim.sleep_until(5_000)
        seen.append(sim.now())

    result = run(1, main, trace())
    assert result.outcome == "completed"
    assert seen == [1_234, 5_000]
    assert all(type(t) is int for t in seen)


def _race(seed: int) -> list[str]:
    """Three tasks woken by the same deadline: which runs first is the scheduler's choice."""
    order: list[str] = []

    async def main(sim: Sim) -> None:
        async def wake(name: str) -> None:
            await sim.sleep_until(100)
            order.append(name)

        async with trio.open_nursery() as nursery:
            for name in "abc":
                nursery.start_soon(wake, name)

    run(seed, main, trace())
    return order


def test_a_seed_fixes_the_interleaving_and_different_seeds_pick_different_ones() -> None:
    assert _race(7) == _race(7)
    assert len({tuple(_race(seed)) for seed in range(20)}) > 1


def test_trio_scheduler_state_is_restored_after_a_run() -> None:
    flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    state = trio_run._r.getstate()
    _race(3)
    assert flag == trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    assert trio_run._r.getstate() == state


def test_the_schedule_is_the_same_whether_or_not_hypothesis_was_imported() -> None:
    # Importing Hypothesis flips Trio's deterministic flag and registers its RNG;
    # the runtime sets both itself, so a CLI process and a test process agree.
    script = "{imp}from tests.test_sim_runtime import _race; print([_race(s) for s in range(8)])"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script.format(imp=imp)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for imp in ("", "import hypothesis; ")
    }
    assert len(outputs) == 1


def test_a_deadlock_ends_the_run_and_names_the_blocked_tasks() -> None:
    t = trace()

    async def main(sim: Sim) -> None:
        never = trio.Event()

        async def stuck() -> None:
            await never.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stuck, name="waits-for-a-reply-that-never-comes")

    result = run(1, main, t, Limits(time_limit_ms=60_000))
    assert result.outcome == "deadlock"
    assert "waits-for-a-reply-that-never-comes" in result.detail
    [event] = t.of_kind("deadlock")
    assert "waits-for-a-reply-that-never-comes" in event["blocked"]


def test_the_time_limit_bounds_a_run() -> None:
    async def main(sim: Sim) -> None:
        while True:
            await sim.sleep(1_000)

    result = run(1, main, trace(), Limits(time_limit_ms=10_000))
    assert (result.outcome, result.end_ms) == ("time_limit", 10_000)


def test_the_step_limit_bounds_a_run() -> None:
    async def main(sim: Sim) -> None:
        while True:
            sim.event("tick")
            await sim.sleep(1)

    result = run(1, main, trace(), Limits(step_limit=50))
    assert result.outcome == "step_limit"
    assert result.end_ms == 50


def test_named_streams_are_independent_and_seeded() -> None:
    draws: list[tuple[float, float]] = []

    async def main(sim: Sim) -> None:
        draws.append((sim.rng("network").random(), sim.rng("workload").random()))

    run(5, main, trace())
    run(5, main, trace())
    run(6, main, trace())
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]
    assert draws[0][0] != draws[0][1]


def _cancel_race(seed: int) -> list[str]:
    """A task woken at 100 ms whose scope another task, woken at the same moment, cancels."""
    order: list[str] = []

    async def main(sim: Sim) -> None:
        scope = trio.CancelScope()

        async def sleeper() -> None:
            with scope:
                await sim.sleep_until(100)
                order.append("ran")

        async def canceller() -> None:
            await sim.sleep_until(100)
            scope.cancel()
            order.append("cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            nursery.start_soon(canceller)

    run(seed, main, trace())
    return order


def test_a_task_cancelled_after_it_was_woken_does_not_run_on() -> None:
    # An eviction due at the same millisecond as the moment a client's loop wakes: if the
    # eviction runs first, the dead instance's loop must not send a request.
    orders = {tuple(_cancel_race(seed)) for seed in range(40)}
    assert ("cancelled", "ran") not in orders
    assert orders == {("ran", "cancelled"), ("cancelled",)}  # both interleavings happen


def test_the_virtual_clock_reads_what_trios_mock_clock_would() -> None:
    from semsim.runtime.kernel import _virtual_clock

    clock = _virtual_clock()
    reference = trio.testing.MockClock(autojump_threshold=0)
    for step in (0.0, 1.0, 0.5, 2_500.0, 1e-3, 86_400_000.0):
        clock.jump(step)
        reference.jump(step)
        assert clock.current_time() == reference.current_time()
        assert trio.testing.MockClock.current_time(clock) == clock.current_time()
        assert clock.deadline_to_sleep_time(clock.current_time() + 10) == reference.deadline_to_sleep_time(
            reference.current_time() + 10
        )


def test_sim_now_follows_trios_clock_through_a_run() -> None:
    seen: list[tuple[int, int]] = []

    async def main(sim: Sim) -> None:
        for ms in (0, 7, 1_000, 1):
            await sim.sleep(ms)
            seen.append((sim.now(), int(trio.current_time())))

    result = run(3, main, Trace(3, {}, {}))
    assert result.outcome == "completed"
    assert seen == [(0, 0), (7, 7), (1_007, 1_007), (1_008, 1_008)]


def test_entries_due_together_run_in_order_with_first_and_last_at_the_edges() -> None:
    order: list[str] = []

    async def main(sim: Sim) -> None:
        for name, tie in (("a", "fifo"), ("b", "last"), ("c", "first"), ("d", "fifo"), ("e", "first")):
            sim.call_at(1_000, functools.partial(order.append, name), tie)  # type: ignore[arg-type]
        sim.call_at(999, functools.partial(order.append, "earlier"), "last")
        await sim.sleep(2_000)

    run(1, main, trace())
    assert order == ["earlier", "c", "e", "a", "d", "b"]


def test_a_cancelled_entry_past_the_limit_does_not_hide_a_deadlock() -> None:
    """An answered wait leaves its (cancelled) timeout entry in the heap; a run stuck after it
    is a deadlock, not a run that reached its time limit."""

    async def main(sim: Sim) -> None:
        signal = sim.signal()

        async def setter() -> None:
            await sim.sleep(10)
            signal.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(setter)
            assert await signal.wait(120_000)  # answered at 10 ms; its timeout entry is cancelled
            await trio.sleep_forever()

    result = run(1, main, trace(), Limits(time_limit_ms=60_000))
    assert result.outcome == "deadlock", result


class _Steps(trio.abc.Instrument):
    """Counts task steps by task name."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] = self.steps.get(task.name, 0) + 1


def _timer_steps(moments: int) -> int:
    steps = _Steps()
    fired: list[int] = []

    async def main(sim: Sim) -> None:
        trio.lowlevel.add_instrument(steps)
        for t_ms in range(1, moments + 1):
            sim.call_at(t_ms * 10, functools.partial(fired.append, t_ms))
        await sim.sleep(5_000)

    result = run(1, main, trace())
    assert result.outcome == "completed"
    assert fired == list(range(1, moments + 1))
    return steps.steps["semsim.timers"]


def test_moving_time_costs_no_task_step() -> None:
    """Time moves in Trio's own idle moment: the timers' task steps as often (at its start and
    at the run's end) whatever the number of moments time moves through."""
    assert _timer_steps(200) == _timer_steps(2) <= 4


def test_an_entry_that_ends_the_run_stops_the_tasks_it_woke_at_once() -> None:
    """A violation raised by an entry ends the run as a task's would: entries due after it do
    not run, and a task an earlier entry woke in the same millisecond does not run on."""
    from semsim.runtime.kernel import StopRun

    class Broke(StopRun):
        name = "broke"
        t_ms = 100
        finding = None

    order: list[str] = []

    def fail() -> None:
        order.append("fail")
        raise Broke("the entry broke an invariant")

    async def main(sim: Sim) -> None:
        async def sleeper() -> None:
            await sim.sleep_until(100)
            order.append("sleeper ran on")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await sim.sleep(1)
            sim.call_at(100, fail)
            sim.call_at(100, functools.partial(order.append, "later entry"))
            await sim.sleep(1_000)
            order.append("main ran on")

    result = run(1, main, trace())
    assert (result.outcome, result.invariant, result.end_ms) == ("violation", "broke", 100)
    assert order == ["fail"]


def test_a_moment_is_over_once_every_task_did_what_it_does_at_it() -> None:
    """``moment_over`` watchers run once per millisecond time moves on from, after the entries
    due at it and every task they woke (a chain of wakeups included), before time moves."""
    seen: list[tuple[int, list[str]]] = []
    order: list[str] = []

    async def main(sim: Sim) -> None:
        sim.timers.moment_over.append(lambda: seen.append((sim.now(), list(order))))

        async def chained() -> None:
            await sim.sleep_until(100)
            order.append("woken at 100")
            signal.set()

        async def second() -> None:
            await signal.wait()
            order.append("woken by the first")

        signal = sim.signal()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chained)
            nursery.start_soon(second)
            sim.call_at(100, functools.partial(order.append, "entry at 100"))
            await sim.sleep_until(250)
            order.append("main at 250")

    run(1, main, trace())
    assert seen == [
        (0, []),
        (100, ["entry at 100", "woken at 100", "woken by the first"]),
    ]
    assert order[-1] == "main at 250"


def test_a_watcher_that_raises_ends_the_run_as_an_entry_does() -> None:
    from semsim.runtime.kernel import StopRun

    class Late(StopRun):
        name = "late"
        t_ms = 100
        finding = None

    order: list[str] = []

    def watch(sim: Sim) -> None:
        if sim.now() == 100:
            raise Late("a promise was due by the end of 100 ms")

    async def main(sim: Sim) -> None:
        sim.timers.moment_over.append(functools.partial(watch, sim))
        await sim.sleep_until(100)
        order.append("main at 100")
        await sim.sleep_until(200)
        order.append("main ran on")

    result = run(1, main, trace())
    assert (result.outcome, result.invariant, result.end_ms) == ("violation", "late", 100)
    assert order == ["main at 100"]


def test_an_entry_that_crashes_raises_out_of_the_run() -> None:
    """A bug in an entry (any exception) is a crash of the run, never swallowed by Trio's loop."""

    def crash() -> None:
        raise ZeroDivisionError("a bug in a timer's callback")

    async def main(sim: Sim) -> None:
        sim.call_at(10, crash)
        await sim.sleep(100)

    with pytest.raises(BaseExceptionGroup) as raised:
        run(1, main, trace())
    assert raised.value.subgroup(ZeroDivisionError) is not None


def _violation(name: str, t_ms: int) -> BaseException:
    from semsim.runtime.kernel import StopRun

    class Broke(StopRun):
        pass

    broke = Broke(name)
    broke.name, broke.t_ms, broke.finding = name, t_ms, None
    return broke


def test_an_entrys_violation_is_the_verdict_over_one_its_cancellation_causes() -> None:
    """The entry's violation came first; a task's cleanup that breaks another invariant while
    the run unwinds must not become the verdict (the parked task raises the entry's last)."""

    async def main(sim: Sim) -> None:
        async def worker() -> None:
            try:
                await sim.sleep(10_000)
            finally:
                raise _violation("judged-while-unwinding", sim.now())

        def entry() -> None:
            raise _violation("broken-by-the-entry", sim.now())

        sim.call_at(100, entry)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
            await sim.sleep(1_000)

    result = run(1, main, trace())
    assert (result.outcome, result.invariant, result.end_ms) == ("violation", "broken-by-the-entry", 100)


def test_a_shielded_cleanup_on_a_trio_deadline_ends_after_an_entry_fails() -> None:
    """Once an entry's error has ended the run, Trio's own deadlines still move time (as when a
    failing driver had exited): a shielded cleanup with a ``trio.sleep`` ends instead of spinning."""
    import signal

    cleaned: list[int] = []

    async def main(sim: Sim) -> None:
        async def worker() -> None:
            try:
                await sim.sleep(10_000)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(5)
                    cleaned.append(sim.now())

        def entry() -> None:
            raise _violation("broken", sim.now())

        sim.call_at(100, entry)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
            await sim.sleep(1_000)

    def spinning(*_: object) -> None:
        raise TimeoutError("the run spun: time never reached the cleanup's deadline")

    previous = signal.signal(signal.SIGALRM, spinning)
    signal.alarm(10)
    try:
        result = run(1, main, trace())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert (result.outcome, result.invariant) == ("violation", "broken")
    assert cleaned == [105]


def test_an_entrys_crash_comes_first_in_the_group_over_what_its_cancellation_raised() -> None:
    """A crash is reported by the group's first leaf: the entry's bug, not a cleanup's error."""

    def crash() -> None:
        raise ZeroDivisionError("a bug in a timer's callback")

    async def main(sim: Sim) -> None:
        async def worker() -> None:
            try:
                await sim.sleep(1_000)
            finally:
                raise KeyError("raised while unwinding")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
            sim.call_at(10, crash)
            await sim.sleep(100)

    with pytest.raises(BaseExceptionGroup) as raised:
        run(1, main, trace())
    assert isinstance(raised.value.exceptions[0], ZeroDivisionError), raised.value.exceptions


def test_a_run_makes_no_full_collection_and_restores_the_collectors_thresholds() -> None:
    """A run only grows what it keeps; the collector's full passes over it would grow with it."""
    import gc

    full: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    kept: list[object] = []

    async def main(sim: Sim) -> None:
        for _ in range(200):
            kept.extend([{"n": n}] for n in range(5_000))  # long-lived, as a trace is
            await sim.sleep(1)

    before = gc.get_threshold()
    gc.callbacks.append(count)
    try:
        result = run(1, main, trace())
    finally:
        gc.callbacks.remove(count)
    assert result.outcome == "completed"
    assert full == []
    assert gc.get_threshold() == before


# --- reading a trace back (docs/WIRE.md, "Reading a trace back") -------------------------------


def test_a_trace_s_blank_lines_are_skipped_and_line_numbers_count_them(tmp_path: Path) -> None:
    t = trace()
    t.event(5, "tick", {})
    path = tmp_path / "t.jsonl"
    header, event = t.to_bytes().decode().splitlines()
    path.write_text(f"\n{header}\n \t\r\n{event}\n\n")
    assert read_trace(path) == (t.header, list(t.events()))
    path.write_text(f"{header}\n\n\n{event}\n{{not json\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:5: not JSON"):
        read_trace(path)
    path.write_text(f'{header}\n\n{{"kind": "tick"}}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:3: an event needs an integer time"):
        read_trace(path)


def test_a_trace_reads_back_whatever_text_its_strings_hold(tmp_path: Path) -> None:
    """Lines end at ``\\n`` only: U+2028 or a form feed in a name is part of its string."""
    t = Trace(seed=0, config={"key": "a\u2028b\x0cc\x1cd"}, faults={})
    t.event(1, "tick", {"who": "x\u2029y\x85z"})
    t.write(tmp_path / "t.jsonl")
    assert read_trace(tmp_path / "t.jsonl") == (t.header, list(t.events()))
