"""``module:attribute`` references and entry points: how a person names their own scenario or
variant to semsim.

The form is the one entry points, uvicorn and Celery use: a module to
import, a colon, and an attribute of it (dotted for one inside a class or
namespace). :func:`resolve` imports and reads it; whatever goes wrong is a
:class:`ReferenceLookupError` saying what, never a traceback, since a typo
in a user's reference is a usage error.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable
from importlib import metadata


class ReferenceLookupError(LookupError):
    """A ``module:attribute`` reference that names nothing; the message says which part failed."""


def resolve(reference: str) -> object:
    """What ``module:attribute`` names."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ReferenceLookupError(f"{reference!r} is not a module:attribute reference")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise ReferenceLookupError(f"cannot import {module_name!r} (from {reference!r}): {error}") from None
    except Exception as error:  # the user's module failing as it loads is theirs to fix, named
        raise ReferenceLookupError(
            f"importing {module_name!r} (from {reference!r}) failed: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ReferenceLookupError(f"{reference!r}: {module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def find_named(name: str, group: str) -> tuple[object, str] | None:
    """What ``name`` names and how to name it in a message: a ``module:attribute`` reference,
    else an entry point of ``group``; None when it is neither (the caller says what is known)."""
    if ":" in name:
        return resolve(name), repr(name)
    entry = next((entry for entry in entry_points(group) if entry.name == name), None)
    return None if entry is None else load_entry_point(entry, group)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a mistyped one, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """The entry points of ``group``, by name (then value): an order that does not depend on the
    order packages were installed in."""
    return sorted(metadata.entry_points(group=group), key=lambda e: (e.name, e.value))


def load_entry_point(entry: metadata.EntryPoint, group: str) -> tuple[object, str]:
    """What ``entry`` names, and how to name the entry point in a message.

    A package that fails to load is a :class:`ReferenceLookupError` naming it, not a traceback.
    """
    where = f"entry point {entry.name!r} ({entry.value}) of group {group}"
    try:
        return entry.load(), where
    except Exception as error:  # a broken package is named, not a traceback
        raise ReferenceLookupError(f"cannot load {where}: {type(error).__name__}: {error}") from None


def importable_from_working_directory(reference: str) -> None:
    """Let a ``module:attribute`` reference name a module in the working directory.

    As ``python -m`` does, and uvicorn and Celery for their own references:
    the ``semsim`` script's ``sys.path`` starts at its own directory, so a
    user's ``mystories.py`` beside them would not be found. Names without a
    colon change nothing. A campaign's worker processes start with this
    process's ``sys.path``, so they find the module too.
    """
    if ":" in reference and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
