"""The ConcurrencyGate object (seed 003): ``/acquire`` and ``/release`` over an in-memory ledger.

Seed 003's "thin ConcurrencyGate DO over POST /acquire / /release": one
object per account (the seed's ``idFromName("global")`` is the world with
one key), whose ledger is :class:`semaphore_core.gate.ConcurrencySlots`.
What it owns:

- **The answers.** An acquire is answered ``{"status": 200, "token"}`` or,
  at the cap, ``{"status": 429, "retryAfter": 10}`` ("sheds with 429 +
  retry-after: 10"); a release ``{"status": 200, "released"}``.
- **Memory only.** The ledger belongs to the live instance: an eviction
  builds a new, empty one ("eviction resets to all-free, the harmless
  direction"). It writes no storage ("it uses no storage").
- **Its own failures**, drawn per acquire from ``faults.gate_error``: an
  answer of ``{"status": 500}`` (a non-ok, non-429 answer). Lost requests
  and replies, partitions and evictions are the network's and the
  platform's, as for every object.

What it must not know: its callers, their fail-open rules, the API.
"""

from __future__ import annotations

from random import Random
from typing import Any

from semsim.runtime.durable import ObjectContext
from semsim.runtime.network import RemoteError
from semsim.world.design import GateSpec
from semsim.world.faults import FaultPlan
from semsim.world.variant import REFERENCE, Variant


class GateObject:
    """One live instance of a gate: a fresh ledger, exact while the instance lives."""

    def __init__(
        self,
        ctx: ObjectContext,
        spec: GateSpec,
        cap: int,
        faults: FaultPlan,
        rng: Random,
        variant: Variant = REFERENCE,
    ) -> None:
        self.ctx = ctx
        self._spec = spec
        self._faults = faults
        self._rng = rng
        #: Seed 003's ``ConcurrencySlots``, or the variant's ledger (semsim.world.variant).
        self.ledger = variant.build_ledger(
            lambda: ctx.sim.next_id("slot"), max_in_flight=cap, stale_ms=spec.stale_ms
        )
        #: Every token this instance handed out: what its count covers (a successor's starts empty).
        self.issued: set[str] = set()

    def handle(self, method: str, payload: Any) -> Any:
        sim = self.ctx.sim
        now = sim.now()
        if method == "acquire":
            if payload != {}:
                raise RemoteError("protocol", f"{self.ctx.name}: acquire takes {{}}, got {payload!r}")
            faults = self._faults
            if faults.gate_error and faults.active(now) and self._rng.random() < faults.gate_error:
                sim.event("gate_error", gate=self.ctx.name)
                return {"status": 500}
            admission = self.ledger.acquire(now)
            sim.event(
                "gate_acquire",
                gate=self.ctx.name,
                token=admission.token,
                in_flight=self.ledger.in_flight,
                healed=[slot.token for slot in admission.healed],
            )
            if admission.token is None:
                return {"status": 429, "retryAfter": self._spec.retry_after_s}
            self.issued.add(admission.token)
            return {"status": 200, "token": admission.token}
        if method == "release":
            token = payload.get("token") if isinstance(payload, dict) and set(payload) == {"token"} else None
            if not isinstance(token, str):
                raise RemoteError("protocol", f"{self.ctx.name}: release takes {{token}}, got {payload!r}")
            released = self.ledger.release(token, now)
            sim.event(
                "gate_release",
                gate=self.ctx.name,
                token=token,
                released=released,
                in_flight=self.ledger.in_flight,
            )
            return {"status": 200, "released": released}
        raise RemoteError("protocol", f"{self.ctx.name}: unknown method {method!r}")

    async def alarm(self) -> None:
        """The gate sets no alarm."""
