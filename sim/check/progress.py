"""``progress``: waiting demand is served while capacity exists, oldest first.

Two promises (docs/INVARIANTS.md):

- **Oldest first**, at every round: the allocator serves demand oldest first,
  and once the limit stops one demand it stops every later one, so a grant
  to younger demand in the same round means the order was not kept.
- **No starvation**, once the faults stopped: a group's items may not wait
  a whole :data:`PROGRESS_WINDOW_MS` while permits sit unused, without a
  single moment at which there was no room for them. An admission that
  puts every permit in use, or a round that leaves the key full or the
  group at its cap, closes the window: a permit in transit between a
  release and the next round is latency, not starvation. Windows are per
  group, so a capped group's long backlog and another group's fresh
  arrivals do not make one window between them. A run that does not settle
  at all fails here too (:meth:`Progress.unsettled`).

Starvation that only the idle headroom of live leases explains is finding
F4: a client with nothing queued never hears ``contended``, so that headroom
comes back only when its leases expire.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from semsim.check import client_reads
from semsim.check.checker import Checker, Fail
from semsim.check.events import Admission, Commit, Round
from semsim.check.room import Rooms

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

NAME: Final = "progress"
#: ``progress`` fails when items wait while permits sit unused for this long.
PROGRESS_WINDOW_MS: Final = 30_000


class Progress(Checker):
    """Keeps, per key and group, when its open starvation window began and how its rounds went."""

    name = NAME
    description = "waiting demand is served while capacity exists, oldest first"
    kind = "liveness"

    def __init__(
        self,
        fail: Fail,
        rooms: Rooms,
        clients: Mapping[str, DurableObject] | None,
        in_use: Counter[str],
        event: Callable[..., None],
        calls_api: bool = False,
    ) -> None:
        """``in_use``: the oracle's permits in use per key; ``event`` records a trace event;
        ``calls_api``: the run's clients call an external API (its attempts count as work moving)."""
        self.fail = fail
        self.rooms = rooms
        self.clients = clients
        self._in_use = in_use
        self._event = event
        self._calls_api = calls_api
        #: Per key, per group with items starved: when its open window began.
        self._starved_since: dict[str, dict[str, int]] = {}
        #: Per key, the documented leak's footprint at the last sample.
        self._leaked_seen: dict[str, int] = {}
        #: Per (key, group), for its open starvation window: [its start, rounds full but for idle
        #: lease headroom, rounds short even counting it].
        self._window_rounds: dict[tuple[str, str], list[int]] = {}

    # --- events -------------------------------------------------------------------------

    def on_admit(self, admission: Admission) -> None:
        """An admission that puts every permit in use closes the key's windows: no group starved."""
        key = admission.key
        if key not in self._starved_since or self.clients is None:
            return
        if admission.in_use + self._leaked_seen.get(key, 0) >= self.rooms.capacity(self.clients, key):
            del self._starved_since[key]

    def on_commit(self, commit: Commit) -> None:
        """A commit that left no room for what waits (idle lease headroom aside) ends its windows.

        The holder allocates once per round: permits released between rounds wait
        for the next one. That is the protocol's cadence, not starvation. No room
        means every permit busy (every window of the key closes), or, for one
        group, the group at its cap (a capped group's window closes at every
        round that fills the cap, however long its backlog).
        """
        key = commit.key
        windows = self._starved_since.get(key)
        if windows and self.clients is not None:
            clients = self.clients
            room = self.rooms.room(clients, key, self.rooms.known_leases(clients), commit.t_ms)
            if room.busy >= room.capacity:
                del self._starved_since[key]
                return
            for group in [group for group in windows if group not in room.waiting]:
                del windows[group]
            if not windows:
                del self._starved_since[key]

    def on_round(self, round: Round) -> None:
        """Oldest first; and, while a window is open, whether this round left the key full but
        for idle lease headroom (what F4 explains) or not even then."""
        self._note_round(round.key, round.t_ms)
        blocked = [
            demand.oldest_at
            for request, reply in zip(round.requests, round.replies, strict=True)
            for demand in request.demand
            if any(b.group == demand.group and b.reason == "limit" for b in reply.blocked)
        ]
        if not blocked:
            return
        oldest_blocked = min(blocked)
        for request, reply in zip(round.requests, round.replies, strict=True):
            granted = {grant.group for grant in reply.grants}
            for demand in request.demand:
                if demand.group in granted and demand.oldest_at > oldest_blocked:
                    self.fail(
                        NAME,
                        f"{round.key}: {request.client_id}'s demand in {demand.group} (oldest "
                        f"{demand.oldest_at}) was granted while demand from {oldest_blocked} "
                        "waited on the limit",
                    )

    # --- sampled once the faults stopped -----------------------------------------------------

    def sample(self, clients: Mapping[str, DurableObject], now: int) -> None:
        """During the quiet period: note, per key and group, whether items wait while permits sit
        unused (not actually in use, and not leaked as the reference documents)."""
        known = self.rooms.known_leases(clients)
        for key in sorted(self.rooms.holders):
            room = self.rooms.room(clients, key, known, now)
            self._leaked_seen[key] = room.leaked
            starved = room.waiting if room.busy < room.capacity else {}
            windows = self._starved_since.get(key, {})
            for group in [group for group in windows if group not in starved]:
                del windows[group]
            for group, (count, oldest) in starved.items():
                # Starved since the stretch began, or since the oldest item still waiting came:
                # items that keep arriving and being served within the window are not starved.
                since = max(self._starved_since.setdefault(key, {}).setdefault(group, now), oldest)
                if now - since < PROGRESS_WINDOW_MS:
                    continue
                idle = client_reads.idle_headroom(clients, key, now)
                # F4: the unused permits are live leases' undrawn headroom on clients with
                # nothing queued in those groups: they never hear ``contended``, so it
                # comes back only when the leases expire (their ``ttlMs``). Either
                # now, or at every round of the window (permits released between rounds
                # then wait for the next one, which idle headroom keeps from filling).
                held_by_idle = room.busy + idle >= room.capacity
                held_by_idle = held_by_idle or self._only_idle_headroom_kept_rounds_short(key, group)
                finding = "F4" if idle and held_by_idle else None
                self._starved_since.pop(key, None)
                self.fail(
                    NAME,
                    f"{key}: {count} items of group {group} have waited {now - since} ms while only "
                    f"{self._in_use[key]} of {room.capacity} permits were in use ({room.busy} busy or "
                    f"reported busy, {room.leaked} leaked, {idle} idle lease headroom)",
                    finding,
                )
            if not self._starved_since.get(key, True):
                del self._starved_since[key]

    def unsettled(
        self, clients: Mapping[str, DurableObject], now: int, quiet_from_ms: int, moved_ms: int
    ) -> None:
        """The run is stuck, or too slow, after the faults stopped: ``progress`` fails.

        Attributed to F4 when every key with work waiting is held up by the headroom of
        idle clients' live leases (the finding's own starvation, which lasts until those
        leases expire); otherwise no finding explains it.
        """
        known = self.rooms.known_leases(clients)
        finding = None
        held_up = []
        for key in sorted(self.rooms.holders):
            room = self.rooms.room(clients, key, known, now)
            if room.waiting:
                idle = client_reads.idle_headroom(clients, key, now)
                held_up.append(bool(idle) and room.busy + idle >= room.capacity)
        if held_up and all(held_up) and not any(self._in_use.values()):
            finding = "F4"
        self._event("liveness_cut_short", finding=finding)
        self.fail(
            NAME,
            f"the run did not settle: {now - quiet_from_ms} ms after the faults stopped, "
            f"{client_reads.outstanding(clients)} items are still queued, claiming or running "
            f"({sum(self._in_use.values())} running) and nothing was admitted or released "
            + ("(nor any operation attempted) " if self._calls_api else "")
            + f"for {now - moved_ms} ms"
            + ("; reports are unacknowledged" if client_reads.unreported(clients) else ""),
            finding,
        )

    # --- rounds of an open window -----------------------------------------------------------

    def _note_round(self, key: str, now: int) -> None:
        windows = self._starved_since.get(key)
        if not windows or self.clients is None:
            return
        clients = self.clients
        busy = self.rooms.busy(clients, key, self._leaked_seen.get(key, 0), now)
        room_for = self.rooms.capacity(clients, key)
        if busy >= room_for:
            return  # a full round: ``on_commit`` closed the windows already
        full_but_idle = busy + client_reads.idle_headroom(clients, key, now) >= room_for
        for group, since in windows.items():
            window = self._window_rounds.get((key, group))
            if window is None or window[0] != since:
                window = self._window_rounds[key, group] = [since, 0, 0]
            window[1 if full_but_idle else 2] += 1

    def _only_idle_headroom_kept_rounds_short(self, key: str, group: str) -> bool:
        """Whether every round of the group's open window was full but for idle lease headroom (F4)."""
        window = self._window_rounds.get((key, group))
        since = self._starved_since.get(key, {}).get(group)
        return window is not None and window[0] == since and window[1] > 0 == window[2]
