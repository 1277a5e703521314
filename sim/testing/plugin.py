"""semsim's pytest plugin (the ``pytest11`` entry point ``semsim``): options, a fixture, profiles.

Options (``pytest --help`` lists them under "semsim"):

- ``--semsim-seed N``: the seed of runs and campaigns that name none (default 0);
- ``--semsim-runs N``: the runs of a campaign that names none (default 100);
- ``--semsim-out DIR``: where failing cases are saved (default
  ``semsim-failures/`` in the rootdir).

The fixture ``semsim_runner`` is a :class:`~semsim.testing.SemsimRunner`
for the test. Importing this module registers the Hypothesis profiles
``semsim-ci``, ``semsim-dev`` and ``semsim-nightly`` and nothing heavier:
the simulator is imported when a test first asks for the fixture.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from semsim.testing import profiles  # noqa: F401 (registers the Hypothesis profiles)

if TYPE_CHECKING:
    from semsim.testing.runner import SemsimRunner

#: The most runs ``--semsim-runs`` takes (``semsim fuzz --runs``'s bound).
MAX_RUNS = 1_000_000
MAX_SEED = 2**63 - 1


def _seed(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is a decimal integer from 0 to 2^63 - 1, not {text!r}")
    return int(text)


def _runs(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"runs are a decimal integer from 1 to {MAX_RUNS:,}, not {text!r}")
    return int(text)


def _directory(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("an empty directory name would mean the working directory; name one")
    return Path(text)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("semsim", "semsim: deterministic simulation of concurrency-limit protocols")
    group.addoption(
        "--semsim-seed", type=_seed, metavar="N", help="seed of runs and campaigns that name none (default 0)"
    )
    group.addoption(
        "--semsim-runs", type=_runs, metavar="N", help="runs of a campaign that names none (default 100)"
    )
    group.addoption(
        "--semsim-out",
        type=_directory,
        metavar="DIR",
        help="where failing cases are saved (default: semsim-failures/ in the rootdir)",
    )


@pytest.fixture
def semsim_runner(request: pytest.FixtureRequest) -> SemsimRunner:
    """Runs worlds, scenarios and campaigns; a failure names its invariant, case file and replay."""
    from semsim.testing.runner import DEFAULT_RUNS, SemsimRunner

    config = request.config
    out: Path | None = config.getoption("semsim_out")
    runs: int | None = config.getoption("semsim_runs")
    return SemsimRunner(
        out_dir=out if out is not None else config.rootpath / "semsim-failures",
        test_name=request.node.name,
        seed=config.getoption("semsim_seed"),
        runs=DEFAULT_RUNS if runs is None else runs,
    )
