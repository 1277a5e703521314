"""What semsim's checkers read straight from a holder's storage, with no live instance needed.

A holder may be evicted (no instance) or never called (no schema) when a
check asks; these readings work either way. A holder never built reads as
empty. Storage with tables but no readable grants table (a variant that
renamed it, say) is not "never built": it raises
:class:`~semsim.check.reads.CheckerReadError`, so no check passes by
reading nothing (:mod:`semsim.check.reads`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Container
from typing import Final

from semaphore_core.store import HolderStore, LeaseRow
from semsim.check.reads import CheckerReadError, never_built

_GRANTS: Final = "durability_semaphore_grants"


def built(conn: sqlite3.Connection) -> bool:
    """Whether a holder's schema exists (an object nobody ever called has none)."""
    try:
        conn.execute(f"SELECT 1 FROM {_GRANTS} LIMIT 0")
    except sqlite3.OperationalError as error:
        if never_built(conn, _GRANTS):
            return False
        raise CheckerReadError(f"a checker could not read a holder's grants: {error}") from error
    return True


def leases(conn: sqlite3.Connection) -> list[LeaseRow]:
    """Every lease row, live and retired (none for a holder never built)."""
    if not built(conn):
        return []
    try:
        return HolderStore(conn).list_leases()
    except sqlite3.OperationalError as error:
        raise CheckerReadError(f"a checker could not list a holder's leases: {error}") from error


def unknown_leases(conn: sqlite3.Connection, known: Container[str]) -> int:
    """How many leases no client knows: granted in replies that were lost (the documented leak)."""
    return sum(1 for lease in leases(conn) if lease.lease_id not in known)


def lease_totals(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """Per group, the holder's lease totals (``HolderStore.lease_totals``)."""
    if not built(conn):
        return {}
    return HolderStore(conn).lease_totals()


def granted_by_group(conn: sqlite3.Connection, now: int) -> dict[str, int]:
    """Holder-accounted grant permits per group."""
    if not built(conn):
        return {}
    store = HolderStore(conn)
    unreclaimed = store.unreclaimed_by_group(now)
    return {group: total - unreclaimed.get(group, 0) for group, (_, total) in store.grant_totals().items()}


def accounted(conn: sqlite3.Connection, now: int) -> tuple[int, int]:
    """Holder-accounted usage: (granted, leased)."""
    if not built(conn):
        return 0, 0
    store = HolderStore(conn)
    totals = store.grant_totals()
    unreclaimed = store.unreclaimed_by_group(now)
    granted = sum(total for _, total in totals.values()) - sum(unreclaimed.values())
    return granted, store.leased_footprint()
