"""A forging client: reports that lie, to show the holder's clamping holds.

``reports_monotone`` (docs/INVARIANTS.md) promises that "no replayed, reordered,
duplicated or forged report frees capacity twice". Honest queue clients
never send a report whose released exceeds its claimed, claims more than
a grant holds, or rewinds a mark, so without this client the clamps that
guard against them are never exercised. The forger asks for a few permits at
a time; each report on its grants is, with the plan's ``forged_reports``
probability, one of those lies (otherwise honest). It runs no work, so the
oracle of permits in use never counts it; once the faults stop it reports
every grant honestly released, so it leaves nothing charged behind.

It forgets a grant only when the holder has *acknowledged* an honest report
that releases all of it (or answered ``not_found``). A report can be lost,
and a later report can be a lie: dropping a grant by its local mark alone
would leave it charged forever, which ``capacity_returns`` reports as a
leak that is the forger's, not the protocol's (the queue client had the
same mistake, see docs/FINDINGS.md, "Found in semsim itself").

A ``negative_count`` lie puts -1 in a report's ``claimed`` or ``released``:
the message is malformed, so the holder must reject it whole (its honest
reports with it) and change nothing.

It forges lease reports too, each period with the same probability, one lie
at a time (the reference answers them in ``applyLeaseReports``):

- ``unknown_lease``: a lease the holder never issued, with permits drawn.
  The holder echoes it retired (``expiresAt`` now) and charges its live
  footprint against that round's lease budget.
- ``foreign_lease``: another client's live lease, reported under the
  forger's own id as drawn and released (or drawn and still running). It is
  echoed retired with *that* lease's group and permits, charged as unknown
  debt, and the lease itself is left alone.
- ``replayed_lease``: an old report on another client's lease, sent again
  under that client's id as a sync: counts it already passed, so the
  clamps must leave the lease as it is (a replay may heartbeat it).

The forger is omniscient, as a nemesis is: it reads the holder's lease rows
(``peek``) to pick a victim, and remembers their released marks from one
period to the next so that what it replays is old. Lease lies go in a
request with no demand (so the holder never leases the forger anything) or,
for replays, in a sync; a ``fault`` event names each one.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from semsim.runtime.kernel import Sim
from semsim.runtime.network import Network, RpcError

NAME: Final = "forger"
#: How often the forger asks for a permit or reports.
PERIOD_MS: Final = 3_000
#: Permits asked for at a time: several, so a lie can sit strictly inside a grant.
ASK_PERMITS: Final = 3
#: At most this many grants are remembered (older ones are reported released and dropped).
MAX_GRANTS: Final = 8
#: The lies the forger tells about its grants, and about leases.
GRANT_LIES: Final = ("released_above_claimed", "claim_above_permits", "rewind", "negative_count")
LEASE_LIES: Final = ("unknown_lease", "foreign_lease", "replayed_lease")
LIES: Final = GRANT_LIES + LEASE_LIES
#: Permits an unknown lease claims to have drawn, at most.
MAX_UNKNOWN_DRAWN: Final = 3


@attrs.frozen
class SeenLease:
    """A lease row of the holder, as the forger peeked at it."""

    lease_id: str
    client_id: str
    group: str
    permits: int
    released: int


def lease_rows(conn: sqlite3.Connection) -> list[SeenLease]:
    """The holder's lease rows, by id (none if its schema does not exist yet)."""
    try:
        rows = conn.execute(
            "SELECT lease_id, client_id, grp, permits, released FROM durability_semaphore_leases "
            "ORDER BY lease_id"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [SeenLease(str(a), str(b), str(c), int(d), int(e)) for a, b, c, d, e in rows]


async def forge(
    sim: Sim,
    network: Network,
    holder: str,
    group: str,
    rate: float,
    until_ms: int,
    lies: Sequence[str] = (),
) -> None:
    """Ask, claim and release through lying reports until ``until_ms``, then settle honestly.

    ``lies`` narrows the lies told (empty: all of them); with no grant lie
    among them the forger asks for no permits (its lease lies are
    :func:`forge_leases`, a loop and a random stream of their own).
    """
    rng = sim.rng(f"forger:{holder}")
    grant_lies = [lie for lie in GRANT_LIES if not lies or lie in lies]
    if not grant_lies:
        return
    grants: dict[str, tuple[int, int, int]] = {}  # grant id -> (permits, claimed, released) as reported
    while sim.now() < until_ms:
        await sim.sleep(PERIOD_MS)
        reports = []
        #: Grants whose report in this message honestly releases every permit.
        releasing_all: list[str] = []
        for grant_id, (permits, claimed, released) in sorted(grants.items()):
            if rng.random() < rate:
                lie, report = _lie(rng, grant_lies, grant_id, permits, claimed, released)
                sim.event("fault", fault="forged_report", lie=lie, grant=grant_id)
                reports.append(report)
            else:
                # Honest: claim everything, release a step more each time.
                claimed = permits
                released = min(permits, released + 1)
                grants[grant_id] = (permits, claimed, released)
                reports.append({"grantId": grant_id, "claimed": claimed, "released": released})
                if released >= permits:
                    releasing_all.append(grant_id)
        reply = await _ask(network, holder, group, reports, sim.now(), demand=len(grants) < MAX_GRANTS)
        if reply is None:
            continue  # lost, or lost its reply: nothing is known to have been applied
        for result in reply.get("grantResults", ()):
            if result["status"] == "not_found":
                grants.pop(result["grantId"], None)
        for grant_id in releasing_all:
            grants.pop(grant_id, None)  # the holder applied the full release: settled
        for grant in reply.get("grants", ()):
            grants[grant["grantId"]] = (grant["permits"], 0, 0)
    # Quiet period: report every grant claimed and released, until the holder has none left.
    while grants:
        reports = [
            {"grantId": grant_id, "claimed": permits, "released": permits}
            for grant_id, (permits, _, _) in sorted(grants.items())
        ]
        if await _ask(network, holder, group, reports, sim.now(), demand=False) is not None:
            grants.clear()
        else:
            await sim.sleep(PERIOD_MS)


async def forge_leases(
    sim: Sim,
    network: Network,
    holder: str,
    rate: float,
    until_ms: int,
    lies: Sequence[str],
    peek: Callable[[], list[SeenLease]],
) -> None:
    """Every ``PERIOD_MS`` until ``until_ms``, with probability ``rate``, one forged lease report.

    ``lies`` narrows the lies (empty: all); ``peek`` reads the holder's lease rows.
    """
    rng = sim.rng(f"forger-leases:{holder}")
    lease_lies = [lie for lie in LEASE_LIES if not lies or lie in lies]
    if not lease_lies:
        return
    #: Released marks of other clients' leases as of an earlier period: what a replay sends.
    old: dict[str, SeenLease] = {}
    while sim.now() < until_ms:
        await sim.sleep(PERIOD_MS)
        if rng.random() < rate:
            await _lease_lie(sim, network, holder, rng, rng.choice(lease_lies), peek(), old)
        old = {lease.lease_id: lease for lease in peek() if lease.client_id != NAME}


def _lie(
    rng: Any, lies: Sequence[str], grant_id: str, permits: int, claimed: int, released: int
) -> tuple[str, dict[str, Any]]:
    """One forged report on a grant: released above claimed, a claim above the grant, a rewind,
    or a negative count (a malformed message: the holder must reject it whole and change nothing)."""
    lie = rng.choice(lies)
    if lie == "negative_count":
        field = rng.choice(("claimed", "released"))
        # The rest of the report is honest (the whole grant claimed): a parser that clamped
        # the -1 instead of rejecting the message would apply that claim.
        return lie, {"grantId": grant_id, "claimed": permits, "released": released, field: -1}
    if lie == "released_above_claimed":
        return lie, {"grantId": grant_id, "claimed": claimed, "released": claimed + 1}
    if lie == "claim_above_permits":
        return lie, {"grantId": grant_id, "claimed": permits + 5, "released": released}
    return lie, {"grantId": grant_id, "claimed": max(0, claimed - 1), "released": max(0, released - 1)}


async def _lease_lie(
    sim: Sim,
    network: Network,
    holder: str,
    rng: Any,
    lie: str,
    rows: list[SeenLease],
    old: dict[str, SeenLease],
) -> None:
    """Send one forged lease report (see the module docstring); falls back to an unknown lease
    when there is no other client's lease to lie about."""
    theirs = [lease for lease in rows if lease.client_id != NAME]
    replayable = [lease for lease in theirs if lease.lease_id in old]
    if lie == "replayed_lease" and replayable:
        then = old[rng.choice(replayable).lease_id]
        report = {"leaseId": then.lease_id, "drawn": then.released, "released": then.released}
        sim.event("fault", fault="forged_lease_report", lie=lie, lease=then.lease_id, victim=then.client_id)
        message = {"type": "sync", "v": 1, "clientId": then.client_id, "grants": [], "leases": [report]}
    else:
        if lie == "foreign_lease" and theirs:
            victim = rng.choice(theirs)
            lease_id, victim_id = victim.lease_id, victim.client_id
            # Claims the lease drawn in full, then either all of it released or none of it.
            released = rng.choice((0, victim.permits))
            report = {"leaseId": lease_id, "drawn": victim.permits, "released": released}
        else:
            lie, victim_id = "unknown_lease", None
            lease_id = sim.next_id(f"{NAME}/lease")
            report = {"leaseId": lease_id, "drawn": rng.randint(1, MAX_UNKNOWN_DRAWN), "released": 0}
        sim.event("fault", fault="forged_lease_report", lie=lie, lease=lease_id, victim=victim_id)
        # No demand: the holder has nothing to lease the forger, but the report's debt is
        # charged against this round's lease budget.
        message = {
            "type": "request",
            "v": 1,
            "clientId": NAME,
            "demand": [],
            "grants": [],
            "leases": [report],
        }
    # Lost, or its reply lost: a lie has no follow-up.
    with contextlib.suppress(RpcError):
        await network.call(NAME, holder, "permits", message)


async def _ask(
    network: Network, holder: str, group: str, reports: list[dict[str, Any]], now: int, demand: bool
) -> dict[str, Any] | None:
    message = {
        "type": "request",
        "v": 1,
        "clientId": NAME,
        "demand": [{"group": group, "count": ASK_PERMITS, "oldestAt": now}] if demand else [],
        "grants": reports,
    }
    try:
        reply = await network.call(NAME, holder, "permits", message)
    except RpcError:
        return None
    return reply if isinstance(reply, dict) else None
