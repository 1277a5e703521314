"""semsim's own invariants are checkers on the interface users' invariants use, one module each.

The table of semsim.check.builtin names every invariant; each one judged
in a run (all but ``deterministic``, which compares runs, and
``exact_accounting``, the model run in lockstep beside each holder) is a
``Checker`` subclass of that name in a module of its own under
``semsim.check``, and the Monitor builds it. A checker that is not built
judges nothing, and a name nobody carries is an invariant nobody checks.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict

import semsim.check
from semsim.check.builtin import BUILTIN
from semsim.check.checker import Checker
from semsim.check.invariants import Monitor
from semsim.harness.run import run_world
from semsim.scenarios import SCENARIOS

#: Judged by something other than a checker of the run: see the module docstring.
#: Judged by the kernel (deterministic) and by the models in lockstep, not by a Checker.
NOT_A_CHECKER = {"deterministic", "exact_accounting", "exact_queue"}


def _checkers() -> dict[str, list[type[Checker]]]:
    found: dict[str, list[type[Checker]]] = defaultdict(list)
    for module in pkgutil.iter_modules(semsim.check.__path__):
        if module.name == "cross_checks":
            continue  # the debug mode's second judgements, under the names they cross-check
        loaded = importlib.import_module(f"semsim.check.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            if issubclass(cls, Checker) and cls is not Checker and cls.__module__ == loaded.__name__:
                found[cls.name].append(cls)
    return found


def test_every_invariant_judged_in_a_run_is_a_checker_in_a_module_of_its_own() -> None:
    checkers = _checkers()
    modules: dict[str, set[str]] = defaultdict(set)
    for invariant in BUILTIN:
        if invariant.name in NOT_A_CHECKER:
            assert invariant.name not in checkers, invariant.name
            continue
        [cls] = checkers[invariant.name]
        assert cls.__module__ != "semsim.check.invariants", f"{invariant.name} is still inside the Monitor"
        modules[cls.__module__].add(invariant.name)
        expected = "liveness" if invariant.kind == "liveness" else "safety"
        assert cls.kind == expected, (invariant.name, cls.kind)
    assert all(len(names) == 1 for names in modules.values()), dict(modules)


def test_the_monitor_builds_each_of_them_for_a_run() -> None:
    story = SCENARIOS["eviction-mid-attempt"]  # the account-concurrency world: every checker is built
    run = run_world(story.config, story.faults, story.seed, tolerated=story.tolerated)
    built = {type(value).name for value in _own_checkers(run.monitor)}
    judged = {invariant.name for invariant in BUILTIN} - NOT_A_CHECKER
    assert judged == built, (judged - built, built - judged)


def _own_checkers(monitor: Monitor) -> list[Checker]:
    """Every Checker the monitor holds, directly or in a tuple of them (semsim's own, not the user's)."""
    found: list[Checker] = []
    for name, value in vars(monitor).items():
        if name == "checkers":
            continue  # the user's
        values = value if isinstance(value, tuple) else (value,)
        found.extend(v for v in values if isinstance(v, Checker))
    return found
