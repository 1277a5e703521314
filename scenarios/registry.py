"""Every scenario semsim can run by name: its own, the ones installed packages register, and any
``module:attribute`` a person names.

A team keeps its failure stories in its own package and registers them
under the entry-point group ``semsim.scenarios`` (pyproject.toml)::

    [project.entry-points."semsim.scenarios"]
    myservice = "myservice.scenarios:ALL"

An entry point, like a ``module:attribute`` reference on the command line
(``semsim run myservice.scenarios:double_eviction``), names a
:class:`~semsim.scenarios.base.Scenario`, a function that builds one (as
semsim's own topic modules do: its docstring becomes the scenario's
promise), or a list or tuple of either. A registered scenario is then known
by its ``name``, in ``semsim list`` and ``semsim run`` alike.

What cannot be loaded is a :class:`ScenarioLookupError` naming the
reference, the entry point or the package, never a traceback: a user's
import error is a usage error, not a violation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Final

import attrs

from semsim.inputs.references import (
    ReferenceLookupError,
    did_you_mean,
    entry_points,
    load_entry_point,
    resolve,
)
from semsim.scenarios import SCENARIOS
from semsim.scenarios.base import Scenario

#: The entry-point group installed packages register their scenarios under.
GROUP: Final = "semsim.scenarios"


class ScenarioLookupError(LookupError):
    """A scenario name or reference that names nothing runnable; the message says what and why."""


def _scenarios_of(value: object, where: str) -> list[Scenario]:
    """The scenarios ``value`` stands for: itself, what it builds, or each item of a list or tuple."""
    if isinstance(value, Scenario):
        return [value]
    if isinstance(value, list | tuple):
        return [scenario for item in value for scenario in _scenarios_of(item, where)]
    if callable(value):
        return [_built(value, where)]
    raise ScenarioLookupError(
        f"{where} is a {type(value).__name__}, not a Scenario, a function building one, or a list of them"
    )


def _built(build: Callable[[], object], where: str) -> Scenario:
    try:
        scenario = build()
    except Exception as error:  # the user's builder failing is their error, named
        raise ScenarioLookupError(
            f"{where} failed to build its scenario: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(scenario, Scenario):
        raise ScenarioLookupError(f"{where} returned a {type(scenario).__name__}, not a Scenario")
    if scenario.promise:
        return scenario
    return attrs.evolve(scenario, promise=inspect.getdoc(build) or "")


def load_reference(reference: str) -> list[Scenario]:
    """The scenarios ``module:attribute`` names (``attribute`` may be dotted)."""
    try:
        target = resolve(reference)
    except ReferenceLookupError as error:
        raise ScenarioLookupError(str(error)) from None
    return _scenarios_of(target, repr(reference))


def installed() -> dict[str, Scenario]:
    """The scenarios installed packages register (:data:`GROUP`), by name, in entry-point order.

    Entry points are read in the order of their names, so the listing does not
    depend on the order packages were installed in.
    """
    found: dict[str, Scenario] = {}
    for entry in entry_points(GROUP):
        try:
            value, where = load_entry_point(entry, GROUP)
        except ReferenceLookupError as error:
            raise ScenarioLookupError(str(error)) from None
        for scenario in _scenarios_of(value, where):
            if scenario.name in SCENARIOS or scenario.name in found:
                raise ScenarioLookupError(
                    f"{where}: a scenario named {scenario.name!r} is already registered"
                )
            found[scenario.name] = scenario
    return found


def every_scenario() -> dict[str, Scenario]:
    """semsim's own scenarios, in their reading order, then the installed ones."""
    return {**SCENARIOS, **installed()}


def find(name: str) -> Scenario:
    """The scenario ``name`` names: a registered name, or a ``module:attribute`` reference to one."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    if ":" in name:
        found = load_reference(name)
        if len(found) != 1:
            names = ", ".join(s.name for s in found) or "none"
            raise ScenarioLookupError(f"{name!r} names {len(found)} scenarios ({names}); name one")
        return found[0]
    known = every_scenario()
    if name in known:
        return known[name]
    raise ScenarioLookupError(
        f"unknown scenario {name!r}; `semsim list` shows them, and module:function names your own"
        f"{did_you_mean(name, known)}"
    )
