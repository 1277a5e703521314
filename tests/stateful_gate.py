"""A Hypothesis state machine that drives ``semaphore_core.gate.ConcurrencySlots`` as the gate object would.

Rules: time advancing, acquires (by workers that will release, and by
workers that die holding their slot), releases (once, again, of a token
never issued), and an eviction (the object builds a new, empty ledger).

After every step it checks the ledger's own promises (seed 003):

- ``exact``: the slots held are exactly the ones acquired and neither
  released nor healed, in this ledger's life; never more than the cap.
- ``sheds_only_at_cap``: an acquire is refused only when every slot is
  held by work that is not yet stale.
- ``heals_late``: a slot is healed only once it has been held longer than
  ``stale_ms``, and then by the first acquire that comes.
- ``release_idempotent``: a release frees a slot exactly when that slot
  was held, and never another slot.

The module defines the machine; ``tests/test_gate.py`` runs it.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from semaphore_core.gate import ConcurrencySlots

MAX_IN_FLIGHT = 3
STALE_MS = 1_000


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.lives = 0
        self._build()

    def _build(self) -> None:
        self.lives += 1
        counter = itertools.count(1)
        life = self.lives
        self.ledger = ConcurrencySlots(
            lambda: f"life{life}-slot{next(counter)}", max_in_flight=MAX_IN_FLIGHT, stale_ms=STALE_MS
        )
        #: The model: token -> acquired at, for slots this ledger holds.
        self.held: dict[str, int] = {}
        #: Every token this ledger issued (released or healed ones included).
        self.issued: list[str] = []

    @rule(ms=st.sampled_from([0, 1, 10, 400, 999, 1_000, 1_001, 2_500]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def acquire(self) -> None:
        stale = {token for token, at in self.held.items() if self.now - at > STALE_MS}
        admission = self.ledger.acquire(self.now)
        # heals_late: exactly the slots held longer than stale_ms, oldest first.
        assert {slot.token for slot in admission.healed} == stale, "heals_late"
        assert all(self.now - slot.acquired_at_ms > STALE_MS for slot in admission.healed), "heals_late"
        for token in stale:
            del self.held[token]
        if admission.token is None:
            assert len(self.held) == MAX_IN_FLIGHT, "sheds_only_at_cap"
            return
        assert len(self.held) < MAX_IN_FLIGHT, "exact: admitted past the cap"
        self.held[admission.token] = self.now
        self.issued.append(admission.token)

    @precondition(lambda self: bool(self.issued))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.issued))
        was_held = token in self.held
        assert self.ledger.release(token, self.now) is was_held, "release_idempotent"
        self.held.pop(token, None)

    @rule()
    def release_unknown(self) -> None:
        assert self.ledger.release("never-issued", self.now) is False, "release_idempotent"

    @rule()
    def evict(self) -> None:
        """The object is evicted: its successor builds an empty ledger; old tokens mean nothing."""
        old = list(self.issued)
        self._build()
        for token in old[-2:]:
            assert self.ledger.release(token, self.now) is False, "release_idempotent"

    @invariant()
    def exact(self) -> None:
        assert {slot.token: slot.acquired_at_ms for slot in self.ledger.slots()} == self.held, "exact"
        assert self.ledger.in_flight == len(self.held) <= MAX_IN_FLIGHT, "exact"
