"""A literal transliteration of the reference holder, for differential tests only.

``semaphore_core`` is optimised: it reads trigger-kept totals and touches
only rows that can change. This module is the reference as written: it
lists every grant and lease row in every round and filters in Python, line
for line with semaphore-server.ts and semaphore-leases.ts. The stateful
test drives both with the same inputs and demands identical replies,
events and rows; any optimisation that changes behaviour shows up there.

Deliberately naive and deliberately separate: do not import its logic into
the core, and do not "improve" it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import attrs

from semaphore_core import HolderConfig
from semaphore_core.collation import locale_key
from semaphore_core.config import budgets
from semaphore_core.events import (
    BlockedEvent,
    Event,
    GrantReclaimed,
    LeaseGranted,
    LeaseRetired,
    RoundEvent,
)
from semaphore_core.migrations import migrate
from semaphore_core.policy import GroupPolicy, group_policy, resolve_limit
from semaphore_core.protocol import (
    Blocked,
    GrantedPermits,
    GrantResult,
    LeaseGrant,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
)
from semaphore_core.store import GrantRow, HolderStore, LeaseRow, lease_footprint, outstanding
from semaphore_core.transaction import transaction
from semaphore_core.usage import GroupUsage, Usage

_NONE = GroupPolicy()


def _eligible(config: HolderConfig, policy: GroupPolicy) -> bool:
    assert config.leases is not None
    return policy.blocked is None and (
        policy.limit is None or config.leases.limited_groups == "within_group_limit"
    )


def _to_lease_grant(lease: LeaseRow, now: int) -> LeaseGrant:
    return LeaseGrant(lease.lease_id, lease.grp, lease.permits, now if lease.retired else lease.expires_at)


class ReferencePort:
    def __init__(self, conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> None:
        conn.isolation_level = None
        migrate(conn)
        self.conn = conn
        self.store = HolderStore(conn)
        self.config = config
        self.new_id = new_id
        self.contended = False

    def _write_lease(self, row: LeaseRow) -> None:
        self.store.update_lease(row.lease_id, row.permits, row.released, row.expires_at, row.retired)

    # applyReports
    def _apply_reports(self, client_id: str, reports: Any, now: int) -> list[GrantResult]:
        results = []
        for report in reports:
            grant = self.store.get(report.grant_id)
            if grant is None or grant.client_id != client_id:
                results.append(GrantResult(report.grant_id, 0, "not_found"))
                continue
            expired = now >= grant.expires_at
            permits = grant.claimed if expired else grant.permits
            claimed = max(grant.claimed, min(report.claimed, permits))
            released = max(grant.released, min(report.released, claimed))
            if released >= permits:
                self.store.remove(grant.grant_id)
            else:
                self.store.update(grant.grant_id, permits, claimed, released)
            results.append(
                GrantResult(
                    grant.grant_id, claimed, "expired" if expired and report.claimed > claimed else "ok"
                )
            )
        return results

    # #reclaim
    def _reclaim(self, now: int) -> tuple[list[GrantRow], list[GrantReclaimed]]:
        kept, events = [], []
        for grant in self.store.list_grants():
            if now < grant.expires_at or grant.claimed >= grant.permits:
                kept.append(grant)
                continue
            updated = attrs.evolve(grant, permits=grant.claimed)
            if updated.released >= updated.permits:
                self.store.remove(grant.grant_id)
            else:
                self.store.update(updated.grant_id, updated.permits, updated.claimed, updated.released)
                kept.append(updated)
            events.append(
                GrantReclaimed(now, grant.grant_id, grant.client_id, grant.grp, grant.permits - grant.claimed)
            )
        return kept, events

    # applyLeaseReports
    def _apply_lease_reports(
        self, client_id: str, reports: Any, now: int
    ) -> tuple[list[LeaseGrant], int, dict[str, int]]:
        options = self.config.leases
        assert options is not None
        echoes: list[LeaseGrant] = []
        debt = 0
        drawn_map: dict[str, int] = {}
        for report in reports:
            lease = self.store.get_lease(report.lease_id)
            if lease is None or lease.client_id != client_id:
                echoes.append(
                    LeaseGrant(
                        report.lease_id, lease.grp if lease else "", lease.permits if lease else 0, now
                    )
                )
                live = max(0, report.drawn - max(0, report.released))
                debt += min(live, options.permits_per_lease)
                continue
            drawn = min(max(0, report.drawn), lease.permits)
            drawn_map[lease.lease_id] = drawn
            released = max(lease.released, min(max(0, report.released), drawn))
            retired = lease.retired == 1 or report.retired is True or lease.expires_at <= now
            permits = max(released, drawn) if report.retired is True else lease.permits
            if released >= permits:
                self.store.remove_lease(lease.lease_id)
                echoes.append(attrs.evolve(_to_lease_grant(lease, now), permits=released, expires_at=now))
                continue
            refreshed = attrs.evolve(
                lease,
                permits=permits,
                released=released,
                retired=1 if retired else 0,
                expires_at=lease.expires_at if retired else now + options.ttl_ms,
            )
            self._write_lease(refreshed)
            echoes.append(_to_lease_grant(refreshed, now))
        return echoes, debt, drawn_map

    # allocateLeases
    def _allocate_leases(
        self,
        budget: int,
        unknown_debt: int,
        drawn: dict[str, int],
        candidates: list[tuple[str, str, int]],
        policies: dict[str, GroupPolicy],
        group_used: dict[str, int],
        now: int,
    ) -> tuple[dict[str, list[LeaseGrant]], int, list[Any], bool]:
        options = self.config.leases
        assert options is not None
        grants: dict[str, list[LeaseGrant]] = {}
        events: list[Any] = []

        def echo(client: str, grant: LeaseGrant) -> None:
            grants[client] = [*grants.get(client, []), grant]

        footprint = 0
        group_footprint: dict[str, int] = {}
        usable: list[tuple[str, str]] = []
        for lease in self.store.list_leases():
            group = policies.get(lease.grp, _NONE)
            current = lease
            if not lease.retired and (lease.expires_at <= now or not _eligible(self.config, group)):
                current = attrs.evolve(lease, retired=1)
                self._write_lease(current)
                echo(lease.client_id, _to_lease_grant(current, now))
                events.append(
                    LeaseRetired(
                        now,
                        lease.lease_id,
                        lease.client_id,
                        lease.grp,
                        lease.permits - drawn.get(lease.lease_id, lease.permits),
                    )
                )
            live = lease_footprint(current)
            footprint += live
            group_footprint[lease.grp] = group_footprint.get(lease.grp, 0) + live
            if not current.retired and drawn.get(lease.lease_id, lease.permits) < lease.permits:
                usable.append((lease.client_id, lease.grp))

        by_group: dict[str, list[dict[str, Any]]] = {}
        for client_id, group_name, oldest_at in candidates:
            if (
                not _eligible(self.config, policies.get(group_name, _NONE))
                or (client_id, group_name) in usable
            ):
                continue
            existing = by_group.get(group_name, [])
            prior = next((c for c in existing if c["client_id"] == client_id), None)
            if prior is not None:
                prior["oldest_at"] = min(prior["oldest_at"], oldest_at)
            else:
                existing.append({"client_id": client_id, "group": group_name, "oldest_at": oldest_at})
            by_group[group_name] = existing
        entries = []
        for group_name, clients in by_group.items():
            clients.sort(key=lambda c: (c["oldest_at"], locale_key(c["client_id"])))
            entries.append(
                (
                    group_name,
                    clients[: options.max_clients_per_group],
                    min(c["oldest_at"] for c in clients),
                )
            )
        entries.sort(key=lambda e: (e[2], locale_key(e[0])))
        chosen = [c for _, clients, _ in entries[: options.max_groups] for c in clients]

        excess = footprint + unknown_debt - budget
        if excess > 0:
            live_leases = [
                lease for lease in self.store.list_leases() if lease.expires_at > now and not lease.retired
            ]
            live_leases.sort(key=lambda lease: -lease.created_at)
            for lease in live_leases:
                if excess <= 0:
                    break
                count = drawn.get(lease.lease_id)
                if count is None or count >= lease.permits:
                    continue
                retired_row = attrs.evolve(lease, retired=1)
                self._write_lease(retired_row)
                excess -= lease.permits - count
                echo(lease.client_id, _to_lease_grant(retired_row, now))
                events.append(
                    LeaseRetired(now, lease.lease_id, lease.client_id, lease.grp, lease.permits - count)
                )

        eligible = sum(len(clients) for clients in by_group.values())
        remaining = max(0, budget - footprint - unknown_debt)
        share = min(options.permits_per_lease, max(1, remaining // max(1, len(chosen))))
        issued = 0
        for candidate in chosen:
            if remaining <= 0:
                break
            group = policies.get(candidate["group"], _NONE)
            group_room = (
                share
                if group.limit is None
                else group.limit
                - group_used.get(candidate["group"], 0)
                - group_footprint.get(candidate["group"], 0)
            )
            permits = min(share, group_room, remaining)
            if permits <= 0:
                continue
            remaining -= permits
            issued += 1
            lease = LeaseRow(
                self.new_id(),
                candidate["client_id"],
                candidate["group"],
                permits,
                0,
                now,
                now + options.ttl_ms,
                0,
            )
            self.store.insert_lease(lease)
            footprint += permits
            group_footprint[candidate["group"]] = group_footprint.get(candidate["group"], 0) + permits
            echo(candidate["client_id"], _to_lease_grant(lease, now))
            events.append(LeaseGranted(now, lease.lease_id, lease.client_id, lease.grp, permits))
        return grants, footprint, events, issued < eligible

    # #runRound + #allocate
    def round(self, requests: list[PermitRequest], now: int) -> tuple[list[PermitGrant], list[Event]]:
        config = self.config
        limit = resolve_limit(config)
        lease_groups = [lease.grp for lease in self.store.list_leases()] if config.leases else []
        groups = dict.fromkeys([d.group for r in requests for d in r.demand] + lease_groups)
        policies = {g: group_policy(config, g) for g in groups}
        with transaction(self.conn):
            allocations: list[dict[str, Any]] = []
            unknown_debt = 0
            drawn: dict[str, int] = {}
            for request in requests:
                results = self._apply_reports(request.client_id, request.grants, now)
                leases: list[LeaseGrant] = []
                if config.leases and request.leases is not None:
                    echoes, debt, drawn_map = self._apply_lease_reports(
                        request.client_id, request.leases, now
                    )
                    leases.extend(echoes)
                    unknown_debt += debt
                    drawn.update(drawn_map)
                allocations.append({"grants": [], "blocked": [], "grant_results": results, "leases": leases})
            used: dict[str, int] = {}
            total = 0
            kept, reclaimed = self._reclaim(now)
            for grant in kept:
                count = outstanding(grant, now)
                total += count
                used[grant.grp] = used.get(grant.grp, 0) + count
            budget = budgets(config.leases.provisioning, limit) if config.leases else None
            grants_budget = budget.grants if budget else limit
            shared = budget.shared if budget else False
            leased = (
                sum(lease_footprint(x) for x in self.store.list_leases()) if config.leases and shared else 0
            )
            remaining = grants_budget - total - (leased if shared else 0)
            demands = [(i, d) for i, r in enumerate(requests) for d in r.demand]
            demands.sort(key=lambda e: (e[1].oldest_at, locale_key(requests[e[0]].client_id)))
            requested = granted = 0
            for index, demand in demands:
                requested += demand.count
                allocation = allocations[index]
                policy = policies.get(demand.group, _NONE)
                if policy.blocked:
                    allocation["blocked"].append(Blocked(demand.group, policy.blocked))
                    continue
                group_used = used.get(demand.group, 0)
                group_remaining: float = float("inf") if policy.limit is None else policy.limit - group_used
                give = int(max(0, min(demand.count, group_remaining, remaining)))
                if give > 0:
                    grant_id = self.new_id()
                    self.store.insert(
                        GrantRow(
                            grant_id,
                            requests[index].client_id,
                            demand.group,
                            give,
                            0,
                            0,
                            now,
                            now + config.grant_timeout_ms,
                        )
                    )
                    allocation["grants"].append(GrantedPermits(grant_id, demand.group, give))
                    remaining -= give
                    used[demand.group] = group_used + give
                    granted += give
                if give < demand.count:
                    allocation["blocked"].append(
                        Blocked(demand.group, "group_limit" if group_remaining - give <= 0 else "limit")
                    )
            lease_events: list[Any] = []
            contended = False
            if config.leases and budget:
                candidates = [
                    (r.client_id, d.group, d.oldest_at)
                    for r in requests
                    if r.leases is not None
                    for d in r.demand
                ]
                lease_budget = max(0, limit - total - granted) if shared else budget.leases
                lease_grants, leased, lease_events, unserved = self._allocate_leases(
                    lease_budget, unknown_debt, drawn, candidates, policies, used, now
                )
                contended = unserved or (
                    shared and any(b.reason == "limit" for a in allocations for b in a["blocked"])
                )
                for request, allocation in zip(requests, allocations, strict=True):
                    by_lease = {
                        x.lease_id: x
                        for x in [*allocation["leases"], *lease_grants.get(request.client_id, [])]
                    }
                    allocation["leases"] = list(by_lease.values())
                if shared:
                    remaining = limit - total - granted - leased
        self.contended = contended
        replies = [
            PermitGrant(
                tuple(a["grants"]),
                tuple(a["blocked"]),
                tuple(a["grant_results"]),
                now + config.round_period_ms,
                None if r.leases is None else tuple(a["leases"]),
                r.leases is not None and contended,
            )
            for r, a in zip(requests, allocations, strict=True)
        ]
        usage = Usage(
            limit,
            total + granted,
            leased,
            max(0, remaining),
            {g: GroupUsage(n, policies.get(g, _NONE).limit) for g, n in used.items()},
        )
        events: list[Event] = [*reclaimed, *lease_events, RoundEvent(now, requested, granted, usage)]
        counts: dict[tuple[str, Any], int] = {}
        for request, allocation in zip(requests, allocations, strict=True):
            given: dict[str, int] = {}
            for grant in allocation["grants"]:
                given[grant.group] = given.get(grant.group, 0) + grant.permits
            for blocked in allocation["blocked"]:
                demanded = next((d for d in request.demand if d.group == blocked.group), None)
                key = (blocked.group, blocked.reason)
                counts[key] = (
                    counts.get(key, 0) + (demanded.count if demanded else 0) - given.get(blocked.group, 0)
                )
        events.extend(BlockedEvent(now, g, reason, n) for (g, reason), n in counts.items())
        return replies, events

    def sync(self, message: PermitSync, now: int) -> PermitSyncResult:
        with transaction(self.conn):
            results = self._apply_reports(message.client_id, message.grants, now)
            echoes = (
                self._apply_lease_reports(message.client_id, message.leases, now)[0]
                if self.config.leases and message.leases is not None
                else None
            )
        return PermitSyncResult(
            tuple(results), None if echoes is None else tuple(echoes), echoes is not None and self.contended
        )

    def reclaim_expired(self, now: int) -> list[GrantReclaimed]:
        with transaction(self.conn):
            return self._reclaim(now)[1]

    def next_alarm_at(self) -> int | None:
        pending = [g.expires_at for g in self.store.list_grants() if g.claimed < g.permits]
        return min(pending) if pending else None
