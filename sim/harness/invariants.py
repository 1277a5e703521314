"""Every invariant of a team's own that semsim can judge by name: installed packages', ``module:attribute``.

A team registers its checkers (:mod:`semsim.check.checker`) under the
entry-point group ``semsim.invariants``::

    [project.entry-points."semsim.invariants"]
    max_grant = "myservice.invariants:MaxGrant"

An entry point, like a ``module:attribute`` reference on the command line
(``semsim fuzz --invariant myservice.invariants:MaxGrant``), names a
:class:`~semsim.check.checker.Checker` subclass. The reference a checker was
found by is what case files record (``"invariants": [...]``), so ``semsim
fuzz --replay`` judges the same invariants again, in this process or in a
campaign's workers; a case naming one that cannot be loaded is refused,
never replayed without it. What cannot be loaded is an
:class:`InvariantLookupError` saying which and why.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

from semsim.check.checker import Checker, check_checkers
from semsim.harness.run import RESERVED_NAMES
from semsim.inputs.references import ReferenceLookupError, did_you_mean, entry_points, find_named

#: The entry-point group installed packages register their invariants under.
GROUP: Final = "semsim.invariants"


class InvariantLookupError(LookupError):
    """A reference that names no invariant; the message says what and why."""


def _checker_of(value: object, where: str) -> type[Checker]:
    try:
        (checker,) = check_checkers([value], RESERVED_NAMES)
    except (TypeError, ValueError) as error:
        raise InvariantLookupError(f"{where}: {error}") from None
    return checker


@functools.cache
def find_invariant(reference: str) -> type[Checker]:
    """The checker ``reference`` names: a registered name, or ``module:attribute``.

    Cached: a campaign resolves its invariants once per process, not once per run.
    """
    if not isinstance(reference, str) or not reference.strip():
        raise InvariantLookupError(
            f"an invariant is a registered name or module:attribute, got {reference!r}"
        )
    try:
        found = find_named(reference, GROUP)
    except ReferenceLookupError as error:
        raise InvariantLookupError(str(error)) from None
    if found is not None:
        return _checker_of(*found)
    if reference in RESERVED_NAMES:
        raise InvariantLookupError(
            f"{reference!r} is one of semsim's own invariants: every run judges it already"
        )
    names = installed()
    known = f"installed are {', '.join(names)}" if names else "no package installs any"
    raise InvariantLookupError(
        f"unknown invariant {reference!r}: {known}, and module:attribute names your own"
        f"{did_you_mean(reference, names)}"
    )


def find_invariants(references: Sequence[str]) -> tuple[type[Checker], ...]:
    """Every checker ``references`` name, in order; two with the same name are refused."""
    found = [find_invariant(reference) for reference in references]
    try:
        return check_checkers(found, RESERVED_NAMES)
    except (TypeError, ValueError) as error:
        raise InvariantLookupError(str(error)) from None


def reference_to(checker: type[Checker]) -> str:
    """The ``module:attribute`` reference that finds ``checker`` again, in any process.

    What a case file records, and what a campaign hands its workers: a checker
    defined inside a function (``<locals>``) cannot be found that way and is
    refused, saying so.
    """
    reference = f"{checker.__module__}:{checker.__qualname__}"
    try:
        found = find_invariant(reference)
    except InvariantLookupError:
        found = None
    if found is not checker:
        raise InvariantLookupError(
            f"checker {checker.__qualname__} cannot be found again as {reference}: define it at the top "
            f"level of a module, so case files and a campaign's workers can name it"
        )
    return reference


def installed() -> list[str]:
    """The names installed packages register invariants under, sorted (nothing is imported)."""
    return sorted({entry.name for entry in entry_points(GROUP)})
