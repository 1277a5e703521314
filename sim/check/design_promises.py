"""What the gate and the leased workers' store each promise, judged live as their runs go.

The semaphore's invariants are its own (:mod:`semsim.check.builtin`). The
other two designs promise less, and differently; these are the promises
their seeds make, each judged where it could first be broken, so a run stops
at the first broken one with the state that broke it:

- ``gate_exact`` (seed 003: "a DO is single-threaded so the count is exact
  while it lives"): when a call starts at the API, the slots that calls
  running there for one account started under, that the account's living
  gate instance handed out and that their handlers still hold, number no
  more than ``MAX_IN_FLIGHT``. (Slots, not calls: a request the network
  delivered twice runs twice under one slot, and that is the network's
  doing, not the count's.)
  What the seed admits is not counted: calls let through uncapped (it fails
  open), slots of an instance since evicted (its successor starts all-free,
  "the harmless direction"), and a call whose handler gave its slot back
  (its fetch timed out) or died.
- ``single_lease`` (seed 004: a worker claims due instances under a lease):
  a claim never takes an instance another token holds a live lease on.
- ``fenced_write`` (seed 004's ``write`` and ``renew``, fenced by the lease
  token): a write, a hand-back or a renewal that the store accepts was sent
  under the token of the instance's live lease.
- ``lease_limit`` (seed 004's per-workflow ``limits``, applied at claim
  time): after a claim, the instances of a workflow under a live lease
  number no more than its limit.

Each judge only reads: a judged run is the same run as an unjudged one, event
for event, until a promise breaks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from semsim.check.invariants import InvariantViolation
from semsim.runtime.durable import DurableObject
from semsim.runtime.kernel import Sim
from semsim.world.external_api import ApiCall, Change, ExternalApi
from semsim.world.gate_caller import GateCaller
from semsim.world.gate_object import GateObject
from semsim.world.lease_store_object import LeaseStoreObject

GATE_EXACT: Final = "gate_exact"
SINGLE_LEASE: Final = "single_lease"
FENCED_WRITE: Final = "fenced_write"
LEASE_LIMIT: Final = "lease_limit"
#: Each design's promises, in the order a trace header lists its judges.
PROMISES: Final[Mapping[str, tuple[str, ...]]] = {
    "gate": (GATE_EXACT,),
    "leased-worker": (SINGLE_LEASE, FENCED_WRITE, LEASE_LIMIT),
}


def _broken(sim: Sim, name: str, detail: str) -> InvariantViolation:
    sim.event("violation", invariant=name, finding=None, detail=detail)
    return InvariantViolation(name, sim.now(), detail)


class GateExact:
    """``gate_exact`` (module docstring), judged as each call starts at the API."""

    def __init__(
        self,
        sim: Sim,
        api: ExternalApi,
        cap: int,
        gates: Mapping[str, DurableObject],
        callers: Iterable[DurableObject],
    ) -> None:
        self._sim = sim
        self._api = api
        self._cap = cap
        #: The gate of each account, by account.
        self._gates = dict(gates)
        self._callers = tuple(callers)
        #: The slot each running call started under, by call id (calls without a held slot: none).
        self._slot_of_call: dict[str, str] = {}
        api.watch(self._changed)

    def _changed(self, change: Change, call: ApiCall) -> None:
        if change != "start":
            self._slot_of_call.pop(call.call, None)
            return
        held: dict[str, str] = {}
        for obj in self._callers:
            if obj.live:
                caller = obj.instance()
                assert isinstance(caller, GateCaller)
                held.update(caller.slots)
        # The slot a call runs under is its handler's when it starts (a zombie call of a dead
        # handler keeps its own, and a duplicated request shares its handler's).
        slot = held.get(call.key)
        if slot is not None:
            self._slot_of_call[call.call] = slot
        gate = self._gates.get(call.account)
        if gate is None or not gate.live:
            return
        instance = gate.instance()
        assert isinstance(instance, GateObject)
        holding = set(held.values())
        slots = sorted(
            {
                slot_of
                for running in self._api.running.values()
                if running.account == call.account
                and (slot_of := self._slot_of_call.get(running.call)) is not None
                and slot_of in instance.issued
                and slot_of in holding
            }
        )
        if len(slots) > self._cap:
            raise _broken(
                self._sim,
                GATE_EXACT,
                f"calls run at the API for {call.account} under {len(slots)} slots its living gate "
                f"handed out and their handlers hold, above MAX_IN_FLIGHT {self._cap}: {', '.join(slots)}",
            )


class JudgedStore:
    """The store endpoint with ``single_lease``, ``fenced_write`` and ``lease_limit`` judged on every
    request it serves (module docstring); registered on the network in the store's place."""

    def __init__(self, sim: Sim, store: LeaseStoreObject, limits: Mapping[str, int]) -> None:
        self._sim = sim
        self.store = store
        self._limits = dict(limits)

    def dispatch(self, method: str, payload: Any) -> Any:
        now = self._sim.now()
        before = dict(self.store.live_leases(now))
        reply = self.store.dispatch(method, payload)
        if method == "claim":
            self._claimed(reply, before, now)
        elif method in ("renew", "write", "handBack") and reply.get("ok"):
            self._fenced(method, payload, before)
        return reply

    def _claimed(self, reply: list[dict[str, Any]], before: dict[str, str], now: int) -> None:
        taken = sorted(instance["id"] for instance in reply if instance["id"] in before)
        if taken:
            raise _broken(
                self._sim,
                SINGLE_LEASE,
                f"a claim took {', '.join(taken)} under a live lease of another token",
            )
        for workflow, leased in sorted(self.store.leased(now).items()):
            limit = self._limits.get(workflow)
            if limit is not None and leased > limit:
                raise _broken(
                    self._sim,
                    LEASE_LIMIT,
                    f"{leased} instances of workflow {workflow} under live leases, above its limit {limit}",
                )

    def _fenced(self, method: str, payload: dict[str, Any], before: dict[str, str]) -> None:
        id, token = payload["id"], payload["token"]
        live = before.get(id)
        if live != token:
            held = "no live lease" if live is None else f"the live lease is {live}'s"
            raise _broken(
                self._sim,
                FENCED_WRITE,
                f"the store accepted a {method} of {id} under token {token}, but {held}",
            )


def judges_for(design: str) -> tuple[str, ...]:
    """The promises ``design`` is judged by here (none for the semaphore: its judges are its own)."""
    return PROMISES.get(design, ())
