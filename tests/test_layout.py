"""semsim's layout holds: import-linter's contracts in pyproject.toml are kept.

The contracts are the README's "Layout" section as rules: semsim's packages
are layers (each imports only the ones below it, in function bodies and
under ``TYPE_CHECKING`` too), no package's modules import each other in a
cycle, ``semaphore_core`` imports nothing of ``semsim``, and a
run's own packages import no test or plotting library. A new package under
``sim/`` must take a place in the layers, or these tests fail.

Also: no test, notebook or benchmark leaves a temporary directory behind.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from importlinter.cli import lint_imports

from semsim.runtime.kernel import Sim

ROOT = Path(__file__).resolve().parent.parent


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _loggers() -> list[logging.Logger]:
    return [
        logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]


def test_the_import_contracts_are_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    # import-linter configures logging with dictConfig, whose default disables every logger that
    # exists (semaphore_core's among them) for the rest of this process: a later test in it read no
    # record of the core's (tests/test_sim_faults.py). Each logger keeps its state.
    disabled = {logger: logger.disabled for logger in _loggers()}
    try:
        status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        for logger, was in disabled.items():
            logger.disabled = was
    report = capsys.readouterr().out
    assert status == 0, report
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in report


def test_every_package_of_sim_has_a_layer() -> None:
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    layered = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {f"semsim.{path.parent.name}" for path in (ROOT / "sim").glob("*/__init__.py")}
    packages.add("semsim.scenarios")  # the directory scenarios/ (pyproject.toml's package-dir)
    assert packages == layered
    assert not [
        path.name for path in (ROOT / "sim").glob("*.py") if path.name not in ("__init__.py", "__main__.py")
    ], "a module directly under sim/ has no layer: put it in the package it belongs to"


DOCUMENTS = [ROOT / "README.md", ROOT / "notebooks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_PATH = re.compile(r"(?<![\w/.])sim/[\w/]*\w(?:\.py|/)")
_DOTTED = re.compile(r"(?<![\w./])(semsim|sim)((?:\.\w+)+)")


#: Names of entry-point groups (docs name them as packages write them), not modules.
ENTRY_POINT_GROUPS = frozenset({"semsim.scenarios", "semsim.invariants", "semsim.variants"})


def _resolves(dotted: str) -> bool:
    """Whether ``semsim.<module>[.<attribute>...]`` names something that exists."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_sim_path_and_module_a_document_names_exists(document: Path) -> None:
    stale = []
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), start=1):
        stale += [f"{number}: {path}" for path in _PATH.findall(line) if not (ROOT / path).exists()]
        for match in _DOTTED.finditer(line):
            name, attribute = match.group(1), match.group(2).split(".")[1]
            if name == "semsim":
                if match.group(0) not in ENTRY_POINT_GROUPS and not _resolves(match.group(0)):
                    stale.append(f"{number}: {match.group(0)}")
            elif not hasattr(Sim, attribute):  # ``sim.event(...)``: a method of the run's Sim
                stale.append(f"{number}: {match.group(0)}")
    assert not stale, f"{document.name} names what does not exist: {stale}"


#: What leaves a directory behind in /tmp: ``mkdtemp`` is never removed by itself, and a
#: ``TemporaryDirectory`` whose object is dropped at once deletes its directory then and there (so
#: a ``mkdir`` after it makes one that nothing removes). Tests take pytest's ``tmp_path``; a
#: notebook keeps its ``TemporaryDirectory`` object for as long as it needs the directory.
_LEAKS_A_TEMPORARY_DIRECTORY = re.compile(r"\bmkdtemp\(|TemporaryDirectory\([^()]*\)\.name")


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(ROOT / "tests").rglob("*.py"),
            *(ROOT / "notebooks").glob("*.ipynb"),
            *(ROOT / "benchmarks").glob("*.py"),
        ]
    ),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_nothing_leaves_a_temporary_directory_behind(path: Path) -> None:
    found = _LEAKS_A_TEMPORARY_DIRECTORY.findall(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: {found}: use tmp_path, or keep the TemporaryDirectory"
