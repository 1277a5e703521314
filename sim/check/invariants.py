"""The dispatcher between a simulated run and the checkers that judge it.

A :class:`Monitor` is told of every holder commit (a round, a sync, a
reclaim: the engine reports after each transaction), every admission and
release on the clients, every round, request, eviction and rebuilt
instance, and, in the account-concurrency world, every operation event and
call at the external API. It keeps the oracle of permits *actually* in use
(admitted and not yet released, counted from the clients' own admissions
and releases, independent of the holder's accounting), builds each event
record (:mod:`semsim.check.events`) and hands it to the checkers, semsim's
own first (one module each: :mod:`semsim.check.ceiling`,
:mod:`semsim.check.conservative`, :mod:`semsim.check.progress`, ...), then
the user's (:mod:`semsim.check.checker`). A violation stops the run with
the invariant's name, the virtual time, the step and the relevant state.

Liveness is judged after the faults stopped: ``progress`` is sampled from
then on, and once the run has settled (:mod:`semsim.check.settling`)
``operation_progress``, ``reclaimed`` and ``capacity_returns`` judge it,
then the user's ``on_finish``. The documented leak (a lease whose grant
reply was lost: its client never knew it, so nothing ever settles it) is
counted and reported by name.

Known findings (docs/FINDINGS.md) are attributed precisely, by the same
rules as the core's state machine: a violation a finding explains is
recorded under the finding's name; a run that tolerates that finding goes
on.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, TypeVar

import attrs

from semaphore_core.config import HolderConfig
from semaphore_core.durability import AttemptSettled, AttemptStarted, Event, Step
from semaphore_core.protocol import PermitGrant, PermitRequest
from semaphore_core.queue import QueueClient
from semsim.check import client_reads, holder_reads
from semsim.check import lockstep as lockstep_module
from semsim.check import queue_lockstep as queue_lockstep_module
from semsim.check.across_clients import AcrossClients
from semsim.check.alarm_armed import AlarmArmed
from semsim.check.alarm_follows_work import AlarmFollowsWork, Reconciled
from semsim.check.allocation_checks import NAMES as ALLOCATION
from semsim.check.attempts_bounded import AttemptsBounded
from semsim.check.attempts_in_turn import AttemptsInTurn
from semsim.check.builtin import names
from semsim.check.capacity_returns import DOCUMENTED_LEAK as DOCUMENTED_LEAK
from semsim.check.capacity_returns import CapacityReturns
from semsim.check.caps_live import CapsLive
from semsim.check.ceiling import Ceiling
from semsim.check.checker import CHECKER_FAILED, HOOKS, Checker, Violated, assertion_detail, hears
from semsim.check.completed_took_effect import CompletedTookEffect
from semsim.check.conservative import Conservative
from semsim.check.cross_check_failed import CrossCheckFailed
from semsim.check.cross_checks import CrossCheckedAcross, CrossCheckedMirror, FullConservative
from semsim.check.due_work_runs import DueWorkRuns
from semsim.check.durable import Durable
from semsim.check.effect_once import EffectOnce
from semsim.check.engine_permits import EnginePermits
from semsim.check.engine_timers import EngineTimers
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
    Request,
    Round,
    RowChanges,
    RunningCall,
)
from semsim.check.external_ceiling import ExternalCeiling
from semsim.check.fenced import Fenced
from semsim.check.group_ceiling import GroupCeiling
from semsim.check.handoff_alarm import Handoff, HandoffAlarm
from semsim.check.lease_fairness import LeaseFairness
from semsim.check.lifecycle_recorded import LifecycleRecorded
from semsim.check.no_overask import NoOverask
from semsim.check.operation_progress import OperationProgress
from semsim.check.progress import PROGRESS_WINDOW_MS as PROGRESS_WINDOW_MS
from semsim.check.progress import Progress
from semsim.check.queue_lockstep import QueueLockstep
from semsim.check.reads import CheckerReadError
from semsim.check.real_ceiling import RealCeiling
from semsim.check.reclaimed import DROPPED_ALARM as DROPPED_ALARM
from semsim.check.reclaimed import Reclaimed
from semsim.check.registration import RegistrationIdempotent
from semsim.check.released_at_end import ReleasedAtEnd
from semsim.check.released_when_done import ReleasedWhenDone
from semsim.check.replies_applied import RepliesApplied
from semsim.check.reports_monotone import ReportsMonotone
from semsim.check.requests_prompt import RequestsPrompt
from semsim.check.retry_before_last import RetryBeforeLast
from semsim.check.reuse import Reuse
from semsim.check.room import Rooms, WatchedHolder
from semsim.check.row_mirror import RowMirror
from semsim.check.settling import Pending as Pending
from semsim.check.settling import Settling
from semsim.runtime.kernel import StopRun
from semsim.runtime.scheduler import EngineReading
from semsim.world.variant import REFERENCE, Variant

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject
    from semsim.runtime.kernel import Sim
    from semsim.runtime.network import Network
    from semsim.world.external_api import ApiCall, Change, ExternalApi
    from semsim.world.holder_object import Env, HolderObject
    from semsim.world.jobs import Jobs

#: Judged as the run goes, from the one table of semsim's invariants (semsim.check.builtin).
SAFETY: Final = names("safety")
LIVENESS: Final = names("liveness")
#: Who gets permits, and when (sim/check/allocation_checks.py's rules): at every round and request.
INVARIANTS: Final = SAFETY + LIVENESS + ALLOCATION
assert names("allocation") == ALLOCATION, "semsim.check.builtin lists the allocation checks in their order"
#: The semaphore reference's known findings (docs/FINDINGS.md): what a violation may be attributed
#: to, and what a run may tolerate (``run_world``'s ``tolerated``, a case file's ``tolerated``).
SEMAPHORE_FINDINGS: Final = frozenset({"F1", "F2", "F3", "F4", "F5", "F8"})
#: Each design's known findings: the semaphore's, the gate's (F6) and the leased worker's (F7).
DESIGN_FINDINGS: Final[Mapping[str, frozenset[str]]] = {
    "semaphore": SEMAPHORE_FINDINGS,
    "gate": frozenset({"F6"}),
    "leased-worker": frozenset({"F7"}),
}
#: Every known finding, of any design.
KNOWN_FINDINGS: Final = frozenset().union(*DESIGN_FINDINGS.values())


class _UsageFailed(Exception):
    """The holder's own ``usage()`` raised where the checkers read it after a commit: the holder
    under test failed, not a checker (a planted bug, or a team's variant, can make it raise)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


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
_E = TypeVar("_E")


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
        max_attempts: int | None = None,
        retry_delay: Callable[[int], float] | None = None,
        attempt_timeout_ms: int | None = None,
        jobs: Jobs | None = None,
        releases_at_end: bool = False,
    ) -> None:
        """``network``, ``api`` and ``clients`` are the run's (None: a monitor judging no world,
        in a unit test): what is on the wire, the external API of the account-concurrency world,
        and the client objects by name, which the world fills in as it builds them. ``jobs``:
        the job service admitted items run on (None: ``released_when_done`` judges nothing).
        ``max_attempts``: the durable operations' ``maxAttempts`` in that world (None: no
        operations, so ``attempts_bounded`` and ``retry_before_last`` judge nothing).
        ``retry_delay``: that world's retry policy, the delay after attempt ``n`` failed
        (None: ``lifecycle_recorded`` judges nothing). ``attempt_timeout_ms``: that world's
        ``attemptTimeoutMs`` (None: an attempt's duration is not held to it). ``releases_at_end``:
        whether an operation's permit comes back in the step its operation ends (that world
        without F5's fix, whose release waits for the operation's calls): ``released_at_end``."""
        self.sim = sim
        #: The run's own instances of the user's checkers (semsim.check.checker), and per hook
        #: the ones that define it: only they hear it (each event is built once, for semsim's own
        #: checkers and the user's alike).
        self.checkers = tuple(checker() for checker in checkers)
        self._hearing = {hook: [c for c in self.checkers if hears(c, hook)] for hook in HOOKS}
        #: semsim's own invariants that are checkers (one module each), in the order they judge.
        self._on_commit: tuple[Checker, ...] = (Ceiling(self.fail), GroupCeiling(self.fail))
        self._alarm_armed = AlarmArmed(self.fail)
        self._fenced = Fenced(self.fail)
        #: The durable operations' lifecycle (the account-concurrency world's clients).
        self._lifecycle = (
            None
            if retry_delay is None
            else LifecycleRecorded(
                self.fail, {} if clients is None else clients, retry_delay, attempt_timeout_ms
            )
        )
        self._attempts: tuple[Checker, ...] = (
            ()
            if max_attempts is None
            else (
                AttemptsBounded(self.fail, max_attempts),
                RetryBeforeLast(self.fail, max_attempts),
                AttemptsInTurn(self.fail, lambda name: 0 if clients is None else clients[name].generation),
            )
        ) + (() if self._lifecycle is None else (self._lifecycle,))
        self._handoff_alarm = HandoffAlarm(self.fail)
        self._engine_timers = EngineTimers(self.fail)
        self._engine_permits = EnginePermits(self.fail)
        self._due_work_runs = DueWorkRuns(self.fail)
        self._caps_live = CapsLive(self.fail)
        #: Judged each time a millisecond is over, on the clients the world builds.
        self._requests_prompt = None if clients is None else RequestsPrompt(self.fail, clients, sim)
        if self._requests_prompt is not None:
            sim.timers.moment_over.append(self.moment_over)
        #: Oracle detail: each running item's key, by (client, item).
        self._running_items: dict[tuple[str, str], str] = {}
        self._released_at_end = ReleasedAtEnd(self.fail, self._running_items) if releases_at_end else None
        self._alarm_follows_work = AlarmFollowsWork(self.fail)
        self._replies_applied = RepliesApplied(self.fail)
        self._registration = RegistrationIdempotent(self.fail)
        self._effect_once = EffectOnce(self.fail)
        self._released_when_done = None if jobs is None else ReleasedWhenDone(self.fail, jobs.running)
        self._completed_took_effect = (
            None if api is None else CompletedTookEffect(self.fail, api.operation_effects)
        )
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
        #: Every client object (the world adds each as it builds it): their storage is the oracle's detail.
        self.clients = clients
        #: What the reference documents and does not count as a violation, by name.
        self.documented: Counter[str] = Counter()
        self._holders: dict[str, WatchedHolder] = {}
        #: Each holder object's key, by the object's name.
        self._keys: dict[str, str] = {}
        self._dropped_alarms: set[str] = set()
        #: When a client last admitted or released an item (a run that settles slowly still moves).
        self.last_moved_ms = 0
        #: The run's network: what is on the wire is not settled.
        self.network = network
        #: ``reuse``, ``lease_fairness`` and ``no_overask``; the storage of each client that sent
        #: a request, by name (what it sends is judged against it).
        self._reuse = Reuse(self.fail)
        self._lease_fairness = LeaseFairness(self.fail)
        self._client_storage: dict[str, sqlite3.Connection] = {}
        self._no_overask = NoOverask(self.fail, self._client_storage.__getitem__, full=full)
        #: The external API of the account-concurrency world (None in other worlds).
        self.api = api
        #: What the liveness checks ask of each key, read from its holder, the clients and the oracle.
        across = CrossCheckedAcross() if full else AcrossClients()
        self._rooms = Rooms(self._holders, self.in_use, self.in_use_by_group, across)
        self._progress = Progress(self.fail, self._rooms, clients, self.in_use, sim.event, api is not None)
        self._settling = Settling(self._rooms, self.in_use, network, api)
        #: Judged once the run settled (then the user's ``on_finish``): operations first, then
        #: key by key, each key's ``reclaimed`` then its ``capacity_returns``.
        self._operation_progress = (
            OperationProgress(self.fail, {} if clients is None else clients) if api is not None else None
        )
        self._reclaimed = Reclaimed(
            self.fail,
            self.document,
            lambda key: self._holders[key].env,
            lambda key: self._holders[key].obj.name,
            self._dropped_alarms,
        )
        self._capacity_returns = CapacityReturns(
            self.fail, self._rooms, {} if clients is None else clients, self.leaks
        )

    def watch_client(self, obj: DurableObject) -> None:
        """A client object of the run (the world adds each to ``clients`` too).

        What the checkers read from a client's storage is kept until that storage
        changes (:func:`~semsim.check.client_reads.kept`): a check of every client then costs a
        query only for the few that changed since the last one. The debug mode keeps it too, and
        checks every kept answer against storage (:func:`~semsim.check.client_reads.reading`).
        """
        obj.checker_reads = {}
        obj.checker_reads_checked = self.full

    def attach(self, key: str, obj: DurableObject, env: Env) -> None:
        """Watch the holder object of ``key`` (its storage, and the settings it runs with)."""
        mirror = CrossCheckedMirror(obj.storage, key) if self.full else RowMirror(obj.storage)
        self._holders[key] = WatchedHolder(obj, env, mirror)
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
            self.fail("checker", str(error), **({"key": error.key} if error.key else {}))
        except _UsageFailed as failed:
            # The holder's usage() failing is the holder's own fault: exact_accounting, when the
            # model in lockstep does not fail too.
            if holder.lockstep is not None:
                holder.lockstep.usage_failed(self.sim.now(), failed.error)
            self.fail(
                "checker",
                f"{key}: the holder's usage() failed after a commit, so nothing could be judged: "
                f"{type(failed.error).__name__}: {failed.error}",
            )
        except Exception as error:
            self.fail("checker", f"{key}: the checker failed after a commit: {type(error).__name__}: {error}")
        self._tell("on_commit", commit)

    def _committed(self, key: str, holder: HolderObject) -> Commit:
        now = self.sim.now()
        state = self._holders[key]
        delta = state.mirror.refresh(now)  # in the debug mode, every row named as changed
        rows = delta.after
        try:
            usage = holder.judged_usage(now)
        except Exception as error:
            raise _UsageFailed(error) from error
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
        self._reuse.on_commit(commit)  # each remembers what a round is judged on
        self._lease_fairness.on_commit(commit)
        self._reports_monotone.on_commit(commit)  # and reclaimed's claims after the deadline
        self._real_ceiling.on_commit(commit)  # the claims it accepted, and under which limit

        self._alarm_armed.on_commit(commit)
        self._conservative.on_commit(commit)
        if self._full_conservative is not None:
            self._full_conservative.on_commit(commit)
        self._progress.on_commit(commit)  # a round that left no room closes starvation windows
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
        self._capacity_returns.on_admit(admission)
        self._own(self._progress.on_admit, admission)
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
        granted, leased = holder_reads.accounted(self._holders[key].obj.storage, self.sim.now())
        return granted + leased

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
        if self._completed_took_effect is not None:
            self._completed_took_effect.on_operation(operation)
        for checker in self._attempts:
            checker.on_operation(operation)
        self._tell("on_operation", operation)

    def handed_off(
        self, client: str, alarm_ms: int | None, pending_ms: int | None, min_delay_ms: int
    ) -> None:
        """An alarm pass of ``client`` handed its work off: ``handoff_alarm``
        (:mod:`semsim.check.handoff_alarm`) judges the alarm the step left."""
        self._handoff_alarm.on_handoff(Handoff(self.sim.now(), client, alarm_ms, pending_ms, min_delay_ms))

    def engine_step(self, object: str, step: Step, reading: EngineReading) -> None:
        """A step of ``object``'s engine, and a reading of the engine as it left it:
        ``engine_permits`` (:mod:`semsim.check.engine_permits`) judges the permits, and
        ``engine_timers`` (:mod:`semsim.check.engine_timers`) the passes and early timers."""
        self._engine_permits.on_reading(object, step.now_ms, reading)
        if step.alarm_ends or step.early_timers:
            self._engine_timers.on_step(object, step, reading.options)
        if reading.targets:
            self._engine_timers.on_targets(object, reading.targets)
        if step.due_runs:
            self._due_work_runs.on_step(object, step)
        if reading.due_reads:
            self._due_work_runs.on_due_reads(object, reading.due_reads)
        if self._released_at_end is not None and step.events:
            self._released_at_end.on_step(object, step)

    def reconciled(
        self,
        object: str,
        alarm_ms: int | None,
        pending_at: Callable[[], int | None],
        min_delay_ms: int,
    ) -> None:
        """``object``'s scheduler reconciled its alarm in a step: ``alarm_follows_work``
        (:mod:`semsim.check.alarm_follows_work`) judges the alarm the step left. An alarm within
        ``alarmMinDelayMs`` of now is within the bound whatever is pending, so the pending work
        (a query per participant) is read only for a later alarm, or none."""
        now = self.sim.now()
        if alarm_ms is not None and alarm_ms <= now + min_delay_ms:
            return
        self._alarm_follows_work.on_reconciled(Reconciled(now, object, alarm_ms, pending_at(), min_delay_ms))

    @_reads_storage
    def registration_refused(
        self, client: str, id: str, payload: Any, storage: sqlite3.Connection, error: str
    ) -> None:
        """Registering ``id`` again was refused: ``registration_idempotent``
        (:mod:`semsim.check.registration`) judges the payload offered against the one stored."""
        self._registration.on_refused(client, id, payload, storage, error)

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
            operation_effects=0 if call.operation is None else api.operation_effects.get(call.operation, 0),
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
        """A round of ``key`` was served: the allocation checks and ``progress``'s order
        (:mod:`semsim.check.progress`), then the user's checkers (``on_round``)."""
        env = self._holders[key].env
        round = Round(self.sim.now(), key, tuple(requests), tuple(replies), env.leases, env.fixes)
        self._allocation_round(round)
        self._own(self._progress.on_round, round)
        self._tell("on_round", round)

    @_reads_storage
    def _allocation_round(self, round: Round) -> None:
        """``reuse`` and ``lease_fairness``, each in its module."""
        self._reuse.on_round(round)
        self._lease_fairness.on_round(round)

    @_reads_storage
    def _own(self, hook: Callable[[_E], None], event: _E) -> None:
        """One of semsim's own checkers hears ``event``; what it reads fails as ``checker``."""
        hook(event)

    def requesting(
        self, client: str, key: str, request: PermitRequest, conn: sqlite3.Connection, wire: Any = None
    ) -> None:
        """A client sends a request for ``key`` (``wire``: as serialised); ``conn`` is its own
        storage: ``no_overask`` (:mod:`semsim.check.no_overask`) judges it, then the user's
        checkers hear it."""
        self._client_storage[client] = conn
        sent = Request(self.sim.now(), key, client, request, wire)
        self._no_overask.on_request(sent)
        self._tell("on_request", sent)

    @_reads_storage
    def reply_applied(self, client: str, key: str, reply: Any, conn: sqlite3.Connection) -> None:
        """A client applied the holder's ``reply`` (the wire's dict) for ``key``; ``conn`` is its own
        storage: ``replies_applied`` (:mod:`semsim.check.replies_applied`) judges what it holds now."""
        self._replies_applied.on_reply_applied(self.sim.now(), client, key, reply, conn)

    def queue_in_lockstep(
        self, obj: DurableObject, queue: QueueClient, return_idle_leases: bool
    ) -> QueueLockstep | None:
        """``queue`` with the variant's queue model beside it (``exact_queue``), or None when the
        variant has none (its ``queue_model`` is None)."""
        build = self.variant.queue_model
        if build is None:
            return None
        rebuilt = obj.shadow_model is not None  # an instance after an eviction: storage is judged
        model = queue_lockstep_module.model_for(
            obj, queue.client_id, return_idle_leases, None if build == "literal" else build
        )
        return QueueLockstep(queue, model, obj.name, self, rebuilt=rebuilt)

    def lease_expired(self, key: str, client: str = "") -> None:
        """A client retired a lease at its expiry: its report is on the way, so the run still moves
        (an idle run is judged stuck only when nothing moved for a stall window)."""
        self.last_moved_ms = self.sim.now()

    def operator_capped(self, key: str, group: str, limit: int | None, caps: Mapping[str, int]) -> None:
        """The operator set a group's cap on ``key`` (None: lifted it); ``caps`` is the holder's map
        after the call: ``caps_live`` (:mod:`semsim.check.caps_live`) judges it."""
        self._caps_live.on_cap(self.sim.now(), key, group, limit, caps)

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
        if self._released_when_done is not None:
            self._released_when_done.on_release(release)
        self._conservative.on_release(release)
        self._tell("on_release", release)

    @_reads_storage
    def alarm_dropped(self, name: str) -> None:
        """The platform gave up on an object's alarm after its retries: ``alarm_armed`` judges a
        holder's alarm then (with the engine's fallback on, none is dropped with work pending)."""
        self._dropped_alarms.add(name)
        key = self._keys.get(name)
        if key is None:
            return  # a client object's alarm (account-concurrency worlds): operation_progress
        watched = self._holders[key]
        grants = HolderView(key, watched.obj.storage).grants()
        unclaimed = [grant.expires_at for grant in grants if grant.claimed < grant.permits]
        pending = min(unclaimed) if unclaimed else None
        self._alarm_armed.on_alarm_dropped(self.sim.now(), key, pending, watched.env.engine_fallback)

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

    # --- the end of each millisecond ---------------------------------------------------------

    @_reads_storage
    def moment_over(self) -> None:
        """Every task did what it does at this millisecond, and time is about to move:
        ``requests_prompt`` (:mod:`semsim.check.requests_prompt`) judges each live client."""
        assert self._requests_prompt is not None
        self._requests_prompt.moment_over()

    # --- liveness, once the faults stopped and the system was quiet -----------------------

    @_reads_storage
    def sample_progress(self, clients: Mapping[str, DurableObject]) -> None:
        """During the quiet period: ``progress`` (:mod:`semsim.check.progress`) notes, per key and
        group, whether items wait while permits sit unused, and fails on starvation."""
        now = self.sim.now()
        if client_reads.expiry_due(clients, now):
            self.last_moved_ms = now  # a client is about to retire a lease and report it
        self._progress.sample(clients, now)

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
        """What the run still waits on before it settles (None: it has settled), and when to look
        again (:mod:`semsim.check.settling`)."""
        return self._settling.pending(clients, self.sim.now())

    @_reads_storage
    def unsettled(self, clients: Mapping[str, DurableObject], quiet_from_ms: int, moved_ms: int) -> None:
        """The run is stuck, or too slow, after the faults stopped: ``progress`` fails
        (:meth:`semsim.check.progress.Progress.unsettled`)."""
        self._progress.unsettled(clients, self.sim.now(), quiet_from_ms, moved_ms)

    def finish(self, clients: Mapping[str, DurableObject]) -> None:
        """Once settled: ``operation_progress``, ``reclaimed`` and ``capacity_returns``, each in its
        module, then the user's checkers (``on_finish``); the documented leak is counted by name.

        Called once :meth:`settled` holds: nothing runs and every change has been
        reported, so whatever the holder still charges, apart from the documented
        leak, is capacity that did not come back.
        """
        finish = self._finish(clients)
        self._tell("on_finish", finish)

    @_reads_storage
    def _finish(self, clients: Mapping[str, DurableObject]) -> Finish:
        assert self.settled(clients), "finish() judges a settled run"
        waiting = self.outstanding(clients)
        self.sim.event("settled", waiting=waiting)
        keys = sorted(self._holders)
        finish = Finish(
            self.sim.now(),
            MappingProxyType({key: HolderView(key, self._holders[key].obj.storage) for key in keys}),
            MappingProxyType({key: self.in_use[key] for key in keys}),
            waiting,
        )
        if self._operation_progress is not None:
            self._operation_progress.judge(clients)
        if self._lifecycle is not None:
            self._lifecycle.judge(clients)
        known = self._rooms.known_leases(clients)
        for key in keys:  # key by key, as liveness was always judged
            self._reclaimed.judge(finish, key)
            self._capacity_returns.judge(finish, key, clients, known)
        return finish

    def unknown_lease_footprint(self, clients: Mapping[str, DurableObject]) -> int:
        """Permits held, over every key, by leases the holder granted and no client knows (the
        documented leak: a lease lost in its reply, until its TTL). Reads only."""
        known = self._rooms.known_leases(clients)
        return sum(self._rooms.leaked(key, known) for key in sorted(self._holders))
