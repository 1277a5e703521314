"""An install of semsim adds only import names a user's code cannot have.

The repository keeps its directories (``sim/``, ``scenarios/``), and
pyproject.toml's ``package-dir`` maps them to ``semsim`` and
``semsim.scenarios``. These tests hold the mapping to the directories, and
install a built wheel into a fresh environment beside a user project with
packages of its own named ``sim`` and ``scenarios``, which must keep working.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

import semsim

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools: dict[str, Any] = config["tool"]["setuptools"]
    return setuptools


def test_every_package_directory_is_listed_under_its_import_name() -> None:
    setuptools = _setuptools()
    package_dir: dict[str, str] = setuptools["package-dir"]
    found = set()
    for name, directory in package_dir.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / directory).parts
            found.add(".".join((name, *relative)))
    assert found == set(setuptools["packages"])
    assert not {name.split(".")[0] for name in setuptools["packages"]} - {"semsim", "semaphore_core"}


def test_the_version_is_written_once() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in config["project"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "semsim.__version__"}
    assert semsim.__version__.count(".") == 2


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """semsim built as a wheel, as ``pip install semsim`` would install it."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("semsim-*.whl")
    return built


def test_the_wheel_holds_only_semsim_and_semaphore_core(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"semsim", "semaphore_core", f"semsim-{semsim.__version__}.dist-info"}
    assert {"semsim/py.typed", "semaphore_core/py.typed", "semsim/scenarios/base.py"} <= set(names)
    assert "semsim/report/example_traffic.jsonl" in names  # `semsim replay --example`
    assert f"semsim-{semsim.__version__}.dist-info/entry_points.txt" in names


@pytest.fixture(scope="module")
def fresh_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh environment with the wheel, and this environment's libraries (not its semsim):
    ``(its python, its site-packages)``."""
    env = tmp_path_factory.mktemp("env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # This environment's site-packages as a plain path: its libraries import, and its own .pth
    # files (the editable semsim among them) are not run.
    (site / "libraries.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    _pip_install(python, str(wheel))
    return python, site


def _pip_install(python: Path, *what: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", *what],
        check=True,
        capture_output=True,
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "HYPOTHESIS"))}


def test_a_project_with_its_own_sim_and_scenarios_uses_semsim_beside_them(
    fresh_env: tuple[Path, Path], tmp_path: Path
) -> None:
    python, site = fresh_env
    project = tmp_path / "project"
    (project / "sim").mkdir(parents=True)
    (project / "scenarios").mkdir()
    (project / "tests").mkdir()
    (project / "sim" / "__init__.py").write_text('OWNER = "the user"\n', encoding="utf-8")
    (project / "scenarios" / "__init__.py").write_text("class Scenario:\n    pass\n", encoding="utf-8")
    (project / "tests" / "test_both.py").write_text(
        textwrap.dedent(
            """
            import sim
            from scenarios import Scenario

            import semsim
            from semsim.scenarios import SCENARIOS, run_scenario

            SITE = {site!r}


            def test_both_are_importable():
                assert sim.OWNER == "the user"
                assert Scenario.__module__ == "scenarios"
                assert semsim.__file__.startswith(SITE)


            def test_a_scenario_runs():
                result = run_scenario(SCENARIOS["lease-lost-in-reply"])
                assert result.passed, result


            def test_the_plugin_is_loaded_from_the_wheel(semsim_runner):
                assert semsim_runner.scenario("late-claim-not-found").passed
            """
        ).format(site=str(site)),
        encoding="utf-8",
    )
    clean = _clean_env()
    tests = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=clean,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "3 passed" in tests.stdout
    listed = subprocess.run(
        [str(python), "-m", "semsim", "list"], cwd=project, env=clean, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert "lease-lost-in-reply" in listed.stdout
    example = subprocess.run(
        [str(python), "-m", "semsim", "replay", "--example"],
        cwd=project,
        env=clean,
        capture_output=True,
        text=True,
    )
    assert example.returncode == 0, example.stderr
    version = subprocess.run(
        [str(python), "-m", "semsim", "--version"], cwd=project, env=clean, capture_output=True, text=True
    )
    assert version.stdout.strip() == f"semsim {semsim.__version__}", version.stderr


def test_the_example_project_installs_and_runs_with_the_plugin_and_the_command_line(
    fresh_env: tuple[Path, Path], tmp_path: Path
) -> None:
    """examples/myservice, as its README tells a user: its tests, then the semsim commands."""
    python, _ = fresh_env
    project = tmp_path / "myservice"
    ignored = shutil.ignore_patterns("*.egg-info", "build", "__pycache__")
    shutil.copytree(ROOT / "examples" / "myservice", project, ignore=ignored)
    _pip_install(python, str(project))
    clean = _clean_env()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", *argv], cwd=project, env=clean, capture_output=True, text=True, check=False
        )

    tests = run("pytest", "-q", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout
    listed = run("semsim", "list")
    assert "double-eviction" in listed.stdout, listed.stderr
    held = run("semsim", "run", "double-eviction", "--variant", "quick-claims", "--invariant", "claim_window")
    assert held.returncode == 0, held.stdout + held.stderr
    assert "judged by: safety, liveness, claim_window" in held.stdout
    broken = run("semsim", "run", "double-eviction", "--invariant", "claim_window")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "invariant claim_window violated" in broken.stdout
    fuzzed = run(
        "semsim", "fuzz", "--variant", "quick-claims", "--invariant", "claim_window",
        "--runs", "4", "--workers", "2", "--no-db", "--quiet",
    )  # fmt: skip
    assert fuzzed.returncode == 0, fuzzed.stdout + fuzzed.stderr
    assert "with invariants claim_window" in fuzzed.stdout
