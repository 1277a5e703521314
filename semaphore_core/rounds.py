"""One allocation round: ``#allocate`` of semaphore-server.ts.

Order matters and is the reference's: every request's grant reports, then
its lease reports; then reclaim of expired unclaimed grants; then demand,
oldest first (ties: ``clientId`` by ``localeCompare``), under the limit,
the group limits and ``can_grant``; then the lease pass. Runs inside the
caller's transaction; returns what the replies and events need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from semaphore_core.collation import locale_key
from semaphore_core.config import Budgets, HolderConfig, Under, budgets
from semaphore_core.errors import reused_id
from semaphore_core.events import BlockedEvent, GrantReclaimed, LeaseGranted, LeaseRetired
from semaphore_core.fixes import GROUP_CEILING_COUNTS_LEASES, UNDER_SHARES_THE_LIMIT
from semaphore_core.grants import apply_grant_reports, claim_room, reclaim
from semaphore_core.leases import LeaseCandidate, allocate_leases, apply_lease_reports
from semaphore_core.policy import UNLIMITED, GroupPolicy
from semaphore_core.protocol import (
    Blocked,
    BlockedReason,
    GrantedPermits,
    GrantResult,
    LeaseGrant,
    PermitRequest,
)
from semaphore_core.store import GrantRow, HolderStore
from semaphore_core.usage import GroupUsage, Usage


@attrs.define
class Allocation:
    """What one request gets back (mutable while the round builds it)."""

    grants: list[GrantedPermits]
    blocked: list[Blocked]
    grant_results: list[GrantResult]
    leases: list[LeaseGrant]


@attrs.frozen(hash=False)
class RoundResult:
    allocations: list[Allocation]
    usage: Usage
    requested: int
    granted: int
    reclaimed: list[GrantReclaimed]
    lease_events: list[LeaseGranted | LeaseRetired]
    #: Lease demand went unserved, or grants were blocked by lease footprint.
    contended: bool


def allocate(
    store: HolderStore,
    config: HolderConfig,
    requests: Sequence[PermitRequest],
    limit: int,
    policies: Mapping[str, GroupPolicy],
    now: int,
    new_id: Callable[[], str],
) -> RoundResult:
    """Apply reports, reclaim, then hand out permits in oldest-demand order."""
    lease_options = config.leases
    allocations: list[Allocation] = []
    unknown_debt = 0
    drawn: dict[str, int] = {}
    for request in requests:
        room = claim_room(store, config, limit)
        grant_results = apply_grant_reports(store, request.client_id, request.grants, now, room)
        leases: list[LeaseGrant] = []
        if lease_options is not None and request.leases is not None:
            outcome = apply_lease_reports(store, lease_options, request.client_id, request.leases, now)
            leases.extend(outcome.echoes)
            unknown_debt += outcome.unknown_debt
            drawn.update(outcome.drawn)
        allocations.append(Allocation(grants=[], blocked=[], grant_results=grant_results, leases=leases))

    reclaimed = reclaim(store, now)
    # After reclaim every row's outstanding permits are permits - released,
    # which is what the totals sum. Every row has at least one (a grant is
    # deleted once released >= permits), so the groups are those with rows.
    used = {group: total for group, (_, total) in store.grant_totals().items()}
    total = sum(used.values())

    # In strict mode live lease footprint is reserved from the same pool as grants.
    budget = (
        budgets(lease_options.provisioning, limit)
        if lease_options is not None
        else Budgets(grants=limit, leases=0, shared=False)
    )
    under_shares = (
        UNDER_SHARES_THE_LIMIT in config.fixes
        and lease_options is not None
        and isinstance(lease_options.provisioning, Under)
    )
    leased = store.leased_footprint() if lease_options is not None and (budget.shared or under_shares) else 0
    remaining = budget.grants - total - (leased if budget.shared else 0)
    if under_shares:
        # Fix F2: lease footprint above a lowered reserve also blocks grants.
        remaining = min(remaining, limit - total - leased)
    # Fix F1: a within_group_limit group's lease footprint counts against its limit.
    group_leased = (
        {group: footprint for group, (_, footprint) in store.lease_totals().items()}
        if GROUP_CEILING_COUNTS_LEASES in config.fixes
        and lease_options is not None
        and lease_options.limited_groups == "within_group_limit"
        else {}
    )

    demands = [
        (allocation, request, demand)
        for allocation, request in zip(allocations, requests, strict=True)
        for demand in request.demand
    ]
    demands.sort(key=lambda entry: (entry[2].oldest_at, locale_key(entry[1].client_id)))
    requested = 0
    granted = 0
    for allocation, request, demand in demands:
        requested += demand.count
        policy = policies.get(demand.group, UNLIMITED)
        if policy.blocked is not None:
            allocation.blocked.append(Blocked(group=demand.group, reason=policy.blocked))
            continue

        group_used = used.get(demand.group, 0)
        group_remaining = (
            None if policy.limit is None else policy.limit - group_used - group_leased.get(demand.group, 0)
        )
        give = max(
            0,
            min(demand.count, remaining)
            if group_remaining is None
            else min(demand.count, group_remaining, remaining),
        )
        if give > 0:
            grant = GrantRow(
                grant_id=new_id(),
                client_id=request.client_id,
                grp=demand.group,
                permits=give,
                claimed=0,
                released=0,
                created_at=now,
                expires_at=now + config.grant_timeout_ms,
            )
            if not store.insert(grant):
                raise reused_id(grant.grant_id, "grant")
            allocation.grants.append(
                GrantedPermits(grant_id=grant.grant_id, group=demand.group, permits=give)
            )
            remaining -= give
            used[demand.group] = group_used + give
            granted += give
        if give < demand.count:
            # The group gate is checked first so attribution names the tighter one.
            reason: BlockedReason = (
                "group_limit" if group_remaining is not None and group_remaining - give <= 0 else "limit"
            )
            allocation.blocked.append(Blocked(group=demand.group, reason=reason))

    lease_events: list[LeaseGranted | LeaseRetired] = []
    contended = False
    if lease_options is not None:
        candidates = [
            LeaseCandidate(client_id=request.client_id, group=d.group, oldest_at=d.oldest_at)
            for request in requests
            if request.leases is not None
            for d in request.demand
        ]
        # The allocator nets out live footprint itself; hand it gross capacity.
        lease_budget = max(0, limit - total - granted) if budget.shared else budget.leases
        if under_shares:
            # Fix F2: the reserve only leases what the whole limit still has room for.
            lease_budget = min(lease_budget, max(0, limit - total - granted))
        lease_outcome = allocate_leases(
            store,
            lease_options,
            budget=lease_budget,
            unknown_debt=unknown_debt,
            drawn=drawn,
            candidates=candidates,
            policies=policies,
            group_used=used,
            now=now,
            new_id=new_id,
        )
        leased = lease_outcome.footprint
        lease_events = lease_outcome.events
        # Returned headroom helps grants only when they share the limit with leases.
        contended = lease_outcome.unserved or (
            budget.shared
            and any(b.reason == "limit" for allocation in allocations for b in allocation.blocked)
        )
        for allocation, request in zip(allocations, requests, strict=True):
            # One echo per lease; the allocator's view (e.g. retired) supersedes the report's.
            by_lease = {lease.lease_id: lease for lease in allocation.leases}
            for lease in lease_outcome.grants.get(request.client_id, ()):
                by_lease[lease.lease_id] = lease
            allocation.leases = list(by_lease.values())
        if budget.shared:
            remaining = limit - total - granted - leased

    groups = {
        group: GroupUsage(granted=count, limit=policies.get(group, UNLIMITED).limit)
        for group, count in used.items()
    }
    return RoundResult(
        allocations=allocations,
        usage=Usage(
            limit=limit,
            granted=total + granted,
            leased=leased,
            available=max(0, remaining),
            groups=groups,
        ),
        requested=requested,
        granted=granted,
        reclaimed=reclaimed,
        lease_events=lease_events,
        contended=contended,
    )


def blocked_counts(
    requests: Sequence[PermitRequest], allocations: Sequence[Allocation], now: int
) -> list[BlockedEvent]:
    """Permits left queued per (group, reason) across one round's allocations (``blockedCounts``)."""
    counts: dict[tuple[str, BlockedReason], int] = {}
    for request, allocation in zip(requests, allocations, strict=True):
        given: dict[str, int] = {}
        for grant in allocation.grants:
            given[grant.group] = given.get(grant.group, 0) + grant.permits
        for blocked in allocation.blocked:
            # Faithful: the first demand entry of the group, as ``demand.find`` picks.
            demanded = next((d for d in request.demand if d.group == blocked.group), None)
            count = (demanded.count if demanded is not None else 0) - given.get(blocked.group, 0)
            key = (blocked.group, blocked.reason)
            counts[key] = counts.get(key, 0) + count
    return [
        BlockedEvent(timestamp=now, group=group, reason=reason, count=count)
        for (group, reason), count in counts.items()
    ]
