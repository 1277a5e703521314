"""``operation_progress``: once the run has settled, no durable operation is still pending.

Judged in the account-concurrency world, where each client runs its items
as seed 002's durable operations. A pending operation keeps its item
running, so a settled run has none, unless an item's permit came back
while its operation could still run (and call the API) again
(docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from semaphore_core.durability import CALLS
from semsim.check.checker import Checker, Fail
from semsim.check.events import Finish
from semsim.check.reads import select

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject

PENDING: Final = f"SELECT id FROM {CALLS.name} WHERE status = 'pending' ORDER BY id"
#: At most this many operations are named in the detail.
SHOWN: Final = 5


class OperationProgress(Checker):
    """Reads each client's operations table once the run settled."""

    name = "operation_progress"
    description = "once settled, no durable operation is still pending"
    kind = "liveness"

    def __init__(self, fail: Fail, clients: Mapping[str, DurableObject]) -> None:
        self.fail = fail
        self.clients = clients

    def on_finish(self, finish: Finish) -> None:
        self.judge(self.clients)

    def judge(self, clients: Mapping[str, DurableObject]) -> None:
        """Every client of ``clients`` (the Monitor's ``finish`` names them)."""
        pending = [
            f"{name}/{id}" for name, obj in sorted(clients.items()) for (id,) in select(obj.storage, PENDING)
        ]
        if pending:
            self.fail(
                self.name,
                f"{len(pending)} operations still pending once the run settled: {', '.join(pending[:SHOWN])}"
                + (" ..." if len(pending) > SHOWN else ""),
            )
