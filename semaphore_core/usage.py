"""What the holder has handed out: the ``SemaphoreUsage`` snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs


class GroupUsage(NamedTuple):
    """One group's outstanding grant permits and its resolved group limit (None: unlimited)."""

    granted: int
    limit: int | None


@attrs.frozen(hash=False)
class Usage:
    """``limit``, outstanding grant permits, live lease footprint, grant room, per-group grants.

    ``granted`` may exceed ``limit`` after the limit was lowered: running work
    is never evicted.
    """

    limit: int
    granted: int
    leased: int
    available: int
    groups: Mapping[str, GroupUsage]

    def to_wire(self) -> dict[str, Any]:
        groups: dict[str, Any] = {}
        for name, group in self.groups.items():
            entry: dict[str, Any] = {"granted": group.granted}
            if group.limit is not None:
                entry["limit"] = group.limit
            groups[name] = entry
        return {
            "limit": self.limit,
            "granted": self.granted,
            "leased": self.leased,
            "available": self.available,
            "groups": groups,
        }
