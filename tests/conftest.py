"""Hypothesis profiles: ``semsim-ci`` (default, derandomized and bounded), ``semsim-dev``,
``semsim-nightly`` (:mod:`semsim.testing.profiles`).

Choose with ``pytest --hypothesis-profile=semsim-dev``; the two larger ones keep
Hypothesis's example database, so a failure found once replays first.

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
import tomllib
from pathlib import Path

import pytest
from hypothesis import settings

from semsim.testing import profiles  # noqa: F401 (registers the profiles)

# semsim's own profiles (semsim.testing.profiles, registered by the plugin too): the suite is
# a user of them. `pytest --hypothesis-profile=semsim-dev` (or semsim-nightly) overrides this.
settings.load_profile("semsim-ci")

ROOT = Path(__file__).resolve().parent.parent


#: Each directory of the repository and the import name it has (pyproject.toml's package-dir), in
#: the order the modules were always imported in (it decides the order constants are mined in).
_PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
    "package-dir"
]
IMPORT_NAMES = {directory: name for name, directory in _PACKAGE_DIR.items()} | {"tests": "tests"}


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
