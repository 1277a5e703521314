"""``lease_fairness``: each round issues exactly the leases the reference's lease pass would.

Judged at every round from the lease rows its commit changed: the
reference's ``applyLeaseReports`` and ``allocateLeases``, transliterated
(:func:`~semsim.check.allocation_checks.plan_leases`), say which leases the
round must issue, and the rule names what a difference breaks: the share,
a candidate, a group cap, oldest first.
"""

from __future__ import annotations

from semsim.check.allocation_checks import LEASE_FAIRNESS, RoundCommit, lease_fairness_broken
from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit, Round


class LeaseFairness(Checker):
    """Remembers, per key, the lease rows before and after its latest commit, its usage and caps."""

    name = LEASE_FAIRNESS
    description = "each round issues exactly the reference's leases"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        self._last: dict[str, RoundCommit] = {}

    def on_commit(self, commit: Commit) -> None:
        changes = commit.changes
        self._last[commit.key] = RoundCommit.of(
            changes.table_before("leases"), changes.table_after("leases"), commit.usage, commit.group_limits
        )

    def on_round(self, round: Round) -> None:
        last = self._last[round.key]
        broken = lease_fairness_broken(
            round.leases, round.fixes, round.t_ms, round.requests, round.replies, last
        )
        if broken:
            self.fail(LEASE_FAIRNESS, f"{round.key}: {broken}", key=round.key)
