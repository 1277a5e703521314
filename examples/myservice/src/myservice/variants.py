"""The team's holder: the reference with a 2-second claim deadline."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import attrs
from semaphore_core import Holder, HolderConfig
from semsim.world.variant import Variant

#: The claim deadline the team's API needs (the reference's default is 10 s).
GRANT_TIMEOUT_MS = 2_000


def quick_claims_holder(conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> Holder:
    """The reference holder, built with the shorter claim deadline."""
    return Holder(conn, attrs.evolve(config, grant_timeout_ms=GRANT_TIMEOUT_MS), new_id)


#: Judged by semsim's safety and liveness invariants alone (``model=None``): the literal model
#: of the reference would disagree with the new deadline at the first grant, by design.
QUICK_CLAIMS = Variant(
    "quick-claims",
    holder=quick_claims_holder,
    model=None,
    description="grants must be claimed within 2 s",
)
