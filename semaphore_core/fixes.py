"""Opt-in corrections of reference behaviour that breaks a CONTRACT invariant.

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

KNOWN_FIXES: Final[Mapping[str, str]] = {
    GROUP_CEILING_COUNTS_LEASES: "F1: grants in a within_group_limit group also count its lease footprint",
    UNDER_SHARES_THE_LIMIT: "F2: under-mode grants and leases also stay within the room under the limit",
}
ALL_FIXES: Final = frozenset(KNOWN_FIXES)
