"""What semsim's checkers read from a client object's storage, kept while it is unchanged.

The checkers judge the holder against what the clients actually hold and
wait for. Each reading here is one of ``semaphore_core.queue_reads``' queries
(the queue's schema stays with the queue), asked of one client or of all of
them. :func:`kept` answers a client's query from memory while its storage is
unchanged: a check of every client then costs a query only for the few that
changed since the last one. Every reading goes through :func:`reading`, which
in the debug mode (``--full-checks``, a client's ``checker_reads_checked``)
asks storage again beside every answer, and a difference is the
``checker`` verdict: a cache that answers for the wrong question or the wrong
moment would make every check that reads through it judge stale rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from semaphore_core import queue_reads
from semsim.check.cross_check_failed import CrossCheckFailed
from semsim.check.reads import select

if TYPE_CHECKING:
    from semsim.runtime.durable import DurableObject


def kept(obj: DurableObject, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """:func:`~semsim.check.reads.select` on a client's storage, from memory while it is unchanged.

    SQLite counts every row a connection inserts, updates or deletes
    (``total_changes``, rolled back or not), so the same count means the
    same rows, whoever wrote them. Inside an open transaction nothing is
    kept (a rollback would not change the count). Callers only iterate.
    """
    memo = obj.checker_reads
    conn = obj.storage
    if memo is None or conn.in_transaction:
        return select(conn, sql, params)
    changes = conn.total_changes
    if memo.get(None) != changes:
        memo.clear()
        memo[None] = changes
    query = (sql, params)
    rows: list[tuple[Any, ...]] | None = memo.get(query)
    if rows is None:
        rows = memo[query] = select(conn, sql, params)
    return rows


def reading(obj: DurableObject, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """:func:`kept`'s answer; in the debug mode checked against storage asked again."""
    rows = kept(obj, sql, params)
    if obj.checker_reads_checked:
        fresh = select(obj.storage, sql, params)
        if list(rows) != fresh:
            raise CrossCheckFailed(
                f"{obj.name}: a kept reading differs from its storage: {sql} with {params!r} "
                f"answered {list(rows)!r} where storage holds {fresh!r}"
            )
    return rows


def running_items(obj: DurableObject, key: str) -> list[tuple[Any, ...]]:
    """A client's running items of ``key`` per grant and lease, in order (``queue_reads``'
    ``RUNNING_ITEMS``): from one kept reading of every key's where the client's reads are kept
    (every watched client, in both modes), else by its own query."""
    if obj.checker_reads is None:
        return reading(obj, queue_reads.RUNNING_ITEMS, (key,))
    return [row[1:] for row in reading(obj, queue_reads.RUNNING_ITEMS_BY_KEY) if row[0] == key]


def outstanding(clients: Mapping[str, DurableObject]) -> int:
    """Items queued, being claimed or running on any client, for any key."""
    return sum(n for obj in clients.values() for (n,) in reading(obj, queue_reads.OUTSTANDING_ITEMS))


def unreported(clients: Mapping[str, DurableObject]) -> bool:
    """Whether any client has changes the holder has not acknowledged yet."""
    return any(reading(obj, queue_reads.UNREPORTED_CHANGES) for obj in clients.values())


def claiming(clients: Mapping[str, DurableObject]) -> bool:
    """Whether any client has items admitted to a claim it has not heard back about."""
    return any(reading(obj, queue_reads.CLAIMING_ITEMS) for obj in clients.values())


def expiry_due(clients: Mapping[str, DurableObject], now: int) -> bool:
    """Whether a client holds a lease past its expiry that it has not retired yet (it will, at once)."""
    return any(reading(obj, queue_reads.EXPIRY_DUE, (now,)) for obj in clients.values())


def known_leases(clients: Mapping[str, DurableObject]) -> set[str]:
    """Every lease id some client knows, read from every client."""
    return {lease_id for obj in clients.values() for (lease_id,) in reading(obj, queue_reads.LEASE_IDS)}


def lease_in_use(clients: Mapping[str, DurableObject], key: str) -> int:
    """Lease permits drawn and not yet released, as the clients themselves count them."""
    return sum(
        int(row[0] or 0) for obj in clients.values() for row in reading(obj, queue_reads.LEASE_IN_USE, (key,))
    )


def waiting_by_group(clients: Mapping[str, DurableObject], key: str) -> dict[str, tuple[int, int]]:
    """Per group, the items of ``key`` queued or being claimed on any client, and when the
    longest-waiting of them arrived (one query per client)."""
    waiting: dict[str, tuple[int, int]] = {}
    for obj in clients.values():
        for group, count, oldest in reading(obj, queue_reads.WAITING_BY_GROUP, (key,)):
            before_count, before_oldest = waiting.get(group, (0, int(oldest)))
            waiting[group] = (before_count + count, min(before_oldest, int(oldest)))
    return waiting


def waiting_clients(clients: Mapping[str, DurableObject], key: str) -> set[str]:
    """The clients with items of ``key`` queued or being claimed."""
    return {name for name, obj in clients.items() if reading(obj, queue_reads.KEY_HAS_WAITING_ITEMS, (key,))}


def idle_headroom(clients: Mapping[str, DurableObject], key: str, now: int) -> int:
    """Undrawn permits of live leases held by clients with nothing queued for the key (finding F4).

    Only such a client never asks the holder anything, so never hears
    ``contended``; a client with queued items asks every round and must
    return the idle headroom of its other groups when told. Live means not
    yet expired: at its expiry the client retires the lease and reports it,
    so F4 explains a lease's headroom until its ``ttlMs`` and never after.
    """
    total = 0
    for obj in clients.values():
        for (undrawn,) in reading(obj, queue_reads.IDLE_HEADROOM, (key, now)):
            total += undrawn
    return total
