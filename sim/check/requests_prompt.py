"""``requests_prompt``: a client asks for its queued items as soon as it may.

Seed 001 (line 87) has the client ask the holder for a key's queued items,
and the holder's ``nextRequestAt`` say when it may ask again; seed 000's
``JobShard.submit`` (lines 140-149) only enqueues, and the queue's scheduler
runs the request. The port's client loop (``semsim.world.client_object``)
keeps that promise with wakeups of its own: a call into the object (a
submit, a release) wakes it, a reply wakes it, and it sleeps until the
earliest of the times it must act at (a key's ``nextRequestAt``, the end of
a failed call's ``retry_ms`` wait). A wakeup it forgets does not lose the
items: the next one, or the durable alarm 15 s later, sends the request.
No other check sees the delay, unless it outlasts ``progress``' window.

Judged each time a millisecond is over (``Timers.moment_over``), when every
task has done what it does at it: on every live client, a key with items
queued (read from its storage, not from the loop's memory) whose
``nextRequestAt`` has passed must have a call out for it, or be waiting
out a failed call's retry. An evicted client is not judged: it has no loop
until the platform rebuilds it (docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from semaphore_core.queue_reads import KEYS_ASKABLE
from semsim.check.checker import Checker, Fail
from semsim.check.client_reads import reading
from semsim.world.client_object import ClientObject

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject
    from semsim.runtime.kernel import Sim


class RequestsPrompt(Checker):
    name = "requests_prompt"
    description = "a client asks for its queued items as soon as it may"

    def __init__(self, fail: Fail, clients: Mapping[str, DurableObject], sim: Sim) -> None:
        """``clients``: the run's client objects by name (the world adds them as it builds them)."""
        self.fail = fail
        self._clients = clients
        self._sim = sim
        #: The times a client may next ask at, each made a moment of its own (below).
        self._moments: set[int] = set()

    def moment_over(self) -> None:
        """Every task did what it does at this millisecond: each live client asked for what it may.

        A key that may be asked for later (its ``nextRequestAt``, or the end of a failed call's
        retry wait, still to come) gets a moment at that time, an entry that does nothing: were
        nothing else to happen then, a loop that sleeps through it would be judged only at the
        next thing that happens, which may be the late request itself.
        """
        now = self._sim.now()
        self._moments.discard(now)
        for name, obj in self._clients.items():
            client = obj.live_instance
            if not isinstance(client, ClientObject):
                continue  # evicted, or another design's object
            in_flight, retry = client.in_flight, client.retry_at
            for key, next_request_at in reading(obj, KEYS_ASKABLE):
                if key in in_flight:
                    continue  # its reply or its timeout is a moment of its own
                askable_at = max(next_request_at, retry.get(key, 0))
                if askable_at > now:
                    if askable_at not in self._moments:
                        self._moments.add(askable_at)
                        self._sim.call_at(askable_at, _nothing)
                    continue
                self.fail(
                    self.name,
                    f"{name}: items queued for {key} may be asked for since {askable_at} ms"
                    f" (nextRequestAt {next_request_at}), and at {now} ms no call for them is out",
                )


def _nothing() -> None:
    """A moment's entry: time stops at it, so the end of that millisecond is judged."""
