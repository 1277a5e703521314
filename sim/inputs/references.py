"""``module:attribute`` references: how a person names their own scenario or variant to semsim.

The form is the one entry points, uvicorn and Celery use: a module to
import, a colon, and an attribute of it (dotted for one inside a class or
namespace). :func:`resolve` imports and reads it; whatever goes wrong is a
:class:`ReferenceLookupError` saying what, never a traceback, since a typo
in a user's reference is a usage error.
"""

from __future__ import annotations

import importlib
import os
import sys


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
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ReferenceLookupError(f"{reference!r}: {module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


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
