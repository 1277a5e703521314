"""What the gate and the leased workers' store each promise, judged live as their runs go.

The semaphore's invariants are its own (:mod:`semsim.check.builtin`). The
other two designs promise less, and differently; these are the promises
their seeds make, each judged where it could first be broken, so a run stops
at the first broken one with the state that broke it:

- ``gate_exact`` (seed 003: "a DO is single-threaded so the count is exact
  while it lives"): when a call starts at the API, the slots that the calls
  running there for one account started under, among those the account's
  living gate instance handed out, number no more than ``MAX_IN_FLIGHT``.
  (Slots, not calls: a request the network delivered twice runs twice under
  one slot, the network's doing.) What the seed admits is not counted:
  calls let through uncapped (it fails open), and slots of an instance
  since evicted (its successor starts all-free, "the harmless direction").
- ``lease_ceiling`` (seed 004's per-workflow ``limits``, as the API sees
  them): when a call starts at the API, the executions with a call running
  there for one workflow, whose lease is live or was given back by their
  own write, number no more than its limit. What the seed admits is not
  counted: an execution whose lease ran out ("Nothing from this execution
  after that point was recorded": its instance may run again meanwhile).
- ``single_lease`` (seed 004: a worker claims due instances under a lease):
  a claim never takes an instance another token holds a live lease on.
- ``fenced_write`` (seed 004's ``write`` and ``renew``, fenced by the lease
  token): a write, a hand-back or a renewal that the store accepts was sent
  under the token of the instance's live lease.
- ``lease_limit`` (seed 004's per-workflow ``limits``, applied at claim
  time): after a claim, the instances of a workflow under a live lease
  number no more than its limit.

Two known findings break the first two on the faithful designs
(docs/FINDINGS.md): a call outlives its caller's fetch, whose cap the gate's
``STALE_MS`` and the worker's write both take for the call's end, and the
slot (F6) or the lease (F7) is given back while the call runs on. A
violation is attributed to one only when every slot or lease that left the
count while its call ran did so that way (its handler gave up on the call,
or the call outlived ``STALE_MS``; the execution's fetch failed and its
write gave the lease back); a run that tolerates it records it and goes on.

Each judge only reads: a judged run is the same run as an unjudged one, event
for event, until a promise breaks or a tolerated finding is recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from semsim.check.invariants import InvariantViolation
from semsim.runtime.durable import DurableObject
from semsim.runtime.kernel import Sim
from semsim.world.external_api import ApiCall, Change, ExternalApi
from semsim.world.gate_caller import GateCaller
from semsim.world.gate_object import GateObject
from semsim.world.lease_store_object import LeaseStoreObject
from semsim.world.leased_worker import LeasedWorkerObject

GATE_EXACT: Final = "gate_exact"
LEASE_CEILING: Final = "lease_ceiling"
SINGLE_LEASE: Final = "single_lease"
FENCED_WRITE: Final = "fenced_write"
LEASE_LIMIT: Final = "lease_limit"
#: Each design's promises, in the order a trace header lists its judges.
PROMISES: Final[Mapping[str, tuple[str, ...]]] = {
    "gate": (GATE_EXACT,),
    "leased-worker": (LEASE_CEILING, SINGLE_LEASE, FENCED_WRITE, LEASE_LIMIT),
}
#: The known finding (docs/FINDINGS.md) that may explain each promise's violation.
F6: Final = "F6"
F7: Final = "F7"


class Verdicts:
    """Where the judges of one run report: a violation stops the run unless its finding is tolerated,
    in which case it is recorded, counted, and the run goes on."""

    def __init__(self, sim: Sim, tolerated: frozenset[str]) -> None:
        self._sim = sim
        self._tolerated = tolerated
        #: Tolerated violations, by finding.
        self.findings: Counter[str] = Counter()

    def broken(self, name: str, detail: str, finding: str | None = None) -> None:
        self._sim.event("violation", invariant=name, finding=finding, detail=detail)
        if finding is not None and finding in self._tolerated:
            self.findings[finding] += 1
            return
        raise InvariantViolation(name, self._sim.now(), detail, finding)


class GateExact:
    """``gate_exact`` (module docstring), judged as each call starts at the API."""

    def __init__(
        self,
        verdicts: Verdicts,
        api: ExternalApi,
        cap: int,
        stale_ms: int,
        gates: Mapping[str, DurableObject],
        callers: Iterable[DurableObject],
    ) -> None:
        self._verdicts = verdicts
        self._api = api
        self._cap = cap
        #: The world's STALE_MS: what the seed takes for the longest a call may run (the ledger's
        #: own is not trusted to say, so a ledger that heals early is not excused by it).
        self._stale_ms = stale_ms
        #: The gate of each account, by account.
        self._gates = dict(gates)
        self._callers = tuple(callers)
        #: The slot each running call started under, and the handler's caller, by call id.
        self._slot_of_call: dict[str, tuple[str, GateCaller]] = {}
        api.watch(self._changed)

    def _changed(self, change: Change, call: ApiCall) -> None:
        if change != "start":
            self._slot_of_call.pop(call.call, None)
            return
        for obj in self._callers:
            if obj.live:
                caller = obj.instance()
                assert isinstance(caller, GateCaller)
                slot = caller.slots.get(call.key)
                if slot is not None:
                    # The slot a call runs under is its handler's when it starts: a zombie call
                    # of a dead handler keeps its own, a duplicated request shares its handler's.
                    self._slot_of_call[call.call] = (slot, caller)
                    break
        gate = self._gates.get(call.account)
        if gate is None or not gate.live:
            return
        instance = gate.instance()
        assert isinstance(instance, GateObject)
        counted: dict[str, tuple[ApiCall, GateCaller]] = {}
        for running in self._api.running.values():
            held = self._slot_of_call.get(running.call)
            if running.account == call.account and held is not None and held[0] in instance.issued:
                counted.setdefault(held[0], (running, held[1]))
        if len(counted) <= self._cap:
            return
        now = call.started_at
        in_ledger = {slot.token for slot in instance.ledger.slots()}
        left = {slot: pair for slot, pair in counted.items() if slot not in in_ledger}
        # F6: each slot that left the count while its call runs did so because the call outlived
        # what the gate takes for its end: its handler's fetch cap, or STALE_MS.
        explained = bool(left) and all(
            slot in caller.gave_up or now - running.started_at > self._stale_ms
            for slot, (running, caller) in left.items()
        )
        self._verdicts.broken(
            GATE_EXACT,
            f"calls run at the API for {call.account} under {len(counted)} slots its living gate "
            f"handed out, above MAX_IN_FLIGHT {self._cap}: {', '.join(sorted(counted))}"
            f" ({', '.join(sorted(left)) or 'none'} no longer counted)",
            F6 if explained else None,
        )


class JudgedStore:
    """The store endpoint with ``single_lease``, ``fenced_write`` and ``lease_limit`` judged on every
    request it serves (module docstring); registered on the network in the store's place."""

    def __init__(
        self, sim: Sim, verdicts: Verdicts, store: LeaseStoreObject, limits: Mapping[str, int]
    ) -> None:
        self._sim = sim
        self._verdicts = verdicts
        self.store = store
        self._limits = dict(limits)
        #: The status each lease was given back with by its own write (``lease_ceiling`` reads it).
        self.written: dict[tuple[str, str], str] = {}

    def dispatch(self, method: str, payload: Any) -> Any:
        now = self._sim.now()
        before = dict(self.store.live_leases(now))
        reply = self.store.dispatch(method, payload)
        if method == "claim":
            self._claimed(reply, before, now)
        elif method in ("renew", "write", "handBack") and reply.get("ok"):
            self._fenced(method, payload, before)
            if method == "write":
                self.written[(payload["id"], payload["token"])] = payload["status"]
        return reply

    def _claimed(self, reply: list[dict[str, Any]], before: dict[str, str], now: int) -> None:
        taken = sorted(instance["id"] for instance in reply if instance["id"] in before)
        if taken:
            self._verdicts.broken(
                SINGLE_LEASE, f"a claim took {', '.join(taken)} under a live lease of another token"
            )
        for workflow, leased in sorted(self.store.leased(now).items()):
            limit = self._limits.get(workflow)
            if limit is not None and leased > limit:
                self._verdicts.broken(
                    LEASE_LIMIT,
                    f"{leased} instances of workflow {workflow} under live leases, above its limit {limit}",
                )

    def _fenced(self, method: str, payload: dict[str, Any], before: dict[str, str]) -> None:
        id, token = payload["id"], payload["token"]
        live = before.get(id)
        if live != token:
            held = "no live lease" if live is None else f"the live lease is {live}'s"
            self._verdicts.broken(
                FENCED_WRITE, f"the store accepted a {method} of {id} under token {token}, but {held}"
            )


