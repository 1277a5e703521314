"""``reuse``: capacity a report released is offered in the round that applies it.

Judged at every round, from the usage its commit left: a round that keeps
demand waiting on the limit must leave no room in the grants' pool (the
rule and why its bound is zero rounds: :func:`~semsim.check.allocation_checks.reuse_rule`).
"""

from __future__ import annotations

from semaphore_core.usage import Usage
from semsim.check.allocation_checks import REUSE, reuse_broken
from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit, Round


class Reuse(Checker):
    """Remembers each key's usage after its latest commit: a round is judged on its own commit's."""

    name = REUSE
    description = "capacity a report released is offered in the round that applies it"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        self._usage: dict[str, Usage] = {}

    def on_commit(self, commit: Commit) -> None:
        self._usage[commit.key] = commit.usage

    def on_round(self, round: Round) -> None:
        broken = reuse_broken(
            round.leases, round.fixes, self._usage[round.key], round.requests, round.replies
        )
        if broken:
            self.fail(REUSE, f"{round.key}: {broken}", key=round.key)
