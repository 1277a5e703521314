"""What a command names by reference, loaded or refused: variants and invariants.

``--variant`` and ``--invariant`` (and a case file's ``variant`` and
``invariants``) name code outside semsim. Whatever cannot be loaded is the
user's error, exit status 2 with one line saying which and why, found
before any run, never a traceback and never a run without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from semsim.check.checker import Checker
from semsim.harness.invariants import InvariantLookupError, find_invariant, find_invariants
from semsim.harness.variants import VariantLookupError, find_variant
from semsim.inputs.commands import UsageError
from semsim.inputs.references import importable_from_working_directory
from semsim.world.variant import Variant


def load_variant(name: str, where: str) -> Variant:
    """The variant ``name`` names, or a usage error saying ``where`` and why not."""
    importable_from_working_directory(name)
    try:
        return find_variant(name)
    except VariantLookupError as error:
        raise UsageError(f"{where}: {error}") from None


def load_invariants(references: Sequence[str], where: str) -> tuple[type[Checker], ...]:
    """The checkers ``references`` name, in order, or a usage error saying ``where`` and why not."""
    for reference in references:
        importable_from_working_directory(reference)
        try:
            find_invariant(reference)
        except InvariantLookupError as error:
            raise UsageError(f"{where}: invariant {reference!r} cannot be loaded: {error}") from None
    try:
        return find_invariants(references)
    except InvariantLookupError as error:  # two of one name
        raise UsageError(f"{where}: {error}") from None
