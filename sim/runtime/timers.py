"""Timers and signals for the simulation, cheaper than Trio's and with our own tie-break.

Every ``trio.sleep`` or ``move_on_at`` opens a cancel scope and registers a
deadline; a simulated RPC needs several. Here one driver task moves time to
the earliest entry of a heap whenever every task is blocked, and everything
else parks on the heap:

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
from collections.abc import Callable
from typing import Any, Final, Literal

import trio
import trio.lowlevel
import trio.testing

Tie = Literal["first", "fifo", "last"]
#: Sequence offsets: a run schedules far fewer than 2**60 entries.
_TIE_OFFSET: Final[dict[str, int]] = {"first": -(2**60), "fifo": 0, "last": 2**60}


class Entry:
    __slots__ = ("action", "cancelled")

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.cancelled = False


class Timers:
    """A heap of ``(time, sequence, entry)`` served by one driver task."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Entry]] = []
        self._seq = 0

    def call_at(self, t_ms: int, action: Callable[[], None], tie: Tie = "fifo") -> Entry:
        """Run ``action()`` at ``t_ms``; cancel with ``entry.cancelled = True``.

        ``tie`` places it among the entries due at the same millisecond:
        ``fifo`` in the order scheduled, ``first`` before every ``fifo`` entry,
        ``last`` after them all (an injected fault at the edge of its moment:
        see ``sim.harness.run``).
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

    async def drive(self, clock: trio.testing.MockClock, idle: Callable[[], None]) -> None:
        """The one task that moves time: when every other task is blocked, run what is due next.

        It waits until no task can run (``wait_all_tasks_blocked``), then jumps
        the virtual clock to the earliest entry and runs every entry due by
        then. A Trio deadline that comes first or at the same time (the run's
        time limit, a test's ``trio.sleep``) is jumped to instead and left to
        Trio to expire. No cancel scope and no ``Cancelled`` per step: waking
        this task costs one scheduler pass. ``idle()`` is called whenever no
        live entry is left (the kernel's deadlock check).

        So every entry due at a millisecond runs before any task woken at
        that millisecond does: those run once the driver waits again.
        """
        heap = self._heap
        while True:
            await trio.testing.wait_all_tasks_blocked()
            now = clock.current_time()
            while heap and heap[0][2].cancelled:
                heapq.heappop(heap)  # a cancelled entry moves nothing: it must not hide a deadlock
            if not heap:
                idle()
            due = heap[0][0] if heap else math.inf
            if due > now:
                # Where Trio's own next deadline is, exactly: both are integers below 2**53.
                deadline = now + trio.lowlevel.current_statistics().seconds_to_next_deadline
                if deadline <= due:
                    if deadline == math.inf:
                        await trio.sleep_forever()  # nothing will ever happen: as Trio would
                    clock.jump(deadline - now)
                    continue
                clock.jump(due - now)
                now = due
            while heap and heap[0][0] <= now:
                _, _, entry = heapq.heappop(heap)
                if not entry.cancelled:
                    entry.action()


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
