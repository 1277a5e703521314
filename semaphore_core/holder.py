"""``Holder``: the holder half of DurabilitySemaphore as a pure, synchronous state machine.

Sans-I/O in the h11 sense: no clock (``now`` is passed in), no timers, no
network, no randomness (ids come from the injected ``new_id``). What the
reference keeps on the live instance and loses on eviction (the
``contended`` flag of the last round) lives on this object; everything
else is in SQLite. A new ``Holder`` on the same connection is an evicted
and rebuilt instance.

Round scheduling (``roundWaitMs``, ``roundPeriodMs``, parking requests) is
the simulator's job (``sim``); this class runs one round when told to.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from semaphore_core.config import HolderConfig, budgets
from semaphore_core.errors import SemaphoreConfigError, SemaphoreProtocolError
from semaphore_core.events import Event, GrantReclaimed, RoundEvent
from semaphore_core.fixes import CLAIMS_RESPECT_THE_LIMIT
from semaphore_core.grants import apply_grant_reports, claim_room, reclaim
from semaphore_core.leases import apply_lease_reports
from semaphore_core.migrations import LATEST, migrate, schema_version
from semaphore_core.numbers import MAX_SAFE_INTEGER
from semaphore_core.policy import GroupPolicy, group_policy, resolve_limit
from semaphore_core.protocol import (
    MAX_ID_LENGTH,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
    Wire,
    parse_request,
)
from semaphore_core.rounds import allocate, blocked_counts
from semaphore_core.store import HolderStore
from semaphore_core.transaction import transaction
from semaphore_core.usage import GroupUsage, Usage

#: Called inside every write transaction, after the holder's writes and
#: before commit: the simulator arms the object's alarm here, in the same
#: transaction as the rows it serves, as the reference's engine does.
BeforeCommit = Callable[[sqlite3.Connection], None]


@attrs.frozen(hash=False)
class RoundOutcome:
    """A round's replies (in request order), its events (emission order) and usage after it."""

    replies: tuple[PermitGrant, ...]
    events: tuple[Event, ...]
    usage: Usage


