"""Leases: ``applyLeaseReports`` and ``allocateLeases`` of semaphore-leases.ts.

A lease is a block of permits a client draws locally, one per item, without
a round trip. The holder only learns what was drawn from reports, so it
charges a lease's whole footprint (permits not yet released) until the
client itself says how much it drew. An unreported lease is *retired*, never
forgotten: its client may be cut off with work still running.

The reference walks every lease row in every round. This port touches only
the leases that can change: those reported this round, live leases that
expired or lost eligibility, and new ones; sums come from the
trigger-maintained lease totals. Replies and rows are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import attrs

from semaphore_core.collation import locale_key
from semaphore_core.config import LeaseOptions
from semaphore_core.errors import reused_id
from semaphore_core.events import LeaseGranted, LeaseRetired
from semaphore_core.policy import UNLIMITED, GroupPolicy, lease_eligible
from semaphore_core.protocol import LeaseGrant, LeaseReport
from semaphore_core.store import HolderStore, LeaseRow


def to_lease_grant(lease: LeaseRow, now: int) -> LeaseGrant:
    """A retired lease is echoed as expired (``expiresAt = now``) so the client stops drawing at once."""
    return LeaseGrant(
        lease_id=lease.lease_id,
        group=lease.grp,
        permits=lease.permits,
        expires_at=now if lease.retired else lease.expires_at,
    )


@attrs.define
class LeaseReportOutcome:
    #: Echoed leases: refreshed live ones, retired ones, settled ones.
    echoes: list[LeaseGrant]
    #: Live footprint of leases the holder does not know, charged this round.
    unknown_debt: int
    #: Reported ``drawn`` per known lease, so undrawn headroom can be seen.
    drawn: dict[str, int]


def apply_lease_reports(
    store: HolderStore,
    options: LeaseOptions,
    client_id: str,
    reports: Iterable[LeaseReport],
    now: int,
) -> LeaseReportOutcome:
    """Heartbeat live leases, advance release marks, retire expired ones, settle finished ones."""
    outcome = LeaseReportOutcome(echoes=[], unknown_debt=0, drawn={})
    for report in reports:
        lease = store.get_lease(report.lease_id)
        if lease is None or lease.client_id != client_id:
            # Faithful: another client's lease is echoed with *its* group and permits.
            outcome.echoes.append(
                LeaseGrant(
                    lease_id=report.lease_id,
                    group=lease.grp if lease is not None else "",
                    permits=lease.permits if lease is not None else 0,
                    expires_at=now,
                )
            )
            # Client-reported usage is untrusted: clamp before it can affect budget.
            live = max(0, report.drawn - max(0, report.released))
            outcome.unknown_debt += min(live, options.permits_per_lease)
            continue

        drawn = min(max(0, report.drawn), lease.permits)
        outcome.drawn[lease.lease_id] = drawn
        released = max(lease.released, min(max(0, report.released), drawn))
        # An expired lease is retired, not forgotten: its permits may be running.
        # Only the client's own retired report shrinks a lease to what it drew:
        # until then it may still be drawing, whoever asked it to stop.
        retired = lease.retired == 1 or report.retired is True or lease.expires_at <= now
        permits = max(released, drawn) if report.retired is True else lease.permits
        if released >= permits:
            store.remove_lease(lease.lease_id)
            # Echoed as settled (permits = released) so the client can drop the lease.
            outcome.echoes.append(LeaseGrant(lease.lease_id, lease.grp, released, now))
            continue
        expires_at = lease.expires_at if retired else now + options.ttl_ms
        assert released <= permits, (lease, report)
        store.update_lease(lease.lease_id, permits, released, expires_at, 1 if retired else 0)
        outcome.echoes.append(LeaseGrant(lease.lease_id, lease.grp, permits, now if retired else expires_at))
    return outcome


@attrs.frozen
class LeaseCandidate:
    """A lease-capable client's demand for one group."""

    client_id: str
    group: str
    oldest_at: int


@attrs.frozen
class LeaseAllocation:
    #: New and retired leases to echo, per client.
    grants: dict[str, list[LeaseGrant]]
    #: Live footprint after the pass (unknown debt not included).
    footprint: int
    events: list[LeaseGranted | LeaseRetired]
    #: Some eligible candidate received no lease this round.
    unserved: bool


