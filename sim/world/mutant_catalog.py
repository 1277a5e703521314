"""A catalog of protocol mutants of ``semaphore_core``, applied at run time.

A mutation score is the evidence that the simulator's checkers catch real
protocol bugs rather than only the ones they were written against. Each
:class:`Mutant` plants one bug a developer could plausibly write, for the
duration of a ``with mutant.patch():`` block, by rebinding a function or
method where the core looks it up (the defining module and each module that
imported it), and puts every binding back exactly afterwards, whatever
happens inside the block. The source files are never
edited, so the catalog can run next to a clean checkout and against the
same fuzzer campaigns as the real code.

Rules the mutants follow, and why:

- A mutant wraps the real function (or replaces one small one) rather than
  copying a large one: a copy would silently go stale as the core evolves,
  a wrapper keeps tracking it. Where a wrapper needs a different view of
  storage it uses a ``HolderStore`` subclass on the same connection.
- A mutant never rebinds a name the checkers use (the modules of ``semsim.check`` have
  their own ``budgets`` and read ``HolderStore`` and ``Holder.usage`` directly),
  so the invariants keep judging the truth while the holder is wrong.
- Every target must already exist where it is patched: a renamed function
  fails loudly (``AttributeError``) instead of turning the mutant into a
  silent no-op.

``tests/test_mutant_catalog.py`` shows each mutant changes the observable
behaviour it claims to, on a scripted holder, and that the original
behaviour is back after the block.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, TypeAlias

import attrs

import semaphore_core.durability.engine as engine_module
import semaphore_core.durability.operations as operations_module
import semaphore_core.grants as grants_module
import semaphore_core.holder as holder_module
import semaphore_core.leases as leases_module
import semaphore_core.migrations as migrations_module
import semaphore_core.protocol as protocol_module
import semaphore_core.queue as queue_module
import semaphore_core.rounds as rounds_module
import semsim.world.client_object as client_object_module
from semaphore_core.collation import CollationKey
from semaphore_core.config import Budgets, HolderConfig, LeaseOptions, Provisioning, Strict, Under, scaled
from semaphore_core.durability.engine import Engine
from semaphore_core.durability.microtasks import JsPromise
from semaphore_core.leases import LeaseAllocation, LeaseCandidate, LeaseReportOutcome
from semaphore_core.migrations import Migration
from semaphore_core.policy import UNLIMITED, GroupPolicy
from semaphore_core.protocol import (
    GrantReport,
    GrantResult,
    LeaseReport,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
)
from semaphore_core.queue import QueueClient
from semaphore_core.rounds import RoundResult
from semaphore_core.store import GRANTS, LEASES, GrantRow, HolderStore, LeaseRow
from semaphore_core.transaction import transaction
from semaphore_core.usage import Usage
from semsim.world.design import DESIGNS, DesignName
from semsim.world.variant import Variant

#: A mutant's variant is named this and then the mutant's name.
VARIANT_PREFIX: Final = "mutant/"
_NAME: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def _check_name(_: object, __: attrs.Attribute[str], value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ValueError(f"a mutant's name must be kebab-case, got {value!r}")


def _check_description(_: object, __: attrs.Attribute[str], value: str) -> None:
    if not value or "\n" in value:
        raise ValueError(f"a mutant's description must be one non-empty line, got {value!r}")


@attrs.frozen
class Mutant:
    """One planted bug: ``with mutant.patch(): ...`` runs the block against the mutated core."""

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=_check_description)
    patch: Callable[[], contextlib.AbstractContextManager[None]]
    #: The design whose code the patch changes (``semsim.world.design.DESIGNS``): only its runs
    #: can show the bug, so only its scenarios and campaigns score it.
    design: DesignName = attrs.field(default="semaphore", validator=attrs.validators.in_(DESIGNS))

    @property
    def variant(self) -> Variant:
        """The mutant as a variant, ``mutant/NAME``: judged as the reference is, so any world,
        scenario or campaign of its design runs it by name (``semsim fuzz --variant mutant/NAME``,
        with ``--design`` for the gate's and the leased worker's)."""
        return Variant(
            f"{VARIANT_PREFIX}{self.name}", description=self.description, patch=self.patch, design=self.design
        )


# --- applying and restoring ---------------------------------------------------------------

Owner: TypeAlias = ModuleType | type
#: Where to rebind, and how to build the replacement from what is bound there now.
Rebind: TypeAlias = tuple[Owner, str, Callable[[Any], Any]]


@contextlib.contextmanager
def _rebound(rebinds: Sequence[Rebind]) -> Iterator[None]:
    """Rebind each ``owner.name`` to ``make(current)`` for the block; put the originals back after.

    The replacement is built from the binding current at entry, so two
    mutants nest (the inner wraps the outer). Restoration is by identity, in
    reverse order, also when the block raises or a later target is missing.
    """
    saved: list[tuple[Owner, str, object]] = []
    try:
        for owner, name, make in rebinds:
            own = vars(owner)
            if name not in own:
                raise AttributeError(f"mutant target {owner.__name__}.{name} does not exist (source drift?)")
            original = own[name]
            saved.append((owner, name, original))
            setattr(owner, name, make(original))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def patcher(*rebinds: Rebind) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """A mutant's ``patch``: each ``(owner, name, make)`` rebound for the block, and put back after
    (``_rebound``). Public for the catalogs above this layer (``semsim.check.planted``)."""
    return lambda: _rebound(rebinds)


def _everywhere(modules: Iterable[ModuleType], name: str, make: Callable[[Any], Any]) -> tuple[Rebind, ...]:
    """The same rebinding in the defining module and in each module that imported the name."""
    return tuple((module, name, make) for module in modules)


_GRANT_REPORT_USERS: Final = (grants_module, rounds_module, holder_module)
_LEASE_REPORT_USERS: Final = (leases_module, rounds_module, holder_module)
_ALLOCATE_USERS: Final = (rounds_module, holder_module)
_LEASE_PASS_USERS: Final = (leases_module, rounds_module)

ApplyGrantReports: TypeAlias = Callable[..., list[GrantResult]]
ApplyLeaseReports: TypeAlias = Callable[..., LeaseReportOutcome]
Allocate: TypeAlias = Callable[..., RoundResult]
AllocateLeases: TypeAlias = Callable[..., LeaseAllocation]


# --- grant reports -------------------------------------------------------------------------


def _report_lowers_high_water(original: ApplyGrantReports) -> ApplyGrantReports:
    def apply_grant_reports(
        store: HolderStore, client_id: str, reports: Iterable[GrantReport], now: int, *args: Any, **kw: Any
    ) -> list[GrantResult]:
        reports = tuple(reports)
        for report in reports:
            grant = store.get(report.grant_id)
            if grant is None or grant.client_id != client_id:
                continue
            # MUTATION: the stored marks are rewound to the report's, so the real
            # pass's ``max(stored, reported)`` keeps whatever the report says.
            claimed = min(grant.claimed, max(0, report.claimed))
            released = min(grant.released, max(0, report.released), claimed)
            if (claimed, released) != (grant.claimed, grant.released):
                store.update(grant.grant_id, grant.permits, claimed, released)
        return original(store, client_id, reports, now, *args, **kw)

    return apply_grant_reports


def _released_not_clamped_to_claimed(original: ApplyGrantReports) -> ApplyGrantReports:
    def apply_grant_reports(
        store: HolderStore, client_id: str, reports: Iterable[GrantReport], now: int, *args: Any, **kw: Any
    ) -> list[GrantResult]:
        reports = tuple(reports)
        results = original(store, client_id, reports, now, *args, **kw)
        for report in reports:
            grant = store.get(report.grant_id)
            if grant is None or grant.client_id != client_id:
                continue
            # MUTATION: released is clamped to the grant's permits, not to what was claimed.
            released = max(grant.released, min(report.released, grant.permits))
            if released >= grant.permits:
                store.remove(grant.grant_id)
            elif released != grant.released:
                store.update(grant.grant_id, grant.permits, grant.claimed, released)
        return results

    return apply_grant_reports


def _claim_window_ignored(_: Callable[..., int]) -> Callable[..., int]:
    def effective_permits(grant: GrantRow, now: int) -> int:
        # MUTATION: was ``grant.claimed if now >= grant.expires_at else grant.permits``.
        return grant.permits

    return effective_permits


# --- reclaim and the alarm -------------------------------------------------------------------


def _reclaim_takes_claimed(original: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    def reclaim(store: HolderStore, now: int, *args: Any, **kw: Any) -> list[Any]:
        doomed = [grant.grant_id for grant in store.expired_unclaimed(now)]
        events = original(store, now, *args, **kw)
        # MUTATION: every grant the pass shrank is deleted, its claimed, still running permits too.
        for grant_id in doomed:
            store.remove(grant_id)
        return events

    return reclaim


def _alarm_armed_before_writes(original: Callable[..., Any]) -> Callable[..., Any]:
    def write_after_reconcile(self: Engine, write: Callable[[Any], Any], now_ms: int | None = None) -> Any:
        # MUTATION: the alarm's reconcile commits in its own transaction *before* the
        # writes, so it sees the rows as they were, not the round's new grants.
        original(self, lambda _conn: None, now_ms)
        with transaction(self.conn):
            return write(self.conn)

    return write_after_reconcile


def _latest_pending_at(self: HolderStore) -> int | None:
    """``HolderStore.next_pending_at`` with one change."""
    # MUTATION: ``max(expires_at)`` where the original has ``min(expires_at)``.
    row = self._conn.execute(f"SELECT max(expires_at) FROM {GRANTS} WHERE claimed < permits").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _alarm_latest_deadline(_: Callable[..., int | None]) -> Callable[..., int | None]:
    def next_alarm_at(self: Any) -> int | None:
        return _latest_pending_at(self.store)

    return next_alarm_at


# --- the allocator ---------------------------------------------------------------------------


class _FootprintBlindStore(HolderStore):
    """The store as the mutated grant pass sees it: no live lease footprint."""

    __slots__ = ()

    def leased_footprint(self) -> int:
        return 0


def _strict_forgets_footprint(original: Allocate) -> Allocate:
    def allocate(store: HolderStore, config: HolderConfig, *args: Any, **kw: Any) -> RoundResult:
        # MUTATION: in strict mode the grant pass reads a lease footprint of 0.
        if config.leases is not None and isinstance(config.leases.provisioning, Strict):
            store = _FootprintBlindStore(store._conn)
        return original(store, config, *args, **kw)

    return allocate


def _under_takes_last_permit(original: Callable[[Provisioning, int], Budgets]) -> Callable[..., Budgets]:
    def budgets(provisioning: Provisioning, limit: int) -> Budgets:
        if not isinstance(provisioning, Under):
            return original(provisioning, limit)
        # MUTATION: was ``min(max(0, limit - 1), scaled(...))``: the reserve may take every permit.
        reserve = min(limit, scaled(provisioning.reserve, limit))
        return Budgets(grants=limit - reserve, leases=reserve, shared=False)

    return budgets


def _newest_first(requests: Sequence[PermitRequest]) -> list[PermitRequest]:
    """Requests whose demand ages are negated: an ascending sort then serves the newest first."""
    return [
        attrs.evolve(r, demand=tuple(attrs.evolve(d, oldest_at=-d.oldest_at) for d in r.demand))
        for r in requests
    ]


def _oldest_first_reversed(original: Allocate) -> Allocate:
    def allocate(
        store: HolderStore, config: HolderConfig, requests: Sequence[PermitRequest], *args: Any, **kw: Any
    ) -> RoundResult:
        # MUTATION: the oldest-first order of both passes is reversed (ties keep the clientId order).
        return original(store, config, _newest_first(requests), *args, **kw)

    return allocate


class _GrantPassPolicies(Mapping[str, GroupPolicy]):
    """The policies as the mutated grant pass sees them: blocked groups stay blocked, no limits."""

    def __init__(self, real: Mapping[str, GroupPolicy]) -> None:
        self.real = real

    def __getitem__(self, group: str) -> GroupPolicy:
        return attrs.evolve(self.real[group], limit=None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)


def _group_ceiling_ignored(original: Allocate) -> Allocate:
    def allocate(
        store: HolderStore,
        config: HolderConfig,
        requests: Sequence[PermitRequest],
        limit: int,
        policies: Mapping[str, GroupPolicy],
        *args: Any,
        **kw: Any,
    ) -> RoundResult:
        # MUTATION: the grant pass does not see group limits.
        return original(store, config, requests, limit, _GrantPassPolicies(policies), *args, **kw)

    return allocate


def _lease_pass_sees_group_limits(original: AllocateLeases) -> AllocateLeases:
    """Keeps ``group-ceiling-ignored`` to the grant pass: the lease pass gets the real policies."""

    def allocate_leases(*args: Any, **kw: Any) -> LeaseAllocation:
        policies = kw.get("policies")
        if isinstance(policies, _GrantPassPolicies):
            kw["policies"] = policies.real
        return original(*args, **kw)

    return allocate_leases


def _reports_after_allocation(original: Allocate) -> Allocate:
    def allocate(
        store: HolderStore,
        config: HolderConfig,
        requests: Sequence[PermitRequest],
        limit: int,
        policies: Mapping[str, GroupPolicy],
        now: int,
        *args: Any,
        **kw: Any,
    ) -> RoundResult:
        # MUTATION: demand is allocated (and reclaim runs) first, with no reports
        # applied; each request's grant and lease reports are applied afterwards.
        bare = [attrs.evolve(r, grants=(), leases=None if r.leases is None else ()) for r in requests]
        result = original(store, config, bare, limit, policies, now, *args, **kw)
        for allocation, request in zip(result.allocations, requests, strict=True):
            allocation.grant_results = grants_module.apply_grant_reports(
                store, request.client_id, request.grants, now
            )
            if config.leases is not None and request.leases is not None:
                outcome = leases_module.apply_lease_reports(
                    store, config.leases, request.client_id, request.leases, now
                )
                by_lease = {lease.lease_id: lease for lease in allocation.leases}
                by_lease.update((echo.lease_id, echo) for echo in outcome.echoes)
                allocation.leases = list(by_lease.values())
        return result

    return allocate


def _limit_off_by_one(original: Allocate) -> Allocate:
    def allocate(
        store: HolderStore,
        config: HolderConfig,
        requests: Sequence[PermitRequest],
        limit: int,
        *args: Any,
        **kw: Any,
    ) -> RoundResult:
        # MUTATION: the allocator's room is computed from ``limit + 1`` (``<=`` for ``<``).
        return original(store, config, requests, limit + 1, *args, **kw)

    return allocate


def _contended_never_set(original: Allocate) -> Allocate:
    def allocate(*args: Any, **kw: Any) -> RoundResult:
        # MUTATION: the round never reports contention, so clients never return idle headroom.
        return attrs.evolve(original(*args, **kw), contended=False)

    return allocate


# --- leases -----------------------------------------------------------------------------------


def _unknown_debt_dropped(original: ApplyLeaseReports) -> ApplyLeaseReports:
    def apply_lease_reports(*args: Any, **kw: Any) -> LeaseReportOutcome:
        outcome = original(*args, **kw)
        # MUTATION: the live footprint of leases the holder does not know is not charged.
        outcome.unknown_debt = 0
        return outcome

    return apply_lease_reports


class _ForgetsExpiredStore(HolderStore):
    """The store as the mutated lease pass sees it: expired leases are deleted when it retires them."""

    __slots__ = ()

    def live_leases_to_retire(self, now: int, ineligible: Iterable[str]) -> list[LeaseRow]:
        rows = super().live_leases_to_retire(now, ineligible)
        for row in rows:
            if row.expires_at <= now:
                # MUTATION: the expired lease is forgotten, footprint and all; the pass's
                # own ``retire_lease`` then updates nothing.
                self.remove_lease(row.lease_id)
        return rows


def _expired_footprint_dropped(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(store: HolderStore, *args: Any, **kw: Any) -> LeaseAllocation:
        return original(_ForgetsExpiredStore(store._conn), *args, **kw)

    return allocate_leases


def _retired_report_shrinks_to_released(original: ApplyLeaseReports) -> ApplyLeaseReports:
    def apply_lease_reports(
        store: HolderStore,
        options: Any,
        client_id: str,
        reports: Iterable[LeaseReport],
        now: int,
        *args: Any,
        **kw: Any,
    ) -> LeaseReportOutcome:
        # MUTATION: a retired report's lease shrinks to what was *released*, not what
        # was drawn, so it settles while drawn permits are still running.
        shrunk = [attrs.evolve(r, drawn=r.released) if r.retired is True else r for r in reports]
        return original(store, options, client_id, shrunk, now, *args, **kw)

    return apply_lease_reports


# --- written from the reference's code paths (issue 9) -----------------------------------------
#
# Each of these plants a bug on a path of semaphore-server.ts, semaphore-leases.ts, the
# queue's documented rules or the scheduler engine, chosen by the class of bug it stands
# for (an edge value at one layer, a boundary, what survives an eviction, a tie-break
# under the reference's collation, serialisation, parsing, efficiency), not by what an
# existing test happens to check.

# Deadlines: the reference's boundaries are ``now >= expires_at`` (a claim is late, a
# grant is reclaimed) and ``expires_at <= now`` (a lease has expired).


def _claim_deadline_exclusive(_: Callable[..., int]) -> Callable[..., int]:
    def effective_permits(grant: GrantRow, now: int) -> int:
        # MUTATION: ``now > expires_at`` where the reference has ``now >= expires_at``.
        return grant.claimed if now > grant.expires_at else grant.permits

    return effective_permits


class _ReclaimsLateStore(HolderStore):
    """The store as the mutated reclaim pass sees it: a grant is due one millisecond late."""

    __slots__ = ()

    def expired_unclaimed(self, now: int) -> list[GrantRow]:
        # MUTATION: ``expires_at < now`` where the reference has ``now < expires_at`` to keep.
        return super().expired_unclaimed(now - 1)


def _reclaim_deadline_exclusive(original: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    def reclaim(store: HolderStore, now: int, *args: Any, **kw: Any) -> list[Any]:
        return original(_ReclaimsLateStore(store._conn), now, *args, **kw)

    return reclaim


class _LeasesExpireLateStore(HolderStore):
    """The store as the mutated lease pass sees it: a lease expires one millisecond late."""

    __slots__ = ()

    def live_leases_to_retire(self, now: int, ineligible: Iterable[str]) -> list[LeaseRow]:
        # MUTATION: ``expires_at < now`` where the reference has ``expires_at <= now``.
        return super().live_leases_to_retire(now - 1, ineligible)


def _lease_expiry_exclusive(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(store: HolderStore, *args: Any, **kw: Any) -> LeaseAllocation:
        return original(_LeasesExpireLateStore(store._conn), *args, **kw)

    return allocate_leases


# Limits and policies: resolved once per round, and 0 is a limit like any other.


class _PerLookupPolicies(Mapping[str, GroupPolicy]):
    """Group policies re-resolved on every lookup, as a per-demand resolution would."""

    def __init__(self, config: HolderConfig, real: Mapping[str, GroupPolicy]) -> None:
        self.config = config
        self.real = real

    def __getitem__(self, group: str) -> GroupPolicy:
        if group not in self.real:
            raise KeyError(group)
        # MUTATION: the callbacks run again for each demand (and each lease check).
        resolve: Callable[[HolderConfig, str], GroupPolicy] = vars(holder_module)["group_policy"]
        return resolve(self.config, group)

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)


def _policy_per_demand(original: Allocate) -> Allocate:
    def allocate(
        store: HolderStore,
        config: HolderConfig,
        requests: Sequence[PermitRequest],
        limit: int,
        policies: Mapping[str, GroupPolicy],
        *args: Any,
        **kw: Any,
    ) -> RoundResult:
        return original(store, config, requests, limit, _PerLookupPolicies(config, policies), *args, **kw)

    return allocate


def _group_limit_zero_unlimited(original: Callable[..., GroupPolicy]) -> Callable[..., GroupPolicy]:
    def group_policy(config: HolderConfig, group: str) -> GroupPolicy:
        policy = original(config, group)
        # MUTATION: ``if (!value)`` where the reference has ``value === undefined``: a cap of 0 is no cap.
        return UNLIMITED if policy.limit == 0 else policy

    return group_policy


def _limit_zero_rejected(original: Callable[[HolderConfig], int]) -> Callable[[HolderConfig], int]:
    def resolve_limit(config: HolderConfig) -> int:
        limit = original(config)
        if limit == 0:
            # MUTATION: a positive integer is required; the reference accepts 0 (admit nothing).
            raise ValueError("limit must resolve to a positive safe integer, got 0")
        return limit

    return resolve_limit


# usage(): each field, in each provisioning mode, and on the wire.

GrantRoom: TypeAlias = Callable[[Any, int, int, int], int]


def _available_ignores_footprint(original: GrantRoom) -> GrantRoom:
    def _grant_room(self: Any, limit: int, granted: int, leased: int) -> int:
        # MUTATION: strict mode's grant room forgets the lease footprint that shares the limit.
        return original(self, limit, granted, 0)

    return _grant_room


def _available_ignores_reserve(original: GrantRoom) -> GrantRoom:
    def _grant_room(self: Any, limit: int, granted: int, leased: int) -> int:
        leases = self.config.leases
        if leases is not None and isinstance(leases.provisioning, Under):
            # MUTATION: the room is counted from the limit, not from limit - reserve.
            return max(0, limit - granted)
        return original(self, limit, granted, leased)

    return _grant_room


def _usage_wire_drops_zero_limit(original: Callable[[Usage], dict[str, Any]]) -> Callable[..., Any]:
    def to_wire(self: Usage) -> dict[str, Any]:
        wire = original(self)
        for name, group in self.groups.items():
            if group.limit == 0:
                # MUTATION: ``if (group.limit)`` where the reference has ``!== undefined``.
                del wire["groups"][name]["limit"]
        return wire

    return to_wire


# Tie-breaks: ``localeCompare`` (ICU root collation), where "a" < "A" < "b".


def _ties_by_code_point(_: Callable[[str], CollationKey]) -> Callable[[str], CollationKey]:
    def locale_key(text: str) -> CollationKey:
        # MUTATION: code point order ("A" < "B" < "a"), the classic port of ``localeCompare``.
        return tuple(map(ord, text)), ()

    return locale_key


def _ties_case_blind(original: Callable[[str], CollationKey]) -> Callable[[str], CollationKey]:
    def locale_key(text: str) -> CollationKey:
        # MUTATION: primary weights only: "a" and "A" tie, so arrival order decides.
        return original(text)[0], ()

    return locale_key


# Budgets and reports.


def _strict_lease_budget_net(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(
        store: HolderStore, options: Any, *args: Any, budget: int, **kw: Any
    ) -> LeaseAllocation:
        if isinstance(options.provisioning, Strict):
            # MUTATION: the pass is handed capacity net of live footprint, which it nets out again.
            budget = max(0, budget - store.leased_footprint())
        return original(store, options, *args, budget=budget, **kw)

    return allocate_leases


class _ReleaseBlindStore(HolderStore):
    """The store as the mutated report pass sees it: a row whose claim did not move is not rewritten."""

    __slots__ = ()

    def update(self, grant_id: str, permits: int, claimed: int, released: int) -> None:
        current = self.get(grant_id)
        if current is not None and (current.permits, current.claimed) == (permits, claimed):
            return  # MUTATION: a report that only releases is not persisted.
        super().update(grant_id, permits, claimed, released)


def _release_only_not_persisted(original: ApplyGrantReports) -> ApplyGrantReports:
    def apply_grant_reports(store: HolderStore, *args: Any, **kw: Any) -> list[GrantResult]:
        return original(_ReleaseBlindStore(store._conn), *args, **kw)

    return apply_grant_reports


def _sync_ignores_lease_reports(original: Callable[..., PermitSyncResult]) -> Callable[..., PermitSyncResult]:
    def sync_message(self: Any, message: Any, now: int) -> PermitSyncResult:
        sync: PermitSync = holder_module._as_sync(message)
        if sync.leases:
            # MUTATION: only a round applies lease reports; a sync's are dropped.
            sync = attrs.evolve(sync, leases=())
        return original(self, sync, now)

    return sync_message


def _partly_claimed_pending_at(self: HolderStore) -> int | None:
    """``HolderStore.next_pending_at`` with one change."""
    # MUTATION: ``claimed = 0`` where the original has ``claimed < permits``.
    row = self._conn.execute(f"SELECT min(expires_at) FROM {GRANTS} WHERE claimed = 0").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _alarm_ignores_partly_claimed(_: Callable[..., int | None]) -> Callable[..., int | None]:
    def next_alarm_at(self: Any) -> int | None:
        return _partly_claimed_pending_at(self.store)

    return next_alarm_at


# What survives an eviction: every row. A rebuilt instance must not tidy up.


def _rebuilt_drops_retired_leases(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, conn: Any, *args: Any, **kw: Any) -> None:
        original(self, conn, *args, **kw)
        # MUTATION: a new instance deletes retired leases, as if retired meant dead.
        with transaction(conn):
            conn.execute(f"DELETE FROM {LEASES} WHERE retired = 1")

    return __init__


def _down_keeps_claim_index(original: tuple[Migration, ...]) -> tuple[Migration, ...]:
    # MUTATION: 0002's down path forgets one of the indexes its up path created.
    return tuple(
        attrs.evolve(m, down=tuple(s for s in m.down if "grants_claim_deadline" not in s)) for m in original
    )


# Serialisation of replies and parsing of wire input.


def _reply_omits_empty_leases(original: Callable[[PermitGrant], dict[str, Any]]) -> Callable[..., Any]:
    def to_wire(self: PermitGrant) -> dict[str, Any]:
        wire = original(self)
        if not self.leases:
            # MUTATION: ``if (leases.length)`` where the reference spreads ``leases`` whenever asked.
            wire.pop("leases", None)
            wire.pop("contended", None)
        return wire

    return to_wire


def _empty_leases_as_plain(original: Callable[..., Any]) -> Callable[..., Any]:
    def _reports(obj: Any) -> Any:
        grants, leases = original(obj)
        # MUTATION: ``if (message.leases?.length)`` where the reference tests ``'leases' in``.
        return grants, leases or None

    return _reports


def _negative_counts_accepted(original: Callable[..., int]) -> Callable[..., int]:
    def _integer(obj: Any, key: str, path: str, *, count: bool) -> int:
        # MUTATION: ``z.number().int()`` without ``.nonnegative()``: counts may be negative.
        return original(obj, key, path, count=False)

    return _integer


# The queue client (semaphore_core/queue.py): the docs' rules for what it asks and reports.


def _reports_assumed_delivered(original: Callable[..., int]) -> Callable[..., int]:
    def sent(self: QueueClient, key: str, now: int) -> int:
        changes = original(self, key, now)
        # MUTATION: acknowledged when sent, as if only a reply could be lost, never a request.
        self.acked(key, changes)
        return changes

    return sent


def _demand_counts_running(original: Callable[..., PermitRequest]) -> Callable[..., PermitRequest]:
    def build_request(self: QueueClient, key: str, now: int) -> PermitRequest:
        request = original(self, key, now)
        running = dict(
            self._conn.execute(
                "SELECT grp, count(*) FROM durability_semaphore_queue_items "
                "WHERE key = ? AND status = 'running' GROUP BY grp",
                (key,),
            ).fetchall()
        )
        # MUTATION: demand counts items that already hold a permit, asking again for it.
        demand = tuple(attrs.evolve(d, count=d.count + int(running.get(d.group, 0))) for d in request.demand)
        return attrs.evolve(request, demand=demand)

    return build_request


def _released_permit_drawn_again(original: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    def draw_leases(self: QueueClient, now: int) -> list[Any]:
        # The queue reads its leases from memory (``semaphore_core.queue_state``), so the
        # mutation is there: storage is written what the original writes, ``drawn + n``.
        # MUTATION: a lease's room is permits - (drawn - released): a released permit is drawable again.
        for lease in self._state.leases.values():
            lease.drawn -= lease.released
        admitted = original(self, now)  # on an error the queue reloads its memory from storage
        for lease in self._state.leases.values():
            lease.drawn += lease.released
        return admitted

    return draw_leases


# The scheduler engine (seed 002): its own fallback, and an alarm never pushed later.


def _engine_without_fallback(original: Callable[..., JsPromise]) -> Callable[..., JsPromise]:
    def arm_fallback_alarm(self: Engine) -> JsPromise:
        # MUTATION: a throwing pass never arms its own fallback: the platform retries, then drops it.
        return JsPromise.resolve(self.tasks, False)

    return arm_fallback_alarm


def _alarm_pushed_later(original: Callable[..., int | None]) -> Callable[..., int | None]:
    def alarm_target(self: Engine, physical_next_at: int, current: int | None) -> int | None:
        # MUTATION: always rewritten to the target, so each commit pushes a pending alarm later.
        target = max(physical_next_at, self.now_ms + self.options.alarm_min_delay_ms)
        return None if current == target else target

    return alarm_target


# --- who gets permits: the lease pass's shares and order, and what a client asks for ------------------

#: Larger than any lease budget a simulation draws: the share is then never capped.
_UNCAPPED_PERMITS_PER_LEASE: Final = 1_000_000_000


def _lease_share_not_capped(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(store: HolderStore, options: LeaseOptions, *args: Any, **kw: Any) -> LeaseAllocation:
        # MUTATION: ``share = min(permitsPerLease, ...)`` loses its cap: one candidate takes the budget.
        return original(
            store, attrs.evolve(options, permits_per_lease=_UNCAPPED_PERMITS_PER_LEASE), *args, **kw
        )

    return allocate_leases


def _lease_candidates_newest_first(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(*args: Any, **kw: Any) -> LeaseAllocation:
        # MUTATION: the lease pass ranks candidates (and groups) newest demand first.
        candidates: Iterable[LeaseCandidate] = kw["candidates"]
        kw["candidates"] = [attrs.evolve(c, oldest_at=-c.oldest_at) for c in candidates]
        return original(*args, **kw)

    return allocate_leases


class _RoomBlindPolicies(Mapping[str, GroupPolicy]):
    """The policies as the mutated lease pass sees them: no group limits (eligibility kept)."""

    def __init__(self, real: Mapping[str, GroupPolicy]) -> None:
        self.real = real

    def __getitem__(self, group: str) -> GroupPolicy:
        return attrs.evolve(self.real[group], limit=None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)


def _lease_ignores_group_room(original: AllocateLeases) -> AllocateLeases:
    def allocate_leases(store: HolderStore, options: LeaseOptions, *args: Any, **kw: Any) -> LeaseAllocation:
        # MUTATION: with ``within_group_limit`` (where capped groups stay eligible) a lease is
        # sized by the share alone, not by what the group's limit has left.
        if options.limited_groups == "within_group_limit":
            kw["policies"] = _RoomBlindPolicies(kw["policies"])
        return original(store, options, *args, **kw)

    return allocate_leases


def _asks_for_held_capacity(original: Callable[..., PermitRequest]) -> Callable[..., PermitRequest]:
    def build_request(self: Any, key: str, now: int) -> PermitRequest:
        request = original(self, key, now)
        held = dict(
            self._conn.execute(
                "SELECT grp, count(*) FROM durability_semaphore_queue_items "
                "WHERE key = ? AND status IN ('claiming', 'running') GROUP BY grp",
                (key,),
            ).fetchall()
        )
        # MUTATION: demand counts the items already claimed or running, not only the queued ones.
        demand = tuple(attrs.evolve(d, count=d.count + int(held.get(d.group, 0))) for d in request.demand)
        return attrs.evolve(request, demand=demand)

    return build_request


_FROM_THE_REFERENCE: Final[tuple[Mutant, ...]] = (
    Mutant(
        "claim-deadline-off-by-one",
        "a claim arriving exactly at the claim deadline is accepted in full (> where the reference has >=)",
        patcher((grants_module, "effective_permits", _claim_deadline_exclusive)),
    ),
    Mutant(
        "reclaim-deadline-off-by-one",
        "reclaim takes only grants whose deadline has passed by a millisecond, not those due now",
        patcher(*_everywhere(_GRANT_REPORT_USERS, "reclaim", _reclaim_deadline_exclusive)),
    ),
    Mutant(
        "lease-expiry-off-by-one",
        "the lease pass retires an unreported lease a millisecond after its expiry, not at it",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_expiry_exclusive)),
    ),
    Mutant(
        "group-policy-per-demand",
        "group policies are resolved again for every demand instead of once per round",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _policy_per_demand)),
    ),
    Mutant(
        "group-limit-zero-unlimited",
        "a group limit of 0 is read as no group limit",
        patcher((holder_module, "group_policy", _group_limit_zero_unlimited)),
    ),
    Mutant(
        "limit-zero-rejected",
        "a limit of 0 fails the round instead of admitting nothing",
        patcher((holder_module, "resolve_limit", _limit_zero_rejected)),
    ),
    Mutant(
        "usage-available-ignores-footprint",
        "usage().available in strict mode does not subtract the lease footprint",
        patcher((holder_module.Holder, "_grant_room", _available_ignores_footprint)),
    ),
    Mutant(
        "usage-available-ignores-reserve",
        "usage().available in under mode is counted from the limit, not limit - reserve",
        patcher((holder_module.Holder, "_grant_room", _available_ignores_reserve)),
    ),
    Mutant(
        "usage-wire-drops-zero-group-limit",
        "usage's wire form leaves out a group limit of 0, as if the group were unlimited",
        patcher((Usage, "to_wire", _usage_wire_drops_zero_limit)),
    ),
    Mutant(
        "ties-by-code-point",
        "equally old demand is ordered by clientId code points instead of localeCompare",
        patcher(*_everywhere((rounds_module, leases_module), "locale_key", _ties_by_code_point)),
    ),
    Mutant(
        "ties-case-blind",
        "ids that differ only in case tie, so arrival order decides instead of localeCompare",
        patcher(*_everywhere((rounds_module, leases_module), "locale_key", _ties_case_blind)),
    ),
    Mutant(
        "strict-lease-budget-net",
        "the strict lease pass is handed capacity net of live footprint and nets it out again",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _strict_lease_budget_net)),
    ),
    Mutant(
        "release-only-report-not-persisted",
        "a grant report that only advances released (claimed unchanged) is not written",
        patcher(*_everywhere(_GRANT_REPORT_USERS, "apply_grant_reports", _release_only_not_persisted)),
    ),
    Mutant(
        "sync-ignores-lease-reports",
        "a sync applies grant reports only; its lease reports are dropped",
        patcher((holder_module.Holder, "sync_message", _sync_ignores_lease_reports)),
    ),
    Mutant(
        "alarm-ignores-partly-claimed",
        "the alarm follows only grants with nothing claimed, not every grant with unclaimed permits",
        patcher((holder_module.Holder, "next_alarm_at", _alarm_ignores_partly_claimed)),
    ),
    Mutant(
        "rebuilt-holder-drops-retired-leases",
        "a rebuilt holder instance deletes retired leases, losing footprint that survived the eviction",
        patcher((holder_module.Holder, "__init__", _rebuilt_drops_retired_leases)),
    ),
    Mutant(
        "migration-down-keeps-claim-index",
        "migration 0002's down path leaves an index behind, so migrating up again fails",
        patcher((migrations_module, "SEMAPHORE_MIGRATIONS", _down_keeps_claim_index)),
    ),
    Mutant(
        "reply-omits-empty-leases",
        "a round reply leaves out leases (and contended) when the list is empty, though the request asked",
        patcher((PermitGrant, "to_wire", _reply_omits_empty_leases)),
    ),
    Mutant(
        "parse-empty-leases-as-plain",
        "a request whose leases list is empty is parsed as a plain client's",
        patcher((protocol_module, "_reports", _empty_leases_as_plain)),
    ),
    Mutant(
        "parse-accepts-negative-counts",
        "parsing accepts negative counts (demand, claimed, released, drawn)",
        patcher((protocol_module, "_integer", _negative_counts_accepted)),
    ),
    Mutant(
        "queue-reports-assumed-delivered",
        "the queue counts its reports acknowledged when sent, so a lost request is never resent",
        patcher((QueueClient, "sent", _reports_assumed_delivered)),
    ),
    Mutant(
        "queue-demand-counts-running",
        "the queue's demand counts items already running, asking again for permits it holds",
        patcher((QueueClient, "build_request", _demand_counts_running)),
    ),
    Mutant(
        "queue-released-permit-drawn-again",
        "a lease permit released by its item can be drawn again (leases are one-shot)",
        patcher((QueueClient, "draw_leases", _released_permit_drawn_again)),
    ),
    Mutant(
        "engine-without-fallback",
        "the engine hands a throwing alarm to the platform instead of arming its own fallback",
        patcher((Engine, "_arm_fallback_alarm", _engine_without_fallback)),
    ),
    Mutant(
        "engine-pushes-alarm-later",
        "every commit rewrites the alarm to its target, pushing a pending reclaim later",
        patcher((Engine, "_alarm_target", _alarm_pushed_later)),
    ),
)


# --- the catalog -------------------------------------------------------------------------------

_FIRST_CATALOG: Final[tuple[Mutant, ...]] = (
    Mutant(
        "report-lowers-high-water",
        "a stale grant report rewinds claimed/released, so the marks are not monotone",
        patcher(*_everywhere(_GRANT_REPORT_USERS, "apply_grant_reports", _report_lowers_high_water)),
    ),
    Mutant(
        "released-not-clamped-to-claimed",
        "a grant report's released is clamped to the grant's permits instead of to claimed",
        patcher(*_everywhere(_GRANT_REPORT_USERS, "apply_grant_reports", _released_not_clamped_to_claimed)),
    ),
    Mutant(
        "reclaim-takes-claimed",
        "reclaim deletes an expired grant outright, taking back its claimed, running permits too",
        patcher(*_everywhere(_GRANT_REPORT_USERS, "reclaim", _reclaim_takes_claimed)),
    ),
    Mutant(
        "strict-forgets-lease-footprint",
        "in strict mode the grant pass ignores live lease footprint, so grants plus leases pass the limit",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _strict_forgets_footprint)),
    ),
    Mutant(
        "under-reserve-takes-last-permit",
        "the under reserve is capped at the limit, not limit - 1, so plain clients can get no permit",
        patcher(*_everywhere(_ALLOCATE_USERS, "budgets", _under_takes_last_permit)),
    ),
    Mutant(
        "unknown-lease-debt-dropped",
        "a reported lease the holder does not know is not charged against the lease budget",
        patcher(*_everywhere(_LEASE_REPORT_USERS, "apply_lease_reports", _unknown_debt_dropped)),
    ),
    Mutant(
        "expired-lease-footprint-dropped",
        "the lease pass deletes an expired lease instead of retiring it, dropping its footprint",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _expired_footprint_dropped)),
    ),
    Mutant(
        "oldest-first-reversed",
        "demand is served newest first instead of oldest first, in the grant and the lease pass",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _oldest_first_reversed)),
    ),
    Mutant(
        "group-ceiling-ignored",
        "the grant pass ignores group limits (the lease pass still honours them)",
        patcher(
            *_everywhere(_ALLOCATE_USERS, "allocate", _group_ceiling_ignored),
            *_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_pass_sees_group_limits),
        ),
    ),
    Mutant(
        "claim-window-not-enforced",
        "a claim after the grant's deadline (not yet reclaimed) is accepted in full and answered ok",
        patcher((grants_module, "effective_permits", _claim_window_ignored)),
    ),
    Mutant(
        "alarm-armed-before-round-writes",
        "a round arms the alarm from the rows before its writes, so its new grants commit without one",
        patcher((Engine, "transaction", _alarm_armed_before_writes)),
    ),
    Mutant(
        "reports-after-allocation",
        "a round allocates demand before applying its grant and lease reports",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _reports_after_allocation)),
    ),
    Mutant(
        "limit-off-by-one",
        "the allocator computes its room from limit + 1, so one permit too many is handed out",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _limit_off_by_one)),
    ),
    Mutant(
        "contended-never-set",
        "rounds never mark replies contended, so clients never return idle lease headroom",
        patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _contended_never_set)),
    ),
    Mutant(
        "alarm-latest-deadline",
        "the alarm is armed for the latest claim deadline instead of the earliest",
        patcher((holder_module.Holder, "next_alarm_at", _alarm_latest_deadline)),
    ),
    Mutant(
        "retired-report-shrinks-to-released",
        "a retired lease report shrinks the lease to released, not drawn, settling running permits",
        patcher(
            *_everywhere(_LEASE_REPORT_USERS, "apply_lease_reports", _retired_report_shrinks_to_released)
        ),
    ),
)

# --- the durable operations' lifecycle (seed 002) and seed 000's handler -----------------------


def _retry_after_last_attempt(original: Callable[..., Any]) -> Callable[..., Any]:
    """``decideRetry`` with ``attempt > maxAttempts`` for ``>=``: the last attempt's failure retries."""

    def decide(self: Engine, spec: Any, attempt: int, error: BaseException) -> Any:
        decision = original(self, spec, attempt, error)
        if decision.terminal and attempt == spec.policy.max_attempts and decision.error is error:
            delay = int(spec.policy.delay(attempt))
            return attrs.evolve(decision, terminal=False, next_attempt_at=decision.timestamp + delay)
        return decision

    return decide


