"""Opt-in corrections of reference behaviour that breaks a promise of durable operations.

The default engine is the faithful reference (seed 002), bugs included, as
``semaphore_core/fixes.py`` is for the holder. Each entry names a finding in
docs/FINDINGS.md ("Durable operations"); ``SchedulerOptions(fixes={name})``
turns its fix on and ``ALL_DURABILITY_FIXES`` turns on every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

KNOWN_FIXES: Final[Mapping[str, str]] = {}
ALL_DURABILITY_FIXES: Final = frozenset(KNOWN_FIXES)
