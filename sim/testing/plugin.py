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
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from semsim.testing import profiles  # noqa: F401 (registers the Hypothesis profiles)

if TYPE_CHECKING:
    from semsim.testing.runner import SemsimRunner

#: ``--semsim-out``, or its default, as the session configured it (``check_case`` reads it).
OUT_DIR: Path | None = None

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


def pytest_configure(config: pytest.Config) -> None:
    global OUT_DIR
    out: Path | None = config.getoption("semsim_out", None)
    OUT_DIR = out if out is not None else config.rootpath / "semsim-failures"


def pytest_runtest_setup(item: pytest.Item) -> None:
    cases = sys.modules.get("semsim.testing.strategy")  # only once a test used it: nothing to import
    if cases is not None:
        cases.forget()  # each test's shrink budget starts afresh


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
        hypothesis_seed=_hypothesis_seed(config),
    )


def _hypothesis_seed(config: pytest.Config) -> int | None:
    """``--hypothesis-seed`` (Hypothesis's own plugin adds it) as a campaign seed: an integer is
    taken as it is, any other text as a stable digest of it."""
    text = config.getoption("hypothesis_seed", None)
    if text is None:
        return None
    if str(text).isdigit() and int(text) <= MAX_SEED:
        return int(text)
    return int.from_bytes(hashlib.sha256(str(text).encode()).digest()[:8], "big") >> 1
