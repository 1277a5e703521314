"""What each key has waiting that its holder could serve, and the room it has for it.

The liveness checks (``progress``, ``capacity_returns``) and the judgement of
when a run has settled ask the same questions of a key: which groups have
items waiting that the holder could serve, how many permits are busy, how
many the mode offers waiting demand, and how many the documented leak (a
lease lost in its reply, which no client knows) holds for good. The
answers come from three places, each read through its own module: the
holder's mirrored rows (:mod:`semsim.check.row_mirror`) and storage
(:mod:`semsim.check.holder_reads`), the clients' storage
(:mod:`semsim.check.across_clients`, :mod:`semsim.check.client_reads`), and
the oracle's count of permits actually in use (the clients' own admissions
and releases, kept by the :class:`~semsim.check.invariants.Monitor`).
:class:`Rooms` only reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Container, Mapping
from typing import TYPE_CHECKING

import attrs

from semaphore_core.config import Under, budgets
from semaphore_core.fixes import GROUP_CEILING_COUNTS_LEASES
from semsim.check import client_reads, holder_reads
from semsim.check.across_clients import AcrossClients
from semsim.check.row_mirror import RowMirror

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject
    from semsim.world.holder_object import Env


@attrs.define
class WatchedHolder:
    """The holder object of one key, as the checkers watch it."""

    obj: DurableObject
    #: The settings it runs with (limit, lease options, fixes, alarm delay).
    env: Env
    #: Its grant and lease rows, refreshed from what each commit changed.
    mirror: RowMirror


@attrs.frozen
class Room:
    """What one key has waiting that its holder could serve, and the room it has for it."""

    #: Per servable group with items waiting: (how many, the oldest one's arrival).
    waiting: dict[str, tuple[int, int]]
    #: Permits in use or charged (see :meth:`Rooms.busy`), the leak included.
    busy: int
    #: The permits the mode offers waiting demand (:func:`capacity`).
    capacity: int
    #: The documented leak's footprint (leases no client knows).
    leaked: int


class Rooms:
    """The room of every key of a run, read when asked; see the module docstring."""

    def __init__(
        self,
        holders: Mapping[str, WatchedHolder],
        in_use: Counter[str],
        in_use_by_group: Counter[tuple[str, str]],
        across: AcrossClients,
    ) -> None:
        """``holders`` by key (the monitor adds each as the world builds it); ``in_use`` and
        ``in_use_by_group``: the oracle's counts of permits actually in use, per key and per
        (key, group), as the monitor keeps them; ``across``: totals over the clients."""
        self.holders = holders
        self._in_use = in_use
        self._in_use_by_group = in_use_by_group
        self._across = across

    def known_leases(self, clients: Mapping[str, DurableObject]) -> Collection[str]:
        """Every lease id some client knows."""
        self._across.refresh(clients)
        return self._across.known_leases()

    def lease_in_use(self, clients: Mapping[str, DurableObject], key: str) -> int:
        """Lease permits drawn and not yet released for ``key``, as the clients count them."""
        self._across.refresh(clients)
        return self._across.lease_in_use(key)

    def waiting_by_group(self, clients: Mapping[str, DurableObject], key: str) -> dict[str, tuple[int, int]]:
        """Per group, the items of ``key`` queued or being claimed, and when the oldest arrived."""
        self._across.refresh(clients)
        return self._across.waiting_by_group(key)

    def leaked(self, key: str, known: Container[str]) -> int:
        """The documented leak's footprint now, from the row mirror: every holder commit refreshes
        it, so between commits it holds the stored rows (the debug mode reads them and compares)."""
        return self.holders[key].mirror.unknown_footprint(known)

    def capacity(self, clients: Mapping[str, DurableObject], key: str) -> int:
        """The permits the mode offers the waiting demand of ``key`` now (:func:`capacity`)."""
        return capacity(self.holders[key].env, self.lease_in_use(clients, key))

    def busy(self, clients: Mapping[str, DurableObject], key: str, leaked: int, now: int) -> int:
        """Busy: what the holder still counts for grants (a release not yet reported, a grant on
        its way to be claimed: latency, not starvation), what leases actually run, and the
        documented leak. Idle lease headroom is not busy."""
        granted, _ = holder_reads.accounted(self.holders[key].obj.storage, now)
        return max(self._in_use[key], granted + self.lease_in_use(clients, key)) + leaked

    def room(self, clients: Mapping[str, DurableObject], key: str, known: Container[str], now: int) -> Room:
        """Now, for ``key``: what waits that the holder could serve, and the room it has."""
        holder = self.holders[key]
        caps = _caps(holder.obj)
        # A capped group is servable while neither the clients nor what the holder
        # charges against the cap (grants with releases not yet reported and, where
        # the holder counts them, the group's leases) has it at its cap.
        charged = self.charged_against_caps(key, now) if caps else {}
        servable = {
            group: entry
            for group, entry in sorted(self.waiting_by_group(clients, key).items())
            if group not in caps
            or caps[group] > max(self._in_use_by_group[key, group], charged.get(group, 0))
        }
        leaked = self.leaked(key, known)
        room_for = self.capacity(clients, key)
        return Room(servable, self.busy(clients, key, leaked, now), room_for, leaked)

    def charged_against_caps(self, key: str, now: int) -> Counter[str]:
        """Per group, the permits the holder's grant pass counts against a group limit.

        Grants always; with ``within_group_limit`` and the F1 fix, the group's
        lease footprint too (a lease lost in a reply, the documented leak, can
        then hold a capped group shut for good).
        """
        holder = self.holders[key]
        charged = Counter(holder_reads.granted_by_group(holder.obj.storage, now))
        options = holder.env.leases
        if (
            options is not None
            and options.limited_groups == "within_group_limit"
            and GROUP_CEILING_COUNTS_LEASES in holder.env.fixes
        ):
            for group, (_, footprint) in holder_reads.lease_totals(holder.obj.storage).items():
                charged[group] += footprint
        return charged

    def held_by_waiting_clients(
        self, clients: Mapping[str, DurableObject], key: str, known: Container[str]
    ) -> int:
        """Footprint of the (known) leases of clients that still have items of ``key`` waiting."""
        waiting = client_reads.waiting_clients(clients, key)
        return sum(
            max(0, lease.permits - lease.released)
            for lease in holder_reads.leases(self.holders[key].obj.storage)
            if lease.client_id in waiting and lease.lease_id in known
        )

    def claimable_until(self, key: str, now: int) -> int | None:
        """The earliest time by which some grant's unclaimed permits are claimed or taken back, or None.

        Until its deadline a grant's unclaimed permits may still be claimed; the alarm
        takes them back within ``alarm_min_delay_ms`` after it (``reclaimed``).
        """
        holder = self.holders[key]
        delay = holder.env.alarm_min_delay_ms
        bounds = [
            int(expires_at) + delay
            for _, _, _, permits, claimed, _, _, expires_at in holder.mirror.rows["grants"].values()
            if claimed < permits and now <= int(expires_at) + delay
        ]
        return min(bounds, default=None)


def capacity(env: Env, leases_running: int) -> int:
    """The permits the mode offers waiting demand: the limit, except under ``Under``.

    Under's reserve is for leases only (by design): plain clients can use the
    grants' pool alone, and reserve a lease holds but does not draw serves
    nobody else, so only the lease permits actually running count.
    """
    options = env.leases
    if options is None or not isinstance(options.provisioning, Under):
        return env.limit
    pools = budgets(options.provisioning, env.limit)
    return pools.grants + min(pools.leases, leases_running)


def _caps(holder: DurableObject) -> dict[str, int]:
    """The live holder instance's group caps (none if it is not live: eviction forgot them)."""
    instance = getattr(holder, "_instance", None)
    return dict(getattr(instance, "group_limits", {}) or {})
