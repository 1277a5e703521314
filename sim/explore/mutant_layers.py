"""The layers that score a mutant, and what each needs.

``semsim mutants`` scores each mutant against four layers, the ones a
developer (or a user checking their own change) can run:

- ``unit``: the pytest suite minus the other layers' files; a subprocess
  with the plugin (``semsim.explore.mutant_plugin``), ``-x``, the ``semsim-ci``
  profile. Left out as well: the mutant catalogs' own tests (the core's, the
  checkers', the designs': they pin the *faithful* behaviour outside a patch
  block, so they would "kill" every mutant), and the tests whose work runs in a child process that the plugin
  does not reach (the determinism workers, the notebooks): under a mutant
  they only cost time.
- ``state-machine``: ``tests/test_stateful_holder.py`` the same way (for a
  planted bug of the gate or the leased worker, that design's state
  machine, :data:`DESIGN_MACHINES`).
- ``scenarios``: every named scenario of the mutant's design, run in this
  process with the mutant applied; killed when a scenario's documented outcome or an
  invariant fails (the scenarios' own expectations, which the fuzz
  campaign's explicit examples do not judge).
- ``fuzz``: the whole-system fuzz campaigns (``semsim.explore.mutants.try_mutant``).

Each subprocess is bounded by a CPU-time limit (``RLIMIT_CPU``): a mutant
that makes a layer loop is reported as ``timed out``, not waited on. The
verdict of a pytest layer is the exit status (0 survived, 1 or 2 killed)
and the first failing test's node id. The pytest layers need a clone (its
``tests/``) and the ``test`` extra (pytest and pytest-trio);
:func:`pytest_layers_missing` says what is missing before any runs, since a
pytest that cannot start would look like a kill. This module imports no
pytest: ``semsim mutants`` runs without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import attrs

from semsim.harness.catalog import mutant

ROOT: Final = Path(__file__).resolve().parents[2]
#: The layers, in the order they run and appear in the table.
LAYERS: Final = ("unit", "state-machine", "scenarios", "fuzz")
#: Files that are a layer of their own, or that cannot see a mutant applied in this process.
_NOT_UNIT: Final = (
    "tests/test_fuzz.py",
    "tests/test_stateful_holder.py",
    "tests/test_scenarios.py",
    "tests/test_mutant_catalog.py",
    "tests/test_planted_checkers.py",
    "tests/test_design_mutants.py",
    "tests/test_mutants.py",
    "tests/test_sim_determinism.py",
    "tests/test_notebooks.py",
)
#: The pytest selection of each pytest layer.
PYTEST_LAYERS: Final[dict[str, tuple[str, ...]]] = {
    "unit": ("tests", *(f"--ignore={path}" for path in _NOT_UNIT)),
    "state-machine": ("tests/test_stateful_holder.py",),
}
#: The state machine of each other design: the state-machine layer for its planted bugs.
DESIGN_MACHINES: Final[dict[str, str]] = {
    "gate": "tests/test_gate.py::test_the_ledger_keeps_its_promises_under_random_sequences",
    "leased-worker": "tests/test_leased_store.py::test_the_store_keeps_its_promises_under_random_sequences",
}
#: A pytest layer's default CPU budget per mutant, in seconds (a clean unit layer takes about 4 min).
DEFAULT_CPU_BUDGET_S: Final = 20 * 60
_FAILED: Final = re.compile(r"^(?:FAILED|ERROR) (\S+)")


@attrs.frozen
class LayerVerdict:
    """One layer's verdict on one mutant: ``killed`` (and what caught it), ``survived``, ``timed out``."""

    status: str
    caught_by: str | None = None

    def __attrs_post_init__(self) -> None:
        assert self.status in ("killed", "survived", "timed out", "not run"), self.status
        assert (self.status == "killed") == (self.caught_by is not None), self

    @property
    def killed(self) -> bool:
        return self.status == "killed"

    def __str__(self) -> str:
        return f"killed by {self.caught_by}" if self.killed else self.status


SURVIVED: Final = LayerVerdict("survived")
NOT_RUN: Final = LayerVerdict("not run")


def pytest_layers_missing() -> str | None:
    """What the pytest layers lack here (None: nothing): the repository's tests, or pytest itself."""
    if not (ROOT / "tests" / "conftest.py").is_file():
        return (
            f"the unit and state-machine layers run the repository's tests, and {ROOT} has none (use a clone)"
        )
    # xdist too: the repository's pytest configuration passes --dist (pyproject.toml, addopts).
    missing = [name for name in ("pytest", "pytest_trio", "xdist") if importlib.util.find_spec(name) is None]
    if missing:
        named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        return f"the unit and state-machine layers need {named}: pip install -e '.[test]' in the clone"
    return None


def pytest_selection(layer: str, design: str = "semaphore") -> tuple[str, ...]:
    """What pytest runs for ``layer`` when the mutant is ``design``'s."""
    if layer == "state-machine" and design != "semaphore":
        return (DESIGN_MACHINES[design],)
    return PYTEST_LAYERS[layer]


def layer_command(name: str | None, layer: str, design: str = "semaphore") -> list[str]:
    """The command that runs ``layer`` of the pytest suite with mutant ``name`` applied (None: none),
    for a mutant of ``design``."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "semsim.explore.mutant_plugin",
        *([] if name is None else [f"--mutant={name}"]),
        "-x",
        "-q",
        "-rfE",
        "-p",
        "no:cacheprovider",
        "--hypothesis-profile=semsim-ci",
        *pytest_selection(layer, design),
    ]


def _limit_cpu(seconds: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))


def run_pytest_layer(
    name: str | None, layer: str, cpu_budget_s: int = DEFAULT_CPU_BUDGET_S, design: str = "semaphore"
) -> LayerVerdict:
    """Run one pytest layer in a subprocess with the mutant applied (None: the clean code, as a
    mutant of ``design`` meets the layer); its verdict.

    Raises RuntimeError when pytest itself could not run (a usage error, no
    tests collected): that is semsim's fault, not the mutant's.
    """
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    completed = subprocess.run(
        layer_command(name, layer, design),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: _limit_cpu(cpu_budget_s),
    )
    if completed.returncode < 0:
        return LayerVerdict("timed out")
    if completed.returncode == 0:
        return SURVIVED
    if completed.returncode in (1, 2):
        failed = next(
            (m.group(1) for line in completed.stdout.splitlines() if (m := _FAILED.match(line))),
            f"pytest exit {completed.returncode}",
        )
        return LayerVerdict("killed", failed.removeprefix("tests/"))
    tail = "\n".join((completed.stdout + completed.stderr).splitlines()[-10:])
    raise RuntimeError(f"pytest could not run the {layer} layer (exit {completed.returncode}):\n{tail}")


def run_scenarios_layer(name: str) -> LayerVerdict:
    """Every named scenario of the mutant's design with the mutant applied: the first whose outcome
    or invariants fail."""
    from semsim.scenarios import SCENARIOS, run_scenario

    candidate = mutant(name)
    planted = candidate.variant  # in the runs; each scenario's check reads its trace unpatched
    for scenario_name, scenario in SCENARIOS.items():
        if scenario.config.design.name != candidate.design:
            continue  # another design's stories run none of the code it changes
        try:
            result = run_scenario(scenario, variant=planted)
        except Exception as error:  # a crash under a mutant is a kill, named by the scenario
            return LayerVerdict("killed", f"{scenario_name} (crash: {type(error).__name__})")
        if result.failures or result.run.result.outcome != "completed":
            return LayerVerdict("killed", scenario_name)
    return SURVIVED
