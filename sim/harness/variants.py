"""Every holder variant semsim can run by name: the reference, installed packages', ``module:attribute``.

A team registers its variants under the entry-point group ``semsim.variants``::

    [project.entry-points."semsim.variants"]
    capped = "myservice.variants:CAPPED"

An entry point, like a ``module:attribute`` reference on the command line
(``semsim fuzz --variant myservice.variants:CAPPED``), names a
:class:`~semsim.world.variant.Variant` or a function returning one. The name
a variant was found by is what case files record, so ``semsim fuzz
--replay`` finds it again, in this process or in a campaign's workers.
What cannot be loaded is a :class:`VariantLookupError` saying which and why.

semsim's own come first (:func:`builtin`): ``reference``; ``every-fix`` and
``fix/NAME``, the reference with its opt-in fixes (docs/FINDINGS.md);
``mutant/NAME``, each planted bug of :mod:`semsim.harness.catalog` (the world's catalog and
the checkers' own).
"""

from __future__ import annotations

import functools
from typing import Final

from semaphore_core.fixes import ALL_FIXES, KNOWN_FIXES
from semsim.harness.catalog import MUTANTS
from semsim.inputs.references import ReferenceLookupError, did_you_mean, entry_points, find_named
from semsim.world.variant import REFERENCE, Variant

#: The entry-point group installed packages register their variants under.
GROUP: Final = "semsim.variants"


#: The reference with every opt-in fix: what docs/FINDINGS.md's fixed runs are.
EVERY_FIX: Final = Variant(
    "every-fix", fixes=ALL_FIXES, description="the reference with every opt-in fix (docs/FINDINGS.md)"
)


@functools.cache
def builtin() -> dict[str, Variant]:
    """semsim's own variants by name, in listing order: the reference, its fixes, its mutants."""
    variants = [REFERENCE, EVERY_FIX]
    variants += [
        Variant(f"fix/{name}", fixes={name}, description=f"the reference with one fix: {what}")
        for name, what in sorted(KNOWN_FIXES.items())
    ]
    variants += [planted.variant for planted in MUTANTS]
    return {variant.name: variant for variant in variants}


class VariantLookupError(LookupError):
    """A variant name or reference that names no variant; the message says what and why."""


def _variant_of(value: object, where: str) -> Variant:
    if isinstance(value, Variant):
        return value
    if callable(value) and not isinstance(value, type):
        try:
            built = value()
        except Exception as error:  # the user's builder failing is their error, named
            raise VariantLookupError(f"{where} failed: {type(error).__name__}: {error}") from None
        if isinstance(built, Variant):
            return built
        value = built
    raise VariantLookupError(
        f"{where} is a {type(value).__name__}, not a Variant (wrap a Holder subclass in "
        f"semsim.world.variant.Variant(name, holder=..., model=...): its judges are chosen explicitly)"
    )


@functools.cache
def find_variant(name: str) -> Variant:
    """The variant ``name`` names: ``reference``, a registered name, or ``module:attribute``.

    Cached: a campaign resolves its variant once per process, not once per run.
    """
    own = builtin().get(name)
    if own is not None:
        if name in installed():  # which one a case means could not be told
            raise VariantLookupError(
                f"variant {name!r} is semsim's own, and an installed package registers one by that "
                f"name too: rename the entry point in group {GROUP}"
            )
        return own
    try:
        found = find_named(name, GROUP)
    except ReferenceLookupError as error:
        raise VariantLookupError(str(error)) from None
    if found is not None:
        return _variant_of(*found)
    families = [REFERENCE.name, EVERY_FIX.name, "fix/NAME", "mutant/NAME"]
    known = [*builtin(), *installed()]
    raise VariantLookupError(
        f"unknown variant {name!r}: known are {', '.join([*families, *installed()])} "
        f"(semsim list --variants names them all), and module:attribute names your own"
        f"{did_you_mean(name, known)}"
    )


def installed() -> list[str]:
    """The names installed packages register variants under, sorted (nothing is imported)."""
    return sorted({entry.name for entry in entry_points(GROUP)})