def _claims_one_attempt_too_many(original: Callable[..., Any]) -> Callable[..., Any]:
    """``claimAttempt`` with ``attempt <= maxAttempts``: a lost last attempt is run once more."""

    def claim(conn: Any, table: Any, key: str, generation: str, max_attempts: int) -> int | None:
        result: int | None = original(conn, table, key, generation, max_attempts + 1)
        return result

    return claim


def _handoff_arms_no_alarm(_original: Callable[..., Any]) -> Callable[..., Any]:
    """``runAlarm``'s hand-off returns without ``armForHandoff``: the work goes on in memory only."""
    return lambda self, timestamp: JsPromise.resolve(self.tasks)


def _payload_compared_as_text(_original: Callable[[str], str]) -> Callable[[str], str]:
    """``#run`` compares the stored and offered payloads as serialised, not canonical, text."""
    return lambda text: text


def _idempotency_key_per_attempt(original: Callable[..., Any]) -> Callable[..., Any]:
    """Seed 000's handler sends ``id:attempt`` as its idempotency key, so each attempt is new."""

    def request(operation_id: str, payload: Any, attempt: int, deadline_at: int | None = None) -> Any:
        built = original(operation_id, payload, attempt, deadline_at)
        return {**built, "key": f"{operation_id}:{attempt}"}

    return request


