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
"""

from __future__ import annotations

from typing import Any, Final

from sim.network import Network, RpcError
from sim.runtime import Sim

NAME: Final = "forger"
#: How often the forger asks for a permit or reports.
PERIOD_MS: Final = 3_000
#: Permits asked for at a time: several, so a lie can sit strictly inside a grant.
ASK_PERMITS: Final = 3
#: At most this many grants are remembered (older ones are reported released and dropped).
MAX_GRANTS: Final = 8


async def forge(sim: Sim, network: Network, holder: str, group: str, rate: float, until_ms: int) -> None:
    """Ask, claim and release through lying reports until ``until_ms``, then settle honestly."""
    rng = sim.rng(f"forger:{holder}")
    grants: dict[str, tuple[int, int, int]] = {}  # grant id -> (permits, claimed, released) as reported
    while sim.now() < until_ms:
        await sim.sleep(PERIOD_MS)
        reports = []
        #: Grants whose report in this message honestly releases every permit.
        releasing_all: list[str] = []
        for grant_id, (permits, claimed, released) in sorted(grants.items()):
            if rng.random() < rate:
                lie, report = _lie(rng, grant_id, permits, claimed, released)
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


def _lie(rng: Any, grant_id: str, permits: int, claimed: int, released: int) -> tuple[str, dict[str, Any]]:
    """One forged report on a grant: released above claimed, a claim above the grant, or a rewind."""
    lie = rng.choice(("released_above_claimed", "claim_above_permits", "rewind"))
    if lie == "released_above_claimed":
        return lie, {"grantId": grant_id, "claimed": claimed, "released": claimed + 1}
    if lie == "claim_above_permits":
        return lie, {"grantId": grant_id, "claimed": permits + 5, "released": released}
    return lie, {"grantId": grant_id, "claimed": max(0, claimed - 1), "released": max(0, released - 1)}


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