class LeaseCeiling:
    """``lease_ceiling`` (module docstring), judged as each call starts at the API."""

    def __init__(
        self,
        verdicts: Verdicts,
        api: ExternalApi,
        store: JudgedStore,
        limits: Mapping[str, int],
        workers: Iterable[DurableObject],
    ) -> None:
        self._verdicts = verdicts
        self._api = api
        self._store = store
        self._limits = dict(limits)
        self._workers = tuple(workers)
        #: The execution (instance id, lease token) each running call was sent by, by call id.
        self._lease_of_call: dict[str, tuple[str, str]] = {}
        api.watch(self._changed)

    def _changed(self, change: Change, call: ApiCall) -> None:
        if change != "start":
            self._lease_of_call.pop(call.call, None)
            return
        started = {lease for other, lease in self._lease_of_call.items() if other in self._api.running}
        for obj in self._workers:
            if obj.live:
                worker = obj.instance()
                assert isinstance(worker, LeasedWorkerObject)
                waiting = sorted(
                    lease for lease in worker.calling if lease[0] == call.key and lease not in started
                )
                if waiting:
                    self._lease_of_call[call.call] = waiting[0]
                    break
        limit = self._limits.get(call.account)
        if limit is None:
            return
        now = call.started_at
        live = dict(self._store.store.live_leases(now))
        counted: dict[tuple[str, str], str] = {}  # execution -> "live" or the status it wrote
        for running in self._api.running.values():
            lease = self._lease_of_call.get(running.call)
            if running.account != call.account or lease is None:
                continue
            if live.get(lease[0]) == lease[1]:
                counted[lease] = "live"
            elif lease in self._store.written:
                counted[lease] = self._store.written[lease]
            # else: its lease ran out, the seed's admitted duplicate execution
        if len(counted) <= limit:
            return
        given_back = {lease: status for lease, status in counted.items() if status != "live"}
        # F7: each lease given back while its call runs was given back by a failed write: the
        # execution's fetch gave up on the call (an answered call has ended).
        explained = bool(given_back) and all(status == "failed" for status in given_back.values())
        shown = ", ".join(f"{id} ({status})" for (id, _), status in sorted(counted.items()))
        self._verdicts.broken(
            LEASE_CEILING,
            f"{len(counted)} executions of workflow {call.account} have calls running at the API, "
            f"above its limit {limit}: {shown}",
            F7 if explained else None,
        )


def judges_for(design: str) -> tuple[str, ...]:
    """The promises ``design`` is judged by here (none for the semaphore: its judges are its own)."""
    return PROMISES.get(design, ())
