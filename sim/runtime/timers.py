"""Timers and signals for the simulation, cheaper than Trio's and with our own tie-break.

Every ``trio.sleep`` or ``move_on_at`` opens a cancel scope and registers a
deadline; a simulated RPC needs several. Here time moves to the earliest
entry of a heap whenever every task is blocked, inside Trio's own run loop
(``Timers.attach``), and everything else parks on the heap:

- ``Timers.sleep_until`` parks the task (``wait_task_rescheduled``) until
  its time;
- ``Timers.call_at`` runs a plain callback at a time (a delayed delivery,
  an RPC timeout), with no task at all;
- ``Signal`` is an event a task can wait on with an optional deadline.

Entries due at the same millisecond run in the order they were scheduled
(the heap is keyed by ``(time, sequence)``; an entry may ask to go first
or last among them), all before the tasks they wake, so the simulation never
depends on how Trio breaks deadline ties; tasks woken together still run
in the order the seeded scheduler picks. Parked tasks stay cancellable
(eviction cancels them like any Trio task), and a task cancelled after it
was woken but before it ran stops there (see ``_fenced``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import trio
import trio.lowlevel
import trio.testing
from trio._core import _run as trio_run

Tie = Literal["first", "fifo", "last"]
#: Sequence offsets: a run schedules far fewer than 2**60 entries.
_TIE_OFFSET: Final[dict[str, int]] = {"first": -(2**60), "fifo": 0, "last": 2**60}


class Entry:
    __slots__ = ("action", "cancelled")

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.cancelled = False


class Timers:
    """A heap of ``(time, sequence, entry)``, served whenever Trio's run loop goes idle."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Entry]] = []
        self._seq = 0
        #: The error an entry raised, if one did: it ended the run, before anything its
        #: cancellation made other tasks raise (they come first in the nursery's group).
        self.failure: BaseException | None = None
        #: Called, in order, each time a millisecond is over: every task is blocked and nothing
        #: is left due at it, so time is about to move (or nothing can happen again). What
        #: every task did at that millisecond is done, so a check of what should have happened
        #: by then is fair. They must only read; one that raises ends the run as an entry does.
        self.moment_over: list[Callable[[], None]] = []

    def call_at(self, t_ms: int, action: Callable[[], None], tie: Tie = "fifo") -> Entry:
        """Run ``action()`` at ``t_ms``; cancel with ``entry.cancelled = True``.

        ``tie`` places it among the entries due at the same millisecond:
        ``fifo`` in the order scheduled, ``first`` before every ``fifo`` entry,
        ``last`` after them all (an injected fault at the edge of its moment:
        see ``semsim.harness.run``).
        """
        entry = Entry(action)
        self._seq += 1
        seq = self._seq + _TIE_OFFSET[tie]
        heapq.heappush(self._heap, (t_ms, seq, entry))
        return entry

    async def sleep_until(self, t_ms: int) -> None:
        if t_ms <= trio.current_time():
            await trio.lowlevel.checkpoint()
            return
        task = trio.lowlevel.current_task()
        entry = self.call_at(t_ms, lambda: trio.lowlevel.reschedule(task))

        def abort(_: Any) -> trio.lowlevel.Abort:
            entry.cancelled = True
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        await _fenced()

    def attach(
        self, clock: trio.testing.MockClock, idle: Callable[[], None]
    ) -> Callable[[], Awaitable[None]]:
        """Make Trio's own idle moment move time; returns the task to start in the run's nursery.

        Trio calls a ``MockClock``'s ``_autojump`` from its run loop when no
        task can run (the clock's autojump threshold is 0). Here that hook
        jumps the virtual clock to the earliest entry of the heap and runs
        every entry due by then, right in the run loop: the tasks they wake
        run in the same scheduler pass. A Trio deadline that comes first or
        at the same time (the run's time limit, a test's ``trio.sleep``) is
        jumped to instead and left to Trio to expire. So moving time costs no
        task, no scheduler pass of its own and no cancel scope. ``idle()`` is
        called whenever no live entry is left (the kernel's deadlock check), and
        the ``moment_over`` watchers whenever time is about to move.

        Every entry due at a millisecond runs before any task woken at that
        millisecond does.

        An entry that raises (a violation, the step limit, a bug) must end
        the run as if a task had raised it, never inside Trio's run loop. The
        returned task parks for the whole run and is where such an error is
        raised: the run's nursery is cancelled at once (as a failing child
        would cancel it) and the error is delivered at the next idle moment,
        once the cancelled tasks have unwound, so their order is the one a
        failing task gives them. Its name, ``semsim.timers``, is the one
        a deadlock lists. Once that task is gone, Trio's own autojump takes
        over (as it did once a failing driver had exited), so a shielded
        cleanup waiting on a Trio deadline still ends.

        A task in ``trio.testing.wait_all_tasks_blocked`` takes the idle
        moment from this hook: Trio wakes it instead and time does not move
        in that moment (a task that waits for idleness in a loop stops time).
        """
        #: The parked task while it is parked; whether the run's nursery was cancelled.
        parked: trio.lowlevel.Task | None = None
        over = False
        heap = self._heap

        def advance() -> None:
            nonlocal parked
            if over or self.failure is not None:
                if parked is not None:
                    task, parked = parked, None
                    trio.lowlevel.reschedule(task)
                else:  # the run is over and its heap with it: only Trio's deadlines are left
                    trio.testing.MockClock._autojump(clock)
                return
            now = clock._virtual_base
            while heap and heap[0][2].cancelled:
                heapq.heappop(heap)  # a cancelled entry moves nothing: it must not hide a deadlock
            if not heap:
                idle()
            due = heap[0][0] if heap else math.inf
            if due > now and self.moment_over:
                try:
                    for watcher in self.moment_over:
                        watcher()
                except BaseException as error:  # raised again in the parked task
                    self._fail(error, parked)
                    return
                due = heap[0][0] if heap else math.inf  # a watcher may set an entry sooner
            if due > now:
                # Trio's own next deadline, as ``current_statistics()`` would give it less
                # ``now``, without building its statistics (of the I/O backend too) every step.
                deadline = trio_run.GLOBAL_RUN_CONTEXT.runner.deadlines.next_deadline()
                if deadline <= due:
                    if deadline != math.inf:  # else nothing will ever happen: as Trio would
                        clock.jump(deadline - now)
                    return
                clock.jump(due - now)
                now = due
            try:
                while heap and heap[0][0] <= now:
                    _, _, entry = heapq.heappop(heap)
                    if not entry.cancelled:
                        entry.action()
            except BaseException as error:  # raised again in the parked task
                self._fail(error, parked)

        async def park() -> None:
            nonlocal parked
            parked = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                nonlocal over
                over = True  # woken at the next idle moment, after the others unwound
                return trio.lowlevel.Abort.FAILED

            await trio.lowlevel.wait_task_rescheduled(abort)
            if self.failure is not None:
                raise self.failure
            await trio.lowlevel.checkpoint()  # the run is over: this raises ``Cancelled``

        clock._autojump = advance  # type: ignore[method-assign]
        return park

    def _fail(self, error: BaseException, parked: trio.lowlevel.Task | None) -> None:
        """An entry or a watcher raised ``error``: the run's nursery is cancelled, and the parked
        task raises it once the others unwound."""
        self.failure = error
        assert parked is not None, "an entry ran after the run ended"
        assert parked.parent_nursery is not None
        parked.parent_nursery.cancel_scope.cancel()


