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
