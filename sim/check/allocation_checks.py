"""``reuse``, ``lease_fairness`` and ``no_overask``: who gets permits, and when.

The safety invariants (``ceiling``, ``conservative``, ...) ask whether the protocol
ever hands out too much. Most real allocator bugs err the other way, or
hand the right amount to the wrong party: a permit that is released but not
offered again, a lease share that is too big or goes to the wrong client, a
client that asks for what it already holds. Those break no ceiling, so the
checks here judge them, each from the data of one step only (a round's
requests, replies and the rows it committed; one request and its client's
own state), never by re-reading every database.

What this module owns: the three rules, written from the reference
(semaphore-server.ts ``#allocate`` and semaphore-leases.ts ``applyLeaseReports``
and ``allocateLeases`` in seed 001's walkthrough, and semaphore.mdx for what
a client asks). What it must not know: how ``semaphore_core`` computes the
same things. It reads the holder's committed rows and ``usage``, never its
allocator, so a bug planted in the allocator shows up as a difference.

A simulation judges each rule through a checker of its own, on the interface
users' invariants use (:mod:`semsim.check.reuse`,
:mod:`semsim.check.lease_fairness`, :mod:`semsim.check.no_overask`);
``semsim replay`` and the unit tests feed :class:`AllocationChecks` a history
commit by commit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from semaphore_core import queue_reads
from semaphore_core.collation import locale_key
from semaphore_core.config import LeaseOptions, Over, Strict, Under, budgets
from semaphore_core.fixes import UNDER_SHARES_THE_LIMIT
from semaphore_core.protocol import Demand, PermitGrant, PermitRequest
from semaphore_core.usage import Usage
from semsim.check.queued_counts import QueuedCounts
from semsim.check.reads import select

REUSE: Final = "reuse"
LEASE_FAIRNESS: Final = "lease_fairness"
NO_OVERASK: Final = "no_overask"
#: The names, in the order docs/INVARIANTS.md lists them.
NAMES: Final = (REUSE, LEASE_FAIRNESS, NO_OVERASK)

#: A blocked reason that comes from the group's policy, not from capacity: the group is not leased.
_POLICY_BLOCKS: Final = frozenset({"not_permitted", "limit_resolution_error"})

#: Rows as ``SELECT *`` returns them, keyed by id (what ``Monitor`` already reads at every commit).
Rows = Mapping[str, Mapping[str, tuple[Any, ...]]]


# --- reuse ----------------------------------------------------------------------------------


def grant_room(
    options: LeaseOptions | None, fixes: frozenset[str], limit: int, granted: int, leased: int
) -> int:
    """What the grants' pool still holds after a round, by the reference's budget per mode.

    No leases and ``over``: the limit less outstanding grants (``over`` leases
    have their own budget above it). ``strict``: less the live lease footprint
    too. ``under``: the grants' pool (limit less the reserve) less grants; with
    fix F2 also no more than the room under the whole limit. Negative when
    usage stayed above a lowered limit.
    """
    if options is None or isinstance(options.provisioning, Over):
        return limit - granted
    if isinstance(options.provisioning, Strict):
        return limit - granted - leased
    room = budgets(options.provisioning, limit).grants - granted
    if UNDER_SHARES_THE_LIMIT in fixes:
        room = min(room, limit - granted - leased)
    return room


def reuse_rule(room: int, blocked_on_limit: Sequence[str]) -> str | None:
    """``reuse``: None if it holds, else what was left unoffered.

    The bound is zero rounds, from the reference's cadence: ``#allocate``
    applies every request's reports *first*, then reclaims, then allocates,
    all in one transaction ("An allocation round first applies cumulative
    reports ..."), and a ``sync`` applies its reports at once. So capacity a
    report releases is in the pool of the very round that carries it, or of
    the first round after the sync: that round must offer it to demand that
    waits for it. A round then only leaves demand blocked on ``limit`` once
    the limit's room is used up, so after such a round the grants' pool has
    no room left. Waiting a round more is not the reference's cadence but a
    bug (a round that allocates before it applies reports), and any larger
    bound would excuse it.
    """
    if not blocked_on_limit or room <= 0:
        return None
    who = ", ".join(blocked_on_limit[:3]) + (" ..." if len(blocked_on_limit) > 3 else "")
    return (
        f"{room} permits of the grants' pool were left unoffered by a round that kept demand "
        f"waiting on the limit ({who}): capacity released by reports must be offered in the round "
        f"that applies them"
    )


# --- lease_fairness ----------------------------------------------------------------------------


@attrs.frozen
class LeasePlan:
    """What the reference's lease pass issues in one round, and the numbers it decided by."""

    #: (client, group, permits), in the order the pass issues them.
    leases: tuple[tuple[str, str, int], ...]
    #: The candidates the pass considers, in its order (after eligibility, headroom and the caps).
    chosen: tuple[tuple[str, str], ...]
    share: int
    remaining: int
    unknown_debt: int
    footprint: int
    #: (client, group) pairs that still hold usable headroom, and groups not eligible for leases.
    usable: frozenset[tuple[str, str]]
    ineligible: frozenset[str]


def plan_leases(
    options: LeaseOptions,
    fixes: frozenset[str],
    now: int,
    requests: Sequence[PermitRequest],
    replies: Sequence[PermitGrant],
    before: Mapping[str, tuple[Any, ...]],
    caps: Mapping[str, int],
    usage: Usage,
) -> LeasePlan:
    """The reference's ``applyLeaseReports`` and ``allocateLeases``, transliterated for one round.

    ``before`` is every lease row as the previous commit left it; ``usage``
    the holder's usage after the round (its grants include the round's, as
    the reference's ``groupUsed`` and ``limit - total - granted`` do);
    ``caps`` the group limits the round resolved. Groups the round blocked
    by policy (``not_permitted``, ``limit_resolution_error``) are read off the
    replies.
    """
    ppl = options.permits_per_lease
    blocked = {b.group for reply in replies for b in reply.blocked if b.reason in _POLICY_BLOCKS}
    within = options.limited_groups == "within_group_limit"

    def eligible(group: str) -> bool:  # leaseEligible
        return group not in blocked and (group not in caps or within)

    # applyLeaseReports, request by request: [client, group, permits, released, expires_at, retired].
    leases = {lid: [row[1], row[2], row[3], row[4], row[6], row[7]] for lid, row in before.items()}
    unknown_debt = 0
    drawn: dict[str, int] = {}
    for request in requests:
        if request.leases is None:
            continue
        for report in request.leases:
            row = leases.get(report.lease_id)
            if row is None or row[0] != request.client_id:
                # Client-reported usage is untrusted: clamped before it can affect budget.
                unknown_debt += min(max(0, report.drawn - max(0, report.released)), ppl)
                continue
            count = min(max(0, report.drawn), row[2])
            drawn[report.lease_id] = count
            released = max(row[3], min(max(0, report.released), count))
            retired = row[5] == 1 or report.retired is True or row[4] <= now
            permits = max(released, count) if report.retired is True else row[2]
            if released >= permits:
                del leases[report.lease_id]  # settled
                continue
            row[2], row[3], row[5] = permits, released, 1 if retired else 0
            if not retired:
                row[4] = now + options.ttl_ms

    # allocateLeases: retire expired and ineligible leases (footprint stays), find usable headroom.
    footprint = 0
    group_footprint: Counter[str] = Counter()
    usable: set[tuple[str, str]] = set()
    for lease_id, row in leases.items():
        client, group, permits, released, expires_at, retired = row
        if not retired and (expires_at <= now or not eligible(group)):
            retired = 1
        live = max(0, permits - released)
        footprint += live
        group_footprint[group] += live
        # An unreported lease is assumed fully drawn.
        if not retired and drawn.get(lease_id, permits) < permits:
            usable.add((client, group))

    by_group: dict[str, dict[str, int]] = {}
    for request in requests:
        if request.leases is None:
            continue
        for demand in request.demand:
            if not eligible(demand.group) or (request.client_id, demand.group) in usable:
                continue
            clients = by_group.setdefault(demand.group, {})
            prior = clients.get(request.client_id, demand.oldest_at)
            clients[request.client_id] = min(prior, demand.oldest_at)
    ranked = sorted(
        (
            (min(clients.values()), locale_key(group), group, sorted(clients.items(), key=_oldest_then_name))
            for group, clients in by_group.items()
        ),
        key=lambda entry: (entry[0], entry[1]),
    )
    chosen = tuple(
        (client, group)
        for _, _, group, clients in ranked[: options.max_groups]
        for client, _ in clients[: options.max_clients_per_group]
    )

    pools = budgets(options.provisioning, usage.limit)
    budget = max(0, usage.limit - usage.granted) if pools.shared else pools.leases
    if isinstance(options.provisioning, Under) and UNDER_SHARES_THE_LIMIT in fixes:
        budget = min(budget, max(0, usage.limit - usage.granted))
    remaining = max(0, budget - footprint - unknown_debt)
    # With fewer permits than candidates, the oldest demand gets one each.
    share = min(ppl, max(1, remaining // max(1, len(chosen))))
    start = remaining
    issued: list[tuple[str, str, int]] = []
    for client, group in chosen:
        if remaining <= 0:
            break
        room = share if group not in caps else caps[group] - _granted(usage, group) - group_footprint[group]
        permits = min(share, room, remaining)
        if permits <= 0:
            continue
        remaining -= permits
        group_footprint[group] += permits
        issued.append((client, group, permits))
    return LeasePlan(
        leases=tuple(issued),
        chosen=chosen,
        share=share,
        remaining=start,
        unknown_debt=unknown_debt,
        footprint=footprint,
        usable=frozenset(usable),
        ineligible=frozenset(
            d.group for request in requests for d in request.demand if not eligible(d.group)
        ),
    )


def _oldest_then_name(entry: tuple[str, int]) -> tuple[int, Any]:
    return entry[1], locale_key(entry[0])


def _granted(usage: Usage, group: str) -> int:
    entry = usage.groups.get(group)
    return 0 if entry is None else entry.granted


def new_leases(
    before: Mapping[str, tuple[Any, ...]], after: Mapping[str, tuple[Any, ...]]
) -> list[tuple[str, str, int]]:
    """(client, group, permits) of every lease row a commit created."""
    return [(row[1], row[2], row[3]) for lease_id, row in sorted(after.items()) if lease_id not in before]


def lease_fairness_rule(
    plan: LeasePlan,
    issued: Sequence[tuple[str, str, int]],
    ppl: int,
    caps: Mapping[str, int],
    usage: Usage,
    footprint_after: Mapping[str, int],
) -> str | None:
    """``lease_fairness``: None when the round issued the reference's leases, else the rule it broke."""
    if Counter(issued) == Counter(plan.leases):
        return None
    expected = _listing(plan.leases)
    got = _listing(issued)
    numbers = (
        f"expected {expected}, issued {got} ({plan.remaining} permits to lease after "
        f"{plan.footprint} footprint and {plan.unknown_debt} unknown debt, {len(plan.chosen)} candidates, "
        f"share {plan.share})"
    )
    chosen = set(plan.chosen)
    if any(permits > ppl for _, _, permits in issued):
        return f"share above permits_per_lease {ppl}: {numbers}"
    for client, group, _ in issued:
        if (client, group) not in chosen:
            why = (
                "its group is not eligible"
                if group in plan.ineligible
                else "it holds usable headroom there"
                if (client, group) in plan.usable
                else "it is not a candidate, or beyond max_groups / max_clients_per_group"
            )
            return f"a lease to {client} in {group}, though {why}: {numbers}"
    for group, cap in sorted(caps.items()):
        leased_to = any(g == group for _, g, _ in issued)
        if leased_to and _granted(usage, group) + footprint_after.get(group, 0) > cap:
            return f"group cap: {group}'s grants and leases exceed its limit {cap}: {numbers}"
    if {(c, g) for c, g, _ in issued} != {(c, g) for c, g, _ in plan.leases}:
        return f"oldest first when short: {numbers}"
    return f"equal share: {numbers}"


def _listing(leases: Sequence[tuple[str, str, int]]) -> str:
    return "[" + ", ".join(f"{c}/{g}:{p}" for c, g, p in sorted(leases)) + "]"


# --- no_overask ---------------------------------------------------------------------------------

#: A client's queued items of one key from which ``no_overask`` keeps their count by triggers
#: rather than counting them per request: below it the count is cheaper than the triggers'
#: work on every item write (a fuzz run's backlog stays short; an overloaded day's does not).
KEEP_COUNTS_FROM: Final = 200


def client_cover(
    conn: Any, key: str, now: int, counts: QueuedCounts | None = None
) -> tuple[dict[str, int], dict[str, int]]:
    """A client's own state for ``key`` at ``now``: queued items and live lease headroom, per group.

    With ``counts`` (kept by temporary triggers on ``conn``), the queued items
    are looked up rather than counted: the same answer, at a cost that does
    not grow with the client's backlog.
    """
    kept = None if counts is None else counts.by_group(key)
    rows = conn.execute(queue_reads.QUEUED_BY_GROUP, (key,)) if kept is None else kept
    queued = {group: int(items) for group, items in rows}
    undrawn = conn.execute(queue_reads.LEASE_HEADROOM_BY_GROUP, (key, now))
    headroom = {group: int(permits) for group, permits in undrawn}
    return queued, headroom


def overask_rule(
    request: PermitRequest, queued: Mapping[str, int], headroom: Mapping[str, int]
) -> str | None:
    """``no_overask``: None if every group's demand is within the client's uncovered queued items.

    Covered means held already: an item claimed against a grant is no
    longer queued (the queue claims a grant once, at its reply, so a
    grant's unclaimed rest covers nothing later and the holder reclaims
    it), and a live lease's undrawn permits cover that many queued items of
    its group, which the client draws locally without asking.
    """
    asked: Counter[str] = Counter()
    for demand in request.demand:
        asked[demand.group] += demand.count
    for group, count in sorted(asked.items()):
        waiting, undrawn = queued.get(group, 0), headroom.get(group, 0)
        uncovered = max(0, waiting - undrawn)
        if count > uncovered:
            return (
                f"{request.client_id} asked for {count} permits in {group} but only {uncovered} of its "
                f"queued items are uncovered ({waiting} queued, {undrawn} undrawn lease headroom)"
            )
    return None


def as_sent(request: PermitRequest, wire: Any) -> PermitRequest:
    """``request`` with its demand read back from ``wire``, the dict the holder receives (as built
    when there is no wire, or its demand is not a list of well-formed entries: the holder's parser,
    judged by the literal model, refuses those)."""
    entries = wire.get("demand") if isinstance(wire, dict) else None
    if not isinstance(entries, list):
        return request
    demand = []
    for entry in entries:
        if not isinstance(entry, dict):
            return request
        group, count, oldest_at = entry.get("group"), entry.get("count"), entry.get("oldestAt")
        if not (isinstance(group, str) and type(count) is int and type(oldest_at) is int):
            return request
        demand.append(Demand(group=group, count=count, oldest_at=oldest_at))
    return attrs.evolve(request, demand=tuple(demand))


def oldest_queued(conn: Any, key: str, groups: Sequence[str]) -> dict[str, int]:
    """When the oldest still-queued item of each of ``groups`` arrived (a group with none is left out)."""
    found: dict[str, int] = {}
    for group in groups:
        rows = select(conn, queue_reads.OLDEST_QUEUED, (key, group))
        if rows:
            found[group] = int(rows[0][0])
    return found


def dating_rule(request: PermitRequest, oldest: Mapping[str, int]) -> str | None:
    """``no_overask``'s second half: None if each demand is dated by its group's oldest queued item.

    The holder serves demand oldest first across clients by ``oldestAt``
    (seed 001, line 82: ``oldestAt: oldestEnqueuedAt``), so a request that
    dates its demand by a younger item, or by none, is served out of turn.
    """
    for demand in request.demand:
        if demand.count > 0 and oldest.get(demand.group) != demand.oldest_at:
            return (
                f"{request.client_id} dated its demand in {demand.group} {demand.oldest_at}, but its "
                f"oldest queued item there arrived at {oldest.get(demand.group)}"
            )
    return None


# --- one round, as a whole ------------------------------------------------------------------


def reuse_broken(
    options: LeaseOptions | None,
    fixes: frozenset[str],
    usage: Usage,
    requests: Sequence[PermitRequest],
    replies: Sequence[PermitGrant],
) -> str | None:
    """``reuse`` for one round, given the holder's usage after its commit: what broke, or None."""
    blocked = [
        f"{request.client_id}/{b.group}"
        for request, reply in zip(requests, replies, strict=True)
        for b in reply.blocked
        if b.reason == "limit"
    ]
    return reuse_rule(grant_room(options, fixes, usage.limit, usage.granted, usage.leased), blocked)


def lease_fairness_broken(
    options: LeaseOptions | None,
    fixes: frozenset[str],
    now: int,
    requests: Sequence[PermitRequest],
    replies: Sequence[PermitGrant],
    round_commit: RoundCommit,
) -> str | None:
    """``lease_fairness`` for one round, given what its commit changed: what broke, or None
    (a holder without leases issues none)."""
    if options is None:
        return None
    commit = round_commit
    plan = plan_leases(options, fixes, now, requests, replies, commit.before, commit.caps, commit.usage)
    footprint: Counter[str] = Counter()
    for row in commit.after.values():
        footprint[row[2]] += max(0, row[3] - row[4])
    issued = new_leases(commit.before, commit.after)
    return lease_fairness_rule(plan, issued, options.permits_per_lease, commit.caps, commit.usage, footprint)


@attrs.frozen
class RoundCommit:
    """What a round's commit left: the lease rows before and after it, its usage and group caps."""

    before: Mapping[str, tuple[Any, ...]]
    after: Mapping[str, tuple[Any, ...]]
    usage: Usage
    caps: Mapping[str, int]

    @classmethod
    def of(
        cls,
        before: Mapping[str, tuple[Any, ...]],
        after: Mapping[str, tuple[Any, ...]],
        usage: Usage,
        caps: Mapping[str, int | None],
    ) -> RoundCommit:
        return cls(before, after, usage, {group: cap for group, cap in caps.items() if cap is not None})


@attrs.define
class AllocationChecks:
    """``reuse`` and ``lease_fairness`` for a history fed commit by commit and round by round
    (``semsim replay`` and the unit tests); returns ``(invariant, detail)`` for each violation.
    A simulation's monitor judges the same rules through the checkers of
    :mod:`semsim.check.reuse` and :mod:`semsim.check.lease_fairness`."""

    #: Per holder key, what its latest commit left.
    _last: dict[str, RoundCommit] = attrs.Factory(dict)

    def committed(
        self, key: str, before: Rows, after: Rows, usage: Usage, caps: Mapping[str, int | None]
    ) -> None:
        """After every holder commit: remember what it changed (a round's commit is judged by ``round``)."""
        self._last[key] = RoundCommit.of(before.get("leases", {}), after.get("leases", {}), usage, caps)

    def round(
        self,
        key: str,
        options: LeaseOptions | None,
        fixes: frozenset[str],
        requests: Sequence[PermitRequest],
        replies: Sequence[PermitGrant],
        now: int,
    ) -> list[tuple[str, str]]:
        """``reuse`` and ``lease_fairness`` for the round whose commit was the latest of ``key``."""
        commit = self._last[key]
        found: list[tuple[str, str]] = []
        broken = reuse_broken(options, fixes, commit.usage, requests, replies)
        if broken:
            found.append((REUSE, f"{key}: {broken}"))
        broken = lease_fairness_broken(options, fixes, now, requests, replies, commit)
        if broken:
            found.append((LEASE_FAIRNESS, f"{key}: {broken}"))
        return found
