"""Benchmark scripts (run as files: ``python benchmarks/bench_sim.py``); figures in docs/BENCHMARKS.md.

Importing this package makes ``semsim`` this checkout's, whatever the
environment has installed: a script run as a file from another worktree
puts that tree first on ``sys.path`` and imports ``benchmarks``, so it
measures its own tree's code and never one tree's ``semaphore_core`` with
another's ``semsim``. pyproject.toml's ``package-dir`` is mirrored here:
``sim/`` is ``semsim`` and ``scenarios/`` is ``semsim.scenarios``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _use_this_tree() -> None:
    loaded = sys.modules.get("semsim")
    if loaded is not None:
        if Path(loaded.__file__ or "").resolve() != ROOT / "sim" / "__init__.py":
            raise ImportError(f"semsim is already imported from {loaded.__file__}, not from {ROOT}")
        return
    for name, directory in (("semsim", ROOT / "sim"), ("semsim.scenarios", ROOT / "scenarios")):
        spec = importlib.util.spec_from_file_location(
            name, directory / "__init__.py", submodule_search_locations=[str(directory)]
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)  # as the import system binds a submodule
        spec.loader.exec_module(module)


_use_this_tree()
