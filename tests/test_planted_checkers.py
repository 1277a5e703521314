"""The checkers' own planted bugs (``semsim.check.planted``), and the catalog that joins them.

As ``tests/test_mutant_catalog.py`` does for the holder's: each bug changes what it claims on a
scripted row mirror, the original comes back after the block, and the patch rebinds only the
checkers' incremental path (the debug mode's recomputation keeps judging the truth).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from semsim.check.planted import CHECKER_MUTANTS
from semsim.check.row_mirror import GRANTS, LEASES, RowMirror
from semsim.harness import catalog
from semsim.harness.variants import find_variant
from semsim.world import mutant_catalog
from semsim.world.design_mutants import DESIGN_MUTANTS
from tests.helpers import bindings, mirror_store


def outstanding_at_the_deadline() -> tuple[int, list[str], int, list[str]]:
    """A grant of 5 with 2 claimed, due at 100: what the mirror counts outstanding at 100 and
    which deadlines the refresh at 100 reports; then the same at 101."""
    conn = mirror_store()
    mirror = RowMirror(conn)
    conn.execute(f"INSERT INTO {GRANTS} VALUES ('g1', 'c', 'a', 5, 2, 0, 0, 100)")
    mirror.refresh(0)
    at_deadline = mirror.refresh(100).deadlines
    outstanding = mirror.totals(100).granted
    after = mirror.refresh(101).deadlines
    return outstanding, at_deadline, mirror.totals(101).granted, after


def footprint_after_a_report() -> int:
    """A lease of 4, then a report releasing 3 of them: the footprint the mirror keeps."""
    conn = mirror_store()
    mirror = RowMirror(conn)
    conn.execute(f"INSERT INTO {LEASES} VALUES ('l1', 'c', 'a', 4, 0, 0, 500, 0)")
    mirror.refresh(0)
    conn.execute(f"UPDATE {LEASES} SET released = 3 WHERE lease_id = 'l1'")
    mirror.refresh(1)
    return mirror.totals(1).leased


SCENARIOS: dict[str, tuple[Callable[[], object], object, object]] = {
    # A millisecond late, not never: at 101 the mirror has caught up.
    "mirror-deadline-late": (outstanding_at_the_deadline, (2, ["g1"], 2, []), (5, [], 2, ["g1"])),
    "mirror-footprint-ignores-updates": (footprint_after_a_report, 1, 4),
}


def test_every_checker_mutant_has_a_scenario() -> None:
    assert sorted(SCENARIOS) == sorted(m.name for m in CHECKER_MUTANTS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_checker_mutant_changes_what_it_claims_and_the_original_comes_back(name: str) -> None:
    run, faithful, mutated = SCENARIOS[name]
    assert run() == faithful
    with catalog.mutant(name).patch():
        assert run() == mutated
    assert run() == faithful


@pytest.mark.parametrize("planted", CHECKER_MUTANTS, ids=lambda m: m.name)
def test_a_checker_mutant_rebinds_only_the_row_mirror_and_restores_it(planted: mutant_catalog.Mutant) -> None:
    before = bindings()
    with planted.patch():
        after = bindings()
    changed = {key for key in before.keys() | after.keys() if before.get(key) is not after.get(key)}
    assert changed
    assert {owner for owner, _ in changed} == {"semsim.check.row_mirror.RowMirror"}
    assert bindings() == before


def test_the_catalog_joins_the_holders_mutants_and_the_checkers() -> None:
    assert (*mutant_catalog.MUTANTS, *CHECKER_MUTANTS, *DESIGN_MUTANTS) == catalog.MUTANTS
    assert catalog.mutant("limit-off-by-one") is mutant_catalog.mutant("limit-off-by-one")
    assert catalog.mutant("mirror-deadline-late") is CHECKER_MUTANTS[0]
    with pytest.raises(ValueError, match=r"unknown mutant 'nope'.*mirror-deadline-late"):
        catalog.mutant("nope")
    # Found by name wherever a variant is named: semsim fuzz --variant mutant/NAME.
    assert find_variant("mutant/mirror-deadline-late").patch is CHECKER_MUTANTS[0].patch


def test_a_catalog_with_two_mutants_of_one_name_is_refused() -> None:
    with pytest.raises(ValueError, match="mutant names must be unique"):
        mutant_catalog.by_name((CHECKER_MUTANTS[0], CHECKER_MUTANTS[0]))
