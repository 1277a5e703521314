"""Build the API reference of ``semsim`` and ``semaphore_core`` from their docstrings, with pdoc.

    python docs/build_api.py OUT_DIR

writes the HTML reference into ``OUT_DIR`` (``OUT_DIR/index.html``) and
exits 1, listing them, when a reference in a docstring is broken: every
``:class:``/``:func:``/``:mod:``/... role must name something that exists
(absolute, or from the module or class it is written in), and every
warning pdoc gives (an ``__all__`` name that does not resolve, an
annotation it cannot read) counts as one. tests/test_api_reference.py runs
it, so CI builds the reference on every change.

Why pdoc rather than Sphinx: it documents the code as it is imported, with
no configuration tree to keep beside it. Our docstrings use Sphinx's
roles; pdoc turns ``:class:`x.Y``` into a code span it links when it
resolves. It keeps a leading ``~`` (Sphinx's "show the last part only"),
which would stop the link, so this script drops it first.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pdoc
import pdoc.doc
import pdoc.docstrings

MODULES = ("semsim", "semaphore_core")
#: A Sphinx role with its target: ``:class:`~semsim.x.Y```.
ROLE = re.compile(r"(?::py)?:(mod|func|data|const|class|meth|attr|exc|obj):`([^`]+)`")
_TILDE = re.compile(r"((?::py)?:(?:mod|func|data|const|class|meth|attr|exc|obj):`)~")

_rst = pdoc.docstrings.rst


def _rst_without_tildes(contents: str, source_file: Path | None) -> str:
    return _rst(_TILDE.sub(r"\1", contents), source_file)


def build(out_dir: Path) -> list[str]:
    """Render the reference into ``out_dir``; what is broken, one line each (none: it built clean)."""
    pdoc.docstrings.rst = _rst_without_tildes  # pdoc calls it by this module-level name
    try:
        return _build(out_dir)
    finally:
        pdoc.docstrings.rst = _rst


def _build(out_dir: Path) -> list[str]:
    pdoc.render.configure(docformat="restructuredtext", show_source=False, search=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in _module_names():
            # Names a package exports lazily (semsim.testing) are found once touched.
            module = importlib.import_module(name)
            for exported in getattr(module, "__all__", ()):
                getattr(module, exported)
        # Every module by name: a package's __all__ would otherwise hide the submodules it does not
        # list (semsim.testing's runner and profiles, semsim.scenarios's registry).
        pdoc.pdoc(*_specs(_module_names()), output_directory=out_dir)
    problems = [f"pdoc: {warning.message}" for warning in caught]
    every = [pdoc.doc.Module(importlib.import_module(name)) for name in _module_names()]
    problems += [problem for module in every for problem in _broken_roles(module)]
    return sorted(set(problems))


def _module_names() -> list[str]:
    """Every module of the packages documented, each once."""
    names = []
    for root in MODULES:
        package = importlib.import_module(root)
        names.append(root)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return names


def _specs(names: list[str]) -> list[str]:
    """What to hand pdoc: the roots, and each module a package's ``__all__`` leaves out (pdoc walks
    the submodules of what it is given, except those an ``__all__`` does not list)."""
    hidden: list[str] = []
    for name in names:
        parent, _, child = name.rpartition(".")
        exported = getattr(sys.modules.get(parent), "__all__", None) if parent else None
        if (
            exported is not None
            and child not in exported
            and not any(name.startswith(f"{spec}.") for spec in hidden)
        ):
            hidden.append(name)
    return [*MODULES, *hidden]


def _broken_roles(module: pdoc.doc.Module) -> Iterator[str]:
    for doc in (module, *module.flattened_own_members):
        for role, target in ROLE.findall(doc.docstring or ""):
            name = target.split("<")[-1].rstrip(">").lstrip("~!").removesuffix("()")
            if not _resolves(name, doc):
                yield f"{doc.modulename}.{doc.qualname or ''}: :{role}:`{target}` names nothing".replace(
                    ".:", ":"
                )


def _resolves(name: str, doc: pdoc.doc.Doc[Any]) -> bool:
    """Whether ``name`` is an object: absolute, or from the doc's module or enclosing class."""
    if _absolute(name):
        return True
    module = sys.modules[doc.modulename]
    scopes: list[Any] = [module]
    owner = doc.qualname.rpartition(".")[0] if doc.qualname else ""
    if owner:
        scopes.insert(0, _attribute_chain(module, owner.split(".")))
    if isinstance(doc, pdoc.doc.Class):
        scopes.insert(0, doc.obj)
    return any(scope is not None and _attribute_chain(scope, name.split(".")) is not None for scope in scopes)


def _absolute(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _attribute_chain(module, parts[cut:]) is not None
    return False


def _attribute_chain(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if part in getattr(obj, "__annotations__", {}) and not hasattr(obj, part):
            return part  # an attrs field or annotated attribute: documented, if not a class attribute
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the API reference; exit 1 on a broken reference.")
    parser.add_argument("out_dir", type=Path, help="where the HTML goes (index.html and one page per module)")
    args = parser.parse_args(argv)
    problems = build(args.out_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} broken references; the reference is in {args.out_dir}", file=sys.stderr)
        return 1
    print(f"API reference written to {args.out_dir / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
