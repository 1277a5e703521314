"""Resolving the limit and each group's policy once per round.

``#resolveLimit`` and ``#groupPolicy`` of semaphore-server.ts. The limit
must resolve to a non-negative safe integer or the whole round fails. A
group's policy never fails the round: ``can_grant`` returning false blocks
the group (``not_permitted``), and a ``group_limit`` that raises or returns
a bad value blocks it too (``limit_resolution_error``): resolution failures
fail *closed* rather than granting unlimited permits.
"""

from __future__ import annotations

import logging
from typing import Final

import attrs

from semaphore_core.config import HolderConfig, LeaseOptions
from semaphore_core.numbers import as_safe_int
from semaphore_core.protocol import BlockedReason

log: Final = logging.getLogger("semaphore_core")
# A library's logger: silent unless the application configures logging (no "last resort"
# traceback on stderr when a group_limit callback raises).
log.addHandler(logging.NullHandler())


@attrs.frozen
class GroupPolicy:
    """A group's resolved limit (None: only the shared limit) or why it is blocked."""

    limit: int | None = None
    blocked: BlockedReason | None = None


UNLIMITED: Final = GroupPolicy()


def resolve_limit(config: HolderConfig) -> int:
    """The limit for this round; raises ValueError if it is not a non-negative safe integer."""
    source = config.limit
    value = source() if callable(source) else source
    limit = as_safe_int(value)
    if limit is None or limit < 0:
        raise ValueError(f"limit must resolve to a non-negative safe integer, got {value!r}")
    return limit


def group_policy(config: HolderConfig, group: str) -> GroupPolicy:
    """One group's policy; never raises (except BaseException such as cancellation)."""
    try:
        if config.can_grant is not None and not config.can_grant(group):
            return GroupPolicy(blocked="not_permitted")
        if config.group_limit is None:
            return UNLIMITED
        value = config.group_limit(group)
        if value is None:
            return UNLIMITED
        limit = as_safe_int(value)
        if limit is None or limit < 0:
            raise ValueError(f'groupLimit for "{group}" must be a non-negative safe integer, got {value!r}')
        return GroupPolicy(limit=limit)
    except Exception:
        log.warning("durability.semaphore.limit_resolution_failed group=%r", group, exc_info=True)
        return GroupPolicy(blocked="limit_resolution_error")


def lease_eligible(options: LeaseOptions, policy: GroupPolicy) -> bool:
    """``leaseEligible``: not blocked, and unlimited unless limited groups lease within their limit."""
    return policy.blocked is None and (policy.limit is None or options.limited_groups == "within_group_limit")
