"""sim's layout holds: import-linter's contracts in pyproject.toml are kept.

The contracts are the README's "Layout" section as rules: sim's packages
are layers (each imports only the ones below it, in function bodies and
under ``TYPE_CHECKING`` too), no package's modules import each other in a
cycle, ``semaphore_core`` imports neither ``sim`` nor ``scenarios``, and a
run's own packages import no test or plotting library. A new package under
``sim/`` must take a place in the layers, or these tests fail.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_the_import_contracts_are_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert status == 0, report
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in report


def test_every_package_of_sim_has_a_layer() -> None:
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    layered = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {f"sim.{path.parent.name}" for path in (ROOT / "sim").glob("*/__init__.py")}
    assert packages == layered
    assert not [path.name for path in (ROOT / "sim").glob("*.py") if path.name != "__init__.py"], (
        "a module directly under sim/ has no layer: put it in the package it belongs to"
    )
