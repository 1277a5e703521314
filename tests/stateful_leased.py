"""A Hypothesis state machine that drives ``semaphore_core.leased.store.LeaseStore`` as workers would.

Rules: time advancing, instances created, claims by a few workers (with a
concurrency limit and a rate window on one workflow), renewals, fenced
writes (progress, completion, suspension), hand-backs, and workers that
stop renewing (they simply never call again).

After every step it checks the store's promises (seed 004):

- ``fenced``: a write or renewal under a token that no longer holds the
  lease never lands.
- ``one_live_lease``: a claim never hands out an instance under another
  token's live lease.
- ``expiry``: an instance whose lease ran out without renewal is claimable
  again (a claim with room takes it, unless a limit refuses it).
- ``limits``: a workflow's instances under live leases stay within its
  concurrency limit; claims in a rate window stay within its max.

The module defines the machine; ``tests/test_leased_store.py`` runs it.
"""

from __future__ import annotations

import sqlite3

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from semaphore_core.leased import RateLimitRule, RateWindow
from semaphore_core.leased.store import Instance, Lease, LeaseStore

WORKFLOWS = ("limited", "free")
LIMITS = {"limited": 2}
RATE = RateWindow(3, 1_000)
RATE_LIMITS = (RateLimitRule("limited", limit=RATE),)
LEASE_MS = 500


class LeasedStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = LeaseStore(sqlite3.connect(":memory:"))
        self.now = 0
        self.created = 0
        self.tokens = 0
        #: The model: instance id -> (token, lease until) of its last lease (None: released).
        self.holder: dict[str, tuple[str, int] | None] = {}
        #: Every token ever issued, per instance.
        self.issued: dict[str, list[str]] = {}
        #: Grants in each rate window of "limited": window end -> claims counted in it.
        self.window_claims: dict[int, int] = {}

    @rule(ms=st.sampled_from([0, 1, 100, 499, 500, 501, 1_000]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(workflow=st.sampled_from(WORKFLOWS))
    def create(self, workflow: str) -> None:
        self.created += 1
        id = f"i{self.created}"
        assert self.store.create(id, workflow, self.now)
        self.holder[id] = None
        self.issued[id] = []

    @rule(limit=st.integers(0, 3))
    def claim(self, limit: int) -> None:
        self.tokens += 1
        token = f"t{self.tokens}"
        before = {i.id: i for i in self.store.instances()}
        claimed = self.store.claim(
            Lease("worker", token, self.now, self.now + LEASE_MS), limit, WORKFLOWS, LIMITS, RATE_LIMITS
        )
        assert len(claimed) <= limit
        for instance in claimed:
            old = before[instance.id]
            assert not old.leased_at(self.now), "one_live_lease"
            assert old.status in ("pending", "running", "suspended")
            assert old.wake_at_ms is not None
            assert old.wake_at_ms <= self.now
            self.holder[instance.id] = (token, self.now + LEASE_MS)
            self.issued[instance.id].append(token)
        limited = sum(1 for i in claimed if i.workflow == "limited")
        if limited:
            [window] = [w for w in self.store.windows() if w.workflow == "limited"]
            self.window_claims[window.window_end_ms] = (
                self.window_claims.get(window.window_end_ms, 0) + limited
            )
            assert self.window_claims[window.window_end_ms] == window.count <= RATE.max, "limits: rate window"
        # expiry: with room for every claimable instance, each of "free" (no limits) is claimed, an
        # instance whose lease ran out included.
        claimable = [old for old in before.values() if self._claimable(old)]
        if limit >= len(claimable):
            taken = {instance.id for instance in claimed}
            left = [old.id for old in claimable if old.workflow == "free" and old.id not in taken]
            assert left == [], f"expiry: claimable instances left: {left}"

    def _claimable(self, instance: Instance) -> bool:
        return (
            instance.status in ("pending", "running", "suspended")
            and instance.wake_at_ms is not None
            and instance.wake_at_ms <= self.now
            and not instance.leased_at(self.now)
        )

    def _tokens(self, data: st.DataObject) -> tuple[str, str]:
        id = data.draw(st.sampled_from(sorted(i for i in self.issued if self.issued[i])))
        return id, data.draw(st.sampled_from(self.issued[id]))

    def _holds(self, id: str, token: str) -> bool:
        """``token`` holds ``id``'s lease, and it is live."""
        held = self.holder[id]
        return held is not None and held[0] == token and held[1] > self.now

    @precondition(lambda self: any(self.issued.values()))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        id, token = self._tokens(data)
        holds = self._holds(id, token)
        landed = self.store.renew(id, token, self.now, self.now + LEASE_MS)
        assert landed is holds, "fenced"
        if landed:
            self.holder[id] = (token, self.now + LEASE_MS)

    @precondition(lambda self: any(self.issued.values()))
    @rule(data=st.data(), how=st.sampled_from(["progress", "complete", "suspend", "hand_back"]))
    def write(self, data: st.DataObject, how: str) -> None:
        id, token = self._tokens(data)
        before = self.store.get(id)
        holds = self._holds(id, token)
        if how == "progress":
            landed = self.store.write(id, token, "running", self.now)
        elif how == "complete":
            landed = self.store.write(id, token, "completed", self.now, release=True)
        elif how == "suspend":
            landed = self.store.write(
                id, token, "suspended", self.now, release=True, wake_at_ms=self.now + 200
            )
        else:
            landed = self.store.hand_back(id, token, self.now)
        assert landed is holds, "fenced"
        if not landed:
            assert self.store.get(id) == before, "fenced: a refused write changed the row"
        elif how != "progress":
            self.holder[id] = None

    @invariant()
    def limits(self) -> None:
        live = [i for i in self.store.instances() if i.leased_at(self.now)]
        assert sum(1 for i in live if i.workflow == "limited") <= LIMITS["limited"], "limits: concurrency"
        for instance in self.store.instances():
            held = self.holder[instance.id]
            assert (instance.lease_token, instance.lease_until_ms) == (held or (None, None)), (
                "fenced: the lease"
            )
            if instance.leased_at(self.now):
                assert self._holds(instance.id, str(instance.lease_token)), "one_live_lease"
