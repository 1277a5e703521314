"""A pytest plugin that applies one mutant for a whole session.

``pytest -p semsim.explore.mutant_plugin --mutant NAME ...`` runs the selected tests
against the mutated core: the mutant's ``patch()`` is entered when pytest is
configured (after ``tests/conftest.py`` has imported every project module,
so each rebinding lands where the core looks the name up) and left when
pytest unconfigures. An unknown name is a usage error before any test runs.
The layers that run it are ``semsim.explore.mutant_layers``.
"""

from __future__ import annotations

import contextlib
from typing import Final

import pytest

from semsim.harness.catalog import mutant

_STACK_KEY: Final = pytest.StashKey[contextlib.ExitStack]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mutant", metavar="NAME", default=None, help="apply this mutant for the whole session")


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--mutant")
    if name is None:
        return
    try:
        chosen = mutant(name)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    stack = contextlib.ExitStack()
    stack.enter_context(chosen.patch())
    config.stash[_STACK_KEY] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_STACK_KEY, None)
    if stack is not None:
        stack.close()


def pytest_report_header(config: pytest.Config) -> str | None:
    name = config.getoption("--mutant")
    return None if name is None else f"mutant: {name} (applied for the whole session)"
