"""``ConcurrencySlots``: seed 003's in-memory slot ledger, the core of its ConcurrencyGate.

Seed 003 is a merged pull request: its description, not its code. It
describes ``src/gate.ts`` as a "pure, clock-injected ConcurrencySlots
ledger (unit-testable without a DO runtime)" under a thin
``ConcurrencyGate`` object that answers ``POST /acquire`` and ``/release``.
What the description says the ledger does, and so what this module owns:

- **A slot per unit of work in flight, up to ``MAX_IN_FLIGHT`` (6).** One
  object "counts in-flight audits exactly and sheds with 429 past
  MAX_IN_FLIGHT (6)": an acquire past the cap is refused. The 429 and its
  ``retry-after: 10`` are the object's answer, not the ledger's.
- **Exact while the object lives, gone when it does not.** "The slot ledger
  is in-memory (a DO is single-threaded, so it is exact while the object
  lives; eviction resets to all-free, the harmless direction)". An
  eviction is the object building a new ledger; nothing here survives it.
- **Leaked slots heal.** "Leaked slots (a worker that died between acquire
  and release) self-heal after STALE_MS (120s ...)".
- **Release is idempotent.** Releasing a token twice, or one the ledger
  never issued or already healed, frees nothing.

What it must not know: HTTP, the caller's fail-open rules, eviction, time
beyond the ``now_ms`` it is given.

Modelling choices, the least the description needs (docs/DESIGNS.md lists
them with the other designs' choices):

- a slot is stale when it has been held *longer* than ``stale_ms``
  (``now_ms - acquired_at_ms > stale_ms``: "after STALE_MS");
- stale slots are freed when an acquire needs the count, before it
  decides: a ledger nobody asks keeps its stale slots, which changes
  nothing anyone can observe;
- tokens come from an injected ``new_token`` that must never repeat one
  (the reference's are random): the ledger can only refuse a token it
  holds, so a factory that reused a released or healed token would let a
  late release free another worker's slot.

| slot | event | after |
|---|---|---|
| (none) | ``acquire`` with fewer than ``max_in_flight`` live slots | held since ``now`` |
| (none) | ``acquire`` at the cap | none: ``Admission.token`` is None |
| held | ``release(token)`` | freed (``True``) |
| freed, healed or unknown | ``release(token)`` | unchanged (``False``) |
| held longer than ``stale_ms`` | the next ``acquire`` | healed (in ``Admission.healed``) |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

#: "sheds with 429 past MAX_IN_FLIGHT (6)".
MAX_IN_FLIGHT: Final = 6
#: "leaked slots ... self-heal after STALE_MS (120s, generously above the fetch layer's caps)".
STALE_MS: Final = 120_000
#: The object's shed answer: "429 + retry-after: 10" (seconds, as the HTTP header is).
RETRY_AFTER_S: Final = 10


@attrs.frozen
class Slot:
    """A slot held since ``acquired_at_ms`` under ``token``."""

    token: str
    acquired_at_ms: int


@attrs.frozen
class Admission:
    """What an ``acquire`` did: the new slot's token (None at the cap), and the stale slots it healed."""

    token: str | None
    healed: tuple[Slot, ...] = ()

    @property
    def admitted(self) -> bool:
        return self.token is not None


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class ConcurrencySlots:
    """The gate's ledger: at most ``max_in_flight`` slots, each freed by its release or by age."""

    def __init__(
        self,
        new_token: Callable[[], str],
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        stale_ms: int = STALE_MS,
    ) -> None:
        self.max_in_flight = _check_positive("max_in_flight", max_in_flight)
        self.stale_ms = _check_positive("stale_ms", stale_ms)
        self._new_token = new_token
        #: Held slots by token, in the order they were acquired.
        self._slots: dict[str, Slot] = {}
        self._now_ms = 0

    @property
    def in_flight(self) -> int:
        """Slots held now, stale ones the next acquire will heal included."""
        return len(self._slots)

    def slots(self) -> tuple[Slot, ...]:
        """The held slots, oldest first."""
        return tuple(self._slots.values())

    def acquire(self, now_ms: int) -> Admission:
        """Heal the stale slots, then take a slot if one is free."""
        self._advance(now_ms)
        healed = tuple(slot for slot in self._slots.values() if now_ms - slot.acquired_at_ms > self.stale_ms)
        token: str | None = None
        if len(self._slots) - len(healed) < self.max_in_flight:
            token = self._new_token()
            # All or nothing: a bad token changes nothing, healing included.
            if not isinstance(token, str) or token in self._slots:
                raise ValueError(f"new_token must give a fresh string, got {token!r}")
        for slot in healed:
            del self._slots[slot.token]
        if token is None:
            return Admission(token=None, healed=healed)
        self._slots[token] = Slot(token=token, acquired_at_ms=now_ms)
        assert len(self._slots) <= self.max_in_flight, "the ledger admitted past its cap"
        return Admission(token=token, healed=healed)

    def release(self, token: str, now_ms: int) -> bool:
        """Free ``token``'s slot; False (and nothing changes) if it is not held."""
        self._advance(now_ms)
        return self._slots.pop(token, None) is not None

    def _advance(self, now_ms: int) -> None:
        if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < self._now_ms:
            raise ValueError(f"now_ms must be an integer no earlier than {self._now_ms}, got {now_ms!r}")
        self._now_ms = now_ms
