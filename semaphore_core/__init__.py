"""semaphore_core: the DurabilitySemaphore holder as a pure, synchronous state machine.

A faithful port of the reference holder (semaphore-server.ts,
semaphore-store.ts, semaphore-leases.ts) on ``sqlite3``. Where to look:

- ``protocol``: wire messages, parsing and serialisation
- ``config``: ``HolderConfig``, ``LeaseOptions``, provisioning modes, budgets
- ``rounds``: one allocation round (reports, reclaim, oldest-demand-first grants)
- ``grants``: grant reports and reclaim
- ``leases``: lease reports and the lease pass
- ``policy``: resolving the limit and group policies
- ``store`` / ``migrations``: the tables and the queries on them
- ``holder``: the ``Holder`` facade (transactions, replies, events, usage)

Beside it, the cores the other seeds describe: ``durability`` (seed 002's
durable operations and scheduler), ``gate`` (seed 003's slot ledger) and
``leased`` (seed 004's leased-worker store); docs/DESIGNS.md.
"""

from semaphore_core.config import (
    Budgets,
    HolderConfig,
    LeaseOptions,
    Over,
    Provisioning,
    Ratio,
    Strict,
    Under,
    budgets,
)
from semaphore_core.errors import SemaphoreConfigError, SemaphoreProtocolError
from semaphore_core.events import (
    BlockedEvent,
    Event,
    GrantReclaimed,
    LeaseGranted,
    LeaseRetired,
    RoundEvent,
)
from semaphore_core.fixes import ALL_FIXES, KNOWN_FIXES
from semaphore_core.holder import Holder, RoundOutcome
from semaphore_core.migrations import LATEST, migrate, schema_version
from semaphore_core.usage import GroupUsage, Usage

__all__ = [
    "ALL_FIXES",
    "KNOWN_FIXES",
    "LATEST",
    "BlockedEvent",
    "Budgets",
    "Event",
    "GrantReclaimed",
    "GroupUsage",
    "Holder",
    "HolderConfig",
    "LeaseGranted",
    "LeaseOptions",
    "LeaseRetired",
    "Over",
    "Provisioning",
    "Ratio",
    "RoundEvent",
    "RoundOutcome",
    "SemaphoreConfigError",
    "SemaphoreProtocolError",
    "Strict",
    "Under",
    "Usage",
    "budgets",
    "migrate",
    "schema_version",
]
