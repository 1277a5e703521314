"""What a test suite uses semsim through: the pytest plugin, its fixture and Hypothesis profiles.

Installing semsim registers the plugin (the ``pytest11`` entry point
``semsim``); ``-p no:semsim`` turns it off. A test asks for the
``semsim_runner`` fixture (:class:`SemsimRunner`) to run a world, a
scenario or a campaign: a violated invariant fails the test with the
invariant, the case file it wrote and the one-line command that replays it.
:func:`scenario_test` makes a scenario a test of its own. :func:`cases`
and :func:`check_case` make a campaign a Hypothesis test of the user's own
(:mod:`semsim.testing.strategy`). The Hypothesis
profiles ``semsim-ci``, ``semsim-dev`` and ``semsim-nightly`` are
registered whenever the plugin is (:mod:`semsim.testing.profiles`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from semsim.testing.failures import SemsimFailure
    from semsim.testing.runner import SemsimRunner, scenario_test
    from semsim.testing.strategy import cases, check_case

__all__ = ["SemsimFailure", "SemsimRunner", "cases", "check_case", "scenario_test"]

#: Where each public name lives. They are imported when first used: pytest loads the plugin in
#: every session of an environment semsim is installed in, and the simulator takes a second to
#: import, which a session that runs no simulation should not pay.
_HOMES = {
    "SemsimFailure": "semsim.testing.failures",
    "SemsimRunner": "semsim.testing.runner",
    "scenario_test": "semsim.testing.runner",
    "cases": "semsim.testing.strategy",
    "check_case": "semsim.testing.strategy",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once: later uses (and the API reference) read it directly
    return value
