"""Opt-in corrections of reference behaviour that breaks a promise of durable operations.

The default engine is the faithful reference (seed 002), bugs included, as
``semaphore_core/fixes.py`` is for the holder. Each entry names a finding in
docs/FINDINGS.md ("Durable operations"); ``SchedulerOptions(fixes={name})``
turns its fix on and ``ALL_DURABILITY_FIXES`` turns on every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: D1. When an execution settles, its key leaves the engine's active set only if no
#: newer execution of the same key (a purged and re-registered id) is running, so
#: ``liveTimers`` cannot arm a zero-delay timer for that running row in a loop.
ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION: Final = "active-set-follows-the-current-execution"

KNOWN_FIXES: Final[Mapping[str, str]] = {
    ACTIVE_SET_FOLLOWS_THE_CURRENT_EXECUTION: (
        "D1: a settling execution keeps a newer execution of its id in the active set (no timer loop)"
    ),
}
ALL_DURABILITY_FIXES: Final = frozenset(KNOWN_FIXES)
