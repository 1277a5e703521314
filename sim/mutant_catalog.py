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
- A mutant never rebinds a name the checkers use (``sim.invariants`` has its
  own ``budgets`` and reads ``HolderStore`` and ``Holder.usage`` directly),
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

import semaphore_core.grants as grants_module
import semaphore_core.holder as holder_module
import semaphore_core.leases as leases_module
import semaphore_core.queue as queue_module
import semaphore_core.rounds as rounds_module
from semaphore_core.config import Budgets, HolderConfig, LeaseOptions, Provisioning, Strict, Under, scaled
from semaphore_core.leases import LeaseAllocation, LeaseCandidate, LeaseReportOutcome
from semaphore_core.policy import GroupPolicy
from semaphore_core.protocol import GrantReport, GrantResult, LeaseReport, PermitRequest
from semaphore_core.rounds import RoundResult
from semaphore_core.store import GRANTS, GrantRow, HolderStore, LeaseRow
from semaphore_core.transaction import transaction

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


def _patcher(*rebinds: Rebind) -> Callable[[], contextlib.AbstractContextManager[None]]:
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
    def round_armed_early(self: Any, requests: Any, now: int, *args: Any, **kw: Any) -> Any:
        hook = self._before_commit
        if hook is None:
            return original(self, requests, now, *args, **kw)
        # MUTATION: the hook (which arms the alarm) runs in its own transaction
        # *before* the round, so it sees the rows as they were, not the new grants.
        self._before_commit = None
        try:
            with transaction(self._conn):
                hook(self._conn)
            return original(self, requests, now, *args, **kw)
        finally:
            self._before_commit = hook

    return round_armed_early


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


# --- the catalog -------------------------------------------------------------------------------

MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "report-lowers-high-water",
        "a stale grant report rewinds claimed/released, so the marks are not monotone",
        _patcher(*_everywhere(_GRANT_REPORT_USERS, "apply_grant_reports", _report_lowers_high_water)),
    ),
    Mutant(
        "released-not-clamped-to-claimed",
        "a grant report's released is clamped to the grant's permits instead of to claimed",
        _patcher(*_everywhere(_GRANT_REPORT_USERS, "apply_grant_reports", _released_not_clamped_to_claimed)),
    ),
    Mutant(
        "reclaim-takes-claimed",
        "reclaim deletes an expired grant outright, taking back its claimed, running permits too",
        _patcher(*_everywhere(_GRANT_REPORT_USERS, "reclaim", _reclaim_takes_claimed)),
    ),
    Mutant(
        "strict-forgets-lease-footprint",
        "in strict mode the grant pass ignores live lease footprint, so grants plus leases pass the limit",
        _patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _strict_forgets_footprint)),
    ),
    Mutant(
        "under-reserve-takes-last-permit",
        "the under reserve is capped at the limit, not limit - 1, so plain clients can get no permit",
        _patcher(*_everywhere(_ALLOCATE_USERS, "budgets", _under_takes_last_permit)),
    ),
    Mutant(
        "unknown-lease-debt-dropped",
        "a reported lease the holder does not know is not charged against the lease budget",
        _patcher(*_everywhere(_LEASE_REPORT_USERS, "apply_lease_reports", _unknown_debt_dropped)),
    ),
    Mutant(
        "expired-lease-footprint-dropped",
        "the lease pass deletes an expired lease instead of retiring it, dropping its footprint",
        _patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _expired_footprint_dropped)),
    ),
    Mutant(
        "oldest-first-reversed",
        "demand is served newest first instead of oldest first, in the grant and the lease pass",
        _patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _oldest_first_reversed)),
    ),
    Mutant(
        "group-ceiling-ignored",
        "the grant pass ignores group limits (the lease pass still honours them)",
        _patcher(
            *_everywhere(_ALLOCATE_USERS, "allocate", _group_ceiling_ignored),
            *_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_pass_sees_group_limits),
        ),
    ),
    Mutant(
        "claim-window-not-enforced",
        "a claim after the grant's deadline (not yet reclaimed) is accepted in full and answered ok",
        _patcher((grants_module, "effective_permits", _claim_window_ignored)),
    ),
    Mutant(
        "alarm-armed-before-round-writes",
        "a round arms the alarm from the rows before its writes, so its new grants commit without one",
        _patcher((holder_module.Holder, "round", _alarm_armed_before_writes)),
    ),
    Mutant(
        "reports-after-allocation",
        "a round allocates demand before applying its grant and lease reports",
        _patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _reports_after_allocation)),
    ),
    Mutant(
        "limit-off-by-one",
        "the allocator computes its room from limit + 1, so one permit too many is handed out",
        _patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _limit_off_by_one)),
    ),
    Mutant(
        "contended-never-set",
        "rounds never mark replies contended, so clients never return idle lease headroom",
        _patcher(*_everywhere(_ALLOCATE_USERS, "allocate", _contended_never_set)),
    ),
    Mutant(
        "alarm-latest-deadline",
        "the alarm is armed for the latest claim deadline instead of the earliest",
        _patcher((holder_module.Holder, "next_alarm_at", _alarm_latest_deadline)),
    ),
    Mutant(
        "retired-report-shrinks-to-released",
        "a retired lease report shrinks the lease to released, not drawn, settling running permits",
        _patcher(
            *_everywhere(_LEASE_REPORT_USERS, "apply_lease_reports", _retired_report_shrinks_to_released)
        ),
    ),
    Mutant(
        "lease-share-not-capped",
        "the lease pass's equal share is not capped at permits_per_lease",
        _patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_share_not_capped)),
    ),
    Mutant(
        "lease-candidates-newest-first",
        "the lease pass serves the newest demand first, so when short the oldest get no lease",
        _patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_candidates_newest_first)),
    ),
    Mutant(
        "lease-ignores-group-room",
        "with within_group_limit a lease is sized by the share alone, not by the group limit's room",
        _patcher(*_everywhere(_LEASE_PASS_USERS, "allocate_leases", _lease_ignores_group_room)),
    ),
    Mutant(
        "client-asks-for-held-capacity",
        "a client's demand counts its claimed and running items too, asking again for what it holds",
        _patcher((queue_module.QueueClient, "build_request", _asks_for_held_capacity)),
    ),
)

_BY_NAME: Final[Mapping[str, Mutant]] = {m.name: m for m in MUTANTS}
assert len(_BY_NAME) == len(MUTANTS), "mutant names must be unique"


def mutant(name: str) -> Mutant:
    """The catalogued mutant called ``name``; ValueError listing the known names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown mutant {name!r}; known mutants: {', '.join(_BY_NAME)}") from None
