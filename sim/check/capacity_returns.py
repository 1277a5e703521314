"""``capacity_returns``: once settled, the holder charges nothing, the documented leak aside.

Judged once the run has settled: nothing runs and every change has been
reported, so whatever the holder still charges is capacity that did not
come back (docs/INVARIANTS.md), except

- the documented leak: a lease granted in a reply that was lost, which no
  client knows and so nothing ever settles (counted by name,
  ``lease_lost_in_reply``, in the run's leaks). A lease some client drew
  items on was not lost in a reply: if no client knows it once settled and
  the holder still charges it, a client forgot it, and that is a violation,
  not the leak;
- the leases of clients whose items still wait (in a capped group, say):
  such a client is still working, and keeps its leases until the holder
  says contended, by design.

Lease permits still charged that the idle headroom of live leases covers
are finding F4.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Final

from semsim.check import client_reads, holder_reads
from semsim.check.checker import Checker, Fail
from semsim.check.events import Admission, Finish
from semsim.check.room import Rooms

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

NAME: Final = "capacity_returns"
#: The leak the reference documents: a lease in a lost reply is never settled.
DOCUMENTED_LEAK: Final = "lease_lost_in_reply"


class CapacityReturns(Checker):
    """Reads each holder's accounting, and the clients' leases, once the run settled."""

    name = NAME
    description = "once settled, usage is back to 0 (the documented leak aside)"
    kind = "liveness"

    def __init__(
        self, fail: Fail, rooms: Rooms, clients: Mapping[str, DurableObject], leaks: Counter[str]
    ) -> None:
        """``leaks``: where the documented leak is counted by name (the run's report reads it)."""
        self.fail = fail
        self.rooms = rooms
        self.clients = clients
        self.leaks = leaks
        #: Per key, each lease some client drew an item on, and the first client that did.
        self._drawn_on: dict[str, dict[str, str]] = {}

    def on_admit(self, admission: Admission) -> None:
        if admission.lease is not None:
            self._drawn_on.setdefault(admission.key, {}).setdefault(admission.lease, admission.client)

    def on_finish(self, finish: Finish) -> None:
        known = self.rooms.known_leases(self.clients)
        for key in finish.holders:
            self.judge(finish, key, self.clients, known)

    def judge(
        self, finish: Finish, key: str, clients: Mapping[str, DurableObject], known: Container[str]
    ) -> None:
        """One key's holder, given the run's clients and every lease id they know (the Monitor
        judges key by key, each key's checks together)."""
        now = finish.t_ms
        storage = self.rooms.holders[key].obj.storage
        granted, leased = holder_reads.accounted(storage, now)
        drawn_on = self._drawn_on.get(key, {})
        forgotten = sorted(
            (lease.lease_id, drawn_on[lease.lease_id], lease.permits - lease.released)
            for lease in holder_reads.leases(storage)
            if lease.lease_id not in known and lease.lease_id in drawn_on and lease.permits > lease.released
        )
        if forgotten:
            lease_id, client, charged = forgotten[0]
            self.fail(
                NAME,
                f"{key}: once settled, lease {lease_id} still charges {charged} permits and no client "
                f"knows it, though {client} drew items on it: forgotten, not lost in a reply",
            )
        leaked = self.rooms.leaked(key, known)
        lost_in_replies = holder_reads.unknown_leases(storage, known)
        if lost_in_replies:  # no name counted zero times: reports list what happened
            self.leaks[DOCUMENTED_LEAK] += lost_in_replies
        held = self.rooms.held_by_waiting_clients(clients, key, known)
        if granted or leased - leaked - held:
            idle = client_reads.idle_headroom(clients, key, now)
            finding = "F4" if not granted and leased - leaked - held <= idle else None
            self.fail(
                NAME,
                f"{key}: once settled, {granted} granted and {leased - leaked - held} leased "
                f"permits are still charged ({leaked} more leaked in lost replies, as documented; "
                f"{held} held by clients whose items still wait; {idle} idle headroom of live leases)",
                finding,
            )
