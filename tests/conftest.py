"""Hypothesis profiles: ``ci`` (default, derandomized and bounded), ``dev``, ``nightly``.

Choose with ``pytest --hypothesis-profile=dev``. The example database lives in
``.hypothesis-db/`` inside the project so a failure found once replays first.

Every project module is imported here, before any test runs. Hypothesis
draws about 5% of generated values from constants it mines out of every
*local* module in ``sys.modules``, so without this a derandomized run would
generate differently depending on which tests (and so which modules) were
loaded first: ``pytest tests/test_x.py`` and ``pytest`` would not agree.
Fuzz campaigns (``semsim.explore.fuzz.campaign``) do not need this: they empty that
pool for their duration, so they draw the same cases in any process; the
other Hypothesis tests (the holder's state machine, protocol fuzzing) do.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

DATABASE = DirectoryBasedExampleDatabase(str(Path(__file__).resolve().parent.parent / ".hypothesis-db"))

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    database=DATABASE,
    deadline=None,
    max_examples=500,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    database=DATABASE,
    deadline=None,
    max_examples=5_000,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent


#: Each directory of the repository and the import name it has (pyproject.toml's package-dir).
IMPORT_NAMES = {
    "semaphore_core": "semaphore_core",
    "sim": "semsim",
    "scenarios": "semsim.scenarios",
    "tests": "tests",
}


def _import_project_modules() -> None:
    for directory, name in IMPORT_NAMES.items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            parts = (name, *path.relative_to(ROOT / directory).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts[-1] == "conftest":
                continue
            try:
                importlib.import_module(".".join(parts))
            except ModuleNotFoundError as error:
                if error.name != ".".join(parts):
                    raise
                raise pytest.UsageError(
                    f"{path.relative_to(ROOT)} is not importable as {error.name}: a strict editable"
                    " install links the files it saw, so a new module needs `pip install -e '.[test]'"
                    " --config-settings editable_mode=strict` again (README, Development)"
                ) from None


_import_project_modules()
