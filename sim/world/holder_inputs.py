"""The holder's callbacks (``limit``, ``group_limit``, ``can_grant``), built in one place.

``HolderConfig`` takes three callables from the application: the limit
(resolved once per round; a raise or a bad value fails the whole round),
each group's limit (a raise or a bad value fails the group closed,
``limit_resolution_error``) and ``can_grant`` (false: ``not_permitted``). A
simulated holder reads the deployment's limit (``Env.limit``, which the
operator may change) and the instance's ``limitWorkflow`` caps, and a fault
plan's :class:`~semsim.world.faults.InputFault` windows make each callback misbehave
for a while.

Everything that hands a holder its callbacks (the holder object, and any
model run beside it in lockstep) builds them here, each its own set, so both
see the same inputs at the same virtual time when they read them alike.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

import attrs

from semsim.world.faults import InputFault

#: What a misbehaving ``bad`` callback returns: not a non-negative safe integer.
BAD_VALUE: Final = -1


class PlannedInputFailure(RuntimeError):
    """A holder callback raising because the fault plan says so."""


class _NotPlanned(logging.Filter):
    """Drops the core's log records of a planned callback failure.

    ``semaphore_core`` logs a ``group_limit`` callback that raises, with its
    traceback, as an application would want. In a simulation the failure is
    one the fault plan injected, and pytest's captured-log section would
    print a traceback for every one of them beside a test's real failure.
    Any other exception a callback raises is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], PlannedInputFailure))


#: On the core's logger itself (its records are logged there), once, when simulation is imported.
_PLANNED_FILTER: Final = _NotPlanned()
logging.getLogger("semaphore_core").addFilter(_PLANNED_FILTER)


@attrs.define
class HolderInputs:
    """The three callables ``HolderConfig`` takes (``can_grant`` None: every group may be granted)."""

    limit: Callable[[], int]
    group_limit: Callable[[str], int | None]
    can_grant: Callable[[str], bool] | None
    #: While set, the callbacks behave: the checkers read usage through them and must see
    #: the deployment's limit, not the planned failure.
    suspended: bool = False
    #: While set, the callbacks answer as their next call would, and a flapping fault does not
    #: count the read: the model in lockstep compares the holder's ``usage()`` under the
    #: planned faults without changing what the holder's own next call sees.
    peeking: bool = False

    @contextlib.contextmanager
    def behaving(self) -> Iterator[None]:
        """Callbacks without their planned faults, for the checkers' own reads."""
        before, self.suspended = self.suspended, True
        try:
            yield
        finally:
            self.suspended = before

    @contextlib.contextmanager
    def peeking_only(self) -> Iterator[None]:
        """Callbacks with their planned faults that count no call, for the judge's own reads."""
        before, self.peeking = self.peeking, True
        try:
            yield
        finally:
            self.peeking = before


def holder_inputs(
    limit: Callable[[], int],
    group_limits: Mapping[str, int],
    faults: Sequence[InputFault],
    now: Callable[[], int],
    behaving_with: HolderInputs | None = None,
) -> HolderInputs:
    """The callbacks of one holder: ``limit()`` and ``group_limits`` as the application has them,
    misbehaving as ``faults`` (this holder's) say at virtual time ``now()``.

    ``can_grant`` is None when no fault denies anything, as for an application
    that passes none. Each ``flapping`` fault counts the calls it covers, per
    group, in this set alone, and a call misbehaves when any fault covering it
    strikes. So the model in lockstep gets a set of its own, ``behaving_with``
    the holder's (whose ``behaving`` and ``peeking_only`` then hold for both):
    each sees its own calls alternate, and the two agree exactly when they read
    the callbacks equally often.
    """
    #: Calls so far that each flapping fault covered, per fault (by position) and group.
    flapped: dict[tuple[int, str | None], int] = {}

    def failing(input: str, group: str | None) -> InputFault | None:
        leader = inputs if behaving_with is None else behaving_with
        if inputs.suspended or leader.suspended:
            return None
        counting = not (inputs.peeking or leader.peeking)
        t_ms = now()
        struck = None
        for index, fault in enumerate(faults):
            if not fault.covers(input, group, t_ms):
                continue
            if fault.flapping:
                calls = flapped.get((index, group), 0)
                if counting:
                    flapped[(index, group)] = calls + 1
                if calls % 2 == 1:
                    continue
            if struck is None:  # the first fault that strikes answers; the rest still count
                struck = fault
        return struck

    def resolve_limit() -> int:
        fault = failing("limit", None)
        if fault is None:
            return limit()
        if fault.bad:
            return BAD_VALUE
        raise PlannedInputFailure("the limit callback failed (planned)")

    def group_limit(group: str) -> int | None:
        fault = failing("group_limit", group)
        if fault is None:
            return group_limits.get(group)
        if fault.bad:
            return BAD_VALUE
        raise PlannedInputFailure(f"the group_limit callback failed for {group!r} (planned)")

    def can_grant(group: str) -> bool:
        return failing("can_grant", group) is None

    denies = any(fault.input == "can_grant" for fault in faults)
    inputs = HolderInputs(resolve_limit, group_limit, can_grant if denies else None)
    return inputs
