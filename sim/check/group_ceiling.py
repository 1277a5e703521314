"""``group_ceiling``: a group's grants stay within its cap; with ``within_group_limit`` leases,
grants plus lease footprint do too (docs/INVARIANTS.md).

The lease-inclusive part is finding F1: the reference's grants ignore the
group's lease footprint. Every group's usage is remembered, so a cap set
on a busy group is judged by the lowered-limit rule (it may stay above,
not grow) rather than from zero. Judged after every holder commit;
:func:`group_ceiling_rule` is shared with ``semsim replay``.
"""

from __future__ import annotations

from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit


class GroupCeiling(Checker):
    """Judges each capped group of each commit against its usage after the commit before."""

    name = "group_ceiling"
    description = "a group's grants (and leases, within its limit) stay within its cap"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        #: Per key, per group: (granted, lease footprint) after the last commit judged.
        self._before: dict[str, dict[str, tuple[int, int]]] = {}

    def on_commit(self, commit: Commit) -> None:
        usage, options = commit.usage, commit.leases
        footprints = commit.holder.lease_footprints()
        within = options is not None and options.limited_groups == "within_group_limit"
        groups = {
            group: (usage.groups[group].granted if group in usage.groups else 0, footprints.get(group, 0))
            for group in sorted(set(usage.groups) | set(footprints))
        }
        before = self._before.get(commit.key, {})
        self._before[commit.key] = groups
        for group, limit in sorted(commit.group_limits.items()):
            granted, leased = groups.get(group, (0, 0))
            broken = group_ceiling_rule(within, limit, granted, leased, before.get(group, (0, 0)))
            if broken:  # a tolerated finding returns: every capped group is judged
                self.fail(self.name, f"{commit.key} group {group}: {broken[0]}", broken[1], key=commit.key)


def group_ceiling_rule(
    within: bool, limit: int, granted: int, leased: int, before: tuple[int, int]
) -> tuple[str, str | None] | None:
    """``group_ceiling`` for one group; the lease-inclusive part is finding F1."""
    before_granted, before_leased = before
    if granted > limit and granted > before_granted:
        return f"{granted} granted > group limit {limit}, grew from {before_granted}", None
    if within:
        used, before_used = granted + leased, before_granted + before_leased
        if used > limit and used > before_used:
            return (
                f"{granted} granted + {leased} leased > group limit {limit}, grew from {before_used}",
                "F1",
            )
    return None
