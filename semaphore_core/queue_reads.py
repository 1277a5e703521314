"""What may be asked of a client's queue storage from outside it: read-only SQL, one question each.

The queue's tables are :mod:`semaphore_core.queue`'s (its migrations make
them). Whoever judges a run reads them too: how many items wait and since
when, which run on which grant or lease, whether a change is still
unreported. Those questions live here, beside the schema they depend on,
rather than as copies of it in the checkers: a migration that renames a
column fails ``tests/test_queue_reads.py`` at once, instead of turning a
check into one that reads nothing.

Each is one ``SELECT`` with ``?`` parameters as named; none writes. The
caller runs them on the client's connection (the checkers keep answers
until that storage changes, keyed by the statement).
"""

from __future__ import annotations

from typing import Final

#: How many items are queued, being claimed or running, for any key: ``(count,)``.
OUTSTANDING_ITEMS: Final = (
    "SELECT count(*) FROM durability_semaphore_queue_items WHERE status IN ('queued', 'claiming', 'running')"
)
#: The running items of key ``?``, per grant and lease: ``(grant_id, lease_id, count)`` rows, in order.
RUNNING_ITEMS: Final = (
    "SELECT grant_id, lease_id, count(*) FROM durability_semaphore_queue_items "
    "WHERE key = ? AND status = 'running' GROUP BY grant_id, lease_id ORDER BY grant_id, lease_id"
)
#: The same for every key at once: ``(key, grant_id, lease_id, count)`` rows, in order.
RUNNING_ITEMS_BY_KEY: Final = (
    "SELECT key, grant_id, lease_id, count(*) FROM durability_semaphore_queue_items "
    "WHERE status = 'running' GROUP BY key, grant_id, lease_id ORDER BY key, grant_id, lease_id"
)
#: A row if any item of key ``?`` is queued or being claimed.
KEY_HAS_WAITING_ITEMS: Final = (
    "SELECT 1 FROM durability_semaphore_queue_items "
    "WHERE key = ? AND status IN ('queued', 'claiming') LIMIT 1"
)
#: Per group of key ``?``, the items queued or being claimed and when the oldest arrived:
#: ``(grp, count, min enqueued_at)`` rows, by group.
WAITING_BY_GROUP: Final = (
    "SELECT grp, count(*), min(enqueued_at) FROM durability_semaphore_queue_items "
    "WHERE key = ? AND status IN ('queued', 'claiming') GROUP BY grp ORDER BY grp"
)
#: The same for every key at once: ``(key, grp, count, min enqueued_at)`` rows, in order.
WAITING_BY_KEY_AND_GROUP: Final = (
    "SELECT key, grp, count(*), min(enqueued_at) FROM durability_semaphore_queue_items "
    "WHERE status IN ('queued', 'claiming') GROUP BY key, grp ORDER BY key, grp"
)
#: A row if any item was admitted to a claim the client has not heard back about.
CLAIMING_ITEMS: Final = "SELECT 1 FROM durability_semaphore_queue_items WHERE status = 'claiming' LIMIT 1"
#: A row if any key has changes the holder has not acknowledged yet.
UNREPORTED_CHANGES: Final = "SELECT 1 FROM durability_semaphore_queue_keys WHERE changes > acked LIMIT 1"
#: Lease permits of key ``?`` drawn and not yet released: ``(sum,)`` (NULL: no lease).
LEASE_IN_USE: Final = "SELECT sum(drawn - released) FROM durability_semaphore_queue_leases WHERE key = ?"
#: The same per key: ``(key, sum)`` rows, by key.
LEASE_IN_USE_BY_KEY: Final = (
    "SELECT key, sum(drawn - released) FROM durability_semaphore_queue_leases GROUP BY key ORDER BY key"
)
#: Every lease the client knows, live or retired: ``(lease_id,)`` rows (unordered).
LEASE_IDS: Final = "SELECT lease_id FROM durability_semaphore_queue_leases"
#: The same, by id.
LEASE_IDS_IN_ORDER: Final = LEASE_IDS + " ORDER BY lease_id"
#: Undrawn permits of the live leases of key ``?`` (not expired at ``?``) while nothing of the key
#: is queued: ``(undrawn,)`` rows. Only such a client never asks, so never hears ``contended``.
IDLE_HEADROOM: Final = (
    "SELECT permits - drawn FROM durability_semaphore_queue_leases l WHERE l.key = ? AND "
    "l.retired = 0 AND l.expires_at > ? AND l.drawn < l.permits AND NOT EXISTS (SELECT 1 FROM "
    "durability_semaphore_queue_items i WHERE i.key = l.key AND i.status = 'queued')"
)
#: A row if a lease is past its expiry at ``?`` and not yet retired (the client retires it at once).
EXPIRY_DUE: Final = (
    "SELECT 1 FROM durability_semaphore_queue_leases WHERE retired = 0 AND expires_at <= ? LIMIT 1"
)

