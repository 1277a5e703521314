"""Opt-in corrections of reference behaviour that breaks an invariant (docs/INVARIANTS.md).

The default holder is the faithful reference, bugs included: a model that
silently fixed them could not find them. Each entry names a finding in
docs/FINDINGS.md; ``HolderConfig(fixes={name})`` turns its fix on, and
``ALL_FIXES`` turns on every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: F1. Under ``limited_groups="within_group_limit"`` the grant pass also
#: charges the group's live lease footprint against the group limit.
GROUP_CEILING_COUNTS_LEASES: Final = "group-ceiling-counts-leases"
#: F2. Under ``Under`` provisioning both passes also stay within the room
#: left under the whole limit, so a lowered limit stops both pools.
UNDER_SHARES_THE_LIMIT: Final = "under-shares-the-limit"

#: F3. A claim may only grow claimed-and-unreleased permits (plus lease
#: footprint, in strict and under modes) up to the current limit; the rest is
#: clamped and answered ``expired``. The limit is resolved for syncs too.
CLAIMS_RESPECT_THE_LIMIT: Final = "claims-respect-the-limit"
#: F4 (client side, ``QueueClient``). A client returns a lease's undrawn headroom as
#: soon as nothing is queued in its group, instead of waiting for a ``contended``
#: reply it never gets while it has nothing to ask for.
RETURN_IDLE_LEASES: Final = "return-idle-leases"

#: F5 (the account-concurrency composition, ``semsim.world.client_object``). Each call to
#: the external API carries its attempt's deadline and is logged durably before it is
#: sent; an operation's next call, and its permit's return, wait until its last call
#: was answered or its deadline passed.
CALLS_END_WITHIN_THEIR_PERMIT: Final = "calls-end-within-their-permit"

#: F8 (the durability port, ``semaphore_core.durability.operations``). ``#execute`` starts a
#: row only once it is due, so a pass's lane that reaches a row it read before the row's last
#: attempt failed leaves the retry to the time the failure named.
RETRIES_WAIT_THEIR_TIME: Final = "retries-wait-their-time"

KNOWN_FIXES: Final[Mapping[str, str]] = {
    GROUP_CEILING_COUNTS_LEASES: "F1: grants in a within_group_limit group also count its lease footprint",
    UNDER_SHARES_THE_LIMIT: "F2: under-mode grants and leases also stay within the room under the limit",
    CLAIMS_RESPECT_THE_LIMIT: "F3: a claim cannot admit work above the current limit",
    RETURN_IDLE_LEASES: "F4: a client returns idle lease headroom at once, not only when told contended",
    CALLS_END_WITHIN_THEIR_PERMIT: (
        "F5: a call carries its attempt's deadline; the next call and the permit wait for the last to end"
    ),
    RETRIES_WAIT_THEIR_TIME: "F8: a retry starts only once its time has come, never from a stale pass",
}
ALL_FIXES: Final = frozenset(KNOWN_FIXES)
