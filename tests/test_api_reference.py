"""The API reference builds from the docstrings, and a broken reference in one fails the build."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pdoc.doc
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_api", ROOT / "docs" / "build_api.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_builds_with_every_reference_resolved(tmp_path: Path) -> None:
    build_api = _builder()
    assert build_api.build(tmp_path) == []
    assert (tmp_path / "index.html").is_file()
    checker = (tmp_path / "semsim" / "check" / "checker.html").read_text(encoding="utf-8")
    assert "Violated" in checker
    # A role's target is a link, to a submodule its package's __all__ does not list too.
    testing = (tmp_path / "semsim" / "testing.html").read_text(encoding="utf-8")
    assert '<a href="testing/profiles.html">semsim.testing.profiles</a>' in testing
    # A leading ~ (Sphinx's "last part only") is dropped, so the reference still links: the
    # events module's docstring opens with :class:`~semsim.check.checker.Checker`.
    events = (tmp_path / "semsim" / "check" / "events.html").read_text(encoding="utf-8")
    assert "~semsim" not in events
    assert '<a href="checker.html#Checker">semsim.check.checker.Checker</a>' in events


def test_a_role_that_names_nothing_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "brokenrefs.py").write_text(
        textwrap.dedent(
            '''
            """See :class:`Here`, :func:`semsim.check.checker.hears` and :class:`Gone`."""

            class Here:
                """:meth:`run` is mine; :meth:`fly` is not; :mod:`~semsim.nothing` is nowhere."""

                def run(self) -> None:
                    """Runs."""
            '''
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = pdoc.doc.Module(importlib.import_module("brokenrefs"))
        broken = sorted(_builder()._broken_roles(module))
    finally:
        sys.modules.pop("brokenrefs", None)
    assert broken == [
        "brokenrefs.Here: :meth:`fly` names nothing",
        "brokenrefs.Here: :mod:`~semsim.nothing` names nothing",
        "brokenrefs: :class:`Gone` names nothing",
    ]


def test_the_command_exits_1_listing_what_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build_api = _builder()
    monkeypatch.setattr(build_api, "build", lambda out: ["semsim.x: :class:`Y` names nothing"])
    assert build_api.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "semsim.x: :class:`Y` names nothing" in err
    assert "1 broken references" in err
