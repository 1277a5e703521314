"""``ceiling``: holder-accounted usage stays within the mode's ceiling (docs/INVARIANTS.md).

The limit (no leases, strict, under), or grants within the limit and
leases within ``extra`` (over). After the limit is lowered, usage may stay
above it but never grow while above it. Under mode's two pools may each
stay within their own while the sum grows past a lowered limit: that is
finding F2, attributed by the same rule the core's state machine applies.
Judged after every holder commit; :func:`ceiling_rule` is shared with
``semsim replay``.
"""

from __future__ import annotations

from semaphore_core.config import LeaseOptions, Over, Under, budgets
from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit


class Ceiling(Checker):
    """Judges each commit's usage against the one before it, per key."""

    name = "ceiling"
    description = "holder-accounted usage stays within the mode's ceiling"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        #: Per key, (granted, leased) after the last commit judged.
        self._before: dict[str, tuple[int, int]] = {}

    def on_commit(self, commit: Commit) -> None:
        usage = commit.usage
        before = self._before.get(commit.key, (0, 0))
        self._before[commit.key] = (usage.granted, usage.leased)
        broken = ceiling_rule(commit.leases, usage.limit, usage.granted, usage.leased, before)
        if broken:
            self.fail(self.name, f"{commit.key}: {broken[0]}", broken[1], key=commit.key)


def ceiling_rule(
    options: LeaseOptions | None,
    limit: int,
    granted: int,
    leased: int,
    before: tuple[int, int],
) -> tuple[str, str | None] | None:
    """``ceiling``: None if it holds, else (detail, the finding that explains it or None).

    Usage may stay above a lowered limit but never grow while above it.
    """
    before_granted, before_leased = before
    if options is not None and isinstance(options.provisioning, Over):
        extra = budgets(options.provisioning, limit).leases
        if granted > limit and granted > before_granted:
            return f"grants {granted} > limit {limit} and grew from {before_granted}", None
        if leased > extra and leased > before_leased:
            return f"leases {leased} > extra {extra} and grew from {before_leased}", None
        return None
    total, before_total = granted + leased, before_granted + before_leased
    if total <= limit or total <= before_total:
        return None
    finding = None
    if options is not None and isinstance(options.provisioning, Under):
        # F2: under mode budgets its two pools separately; after the limit falls,
        # each may stay within its own pool while the sum grows.
        pools = budgets(options.provisioning, limit)
        within_pools = (granted <= pools.grants or granted <= before_granted) and (
            leased <= pools.leases or leased <= before_leased
        )
        finding = "F2" if within_pools else None
    return f"usage {granted} granted + {leased} leased > limit {limit}, grew from {before_total}", finding
