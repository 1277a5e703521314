"""Exceptions raised by the allocator.

Two kinds, because they mean different things to a caller: a protocol error
is the *peer's* fault (a malformed message, rejected before anything is
written), a config error is the *operator's* fault (caught at construction).
"""

from __future__ import annotations


class SemaphoreProtocolError(Exception):
    """A wire message did not match the protocol; nothing was written."""


class SemaphoreConfigError(ValueError):
    """A holder or lease option is invalid; the message names the field."""


def reused_id(new_id: str, what: str) -> SemaphoreConfigError:
    """``new_id`` returned an id a stored row already has: the round fails whole.

    The reference draws every id from ``crypto.randomUUID()`` and inserts with
    ``ON CONFLICT DO NOTHING``, so a repeated id would be a reply promising
    permits no row charges. Here ids come from the caller's ``new_id``; one
    that repeats is refused instead of being written as nothing.
    """
    return SemaphoreConfigError(
        f"new_id returned {new_id!r}, the id of a stored {what}: new_id must return a new id "
        "on every call (the reference draws crypto.randomUUID())"
    )
