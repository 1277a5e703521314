"""Grant reports and reclaim: ``#applyReports`` and ``#reclaim`` of semaphore-server.ts.

Counts are cumulative high-water marks: they only move forward and are
clamped to what the grant can honour, so a lost, repeated or reordered
report can never free capacity twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from semaphore_core.config import HolderConfig, Over
from semaphore_core.events import GrantReclaimed
from semaphore_core.fixes import CLAIMS_RESPECT_THE_LIMIT
from semaphore_core.protocol import GrantReport, GrantResult
from semaphore_core.store import HolderStore, effective_permits


def claim_room(store: HolderStore, config: HolderConfig, limit: int) -> int | None:
    """Fix F3's room for claims under ``limit``; None when the fix is off (the reference)."""
    if CLAIMS_RESPECT_THE_LIMIT not in config.fixes:
        return None
    leases = config.leases
    # Over mode's leases draw on their own budget; strict and under leases share the limit.
    leased = 0 if leases is None or isinstance(leases.provisioning, Over) else store.leased_footprint()
    return limit - store.claimed_in_use() - leased


def apply_grant_reports(
    store: HolderStore,
    client_id: str,
    reports: Iterable[GrantReport],
    now: int,
    claim_room: int | None = None,
) -> list[GrantResult]:
    """Advance each reported grant; a fully released grant is deleted.

    An unknown grant, or another client's, is answered ``not_found``. A claim
    that arrives after the deadline is clamped to what was claimed in time
    and answered ``expired``, so the client requeues what it could not admit.

    ``claim_room`` is fix F3 (``claims-respect-the-limit``, off in the
    reference): how many more permits may be claimed across all grants before
    claimed-and-unreleased permits plus lease footprint pass the current
    limit. A claim beyond it is clamped and answered ``expired`` like a late
    one, so a grant issued under an old limit cannot admit work above a new one.
    """
    results: list[GrantResult] = []
    for report in reports:
        grant = store.get(report.grant_id)
        if grant is None or grant.client_id != client_id:
            results.append(GrantResult(grant_id=report.grant_id, claimed=0, status="not_found"))
            continue

        expired = now >= grant.expires_at
        permits = effective_permits(grant, now)
        claimed = max(grant.claimed, min(report.claimed, permits))
        limited = False
        if claim_room is not None:
            room = max(0, claim_room)
            if claimed - grant.claimed > room:
                claimed, limited = grant.claimed + room, True
        released = max(grant.released, min(report.released, claimed))
        if claim_room is not None:
            claim_room -= (claimed - grant.claimed) - (released - grant.released)
        assert released <= claimed <= permits <= grant.permits, (grant, report)
        if released >= permits:
            store.remove(grant.grant_id)
        elif (permits, claimed, released) != (grant.permits, grant.claimed, grant.released):
            # An unchanged row is not rewritten; the reference rewrites it to the same values.
            store.update(grant.grant_id, permits, claimed, released)
        results.append(
            GrantResult(
                grant_id=grant.grant_id,
                claimed=claimed,
                status="expired" if (expired or limited) and report.claimed > claimed else "ok",
            )
        )
    return results


def reclaim(store: HolderStore, now: int) -> list[GrantReclaimed]:
    """Shrink every grant past its claim deadline to what was claimed; delete it if all released.

    Events are returned, not emitted: the caller emits them after commit.
    """
    events: list[GrantReclaimed] = []
    for grant in store.expired_unclaimed(now):
        assert now >= grant.expires_at, grant
        assert grant.claimed < grant.permits, grant
        if grant.released >= grant.claimed:
            store.remove(grant.grant_id)
        else:
            store.update(grant.grant_id, grant.claimed, grant.claimed, grant.released)
        events.append(
            GrantReclaimed(
                timestamp=now,
                grant_id=grant.grant_id,
                client_id=grant.client_id,
                group=grant.grp,
                permits=grant.permits - grant.claimed,
            )
        )
    return events
