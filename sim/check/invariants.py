"""The invariants of docs/INVARIANTS.md, checked while a simulation runs.

A :class:`Monitor` is told of every holder commit (a round, a sync, a
reclaim: the engine reports after each transaction) and of every admission
and release on the clients. Safety invariants are checked at those points
and a violation stops the run with the invariant's name, the virtual time,
the step and the relevant state. The oracle of permits *actually* in use
(admitted and not yet released, counted from the clients' own admissions
and releases) is independent of the holder's accounting; ``conservative``
and ``real_ceiling`` compare against it.

Liveness (``capacity_returns``, ``progress``, ``reclaimed``) is judged by
:meth:`Monitor.finish` after the faults stopped and a quiet period passed.
The documented leak (a lease whose grant reply was lost: its client never
knew it, so nothing ever settles it) is counted and reported by name.

Known findings (docs/FINDINGS.md) are attributed precisely, by the same
rules as the core's state machine: a violation a finding explains is
recorded under the finding's name; a run that tolerates that finding goes
on.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, TypeVar

import attrs

from semaphore_core.config import HolderConfig, Under, budgets
from semaphore_core.durability import CALLS, AttemptSettled, AttemptStarted, Event
from semaphore_core.fixes import GROUP_CEILING_COUNTS_LEASES
from semaphore_core.protocol import PermitGrant, PermitRequest
from semaphore_core.store import HolderStore
from semsim.check import client_reads
from semsim.check import lockstep as lockstep_module
from semsim.check.across_clients import AcrossClients
from semsim.check.alarm_armed import AlarmArmed
from semsim.check.allocation_checks import NAMES as ALLOCATION
from semsim.check.allocation_checks import NO_OVERASK, AllocationChecks, CoverMismatch
from semsim.check.builtin import names
from semsim.check.ceiling import Ceiling
from semsim.check.checker import CHECKER_FAILED, HOOKS, Checker, Violated, assertion_detail, hears
from semsim.check.conservative import Conservative
from semsim.check.cross_checks import (
    CrossCheckedAcross,
    CrossCheckedMirror,
    CrossCheckFailed,
    FullConservative,
)
from semsim.check.durable import Durable
from semsim.check.effect_once import EffectOnce
from semsim.check.events import (
    Admission,
    ApiCallChange,
    Commit,
    Evicted,
    Finish,
    HolderView,
    InstanceBuilt,
    Operation,
    Release,
    Round,
    RowChanges,
    RunningCall,
)
from semsim.check.external_ceiling import ExternalCeiling
from semsim.check.fenced import Fenced
from semsim.check.group_ceiling import GroupCeiling
from semsim.check.reads import CheckerReadError, never_built, select
from semsim.check.real_ceiling import RealCeiling
from semsim.check.reports_monotone import ReportsMonotone
from semsim.check.row_mirror import RowMirror
from semsim.runtime.kernel import StopRun
from semsim.world.variant import REFERENCE, Variant

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject
    from semsim.runtime.kernel import Sim
    from semsim.runtime.network import Network
    from semsim.world.external_api import ApiCall, Change, ExternalApi
    from semsim.world.holder_object import Env, HolderObject

#: Judged as the run goes, from the one table of semsim's invariants (semsim.check.builtin).
SAFETY: Final = names("safety")
LIVENESS: Final = names("liveness")
#: Who gets permits, and when (sim/check/allocation_checks.py): checked at every round and request.
INVARIANTS: Final = SAFETY + LIVENESS + ALLOCATION
assert names("allocation") == ALLOCATION, "semsim.check.builtin lists the allocation checks in their order"
#: The leak the reference documents: a lease in a lost reply is never settled.
DOCUMENTED_LEAK: Final = "lease_lost_in_reply"
#: Documented: with the platform alone (no Engine fallback) a dropped alarm's reclaim never runs.
DROPPED_ALARM: Final = "reclaim_lost_with_dropped_alarm"
#: The reference's known findings (docs/FINDINGS.md): what a violation may be attributed to, and
#: what a run may tolerate (``run_world``'s ``tolerated``, a case file's ``tolerated``).
KNOWN_FINDINGS: Final = frozenset({"F1", "F2", "F3", "F4", "F5"})
#: ``progress`` fails when items wait while permits sit unused for this long.
PROGRESS_WINDOW_MS: Final = 30_000


class InvariantViolation(StopRun):
    """An invariant failed. ``finding`` names the known finding that explains it, if any.

    A :class:`~semsim.runtime.kernel.StopRun`, so a ``BaseException`` like
    ``trio.Cancelled``: it must stop the whole run from wherever it is
    raised, and no handler's ``except Exception`` (the platform reporting a
    handler failure to its caller, the engine's alarm fallback, a failed
    round) may turn it into an ordinary error reply.
    """

    def __init__(
        self,
        name: str,
        t_ms: int,
        detail: str,
        finding: str | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{name} at t={t_ms} ms: {detail}")
        self.name = name
        self.t_ms = t_ms
        self.detail = detail
        self.finding = finding
        self.state = dict(state or {})


@attrs.frozen
class Violation:
    name: str
    t_ms: int
    step: int
    detail: str
    finding: str | None = None


# --- the monitor ------------------------------------------------------------------------


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reads_storage(
    method: Callable[Concatenate[Monitor, _P], _R],
) -> Callable[Concatenate[Monitor, _P], _R]:
    """A query failing on built storage, or the debug mode's cross-check, stops the run as the
    ``checker`` verdict.

    :mod:`semsim.check.reads` says which failures are not the checker's.
    """

    def reading(self: Monitor, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except (CheckerReadError, CrossCheckFailed) as error:
            self.fail("checker", str(error))
            raise AssertionError("fail() raises") from error  # pragma: no cover

    functools.update_wrapper(reading, method)
    return reading


@attrs.frozen
class _Room:
    """What one key has waiting that its holder could serve, and the room it has for it."""

    #: Per servable group with items waiting: (how many, the oldest one's arrival).
    waiting: dict[str, tuple[int, int]]
    #: Permits in use or charged (see ``Monitor._busy``), the leak included.
    busy: int
    #: The permits the mode offers waiting demand (``_capacity``).
    capacity: int
    #: The documented leak's footprint (leases no client knows).
    leaked: int


@attrs.frozen
class Pending:
    """What keeps a run from settling: when to look again, and whether the run waits on an end
    already known (a call at the external API, a grant's unclaimed permits coming back).

    Waiting on a known end is not being stuck: ``run_world`` does not fail ``progress`` for
    a run that waits on one, however long since anything moved (whatever else is also under
    way, a reply on its way to a zombie's caller, say).
    """

    #: When what keeps the run unsettled may be over, at the earliest (now when it cannot be told).
    at_ms: int
    known_end: bool = False


@attrs.define
class _HolderState:
    obj: DurableObject
    env: Env
    #: The holder's grant and lease rows, refreshed from what each commit changed.
    mirror: RowMirror


class Monitor:
    """Checks one run's invariants; see the module docstring."""

    def __init__(
        self,
        sim: Sim,
        tolerated: Iterable[str] = (),
        full: bool = False,
        variant: Variant = REFERENCE,
        checkers: Sequence[type[Checker]] = (),
        network: Network | None = None,
        api: ExternalApi | None = None,
        clients: Mapping[str, DurableObject] | None = None,
    ) -> None:
        """``network``, ``api`` and ``clients`` are the run's (None: a monitor judging no world,
        in a unit test): what is on the wire, the external API of the account-concurrency world,
        and the client objects by name, which the world fills in as it builds them."""
        self.sim = sim
        #: The run's own instances of the user's checkers (semsim.check.checker), and per hook
        #: the ones that define it: only they hear it (an admission, release, round or finish
        #: event is built only for them; semsim's own checkers hear commits, operations and calls).
        self.checkers = tuple(checker() for checker in checkers)
        self._hearing = {hook: [c for c in self.checkers if hears(c, hook)] for hook in HOOKS}
        #: semsim's own invariants that are checkers (one module each), in the order they judge.
        self._on_commit: tuple[Checker, ...] = (Ceiling(self.fail), GroupCeiling(self.fail))
        self._alarm_armed = AlarmArmed(self.fail)
        self._fenced = Fenced(self.fail)
        self._effect_once = EffectOnce(self.fail)
        self._external_ceiling = ExternalCeiling(self.fail)
        self._reports_monotone = ReportsMonotone(self.fail)
        self._real_ceiling = RealCeiling(self.fail, self.document)
        self._durable = Durable(self.fail)
        self._conservative = Conservative(self.fail, clients, lambda key: self._holders[key].mirror.rows)
        #: The debug mode's cross-check of ``conservative`` (None outside it).
        self._full_conservative = (
            FullConservative(self.fail, self._conservative, lambda key: self._holders[key].obj.storage)
            if full
            else None
        )
        #: The holder design judged, and so whether a model runs in lockstep (``exact_accounting``).
        self.variant = variant
        self.tolerated = frozenset(tolerated)
        #: Debug mode (semsim.check.cross_checks): every incremental reading is checked against
        #: the same reading from scratch, and a disagreement is the ``checker`` verdict.
        self.full = full
        self.violations: list[Violation] = []
        self.leaks: Counter[str] = Counter()
        #: Oracle: permits in use per holder key, and per (key, group) (admitted, not yet released).
        self.in_use: Counter[str] = Counter()
        self.in_use_by_group: Counter[tuple[str, str]] = Counter()
        self.in_use_by_client: Counter[tuple[str, str]] = Counter()
        #: Oracle detail: each running item's key, by (client, item).
        self._running_items: dict[tuple[str, str], str] = {}
        #: Every client object (the world adds each as it builds it): their storage is the oracle's detail.
        self.clients = clients
        #: What the reference documents and does not count as a violation, by name.
        self.documented: Counter[str] = Counter()
        self._holders: dict[str, _HolderState] = {}
        #: Each holder object's key, by the object's name.
        self._keys: dict[str, str] = {}
        #: Per key, per group with items starved: when its open ``progress`` window began.
        self._starved_since: dict[str, dict[str, int]] = {}
        self._leaked_seen: dict[str, int] = {}
        self._dropped_alarms: set[str] = set()
        #: When a client last admitted or released an item (a run that settles slowly still moves).
        self.last_moved_ms = 0
        #: Per (key, group), for its open starvation window: [its start, rounds full but for idle
        #: lease headroom, rounds short even counting it].
        self._window_rounds: dict[tuple[str, str], list[int]] = {}
        #: The run's network: what is on the wire is not settled.
        self.network = network
        #: ``reuse``, ``lease_fairness`` and ``no_overask``.
        self.allocation = AllocationChecks(full=full)
        #: The external API of the account-concurrency world (None in other worlds).
        self.api = api
        #: What ``progress`` reads from every client at once, kept from the clients that changed.
        self._across = CrossCheckedAcross() if full else AcrossClients()

    def watch_client(self, obj: DurableObject) -> None:
        """A client object of the run (the world adds each to ``clients`` too).

        Outside the debug mode, what the checkers read from a client's storage is
        kept until that storage changes (:func:`~semsim.check.client_reads.kept`): a check of every client
        then costs a query only for the few that changed since the last one.
        """
        obj.checker_reads = None if self.full else {}

    def attach(self, key: str, obj: DurableObject, env: Env) -> None:
        """Watch the holder object of ``key`` (its storage, and the settings it runs with)."""
        mirror = CrossCheckedMirror(obj.storage) if self.full else RowMirror(obj.storage)
        self._holders[key] = _HolderState(obj, env, mirror)
        self._keys[obj.name] = key

    def lockstep(self, obj: DurableObject, config: HolderConfig, key: str) -> lockstep_module.Lockstep | None:
        """The model to run beside a new instance of holder ``key`` (``exact_accounting``): the
        literal one, the variant's own, or none when the variant is judged by the invariants alone."""
        model = self.variant.model
        if model is None:
            return None
        return lockstep_module.Lockstep(obj, config, key, self, full=self.full, model=model)

    # --- reporting ---------------------------------------------------------------

    def fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        t = self.sim.now()
        violation = Violation(name, t, len(self.sim.trace), detail, finding)
        self.sim.event("violation", invariant=name, finding=finding, detail=detail)
        if finding is not None and finding in self.tolerated:
            self.violations.append(violation)
            return
        raise InvariantViolation(name, t, detail, finding, state)

    def document(self, invariant: str, name: str, count: int = 1) -> None:
        """Count behaviour the reference documents, an exception to ``invariant`` no run fails for."""
        self.documented[name] += count
        self.sim.event("documented", invariant=invariant, name=name)

    def _tell(self, hook: str, event: object) -> None:
        """Hand ``event`` to every user checker that hears ``hook``; a violation stops the run."""
        for checker in self._hearing[hook]:
            try:
                getattr(checker, hook)(event)
            except Violated as violated:
                self.fail(checker.name, violated.detail)
            except AssertionError as error:
                self.fail(checker.name, assertion_detail(error))
            except Exception as error:  # the checker's own bug: named, never the protocol's fault
                self.fail(
                    CHECKER_FAILED,
                    f"invariant {checker.name} ({type(checker).__qualname__}.{hook}) failed: "
                    f"{type(error).__name__}: {error}",
                )

    # --- holder commits ---------------------------------------------------------------

    def committed(self, key: str, holder: HolderObject) -> None:
        """After every holder transaction: ceilings, monotone reports, the alarm.

        Called from inside the holder's handlers, some of which (the engine's
        alarm) turn an ordinary exception into a retry: a failure of the
        checker itself is therefore reported as the ``checker`` verdict, which
        stops the run like any violation, rather than swallowed.
        """
        try:
            commit = self._committed(key, holder)
        except CrossCheckFailed as error:
            self.fail("checker", f"{key}: {error}", key=key)
        except Exception as error:
            self.fail("checker", f"{key}: the checker failed after a commit: {type(error).__name__}: {error}")
        self._tell("on_commit", commit)

    def _committed(self, key: str, holder: HolderObject) -> Commit:
        now = self.sim.now()
        state = self._holders[key]
        delta = state.mirror.refresh(now)  # in the debug mode, every row named as changed
        rows = delta.after
        usage = holder.judged_usage(now)
        store = holder.holder.store
        commit = Commit(
            now,
            key,
            usage,
            MappingProxyType(dict(holder.group_limits)),
            self.in_use[key],
            HolderView(key, holder.ctx.storage, built=True),  # it just committed
            holder.env.leases,
            store.next_pending_at(),
            holder.ctx.get_alarm(),
            holder.env.alarm_min_delay_ms,
            RowChanges(delta.before, rows, delta.changed, delta.deadlines),
        )
        for checker in self._on_commit:  # ceiling, group_ceiling: each in its own module
            checker.on_commit(commit)
        self.allocation.committed(key, delta.before, rows, usage, holder.group_limits)
        self._reports_monotone.on_commit(commit)  # and reclaimed's claims after the deadline
        self._real_ceiling.on_commit(commit)  # the claims it accepted, and under which limit

        self._alarm_armed.on_commit(commit)
        self._conservative.on_commit(commit)
        if self._full_conservative is not None:
            self._full_conservative.on_commit(commit)
        self._round_was_full(key, state)
        return commit

    # --- what clients do -------------------------------------------------------------------

    def admitted(
        self, key: str, group: str, *, client: str, item: str, grant: str | None, lease: str | None
    ) -> None:
        """A client admitted ``item`` of ``key`` (through ``grant`` or ``lease``): one more permit in use."""
        accounted = self._accounted_at_admission(key, group, client=client, item=item)
        env = self._holders[key].env
        admission = Admission(
            self.sim.now(),
            key,
            group,
            client,
            item,
            grant,
            lease,
            self.in_use[key],
            limit=env.limit,
            leases=env.leases,
            accounted=accounted,
        )
        self._conservative.on_admit(admission)
        self._no_longer_starved(key)
        self._real_ceiling.on_admit(admission)
        self._tell("on_admit", admission)

    @_reads_storage
    def _accounted_at_admission(self, key: str, group: str, *, client: str, item: str) -> int:
        """The oracle's books for one more permit in use; holder-accounted usage, read now."""
        assert (client, item) not in self._running_items, (client, item)
        self._running_items[client, item] = key
        self.in_use[key] += 1
        self.in_use_by_group[key, group] += 1
        self.in_use_by_client[key, client] += 1
        self.last_moved_ms = self.sim.now()
        granted, leased = _accounted(self._holders[key].obj.storage, self.sim.now())
        return granted + leased

    @_reads_storage
    def _no_longer_starved(self, key: str) -> None:
        """An admission that puts every permit in use closes the key's starvation windows."""
        if key in self._starved_since and self.clients is not None:
            state = self._holders[key]
            running = self._lease_in_use(self.clients, key)
            if self.in_use[key] + self._leaked_seen.get(key, 0) >= _capacity(state.env, running):
                del self._starved_since[key]  # every permit in use at this moment: no group starved

    def operation_event(self, client: str, event: Event) -> None:
        """A client's operation lifecycle event: ``fenced`` (:mod:`semsim.check.fenced`) judges it,
        then the user's checkers hear it; the attempts' starts are noted for ``external_ceiling``.

        An attempt starting or settling is work moving, as an admission or a
        release is: operations waiting for the scheduler's pool (its
        ``alarmConcurrency``) may go a long time between releases while
        attempts run all along. They are bounded (``maxAttempts`` each), so
        this cannot keep a stuck run alive for ever.
        """
        if isinstance(event, AttemptStarted | AttemptSettled):
            self.last_moved_ms = self.sim.now()
        operation = Operation(self.sim.now(), client, event)
        self._external_ceiling.on_operation(operation)  # an attempt's start, for a zombie's calls
        self._fenced.on_operation(operation)
        self._tell("on_operation", operation)

    def api_changed(self, change: Change, call: ApiCall) -> None:
        """``external_ceiling`` (:mod:`semsim.check.external_ceiling`) as each call starts at the
        external API, ``effect_once`` (:mod:`semsim.check.effect_once`) as each ends; then the
        user's checkers hear it."""
        api = self.api
        assert api is not None
        account = call.account
        holder = self._holders.get(account)
        running = [other for other in api.running.values() if other.account == account]
        # The items holding a permit, only when a call runs to ask it of (most API changes have few).
        holding = {item for _, item in self._running_items} if running else set()
        heard = ApiCallChange(
            self.sim.now(),
            change,
            account,
            call.key,
            api.effects.get(call.key, 0),
            api.idempotent,
            in_flight=api.in_flight.get(account, 0),
            in_use=self.in_use[account],
            limit=None if holder is None else holder.env.limit,
            leases=None if holder is None else holder.env.leases,
            running=tuple(
                RunningCall(other.key, other.started_at, other.attempt, other.key in holding)
                for other in running
            ),
        )
        if change == "end":
            # A call ending is work moving: a run that waited on a zombie's end is not stuck at it.
            self.last_moved_ms = self.sim.now()
            self._effect_once.on_api(heard)
        else:
            self._external_ceiling.on_api(heard)
        self._tell("on_api", heard)

    def round_served(
        self, key: str, requests: Sequence[PermitRequest], replies: Sequence[PermitGrant]
    ) -> None:
        """A round of ``key`` was served: semsim's checks of it, then the user's (``on_round``)."""
        self._round_served(key, requests, replies)
        if self._hearing["on_round"]:
            self._tell("on_round", Round(self.sim.now(), key, tuple(requests), tuple(replies)))

    @_reads_storage
    def _round_served(
        self, key: str, requests: Sequence[PermitRequest], replies: Sequence[PermitGrant]
    ) -> None:
        """``progress``, oldest first: no younger demand gets permits while older waits on the limit.

        The allocator serves demand oldest first; once the limit stops one demand it
        stops every later one, so a grant to younger demand in the same round means
        the order was not kept.

        Also notes, while a starvation window is open, whether this round left the
        key full but for idle lease headroom (what F4 explains) or not even then.
        """
        env, now = self._holders[key].env, self.sim.now()
        for name, detail in self.allocation.round(key, env.leases, env.fixes, requests, replies, now):
            self.fail(name, detail, key=key)
        self._note_round(key)
        blocked = [
            demand.oldest_at
            for request, reply in zip(requests, replies, strict=True)
            for demand in request.demand
            if any(b.group == demand.group and b.reason == "limit" for b in reply.blocked)
        ]
        if not blocked:
            return
        oldest_blocked = min(blocked)
        for request, reply in zip(requests, replies, strict=True):
            granted = {grant.group for grant in reply.grants}
            for demand in request.demand:
                if demand.group in granted and demand.oldest_at > oldest_blocked:
                    self.fail(
                        "progress",
                        f"{key}: {request.client_id}'s demand in {demand.group} (oldest {demand.oldest_at}) "
                        f"was granted while demand from {oldest_blocked} waited on the limit",
                    )

    def requesting(self, client: str, key: str, request: PermitRequest, conn: Any) -> None:
        """A client sends a request for ``key``; ``conn`` is its own storage at that moment."""
        try:
            broken = self.allocation.request_sent(key, request, conn, self.sim.now())
        except CoverMismatch as error:
            self.fail("checker", f"{client}: {error}", key=key)
        if broken:
            self.fail(NO_OVERASK, broken, key=key)

    def lease_expired(self, key: str, client: str = "") -> None:
        """A client retired a lease at its expiry: its report is on the way, so the run still moves
        (an idle run is judged stuck only when nothing moved for a stall window)."""
        self.last_moved_ms = self.sim.now()

    def released(self, key: str, group: str, *, client: str, item: str) -> None:
        held = self._running_items.pop((client, item))
        assert held == key, (held, key)
        self.last_moved_ms = self.sim.now()
        self.in_use[key] -= 1
        self.in_use_by_group[key, group] -= 1
        self.in_use_by_client[key, client] -= 1
        assert self.in_use[key] >= 0, key
        assert self.in_use_by_client[key, client] >= 0, (key, client)
        release = Release(self.sim.now(), key, group, client, item, self.in_use[key])
        self._conservative.on_release(release)
        self._tell("on_release", release)

    def alarm_dropped(self, name: str) -> None:
        """The platform gave up on an object's alarm after its retries."""
        self._dropped_alarms.add(name)

    # --- eviction ----------------------------------------------------------------------------

    def evicting(self, obj: DurableObject) -> None:
        """A holder object is being evicted: ``durable`` (:mod:`semsim.check.durable`) notes its
        rows, then the user's checkers hear it."""
        key = self._keys[obj.name]
        evicted = Evicted(self.sim.now(), key, obj.name, HolderView(key, obj.storage))
        self._durable.on_evict(evicted)
        self._tell("on_evict", evicted)

    def rebuilt(self, obj: DurableObject) -> None:
        """An instance of a holder object is being built from its storage: ``durable`` compares
        its rows with the eviction's, then the user's checkers hear it."""
        key = self._keys[obj.name]
        built = InstanceBuilt(self.sim.now(), key, obj.name, obj.generation, HolderView(key, obj.storage))
        self._durable.on_instance(built)
        self._tell("on_instance", built)

    # --- liveness, once the faults stopped and the system was quiet -----------------------

    @_reads_storage
    def sample_progress(self, clients: Mapping[str, DurableObject]) -> None:
        """During the quiet period: note, per key and group, whether items wait while permits sit unused.

        Unused means not actually in use (the oracle) and not leaked as the
        reference documents. ``progress`` fails only when a group's items
        waited a whole ``PROGRESS_WINDOW_MS`` without a single moment at which
        there was no room for them (an admission reaching the limit, or a
        round that left the key full or the group at its cap, closes the
        window): a permit in transit between a release and the next round is
        latency, not starvation. Windows are per group, so a capped group's
        long backlog and another group's fresh arrivals do not make one
        window between them.
        """
        now = self.sim.now()
        if client_reads.expiry_due(clients, now):
            self.last_moved_ms = now  # a client is about to retire a lease and report it
        known = self._known_leases(clients)
        for key, state in sorted(self._holders.items()):
            room = self._starvation(key, state, clients, known, now)
            self._leaked_seen[key] = room.leaked
            starved = room.waiting if room.busy < room.capacity else {}
            windows = self._starved_since.get(key, {})
            for group in [group for group in windows if group not in starved]:
                del windows[group]
            for group, (count, oldest) in starved.items():
                # Starved since the stretch began, or since the oldest item still waiting came:
                # items that keep arriving and being served within the window are not starved.
                since = max(self._starved_since.setdefault(key, {}).setdefault(group, now), oldest)
                if now - since < PROGRESS_WINDOW_MS:
                    continue
                idle = client_reads.idle_headroom(clients, key, now)
                # F4: the unused permits are live leases' undrawn headroom on clients with
                # nothing queued in those groups: they never hear ``contended``, so it
                # comes back only when the leases expire (their ``ttlMs``). Either
                # now, or at every round of the window (permits released between rounds
                # then wait for the next one, which idle headroom keeps from filling).
                held_by_idle = room.busy + idle >= room.capacity
                held_by_idle = held_by_idle or self._only_idle_headroom_kept_rounds_short(key, group)
                finding = "F4" if idle and held_by_idle else None
                self._starved_since.pop(key, None)
                self.fail(
                    "progress",
                    f"{key}: {count} items of group {group} have waited {now - since} ms while only "
                    f"{self.in_use[key]} of {room.capacity} permits were in use ({room.busy} busy or "
                    f"reported busy, {room.leaked} leaked, {idle} idle lease headroom)",
                    finding,
                )
            if not self._starved_since.get(key, True):
                del self._starved_since[key]

    def _starvation(
        self,
        key: str,
        state: _HolderState,
        clients: Mapping[str, DurableObject],
        known: Container[str],
        now: int,
    ) -> _Room:
        """Now, for ``key``: what waits that the holder could serve, and the room it has."""
        caps = _caps(state.obj)
        # A capped group is servable while neither the clients nor what the holder
        # charges against the cap (grants with releases not yet reported and, where
        # the holder counts them, the group's leases) has it at its cap.
        charged = self._charged_against_caps(state, now) if caps else {}
        servable = {
            group: entry
            for group, entry in sorted(self._waiting_by_group(clients, key).items())
            if group not in caps or caps[group] > max(self.in_use_by_group[key, group], charged.get(group, 0))
        }
        leaked = self._leaked(state, known)
        capacity = _capacity(state.env, self._lease_in_use(clients, key))
        # Busy: what the holder still counts for grants (a release not yet reported,
        # a grant on its way to be claimed: latency, not starvation), what leases
        # actually run, and the documented leak. Idle lease headroom is not busy.
        busy = self._busy(key, state, clients, leaked)
        return _Room(servable, busy, capacity, leaked)

    # --- settling, once the story is over -------------------------------------------------

    @_reads_storage
    def outstanding(self, clients: Mapping[str, DurableObject]) -> int:
        """Items queued, being claimed or running on any client, for any key."""
        return client_reads.outstanding(clients)

    @_reads_storage
    def settled(self, clients: Mapping[str, DurableObject]) -> bool:
        """Whether nothing more can happen: liveness can be judged.

        No client runs or is claiming anything, has changes the holder has not
        acknowledged or a lease past its expiry it has yet to retire; no
        message is on the wire (a round's reply may carry a grant or a lease
        the holder has committed and its client not yet heard of) and no call
        is still working at the external API (a zombie); no grant has
        unclaimed permits that may still be claimed, or that the alarm has yet
        to take back (until its deadline plus the alarm's delay); and no key has
        items waiting that the holder could serve: what stays queued waits on
        a capped group, or on a limit the documented leak fills (or that is 0),
        with no grant outstanding that could serve it.
        """
        return self.pending(clients) is None

    @_reads_storage
    def pending(self, clients: Mapping[str, DurableObject]) -> Pending | None:
        """What the run still waits on before it settles (None: it has settled), and when to look again."""
        now = self.sim.now()
        if (
            any(self.in_use.values())
            or client_reads.unreported(clients)
            or client_reads.claiming(clients)
            or client_reads.expiry_due(clients, now)
        ):
            return Pending(now)
        known = self._known_leases(clients)
        holders = sorted(self._holders.items())
        for key, state in holders:
            room = self._starvation(key, state, clients, known, now)
            waiting = sum(count for count, _ in room.waiting.values())
            if waiting and (_accounted(state.obj.storage, now)[0] or room.capacity > room.leaked):
                return Pending(now)
        # Then what is under way, each with when it may be over: the run settles when none is.
        under_way: list[Pending] = []
        network = self.network
        if network is not None and network.on_wire:
            # A reply that landed is still on the wire until its caller's task resumes with it,
            # later in this millisecond: look again a millisecond on at the earliest.
            under_way.append(Pending(max(network.lands_by_ms, now + 1)))
        if self.api is not None and self.api.running:
            # A call still working at the external API (a zombie whose caller gave up) has yet to
            # take effect and end: ``effect_once`` and ``external_ceiling`` judge it then.
            ends_at = min(call.ends_at for call in self.api.running.values())
            under_way.append(Pending(ends_at, known_end=True))
        for _, state in holders:
            bound = _claimable_until(state, now)
            if bound is not None:
                under_way.append(Pending(bound + 1, known_end=True))
        if not under_way:
            return None
        return Pending(
            min(pending.at_ms for pending in under_way), known_end=any(p.known_end for p in under_way)
        )

    @_reads_storage
    def unsettled(self, clients: Mapping[str, DurableObject], quiet_from_ms: int, moved_ms: int) -> None:
        """The run is stuck, or too slow, after the faults stopped: ``progress`` fails.

        Attributed to F4 when every key with work waiting is held up by the headroom of
        idle clients' live leases (the finding's own starvation, which lasts until those
        leases expire); otherwise no finding explains it.
        """
        now = self.sim.now()
        known = self._known_leases(clients)
        finding = None
        held_up = []
        for key, state in sorted(self._holders.items()):
            room = self._starvation(key, state, clients, known, now)
            if room.waiting:
                idle = client_reads.idle_headroom(clients, key, now)
                held_up.append(bool(idle) and room.busy + idle >= room.capacity)
        if held_up and all(held_up) and not any(self.in_use.values()):
            finding = "F4"
        self.sim.event("liveness_cut_short", finding=finding)
        self.fail(
            "progress",
            f"the run did not settle: {now - quiet_from_ms} ms after the faults stopped, "
            f"{self.outstanding(clients)} items are still queued, claiming or running "
            f"({sum(self.in_use.values())} running) and nothing was admitted or released "
            + ("(nor any operation attempted) " if self.api is not None else "")
            + f"for {now - moved_ms} ms"
            + ("; reports are unacknowledged" if client_reads.unreported(clients) else ""),
            finding,
        )

    def _note_round(self, key: str) -> None:
        windows = self._starved_since.get(key)
        if not windows or self.clients is None:
            return
        state = self._holders[key]
        busy = self._busy(key, state, self.clients, self._leaked_seen.get(key, 0))
        capacity = _capacity(state.env, self._lease_in_use(self.clients, key))
        if busy >= capacity:
            return  # a full round: ``_round_was_full`` closed the windows already
        full_but_idle = busy + client_reads.idle_headroom(self.clients, key, self.sim.now()) >= capacity
        for group, since in windows.items():
            window = self._window_rounds.get((key, group))
            if window is None or window[0] != since:
                window = self._window_rounds[key, group] = [since, 0, 0]
            window[1 if full_but_idle else 2] += 1

    def _only_idle_headroom_kept_rounds_short(self, key: str, group: str) -> bool:
        """Whether every round of the group's open window was full but for idle lease headroom (F4)."""
        window = self._window_rounds.get((key, group))
        since = self._starved_since.get(key, {}).get(group)
        return window is not None and window[0] == since and window[1] > 0 == window[2]

    def _charged_against_caps(self, state: _HolderState, now: int) -> Counter[str]:
        """Per group, the permits the holder's grant pass counts against a group limit.

        Grants always; with ``within_group_limit`` and the F1 fix, the group's
        lease footprint too (a lease lost in a reply, the documented leak, can
        then hold a capped group shut for good).
        """
        charged = Counter(_granted_by_group(state.obj.storage, now))
        options = state.env.leases
        if (
            options is not None
            and options.limited_groups == "within_group_limit"
            and GROUP_CEILING_COUNTS_LEASES in state.env.fixes
        ):
            for group, (_, footprint) in _lease_totals(state.obj.storage).items():
                charged[group] += footprint
        return charged

    def _busy(self, key: str, state: _HolderState, clients: Mapping[str, DurableObject], leaked: int) -> int:
        granted, _ = _accounted(state.obj.storage, self.sim.now())
        return max(self.in_use[key], granted + self._lease_in_use(clients, key)) + leaked

    def _leaked(self, state: _HolderState, known: Container[str]) -> int:
        """The documented leak's footprint now, from the row mirror: every holder commit refreshes
        it, so between commits it holds the stored rows (the debug mode reads them and compares)."""
        return state.mirror.unknown_footprint(known)

    def _lease_in_use(self, clients: Mapping[str, DurableObject], key: str) -> int:
        """Lease permits drawn and not yet released for ``key``, as the clients count them."""
        self._across.refresh(clients)
        return self._across.lease_in_use(key)

    def _waiting_by_group(self, clients: Mapping[str, DurableObject], key: str) -> dict[str, tuple[int, int]]:
        """Per group, the items of ``key`` queued or being claimed, and when the oldest arrived."""
        self._across.refresh(clients)
        return self._across.waiting_by_group(key)

    def _known_leases(self, clients: Mapping[str, DurableObject]) -> Container[str]:
        """Every lease id some client knows."""
        self._across.refresh(clients)
        return self._across.known_leases()

    def _round_was_full(self, key: str, state: _HolderState) -> None:
        """A commit that left no room for what waits (idle lease headroom aside) ends its windows.

        The holder allocates once per round: permits released between rounds wait
        for the next one. That is the protocol's cadence, not starvation. No room
        means every permit busy (every window of the key closes), or, for one
        group, the group at its cap (a capped group's window closes at every
        round that fills the cap, however long its backlog).
        """
        windows = self._starved_since.get(key)
        if windows and self.clients is not None:
            clients = self.clients
            room = self._starvation(key, state, clients, self._known_leases(clients), self.sim.now())
            if room.busy >= room.capacity:
                del self._starved_since[key]
                return
            for group in [group for group in windows if group not in room.waiting]:
                del windows[group]
            if not windows:
                del self._starved_since[key]

    def _operations_finished(self, clients: Mapping[str, DurableObject]) -> None:
        """``operation_progress``: once the run has settled, no client has an operation pending.

        A pending operation keeps its item running, so a settled run has
        none, unless an item's permit came back while its operation could
        still run (and call the API) again.
        """
        pending = [
            f"{name}/{id}"
            for name, obj in sorted(clients.items())
            for (id,) in select(
                obj.storage, f"SELECT id FROM {CALLS.name} WHERE status = 'pending' ORDER BY id"
            )
        ]
        if pending:
            self.fail(
                "operation_progress",
                f"{len(pending)} operations still pending once the run settled: {', '.join(pending[:5])}"
                + (" ..." if len(pending) > 5 else ""),
            )

    def finish(self, clients: Mapping[str, DurableObject]) -> None:
        """``capacity_returns`` and ``reclaimed`` once settled; the documented leak is counted by name.

        Called once :meth:`settled` holds: nothing runs and every change has been
        reported, so whatever the holder still charges, apart from the documented
        leak, is capacity that did not come back. The user's checkers hear
        ``on_finish`` after semsim's own liveness held.
        """
        self._finish(clients)
        if self._hearing["on_finish"]:
            keys = sorted(self._holders)
            finish = Finish(
                self.sim.now(),
                MappingProxyType({key: HolderView(key, self._holders[key].obj.storage) for key in keys}),
                MappingProxyType({key: self.in_use[key] for key in keys}),
                self.outstanding(clients),
            )
            self._tell("on_finish", finish)

    @_reads_storage
    def _finish(self, clients: Mapping[str, DurableObject]) -> None:
        assert self.settled(clients), "finish() judges a settled run"
        now = self.sim.now()
        self.sim.event("settled", waiting=self.outstanding(clients))
        if self.api is not None:
            self._operations_finished(clients)
        known = self._known_leases(clients)
        for key, state in sorted(self._holders.items()):
            if not _built(state.obj.storage):
                continue  # the holder was never built: nothing was ever granted
            store = HolderStore(state.obj.storage)
            stale = [
                g
                for g in store.list_grants()
                if g.claimed < g.permits and g.expires_at + state.env.alarm_min_delay_ms < now
            ]
            if stale and state.obj.name in self._dropped_alarms and not state.env.engine_fallback:
                # Documented (seed 002): the platform drops an alarm after its retries;
                # without the Engine's fallback re-arm nothing reclaims those permits.
                self.document("reclaimed", DROPPED_ALARM, len(stale))
            elif stale:
                self.fail(
                    "reclaimed",
                    f"{key}: {len(stale)} grants past their deadline still hold unclaimed permits",
                )
            granted, leased = _accounted(state.obj.storage, now)
            leaked = self._leaked(state, known)
            lost_in_replies = _leaked_count(state.obj.storage, known)
            if lost_in_replies:  # no name counted zero times: reports list what happened
                self.leaks[DOCUMENTED_LEAK] += lost_in_replies
            # A client whose items still wait (in a capped group, say) is still working: it
            # keeps its leases until the holder says contended, by design.
            held = _held_by_waiting_clients(state.obj.storage, clients, key, known)
            if granted or leased - leaked - held:
                idle = client_reads.idle_headroom(clients, key, now)
                finding = "F4" if not granted and leased - leaked - held <= idle else None
                self.fail(
                    "capacity_returns",
                    f"{key}: once settled, {granted} granted and {leased - leaked - held} leased "
                    f"permits are still charged ({leaked} more leaked in lost replies, as documented; "
                    f"{held} held by clients whose items still wait; {idle} idle headroom of live leases)",
                    finding,
                )


def _held_by_waiting_clients(
    conn: Any, clients: Mapping[str, DurableObject], key: str, known: Container[str]
) -> int:
    """Footprint of the (known) leases of clients that still have items of ``key`` waiting."""
    waiting = client_reads.waiting_clients(clients, key)
    return sum(
        max(0, lease.permits - lease.released)
        for lease in _leases(conn)
        if lease.client_id in waiting and lease.lease_id in known
    )


def _claimable_until(state: _HolderState, now: int) -> int | None:
    """The earliest time by which some grant's unclaimed permits are claimed or taken back, or None.

    Until its deadline a grant's unclaimed permits may still be claimed; the alarm
    takes them back within ``alarm_min_delay_ms`` after it (``reclaimed``).
    """
    bounds = [
        int(expires_at) + state.env.alarm_min_delay_ms
        for _, _, _, permits, claimed, _, _, expires_at in state.mirror.rows["grants"].values()
        if claimed < permits and now <= int(expires_at) + state.env.alarm_min_delay_ms
    ]
    return min(bounds, default=None)


def _built(conn: Any) -> bool:
    """Whether a holder's schema exists (an object nobody ever called has none).

    Storage with tables but no readable grants table (a variant that renamed
    it, say) is not "never built": it raises :class:`CheckerReadError`.
    """
    try:
        conn.execute("SELECT 1 FROM durability_semaphore_grants LIMIT 0")
    except sqlite3.OperationalError as error:
        if never_built(conn, "durability_semaphore_grants"):
            return False
        raise CheckerReadError(f"a checker could not read a holder's grants: {error}") from error
    return True


def _leaked_count(conn: Any, known: Container[str]) -> int:
    return sum(1 for lease in _leases(conn) if lease.lease_id not in known)


def _leases(conn: Any) -> list[Any]:
    if not _built(conn):
        return []
    try:
        return HolderStore(conn).list_leases()
    except sqlite3.OperationalError as error:
        raise CheckerReadError(f"a checker could not list a holder's leases: {error}") from error


def _capacity(env: Env, leases_running: int) -> int:
    """The permits the mode offers waiting demand: the limit, except under ``Under``.

    Under's reserve is for leases only (by design): plain clients can use the
    grants' pool alone, and reserve a lease holds but does not draw serves
    nobody else, so only the lease permits actually running count.
    """
    options = env.leases
    if options is None or not isinstance(options.provisioning, Under):
        return env.limit
    pools = budgets(options.provisioning, env.limit)
    return pools.grants + min(pools.leases, leases_running)


def _caps(holder: DurableObject) -> dict[str, int]:
    """The live holder instance's group caps (none if it is not live: eviction forgot them)."""
    instance = getattr(holder, "_instance", None)
    return dict(getattr(instance, "group_limits", {}) or {})


def _lease_totals(conn: Any) -> dict[str, tuple[int, int]]:
    if not _built(conn):
        return {}
    return HolderStore(conn).lease_totals()


def _granted_by_group(conn: Any, now: int) -> dict[str, int]:
    """Holder-accounted grant permits per group (none if the holder was never built)."""
    if not _built(conn):
        return {}
    store = HolderStore(conn)
    unreclaimed = store.unreclaimed_by_group(now)
    return {group: total - unreclaimed.get(group, 0) for group, (_, total) in store.grant_totals().items()}


def _accounted(conn: Any, now: int) -> tuple[int, int]:
    """Holder-accounted usage read straight from a holder's storage (no live instance needed)."""
    if not _built(conn):
        return 0, 0
    store = HolderStore(conn)
    totals = store.grant_totals()
    unreclaimed = store.unreclaimed_by_group(now)
    granted = sum(total for _, total in totals.values()) - sum(unreclaimed.values())
    return granted, store.leased_footprint()
