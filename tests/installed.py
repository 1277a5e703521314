"""A package "installed" for one test: a ``.dist-info`` with entry points, on ``sys.path``.

``importlib.metadata`` finds a distribution by its ``.dist-info`` directory
on ``sys.path``, so a test registers scenarios, variants or invariants
under semsim's entry-point groups without building or installing a wheel.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def install_entry_points(
    where: Path, monkeypatch: pytest.MonkeyPatch, name: str, group: str, entries: dict[str, str]
) -> None:
    """A distribution ``name`` in ``where`` whose entry points of ``group`` are ``entries``."""
    info = where / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    lines = "".join(f"{entry} = {value}\n" for entry, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}", encoding="utf-8")
    monkeypatch.syspath_prepend(str(where))
