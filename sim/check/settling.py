"""When a run has settled, so that what must have come about can be judged.

Liveness (``capacity_returns``, ``reclaimed``, ``operation_progress``, and
the user's ``on_finish`` checks) is judged once nothing more can happen.
Judged too early, a permit still on its way back reads as leaked; judged
too late, or never, a stuck run passes. :meth:`Settling.pending` says what
the run still waits on and when to look again, which ``run_world`` uses to
decide when to judge, and when a run that does not settle is stuck.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from semaphore_core.config import budgets
from semsim.check import client_reads, holder_reads
from semsim.check.room import Rooms

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject
    from semsim.runtime.network import Network
    from semsim.world.external_api import ExternalApi


@attrs.frozen
class Pending:
    """What keeps a run from settling: when to look again, and whether the run waits on an end
    already known (a call at the external API, a grant's unclaimed permits coming back).

    Waiting on a known end is not being stuck: ``run_world`` does not fail ``progress`` for
    a run that waits on one, however long since anything moved (whatever else is also under
    way, a reply on its way to a zombie's caller, say).
    """

    #: When what keeps the run unsettled may be over, at the earliest (now when it cannot be told).
    at_ms: int
    known_end: bool = False


class Settling:
    """Tells whether a run has settled, from its keys' room, its wire and its external API."""

    def __init__(
        self, rooms: Rooms, in_use: Counter[str], network: Network | None, api: ExternalApi | None
    ) -> None:
        self.rooms = rooms
        self._in_use = in_use
        self._network = network
        self._api = api

    def pending(self, clients: Mapping[str, DurableObject], now: int) -> Pending | None:
        """What the run still waits on before it settles (None: it has settled), and when to look again.

        Settled means: no client runs or is claiming anything, has changes the
        holder has not acknowledged or a lease past its expiry it has yet to
        retire; no message is on the wire (a round's reply may carry a grant or a
        lease the holder has committed and its client not yet heard of), unless no
        holder can give anything (nothing outstanding, no lease budget, a limit
        of 0: the wire then carries polls and refusals for as long as clients
        ask) and no
        call is still working at the external API (a zombie); no grant has
        unclaimed permits that may still be claimed, or that the alarm has yet
        to take back (until its deadline plus the alarm's delay); and no key has
        items waiting that the holder could serve: what stays queued waits on
        a capped group, or on a limit the documented leak fills (or that is 0),
        with no grant outstanding that could serve it.
        """
        if (
            any(self._in_use.values())
            or client_reads.unreported(clients)
            or client_reads.claiming(clients)
            or client_reads.expiry_due(clients, now)
        ):
            return Pending(now)
        rooms = self.rooms
        known = rooms.known_leases(clients)
        keys = sorted(rooms.holders)
        #: Whether no holder can give anything: no grant or lease outstanding, no lease budget,
        #: and no permit at all (a limit of 0). Not "nothing servable waits": a submission on the
        #: wire may bring demand a group could serve.
        shut = bool(keys)
        for key in keys:
            room = rooms.room(clients, key, known, now)
            waiting = sum(count for count, _ in room.waiting.values())
            watched = rooms.holders[key]
            storage = watched.obj.storage
            if waiting and (holder_reads.accounted(storage, now)[0] or room.capacity > room.leaked):
                return Pending(now)
            # Cheapest first: almost every run has a limit above 0, and reads nothing more here.
            options = watched.env.leases
            shut = (
                shut
                and room.capacity == 0
                and (options is None or budgets(options.provisioning, watched.env.limit).leases == 0)
                and holder_reads.accounted(storage, now) == (0, 0)
            )
        # Then what is under way, each with when it may be over: the run settles when none is.
        under_way: list[Pending] = []
        network = self._network
        # Messages on the wire may carry a grant or lease a client has yet to hear of, unless
        # no holder can give anything: then they are polls, refusals and demand that cannot be
        # served, which a run shut by a limit of 0 exchanges for ever (clients keep asking), and
        # they change nothing. (A lease budget keeps the wire open: leases may still be given.)
        if network is not None and network.on_wire and not shut:
            # A reply that landed is still on the wire until its caller's task resumes with it,
            # later in this millisecond: look again a millisecond on at the earliest.
            under_way.append(Pending(max(network.lands_by_ms, now + 1)))
        if self._api is not None and self._api.running:
            # A call still working at the external API (a zombie whose caller gave up) has yet to
            # take effect and end: ``effect_once`` and ``external_ceiling`` judge it then.
            ends_at = min(call.ends_at for call in self._api.running.values())
            under_way.append(Pending(ends_at, known_end=True))
        for key in keys:
            bound = rooms.claimable_until(key, now)
            if bound is not None:
                under_way.append(Pending(bound + 1, known_end=True))
        if not under_way:
            return None
        return Pending(
            min(pending.at_ms for pending in under_way), known_end=any(p.known_end for p in under_way)
        )
