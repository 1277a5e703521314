"""The leased workflow worker's store (seed 004, ``@nestjs/workflows``), as pure state machines.

Workers claim due instances from a shared store under a lease token, within
per-workflow concurrency limits and rate windows, renew the lease by
heartbeat, write fenced by the token and hand instances back. Where to look:

- ``rate_windows``: ``RateWindowClaim``, ported exactly from ``sql/rate-windows.js``
- ``store``: ``LeaseStore``, the store's claim, renew, fenced write and hand-back on
  ``sqlite3`` (the seed shows only their callers: the modelling choices are in
  docs/DESIGNS.md)
"""

from semaphore_core.leased.rate_windows import (
    PickedInstance,
    RateLimitRule,
    RateWindow,
    RateWindowClaim,
    RateWindowRow,
)
from semaphore_core.leased.store import FINAL, RUNNABLE, Instance, Lease, LeaseStore, Status

__all__ = [
    "FINAL",
    "RUNNABLE",
    "Instance",
    "Lease",
    "LeaseStore",
    "PickedInstance",
    "RateLimitRule",
    "RateWindow",
    "RateWindowClaim",
    "RateWindowRow",
    "Status",
]
