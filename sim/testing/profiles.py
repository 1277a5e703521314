"""Hypothesis profiles under semsim's own names, for suites that test with semsim.

``semsim-ci`` is derandomized and bounded: the same examples on every run,
so CI is reproducible and a red build is the change's. ``semsim-dev`` draws
anew and keeps failures in Hypothesis's example database, so a failure
found once replays first. ``semsim-nightly`` searches ten times as long.
They are named apart from Hypothesis's own profiles (``ci`` is one of
Hypothesis's built-ins, so a suite asking for it would get that one).
Choose one with ``pytest --hypothesis-profile=semsim-ci``.

A whole-system run takes a tenth of a second or more, so every profile
lifts the deadline and the "too slow" health check.

Each profile descends from Hypothesis's ``default`` profile, not from the
settings active at import. Under a CI service (``CI`` set) Hypothesis loads
its ``ci`` profile, which derandomizes and drops the database; a profile
inheriting from it would make ``semsim-dev`` replay the same examples in
CI and nowhere else.
"""

from __future__ import annotations

from typing import Final

from hypothesis import HealthCheck, settings

PROFILES: Final = ("semsim-ci", "semsim-dev", "semsim-nightly")

_SLOW_IS_EXPECTED: Final = [HealthCheck.too_slow]


def register() -> None:
    """Register the profiles (again: a profile registered twice is simply replaced)."""
    base = settings.get_profile("default")
    settings.register_profile(
        "semsim-ci",
        base,
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=150,
        print_blob=True,
        suppress_health_check=_SLOW_IS_EXPECTED,
    )
    settings.register_profile(
        "semsim-dev",
        base,
        deadline=None,
        max_examples=500,
        print_blob=True,
        suppress_health_check=_SLOW_IS_EXPECTED,
    )
    settings.register_profile(
        "semsim-nightly",
        base,
        deadline=None,
        max_examples=5_000,
        print_blob=True,
        suppress_health_check=_SLOW_IS_EXPECTED,
    )


register()