_FOR_THE_OPERATIONS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "retry-after-last-attempt",
        "decideRetry compares attempt > maxAttempts, so the last attempt's failure schedules a retry",
        patcher((Engine, "_decide_retry", _retry_after_last_attempt)),
    ),
    Mutant(
        "claim-one-attempt-too-many",
        "claimAttempt allows attempt <= maxAttempts, so a lost last attempt runs once more",
        patcher((engine_module, "claim_attempt", _claims_one_attempt_too_many)),
    ),
    Mutant(
        "handoff-arms-no-alarm",
        "an alarm pass that hands off returns without arming a fresh alarm for its running work",
        patcher((Engine, "_arm_for_handoff", _handoff_arms_no_alarm)),
    ),
    Mutant(
        "payload-compared-as-text",
        "a re-registration's payload is compared as text, so one in another key order is refused",
        patcher((operations_module, "canonical", _payload_compared_as_text)),
    ),
    Mutant(
        "idempotency-key-per-attempt",
        "the handler keys each attempt's call apart (id:attempt), so the API takes every attempt's effect",
        patcher((client_object_module, "api_request", _idempotency_key_per_attempt)),
    ),
)

#: Every mutant: the first catalog, then those written from the reference's code paths.
#: Mutants the allocation checks (``reuse``, ``lease_fairness``, ``no_overask``) should kill.
_FOR_THE_ALLOCATION_CHECKS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "lease-share-not-capped",
        "the lease pass's equal share is not capped at permits_per_lease",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_share_not_capped)),
    ),
    Mutant(
        "lease-candidates-newest-first",
        "the lease pass serves the newest demand first, so when short the oldest get no lease",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_candidates_newest_first)),
    ),
    Mutant(
        "lease-ignores-group-room",
        "with within_group_limit a lease is sized by the share alone, not by the group limit's room",
        patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_ignores_group_room)),
    ),
    Mutant(
        "client-asks-for-held-capacity",
        "a client's demand counts its claimed and running items too, asking again for what it holds",
        patcher((queue_module.QueueClient, "build_request", _asks_for_held_capacity)),
    ),
)

MUTANTS: Final[tuple[Mutant, ...]] = (
    *_FIRST_CATALOG,
    *_FROM_THE_REFERENCE,
    *_FOR_THE_ALLOCATION_CHECKS,
    *_FOR_THE_OPERATIONS,
)


def by_name(mutants: Sequence[Mutant]) -> Callable[[str], Mutant]:
    """The lookup of a catalog: the mutant called ``name``, or ValueError listing the known names."""
    found: dict[str, Mutant] = {m.name: m for m in mutants}
    if len(found) != len(mutants):
        raise ValueError(f"mutant names must be unique: {sorted(m.name for m in mutants)}")

    def lookup(name: str) -> Mutant:
        try:
            return found[name]
        except KeyError:
            raise ValueError(f"unknown mutant {name!r}; known mutants: {', '.join(found)}") from None

    return lookup


#: The catalogued mutant called ``name``; ValueError listing the known names otherwise.
mutant: Final = by_name(MUTANTS)
