"""``durable``: an eviction loses or alters no committed row.

An eviction drops a holder's instance and memory; its storage is the
truth it is rebuilt from (docs/INVARIANTS.md). The holder's grant and
lease rows as the eviction found them must be the rows its next instance
is built on.
"""

from __future__ import annotations

from semaphore_core.store import GrantRow, LeaseRow
from semsim.check.checker import Checker, Fail
from semsim.check.events import Evicted, HolderView, InstanceBuilt

#: A holder's rows by id: its grants, and its leases.
_Rows = tuple[dict[str, GrantRow], dict[str, LeaseRow]]


def _rows(holder: HolderView) -> _Rows:
    return (
        {grant.grant_id: grant for grant in holder.grants()},
        {lease.lease_id: lease for lease in holder.leases()},
    )


class Durable(Checker):
    """Keeps each evicted holder's rows until its next instance is built."""

    name = "durable"
    description = "an eviction loses or alters no committed row"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        self._evicted: dict[str, _Rows] = {}

    def on_evict(self, evicted: Evicted) -> None:
        self._evicted[evicted.key] = _rows(evicted.holder)

    def on_instance(self, built: InstanceBuilt) -> None:
        before = self._evicted.pop(built.key, None)
        if before is not None and _rows(built.holder) != before:
            self.fail(self.name, f"{built.object}: committed rows changed across an eviction")
