"""The designs' planted bugs (``semsim.world.design_mutants``), as the catalog's are tested.

Each bug changes what it claims on a scripted ledger or store, the original
comes back after the block, the patch rebinds only its design's core, and
the variant it makes runs on its own design only.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable

import pytest

from semaphore_core.gate import ConcurrencySlots
from semaphore_core.leased.store import Lease, LeaseStore
from semsim.harness import catalog
from semsim.harness.variants import find_variant
from semsim.world.design_mutants import DESIGN_MUTANTS
from semsim.world.mutant_catalog import Mutant
from tests.helpers import bindings


def _ledger(stale_ms: int = 120_000) -> ConcurrencySlots:
    tokens = (f"slot-{n}" for n in itertools.count(1))
    return ConcurrencySlots(lambda: next(tokens), max_in_flight=2, stale_ms=stale_ms)


def late_release() -> tuple[bool, list[str]]:
    """Two slots held; a release of a token never handed out: answered, and what is still held."""
    ledger = _ledger()
    ledger.acquire(0)
    ledger.acquire(1)
    released = ledger.release("slot-9", 2)
    return released, [slot.token for slot in ledger.slots()]


def healed_after_a_second() -> int:
    """A slot taken at 0, then an acquire at 1 s: how many slots the acquire healed as stale."""
    ledger = _ledger()
    ledger.acquire(0)
    return len(ledger.acquire(1_000).healed)


def _store() -> LeaseStore:
    store = LeaseStore(sqlite3.connect(":memory:", isolation_level=None))
    for n in range(3):
        store.create(f"i-{n}", "wf", now_ms=n)
    return store


def claimed_under_a_limit_of_one() -> int:
    """Three due instances of one workflow limited to 1: how many one claim leases."""
    lease = Lease(owner="w", token="t", now_ms=10, until_ms=1_000)
    return len(_store().claim(lease, limit=3, workflows=["wf"], limits={"wf": 1}))


def write_after_expiry() -> bool:
    """A lease until 1 000, then a write under its token at 2 000 (nobody claimed it again)."""
    store = _store()
    store.claim(Lease(owner="w", token="t", now_ms=10, until_ms=1_000), limit=1, workflows=["wf"])
    return store.write("i-0", "t", "completed", 2_000, release=True)


SCENARIOS: dict[str, tuple[Callable[[], object], object, object]] = {
    "gate-release-frees-oldest": (late_release, (False, ["slot-1", "slot-2"]), (True, ["slot-2"])),
    "gate-stale-ms-in-seconds": (healed_after_a_second, 0, 1),
    "leased-limit-off-by-one": (claimed_under_a_limit_of_one, 1, 2),
    "leased-write-after-expiry": (write_after_expiry, False, True),
}
CORES = {
    "gate": "semaphore_core.gate.ConcurrencySlots",
    "leased-worker": "semaphore_core.leased.store.LeaseStore",
}


def test_every_design_mutant_has_a_scenario() -> None:
    assert sorted(SCENARIOS) == sorted(m.name for m in DESIGN_MUTANTS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_design_mutant_changes_what_it_claims_and_the_original_comes_back(name: str) -> None:
    run, faithful, mutated = SCENARIOS[name]
    assert run() == faithful
    with catalog.mutant(name).patch():
        assert run() == mutated
    assert run() == faithful


@pytest.mark.parametrize("planted", DESIGN_MUTANTS, ids=lambda m: m.name)
def test_a_design_mutant_rebinds_only_its_designs_core_and_restores_it(planted: Mutant) -> None:
    before = bindings()
    with planted.patch():
        after = bindings()
    changed = {key for key in before.keys() | after.keys() if before.get(key) is not after.get(key)}
    assert changed
    assert {owner for owner, _ in changed} == {CORES[planted.design]}
    assert bindings() == before


@pytest.mark.parametrize("planted", DESIGN_MUTANTS, ids=lambda m: m.name)
def test_a_design_mutants_variant_runs_on_its_design_only(planted: Mutant) -> None:
    variant = find_variant(f"mutant/{planted.name}")
    assert variant.design == planted.design
    variant.check_design(planted.design)
    for other in {"semaphore", "gate", "leased-worker"} - {planted.design}:
        with pytest.raises(ValueError, match=f"written for the {planted.design} design, not the {other}"):
            variant.check_design(other)


def test_a_semaphore_mutant_is_still_refused_on_the_other_designs() -> None:
    with pytest.raises(ValueError, match="written for the semaphore design, not the gate"):
        find_variant("mutant/limit-off-by-one").check_design("gate")
