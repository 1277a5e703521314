"""The deterministic runtime: one seed, one virtual clock, one trace, bounded runs.

Everything a run does derives from its seed:

- Time is Trio's, a ``MockClock`` of rate 0 that only jumps: when every task
  is blocked, Trio's run loop calls the timers' idle hook
  (``semsim.runtime.timers``), which jumps it to the next thing due, one of
  its own entries or a Trio deadline. One unit of Trio time is one
  millisecond here, so every deadline is an exact integer and the core
  sees integer ``now`` values with no float rounding.
- Randomness comes from named streams derived from the seed
  (``sim.rng("network")``), never from module-level ``random``.
- Trio's own scheduler randomizes each batch of runnable tasks with a
  module-level RNG, ``trio._core._run._r``; with
  ``_ALLOW_DETERMINISTIC_SCHEDULING`` it sorts the batch by task creation
  order first and then shuffles it with ``_r``. :func:`deterministic_trio`
  turns that on and seeds ``_r`` from the run's seed for the duration of the
  run, then restores both: a seed also picks an interleaving, and a process
  that imported Hypothesis (which flips the flag and reseeds ``_r``) runs
  the same schedule as one that did not.

A run ends when its main function returns, at the virtual-time limit, at
the step limit, or in a deadlock (every task blocked and nothing scheduled
before the time limit), which names the blocked tasks. It never hangs.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from random import Random
from typing import Any, Final, Literal

import attrs
import trio
import trio.lowlevel
import trio.testing
from trio._core import _run as trio_run

from semsim.inputs.validation import check_seed
from semsim.runtime.timers import Entry, Signal, Tie, Timers
from semsim.runtime.trace import Trace

_NEEDED = ("_r", "_ALLOW_DETERMINISTIC_SCHEDULING", "GLOBAL_RUN_CONTEXT")
if not all(hasattr(trio_run, name) for name in _NEEDED) or not hasattr(
    trio.testing.MockClock(), "_virtual_base"
):
    raise ImportError(
        f"semsim's deterministic runtime needs Trio scheduler internals that Trio {trio.__version__} "
        "does not have; install a Trio version within the range pyproject.toml pins"
    )

Outcome = Literal["completed", "time_limit", "step_limit", "deadlock", "violation"]

#: The runtime's schedule: the order in which work due in the same millisecond runs. A seed
#: repeats its run only under the schedule it ran under, so traces and saved cases record it.
#: 1: every delivered message had a task of its own, timers were tasks, Trio's autojump moved
#: time. 2: synchronous answers at delivery, timers in the heap, time moves when every task is blocked
#: (first by a driver task, now by Trio's idle hook: the same order, the same traces).
SCHEDULE: Final = 2

#: A full collection's threshold (gen 1 collections between full ones) that a run never reaches.
_NO_FULL_COLLECTION: Final = 2**30

DEFAULT_TIME_LIMIT_MS: Final = 24 * 3_600_000
DEFAULT_STEP_LIMIT: Final = 5_000_000


#: How often (in trace events) a run tells its ``progress`` observer the virtual time.
PROGRESS_EVERY_EVENTS: Final = 4096


@attrs.frozen
class Limits:
    """Every run is bounded in virtual time and in trace events."""

    time_limit_ms: int = DEFAULT_TIME_LIMIT_MS
    step_limit: int = DEFAULT_STEP_LIMIT

    def __attrs_post_init__(self) -> None:
        if self.time_limit_ms <= 0 or self.step_limit <= 0:
            raise ValueError(f"limits must be positive, got {self}")


class StopRun(BaseException):
    """Raised anywhere in a run to end it with a verdict: ``RunResult("violation", ...)``.

    The runtime's interface to whatever judges a run: it knows nothing of
    invariants. A checker raises a subclass (``semsim.check.invariants``'s
    ``InvariantViolation``) that sets ``name`` (what failed), ``t_ms`` (when)
    and ``finding`` (the known finding that explains it, or None); the run
    stops and its result carries them and the exception's message.

    A ``BaseException``, like ``trio.Cancelled``: it must stop the whole run
    from wherever it is raised, and no handler's ``except Exception`` may turn
    it into an ordinary error reply.
    """

    name: str
    t_ms: int
    finding: str | None


class StepLimitReached(BaseException):
    """The run recorded more trace events than its step limit allows.

    A ``BaseException`` so that no handler's ``except Exception`` swallows it.
    """


@contextmanager
def young_collections_only() -> Iterator[None]:
    """No full collection of the cyclic garbage collector while a run goes; restored afterwards.

    A run only grows what it keeps: its trace (a tuple and a dict per event),
    the objects' state, the checkers' mirrors. Python's collector walks every
    tracked object in a full collection, and runs one each time the
    long-lived objects grew by a quarter, so a run's CPU for it grows with its
    size: a quarter of the CPU at 1,000 clients (docs/BENCHMARKS.md). Young
    collections still run as usual and reclaim short-lived cycles; cyclic
    garbage that survives them waits for the first full collection after the
    run. Nothing a run records depends on when the collector runs.
    """
    saved = gc.get_threshold()
    gc.set_threshold(saved[0], saved[1], _NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


@contextmanager
def deterministic_trio(seed: int) -> Iterator[None]:
    """Seed Trio's scheduler RNG and make it sort-then-shuffle; restore both afterwards."""
    saved_flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_state = trio_run._r.getstate()
    setattr(trio_run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010 (Final in trio)
    trio_run._r.seed(f"semsim-trio-schedule:{seed}")
    try:
        yield
    finally:
        setattr(trio_run, "_ALLOW_DETERMINISTIC_SCHEDULING", saved_flag)  # noqa: B010
        trio_run._r.setstate(saved_state)


class Sim:
    """The context every simulated component shares within one run."""

    #: Told the virtual time every :data:`PROGRESS_EVERY_EVENTS` trace events (a command's
    #: progress bar): it only observes, so the run is the same with or without it.
    progress: Callable[[int], None] | None

    def __init__(self, seed: int, trace: Trace, limits: Limits) -> None:
        self.seed = seed
        self.trace = trace
        self.limits = limits
        self._streams: dict[str, Random] = {}
        self._ids: dict[str, int] = {}
        self.timers = Timers()
        self._clock = _virtual_clock()
        self.progress = None

    # --- time ----------------------------------------------------------------

    def now(self) -> int:
        """Virtual milliseconds since the start of the run (Trio's time: see :func:`_virtual_clock`)."""
        return int(self._clock._virtual_base)

    async def sleep_until(self, t_ms: int) -> None:
        await self.timers.sleep_until(t_ms)

    async def sleep(self, ms: int) -> None:
        await self.timers.sleep_until(self.now() + ms)

    def call_at(self, t_ms: int, action: Callable[[], None], tie: Tie = "fifo") -> Entry:
        """Run the plain callback ``action`` at ``t_ms`` (no task); returns a cancellable entry.

        ``tie``: where it goes among the entries due at the same millisecond (``Timers.call_at``).
        """
        return self.timers.call_at(t_ms, action, tie)

    def signal(self) -> Signal:
        return Signal(self.timers)

    # --- randomness and ids ------------------------------------------------------

    def rng(self, name: str) -> Random:
        """The run's random stream called ``name`` (string seeding is hash-independent)."""
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = Random(f"semsim:{self.seed}:{name}")
        return stream

    def next_id(self, prefix: str) -> str:
        """``prefix-1``, ``prefix-2``, ...: ids that depend only on the order of calls."""
        n = self._ids.get(prefix, 0) + 1
        self._ids[prefix] = n
        return f"{prefix}-{n}"

    # --- trace -------------------------------------------------------------------

    def _tell_progress(self) -> None:
        """Tell the observer the time; one that fails (a closed stream) is dropped, never raised
        into the simulated code, whose handlers would turn it into an error reply."""
        assert self.progress is not None
        try:
            self.progress(self.now())
        except Exception:
            self.progress = None

    def event(self, kind: str, /, **fields: Any) -> None:
        """Record one trace event at the current virtual time."""
        self.trace.event(self.now(), kind, fields)
        if self.progress is not None and len(self.trace) % PROGRESS_EVERY_EVENTS == 0:
            self._tell_progress()
        if len(self.trace) > self.limits.step_limit:
            raise StepLimitReached(f"step limit of {self.limits.step_limit} trace events reached")


@attrs.frozen
class RunResult:
    outcome: Outcome
    end_ms: int
    detail: str = ""
    #: The invariant a ``violation`` broke.
    invariant: str | None = None
    #: The known finding (docs/FINDINGS.md) that explains the violation, if one does.
    finding: str | None = None


def _virtual_clock() -> trio.testing.MockClock:
    """Trio's ``MockClock(autojump_threshold=0)``, read without asking the real clock.

    A clock of rate 0 is ``virtual_base + 0 * (perf_counter() - real_base)``:
    exactly its virtual base, so reading the base gives the same time for a
    third of the cost. Time is read several times per step (Trio's run loop,
    every ``Sim.now``), hundreds of thousands of times a simulated hour.
    ``MockClock`` is final, so the instance's ``current_time`` is replaced;
    tests/test_sim_runtime.py pins that both readings agree. Its autojump
    (threshold 0) is how time moves: Trio calls ``_autojump`` whenever no
    task can run, and ``Timers.attach`` replaces it with the heap's hook.
    """
    clock = trio.testing.MockClock(autojump_threshold=0)
    assert clock.rate == 0
    clock.current_time = lambda: clock._virtual_base  # type: ignore[method-assign]
    return clock


class _DeadlockDetector:
    """Notices a deadlock when time would move and nothing is left to move it to.

    The timers' idle hook calls :meth:`idle` when every task is blocked and its
    heap is empty. If the only Trio deadline left is the run's time limit
    itself, nothing can ever happen again: that is a deadlock, recorded with
    the blocked tasks' names before time jumps to the limit, whose
    cancellation ends the run. Checking there costs nothing per step, unlike
    a watchdog task woken at every idle moment.
    """

    def __init__(self) -> None:
        self.blocked: list[str] | None = None

    def idle(self) -> None:
        # Nothing can ever happen again when the only deadline left is the
        # run's own limit (a task sleeping past the limit in Trio still counts).
        if self.blocked is None and _active_deadlines() == 1:
            self.blocked = _blocked_tasks()


def _active_deadlines() -> int:
    """How many cancel scopes with a deadline are live in this run (Trio internals, pinned by tests)."""
    runner = trio_run.GLOBAL_RUN_CONTEXT.runner
    return int(runner.deadlines._active)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first leaf exception of a (nested) group: nurseries nest their groups."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _blocked_tasks() -> list[str]:
    """Names of the leaf tasks (the ones actually waiting), in a stable order."""
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        children = [t for nursery in task.child_nurseries for t in nursery.child_tasks]
        if not children:
            names.append(task.name)
        for child in sorted(children, key=lambda t: t.name):
            walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return names


def run(
    seed: int,
    main: Callable[[Sim], Awaitable[None]],
    trace: Trace,
    limits: Limits = Limits(),
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Run ``main`` under the virtual clock with Trio's scheduling seeded by ``seed``.

    ``seed``: an integer in ``[0, MAX_SEED]`` (``semsim.inputs.validation``); anything else is
    refused before the run starts. ``progress``: told the virtual time as the run goes
    (:attr:`Sim.progress`).
    """
    check_seed(seed)
    sim = Sim(seed, trace, limits)
    sim.progress = progress
    result: list[RunResult] = []

    detector = _DeadlockDetector()

    async def root() -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sim.timers.attach(sim._clock, detector.idle), name="semsim.timers")
                with trio.move_on_at(limits.time_limit_ms) as limit:
                    await main(sim)
                nursery.cancel_scope.cancel()
            if detector.blocked is not None:
                sim.event("deadlock", blocked=detector.blocked)
                detail = "deadlock: every task is blocked: " + ", ".join(detector.blocked)
                result.append(RunResult("deadlock", sim.now(), detail))
            else:
                outcome: Outcome = "time_limit" if limit.cancelled_caught else "completed"
                result.append(RunResult(outcome, sim.now()))
        except* StepLimitReached as group:
            result.append(RunResult("step_limit", sim.now(), str(_first(group))))
        except* StopRun as group:
            # An entry's violation was raised first, though its task raises it last.
            failure = sim.timers.failure
            violation = failure if isinstance(failure, StopRun) else _first(group)
            assert isinstance(violation, StopRun)
            result.append(
                RunResult("violation", violation.t_ms, str(violation), violation.name, violation.finding)
            )

    with deterministic_trio(seed), young_collections_only():
        try:
            trio.run(root, clock=sim._clock, strict_exception_groups=True)
        except BaseExceptionGroup as group:
            raise _entry_first(group, sim.timers.failure).with_traceback(group.__traceback__) from None
    return result[0]


def _entry_first(group: BaseExceptionGroup[Any], failure: BaseException | None) -> BaseExceptionGroup[Any]:
    """The run's crash with the error an entry raised first: it came first (what unwinding then
    raised follows from it), though its task raises it last. A crash is reported by its first
    leaf (``semsim.explore.fuzz.run_case``)."""
    if failure is None or failure not in group.exceptions or group.exceptions[0] is failure:
        return group
    return group.derive([failure, *(error for error in group.exceptions if error is not failure)])