class Signal:
    """A one-shot event a task can wait on, with an optional deadline."""

    __slots__ = ("_timers", "_waiters", "is_set")

    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._waiters: list[trio.lowlevel.Task] = []
        self.is_set = False

    def set(self) -> None:
        if self.is_set:
            return
        self.is_set = True
        waiters, self._waiters = self._waiters, []
        for task in waiters:
            trio.lowlevel.reschedule(task)

    async def wait(self, until_ms: int | float | None = None) -> bool:
        """Wait until set or until ``until_ms``; True if the signal is set."""
        if self.is_set:
            await trio.lowlevel.checkpoint()
            return True
        task = trio.lowlevel.current_task()
        self._waiters.append(task)
        timer: Entry | None = None
        if until_ms is not None and until_ms != math.inf:

            def expire() -> None:
                if task in self._waiters:
                    self._waiters.remove(task)
                    trio.lowlevel.reschedule(task)

            timer = self._timers.call_at(int(until_ms), expire)

        def abort(_: Any) -> trio.lowlevel.Abort:
            if task in self._waiters:
                self._waiters.remove(task)
            if timer is not None:
                timer.cancelled = True
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if timer is not None:
            timer.cancelled = True
        await _fenced()
        return self.is_set


async def _fenced() -> None:
    """Raise ``Cancelled`` if the task's scope was cancelled after it was woken.

    A task woken by a timer or a signal is runnable until the scheduler gets
    to it; if something due in the same millisecond cancels it first (an
    eviction at the moment the client's loop wakes), Trio still resumes it
    normally and it would run up to its next checkpoint: a dead instance
    sending a request after its eviction. This makes the
    cancellation take effect at once. It does not yield when the task was not
    cancelled, so it changes nothing else.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