def allocate_leases(
    store: HolderStore,
    options: LeaseOptions,
    *,
    budget: int,
    unknown_debt: int,
    drawn: Mapping[str, int],
    candidates: Iterable[LeaseCandidate],
    policies: Mapping[str, GroupPolicy],
    group_used: Mapping[str, int],
    now: int,
    new_id: Callable[[], str],
) -> LeaseAllocation:
    """One round's lease pass.

    Retires leases that expired or lost eligibility (their footprint stays),
    skips clients that still hold usable headroom, retires undrawn headroom
    newest first when the budget fell, then shares what is left equally among
    the oldest candidates, capped at ``permits_per_lease``.
    """
    grants: dict[str, list[LeaseGrant]] = {}
    events: list[LeaseGranted | LeaseRetired] = []

    def echo(client_id: str, grant: LeaseGrant) -> None:
        grants.setdefault(client_id, []).append(grant)

    def policy_of(group: str) -> GroupPolicy:
        return policies.get(group, UNLIMITED)

    # --- retire live leases that expired or whose group is no longer eligible.
    lease_totals = store.lease_totals()
    ineligible = [g for g in lease_totals if not lease_eligible(options, policy_of(g))]
    for lease in store.live_leases_to_retire(now, ineligible):
        # Stop draws now; the full footprint stays until the client confirms.
        store.retire_lease(lease.lease_id)
        echo(lease.client_id, LeaseGrant(lease.lease_id, lease.grp, lease.permits, now))
        events.append(
            LeaseRetired(
                timestamp=now,
                lease_id=lease.lease_id,
                client_id=lease.client_id,
                group=lease.grp,
                permits=lease.permits - drawn.get(lease.lease_id, lease.permits),
            )
        )

    # Retiring keeps footprint, so the totals still hold.
    footprint = sum(total for _, total in lease_totals.values())
    group_footprint = {group: total for group, (_, total) in lease_totals.items()}

    # An unreported lease is assumed fully drawn (as gatekeeper does), so
    # only a lease reported this round can hold usable headroom.
    reported: list[LeaseRow] = []
    usable: set[tuple[str, str]] = set()
    for lease_id, count in drawn.items():
        current = store.get_lease(lease_id)
        if current is None:
            continue  # settled by its report this round
        reported.append(current)
        if not current.retired and count < current.permits:
            usable.add((current.client_id, current.grp))

    by_group: dict[str, dict[str, LeaseCandidate]] = {}
    for candidate in candidates:
        if not lease_eligible(options, policy_of(candidate.group)) or (
            (candidate.client_id, candidate.group) in usable
        ):
            continue
        clients = by_group.setdefault(candidate.group, {})
        prior = clients.get(candidate.client_id)
        if prior is None:
            clients[candidate.client_id] = candidate
        elif candidate.oldest_at < prior.oldest_at:
            clients[candidate.client_id] = attrs.evolve(prior, oldest_at=candidate.oldest_at)

    ranked_groups = []
    for group, clients in by_group.items():
        ordered = sorted(clients.values(), key=lambda c: (c.oldest_at, locale_key(c.client_id)))
        ranked_groups.append((min(c.oldest_at for c in ordered), locale_key(group), ordered))
    ranked_groups.sort(key=lambda entry: (entry[0], entry[1]))
    chosen = [
        candidate
        for _, _, ordered in ranked_groups[: options.max_groups]
        for candidate in ordered[: options.max_clients_per_group]
    ]

    # A lowered budget retires leases with undrawn headroom, newest first, until
    # the headroom their clients reported covers the excess. Their footprint
    # stays until each client confirms what it actually drew.
    excess = footprint + unknown_debt - budget
    if excess > 0:
        live = [lease for lease in reported if lease.expires_at > now and not lease.retired]
        live.sort(key=lambda lease: (-lease.created_at, lease.seq))
        for lease in live:
            if excess <= 0:
                break
            count = drawn[lease.lease_id]
            if count >= lease.permits:
                continue
            store.retire_lease(lease.lease_id)
            excess -= lease.permits - count
            echo(lease.client_id, LeaseGrant(lease.lease_id, lease.grp, lease.permits, now))
            events.append(
                LeaseRetired(
                    timestamp=now,
                    lease_id=lease.lease_id,
                    client_id=lease.client_id,
                    group=lease.grp,
                    permits=lease.permits - count,
                )
            )

    eligible = sum(len(clients) for clients in by_group.values())
    remaining = max(0, budget - footprint - unknown_debt)
    # With fewer permits than candidates, the oldest demand gets one each
    # rather than everyone getting a rounded-down share of nothing.
    share = min(options.permits_per_lease, max(1, remaining // max(1, len(chosen))))

    issued = 0
    for candidate in chosen:
        if remaining <= 0:
            break
        group_limit = policy_of(candidate.group).limit
        group_room = (
            share
            if group_limit is None
            else group_limit - group_used.get(candidate.group, 0) - group_footprint.get(candidate.group, 0)
        )
        permits = min(share, group_room, remaining)
        if permits <= 0:
            continue
        remaining -= permits
        issued += 1
        lease = LeaseRow(
            lease_id=new_id(),
            client_id=candidate.client_id,
            grp=candidate.group,
            permits=permits,
            released=0,
            created_at=now,
            expires_at=now + options.ttl_ms,
            retired=0,
        )
        if store.insert_lease(lease) is None:
            raise reused_id(lease.lease_id, "lease")
        footprint += permits
        group_footprint[candidate.group] = group_footprint.get(candidate.group, 0) + permits
        echo(candidate.client_id, to_lease_grant(lease, now))
        events.append(
            LeaseGranted(
                timestamp=now,
                lease_id=lease.lease_id,
                client_id=lease.client_id,
                group=lease.grp,
                permits=permits,
            )
        )
    return LeaseAllocation(grants=grants, footprint=footprint, events=events, unserved=issued < eligible)
