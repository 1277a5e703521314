"""The gate's slot ledger (``semaphore_core.gate``), one test per behaviour seed 003 describes.

Seed 003 is a pull request's description; the quotes below are its words.
The state machine in ``tests/stateful_gate.py`` checks the same promises
under random sequences.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from semaphore_core.gate import MAX_IN_FLIGHT, RETRY_AFTER_S, STALE_MS, Admission, ConcurrencySlots, Slot
from tests.stateful_gate import GateMachine


def ledger(**kw: int) -> ConcurrencySlots:
    counter = itertools.count(1)
    return ConcurrencySlots(lambda: f"slot-{next(counter)}", **kw)


def test_the_references_constants() -> None:
    """ "sheds with 429 past MAX_IN_FLIGHT (6)", "self-heal after STALE_MS (120s ...)",
    "429 + retry-after: 10"."""
    assert (MAX_IN_FLIGHT, STALE_MS, RETRY_AFTER_S) == (6, 120_000, 10)
    assert (ledger().max_in_flight, ledger().stale_ms) == (6, 120_000)


def test_it_admits_up_to_the_cap_and_sheds_past_it() -> None:
    """ "counts in-flight audits exactly and sheds with 429 past MAX_IN_FLIGHT (6)"."""
    slots = ledger()
    tokens = [slots.acquire(t).token for t in range(6)]
    assert tokens == [f"slot-{n}" for n in range(1, 7)]
    assert slots.in_flight == 6
    assert slots.acquire(10) == Admission(token=None)
    assert slots.in_flight == 6  # a shed acquire takes nothing


def test_a_release_frees_a_slot_for_the_next_acquire() -> None:
    slots = ledger(max_in_flight=1)
    first = slots.acquire(0).token
    assert first is not None
    assert not slots.acquire(1).admitted
    assert slots.release(first, 2) is True
    assert slots.acquire(3).token == "slot-2"


def test_release_is_idempotent() -> None:
    """ "release is idempotent": twice, or a token never issued, frees nothing more."""
    slots = ledger(max_in_flight=2)
    a, b = slots.acquire(0).token, slots.acquire(0).token
    assert a is not None
    assert b is not None
    assert slots.release(a, 1) is True
    assert slots.release(a, 2) is False
    assert slots.release("never-issued", 3) is False
    assert slots.slots() == (Slot(b, 0),)


def test_a_leaked_slot_heals_after_stale_ms_and_not_before() -> None:
    """ "Leaked slots (a worker that died between acquire and release) self-heal after STALE_MS"."""
    slots = ledger(max_in_flight=1, stale_ms=1_000)
    leaked = slots.acquire(0).token
    assert leaked is not None
    assert slots.acquire(1_000) == Admission(token=None)  # held exactly STALE_MS: not yet stale
    healed = slots.acquire(1_001)
    assert healed == Admission(token="slot-2", healed=(Slot(leaked, 0),))
    assert slots.release(leaked, 1_002) is False  # its late release frees nothing
    assert slots.in_flight == 1


def test_stale_slots_heal_only_when_an_acquire_asks() -> None:
    """A ledger nobody asks keeps its stale slots; the next acquire heals every one of them."""
    slots = ledger(max_in_flight=3, stale_ms=100)
    for t in (0, 50, 60):
        slots.acquire(t)
    assert slots.in_flight == 3
    assert slots.release("slot-2", 500) is True  # a release does not heal the others
    assert slots.in_flight == 2
    admission = slots.acquire(500)
    assert [slot.token for slot in admission.healed] == ["slot-1", "slot-3"]
    assert slots.slots() == (Slot("slot-4", 500),)


def test_eviction_resets_to_all_free() -> None:
    """ "eviction resets to all-free, the harmless direction": the object's new ledger is empty,
    and the old tokens' releases free nothing in it."""
    old = ledger(max_in_flight=1)
    token = old.acquire(0).token
    assert token is not None
    new = ledger(max_in_flight=1)
    assert new.in_flight == 0
    assert new.release(token, 1) is False
    assert new.acquire(1).admitted


@pytest.mark.parametrize("field", ["max_in_flight", "stale_ms"])
@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bad_configuration_is_refused(field: str, bad: object) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
        ledger(**{field: bad})  # type: ignore[arg-type]


def test_time_must_not_go_backwards_and_tokens_must_be_fresh() -> None:
    slots = ledger()
    slots.acquire(10)
    with pytest.raises(ValueError, match="no earlier than 10"):
        slots.acquire(9)
    same = ConcurrencySlots(lambda: "same", stale_ms=10)
    same.acquire(0)
    with pytest.raises(ValueError, match="fresh string"):
        same.acquire(20)  # all or nothing: the stale slot is not healed either
    assert same.slots() == (Slot("same", 0),)


def test_the_ledger_keeps_its_promises_under_random_sequences() -> None:
    run_state_machine_as_test(GateMachine, settings=settings(max_examples=150, stateful_step_count=40))
