"""Planted bugs in semsim's own checkers: the checkers checked (issue 27).

A checker that judges from kept state (a running sum, rows kept in step by
triggers) can go wrong where the code it judges is right, and fuzzing
correct code never shows it unless something recomputes what the checker
keeps. Two things do: the checker's debug mode, on one drawn case in four
(``semsim.explore.fuzz.judged_in_full``), recomputes every kept sum from
storage and names a difference ``checker``; and the literal model in
lockstep takes its ``usage()`` from the same kept sums, so a wrong sum
makes the holder and the model disagree (``exact_accounting``, which then
blames the holder for the checker's bug: the verdict a team would
investigate).

These mutants follow the catalog's rules (:mod:`semsim.world.mutant_catalog`)
but one: they rebind checker code, the incremental path only. The debug
mode's recomputation (``semsim.check.cross_checks``, the lockstep's listed
sums) stays as it is, so the truth is still judged beside them. They live
here, not in the catalog, because the catalog sits in the world layer,
below the checkers it would have to import; ``semsim.harness.catalog``
joins the two.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final

from semsim.check.row_mirror import RowMirror, Rows
from semsim.world.mutant_catalog import Mutant, patcher

Advance = Callable[[RowMirror, int], None]
#: Per table, the ids a refresh changed (``RowMirror._update_totals``' ``ids``).
Changed = dict[str, list[str]]
UpdateTotals = Callable[[RowMirror, Rows, Rows, Changed, int], None]


def _deadline_late(original: Advance) -> Advance:
    def _advance(self: RowMirror, now: int) -> None:
        # MUTATION: a grant is recounted once its claim deadline has passed by a millisecond, not
        # at it (the heap is drained up to now - 1), so at the deadline's millisecond its unclaimed
        # permits still count as outstanding and the deadline is reported a millisecond late.
        original(self, max(now - 1, self._now))

    return _advance


def _footprint_on_insert_and_delete(original: UpdateTotals) -> UpdateTotals:
    def _update_totals(self: RowMirror, before: Rows, after: Rows, ids: Changed, now: int) -> None:
        # MUTATION: the lease footprint's running sum moves when a lease row is inserted or deleted,
        # not when a report updates one (released permits, a retired lease's shrunken permits).
        leases = [i for i in ids["leases"] if i not in before["leases"] or i not in after["leases"]]
        original(self, before, after, {**ids, "leases": leases}, now)

    return _update_totals


def _rebind(name: str, make: Callable[[Any], Any]) -> Callable[[], AbstractContextManager[None]]:
    return patcher((RowMirror, name, make))


#: The checkers' planted bugs, in the order ``semsim mutants`` lists them (after the catalog's).
CHECKER_MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "mirror-deadline-late",
        "the checkers' row mirror recounts a grant a millisecond after its claim deadline, not at it",
        _rebind("_advance", _deadline_late),
    ),
    Mutant(
        "mirror-footprint-ignores-updates",
        "the checkers' running lease footprint moves on inserted and deleted leases, not on reports",
        _rebind("_update_totals", _footprint_on_insert_and_delete),
    ),
)