#: Every queued item (not being claimed), the newest first: ``(key, grp, id)`` rows, in the queue's
#: own order reversed (``newest_queued``'s), for a user who withdraws one group's newest items.
QUEUED_NEWEST_FIRST: Final = (
    "SELECT key, grp, id FROM durability_semaphore_queue_items "
    "WHERE status = 'queued' ORDER BY enqueued_at DESC, seq DESC"
)
#: Per group of key ``?``, the items queued (not being claimed): ``(grp, count)`` rows, unordered.
QUEUED_BY_GROUP: Final = (
    "SELECT grp, count(*) FROM durability_semaphore_queue_items "
    "WHERE key = ? AND status = 'queued' GROUP BY grp"
)
#: When the oldest item of key ``?`` and group ``?`` still queued arrived: one ``(enqueued_at,)``
#: row, or none. Items are inserted as they arrive, so the first by ``seq`` is the oldest (an
#: index probe, whatever the backlog: the items' index on ``(key, status, grp)`` ends in ``seq``).
OLDEST_QUEUED: Final = (
    "SELECT enqueued_at FROM durability_semaphore_queue_items "
    "WHERE key = ? AND status = 'queued' AND grp = ? ORDER BY seq LIMIT 1"
)
#: The same for every key: ``(key, grp, count)`` rows, unordered.
QUEUED_BY_KEY_AND_GROUP: Final = (
    "SELECT key, grp, count(*) FROM main.durability_semaphore_queue_items "
    "WHERE status = 'queued' GROUP BY key, grp"
)
#: Per group of key ``?``, the undrawn permits of the live leases (not expired at ``?``):
#: ``(grp, sum)`` rows, unordered.
LEASE_HEADROOM_BY_GROUP: Final = (
    "SELECT grp, sum(permits - drawn) FROM durability_semaphore_queue_leases "
    "WHERE key = ? AND retired = 0 AND expires_at > ? AND drawn < permits GROUP BY grp"
)

#: ``(key, next_request_at)`` of each key with items queued, by key: when the client may next ask
#: for them (what the loop's ``keys_due`` answers from memory).
KEYS_ASKABLE: Final = (
    "SELECT k.key, k.next_request_at FROM durability_semaphore_queue_keys AS k WHERE EXISTS "
    "(SELECT 1 FROM durability_semaphore_queue_items AS i WHERE i.key = k.key AND i.status = 'queued') "
    "ORDER BY k.key"
)

#: The earliest ``next_request_at`` after ``?`` of a key with items queued (None: no such key):
#: when the client may next ask for a key other than those it may ask for already.
NEXT_REQUEST_AFTER: Final = (
    "SELECT min(k.next_request_at) FROM durability_semaphore_queue_keys AS k "
    "WHERE k.next_request_at > ? AND EXISTS "
    "(SELECT 1 FROM durability_semaphore_queue_items AS i WHERE i.key = k.key AND i.status = 'queued')"
)

#: Every question, with example parameters: what tests/test_queue_reads.py prepares on a new queue.
ALL: Final = {
    "OUTSTANDING_ITEMS": (OUTSTANDING_ITEMS, ()),
    "RUNNING_ITEMS": (RUNNING_ITEMS, ("acct",)),
    "RUNNING_ITEMS_BY_KEY": (RUNNING_ITEMS_BY_KEY, ()),
    "KEY_HAS_WAITING_ITEMS": (KEY_HAS_WAITING_ITEMS, ("acct",)),
    "WAITING_BY_GROUP": (WAITING_BY_GROUP, ("acct",)),
    "WAITING_BY_KEY_AND_GROUP": (WAITING_BY_KEY_AND_GROUP, ()),
    "CLAIMING_ITEMS": (CLAIMING_ITEMS, ()),
    "UNREPORTED_CHANGES": (UNREPORTED_CHANGES, ()),
    "LEASE_IN_USE": (LEASE_IN_USE, ("acct",)),
    "LEASE_IN_USE_BY_KEY": (LEASE_IN_USE_BY_KEY, ()),
    "LEASE_IDS": (LEASE_IDS, ()),
    "LEASE_IDS_IN_ORDER": (LEASE_IDS_IN_ORDER, ()),
    "IDLE_HEADROOM": (IDLE_HEADROOM, ("acct", 0)),
    "EXPIRY_DUE": (EXPIRY_DUE, (0,)),
    "QUEUED_NEWEST_FIRST": (QUEUED_NEWEST_FIRST, ()),
    "QUEUED_BY_GROUP": (QUEUED_BY_GROUP, ("acct",)),
    "OLDEST_QUEUED": (OLDEST_QUEUED, ("acct", "wf-1")),
    "QUEUED_BY_KEY_AND_GROUP": (QUEUED_BY_KEY_AND_GROUP, ()),
    "KEYS_ASKABLE": (KEYS_ASKABLE, ()),
    "NEXT_REQUEST_AFTER": (NEXT_REQUEST_AFTER, (0,)),
    "LEASE_HEADROOM_BY_GROUP": (LEASE_HEADROOM_BY_GROUP, ("acct", 0)),
}