class Holder:
    """One semaphore key's budget, kept in ``conn``; see the README, "The core"."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        config: HolderConfig,
        new_id: Callable[[], str],
        *,
        before_commit: BeforeCommit | None = None,
    ) -> None:
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError(f"conn must be a sqlite3.Connection, got {conn!r}")
        if not isinstance(config, HolderConfig):
            raise TypeError(f"config must be a HolderConfig, got {config!r}")
        if not callable(new_id):
            raise TypeError(f"new_id must be a function returning a new id, got {new_id!r}")
        # Transactions are explicit (SAVEPOINTs); the driver must not open its own.
        conn.isolation_level = None
        if schema_version(conn) != LATEST:
            migrate(conn)
        self._conn = conn
        self._store = HolderStore(conn)
        self.config = config
        self._new_id = new_id
        self._before_commit = before_commit
        # From the last round; tells clients in later syncs to return idle lease headroom.
        self._contended = False

    @property
    def store(self) -> HolderStore:
        return self._store

    @property
    def contended(self) -> bool:
        """Whether the last round left lease demand unserved (in memory: eviction forgets it)."""
        return self._contended

    # --- rounds -----------------------------------------------------------------

    def run_round(self, requests: Sequence[Wire | PermitRequest], now: int) -> list[Wire]:
        """Wire requests in, wire replies out (same order); one transaction; events emitted after commit."""
        return [reply.to_wire() for reply in self.round(requests, now).replies]

    def round(self, requests: Sequence[Wire | PermitRequest], now: int) -> RoundOutcome:
        """Like :meth:`run_round` with typed messages, returning the events and usage too.

        Every request is parsed before anything is written. If the limit
        callback raises or resolves to a bad value, the round fails as a
        whole: no writes, the error propagates.
        """
        _check_now(now)
        if isinstance(requests, Mapping | str | bytes):
            raise TypeError(
                f"requests must be a list of request messages, got a {type(requests).__name__} "
                "(one request goes in a list of one)"
            )
        parsed = [_as_request(r) for r in requests]
        limit = resolve_limit(self.config)
        # Held leases are re-checked every round, not only when their group is
        # requested, so a group that became limited or blocked is retired.
        groups = dict.fromkeys(d.group for request in parsed for d in request.demand)
        if self.config.leases is not None:
            groups.update(dict.fromkeys(self._store.lease_totals()))
        policies = {group: group_policy(self.config, group) for group in groups}

        with transaction(self._conn):
            result = allocate(self._store, self.config, parsed, limit, policies, now, self._fresh_id)
            if self._before_commit is not None:
                self._before_commit(self._conn)

        next_request_at = now + self.config.round_period_ms
        self._contended = result.contended
        replies = tuple(
            PermitGrant(
                grants=tuple(allocation.grants),
                blocked=tuple(allocation.blocked),
                grant_results=tuple(allocation.grant_results),
                next_request_at=next_request_at,
                leases=None if request.leases is None else tuple(allocation.leases),
                contended=request.leases is not None and result.contended,
            )
            for request, allocation in zip(parsed, result.allocations, strict=True)
        )
        events: list[Event] = [*result.reclaimed, *result.lease_events]
        events.append(
            RoundEvent(timestamp=now, requested=result.requested, granted=result.granted, usage=result.usage)
        )
        events.extend(blocked_counts(parsed, result.allocations, now))
        self._emit(events)
        return RoundOutcome(replies=replies, events=tuple(events), usage=result.usage)

    # --- reports without a round --------------------------------------------------

    def sync(self, message: Wire | PermitSync, now: int) -> Wire:
        """A wire sync in, the wire ``synced`` reply out; applied at once in one transaction."""
        return self.sync_message(message, now).to_wire()

    def sync_message(self, message: Wire | PermitSync, now: int) -> PermitSyncResult:
        """Like :meth:`sync` with typed messages."""
        _check_now(now)
        sync = _as_sync(message)
        leases = self.config.leases
        # Fix F3 needs the current limit; the reference never resolves it for a sync.
        limit = resolve_limit(self.config) if CLAIMS_RESPECT_THE_LIMIT in self.config.fixes else 0
        with transaction(self._conn):
            room = claim_room(self._store, self.config, limit)
            grant_results = apply_grant_reports(self._store, sync.client_id, sync.grants, now, room)
            echoes = (
                apply_lease_reports(self._store, leases, sync.client_id, sync.leases, now).echoes
                if leases is not None and sync.leases is not None
                else None
            )
            if self._before_commit is not None:
                self._before_commit(self._conn)
        return PermitSyncResult(
            grant_results=tuple(grant_results),
            leases=None if echoes is None else tuple(echoes),
            contended=echoes is not None and self._contended,
        )

    # --- the alarm ------------------------------------------------------------------

    def reclaim_expired(self, now: int) -> list[GrantReclaimed]:
        """What the alarm runs: reclaim unclaimed permits past their deadline; events after commit."""
        _check_now(now)
        with transaction(self._conn):
            events = reclaim(self._store, now)
            if self._before_commit is not None:
                self._before_commit(self._conn)
        self._emit(events)
        return events

    def next_alarm_at(self) -> int | None:
        """Earliest claim deadline of a grant with unclaimed permits, or None."""
        return self._store.next_pending_at()

    # --- reading -----------------------------------------------------------------

    def usage(self, now: int) -> Usage:
        """Limit, outstanding grant permits at ``now``, lease footprint, grant room, per-group grants."""
        _check_now(now)
        limit = resolve_limit(self.config)
        unreclaimed = self._store.unreclaimed_by_group(now)
        groups: dict[str, int] = {
            group: total - unreclaimed.get(group, 0)
            for group, (_, total) in self._store.grant_totals().items()
        }
        granted = sum(groups.values())
        leased = self._store.leased_footprint()
        policies: dict[str, GroupPolicy] = {g: group_policy(self.config, g) for g in groups}
        return Usage(
            limit=limit,
            granted=granted,
            leased=leased,
            available=self._grant_room(limit, granted, leased),
            groups={g: GroupUsage(granted=n, limit=policies[g].limit) for g, n in groups.items()},
        )

    def _grant_room(self, limit: int, granted: int, leased: int) -> int:
        """Permits grants may still receive, given the provisioning mode."""
        if self.config.leases is None:
            return max(0, limit - granted)
        budget = budgets(self.config.leases.provisioning, limit)
        return max(0, budget.grants - granted - (leased if budget.shared else 0))

    def _fresh_id(self) -> str:
        """``new_id()``, checked: a row's id goes on the wire, where clients must send it back."""
        new = self._new_id()
        if not isinstance(new, str) or not 0 < len(new) <= MAX_ID_LENGTH:
            raise SemaphoreConfigError(
                f"new_id must return a non-empty string of at most {MAX_ID_LENGTH} characters, got {new!r}"
            )
        return new

    def _emit(self, events: Iterable[Event]) -> None:
        hook = self.config.on_event
        if hook is not None:
            for event in events:
                hook(event)


def _check_now(now: int) -> None:
    """Times are integer milliseconds that the wire can carry, as ``Date.now()`` gives them."""
    if isinstance(now, bool) or not isinstance(now, int) or not 0 <= now <= MAX_SAFE_INTEGER:
        raise ValueError(f"now must be an integer of milliseconds from 0 to {MAX_SAFE_INTEGER}, got {now!r}")


def _as_request(message: Wire | PermitRequest) -> PermitRequest:
    if isinstance(message, PermitRequest):
        return message
    parsed = parse_request(message)
    if not isinstance(parsed, PermitRequest):
        raise SemaphoreProtocolError("Malformed semaphore message: a round takes requests, got a sync")
    return parsed


def _as_sync(message: Wire | PermitSync) -> PermitSync:
    if isinstance(message, PermitSync):
        return message
    parsed = parse_request(message)
    if not isinstance(parsed, PermitSync):
        raise SemaphoreProtocolError("Malformed semaphore message: sync takes a sync, got a request")
    return parsed
