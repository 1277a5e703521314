"""Lifecycle events (``DurabilitySemaphoreEvent``), with the reference's fields.

The reference returns events from inside the transaction and emits them
only after commit; the holder here does the same, so a rolled-back round
emits nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import attrs

from semaphore_core.protocol import BlockedReason
from semaphore_core.usage import Usage


@attrs.frozen(hash=False)
class RoundEvent:
    """A round ran: permits asked for and handed out, and usage after it."""

    type: ClassVar[str] = "round"
    timestamp: int
    requested: int
    granted: int
    usage: Usage

    def to_wire(self) -> dict[str, Any]:
        return {
            "entityKind": "semaphore",
            "type": self.type,
            "timestamp": self.timestamp,
            "requested": self.requested,
            "granted": self.granted,
            "usage": self.usage.to_wire(),
        }


@attrs.frozen
class BlockedEvent:
    """Permits of one group that stayed queued in a round, and why."""

    type: ClassVar[str] = "blocked"
    timestamp: int
    group: str
    reason: BlockedReason
    count: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "entityKind": "semaphore",
            "type": self.type,
            "timestamp": self.timestamp,
            "group": self.group,
            "reason": self.reason,
            "count": self.count,
        }


@attrs.frozen
class GrantReclaimed:
    """Unclaimed permits of a grant past its claim deadline returned to the pool."""

    type: ClassVar[str] = "grant_reclaimed"
    timestamp: int
    grant_id: str
    client_id: str
    group: str
    permits: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "entityKind": "semaphore",
            "type": self.type,
            "timestamp": self.timestamp,
            "grantId": self.grant_id,
            "clientId": self.client_id,
            "group": self.group,
            "permits": self.permits,
        }


@attrs.frozen
class _LeaseEvent:
    type: ClassVar[str]
    timestamp: int
    lease_id: str
    client_id: str
    group: str
    permits: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "entityKind": "semaphore",
            "type": self.type,
            "timestamp": self.timestamp,
            "leaseId": self.lease_id,
            "clientId": self.client_id,
            "group": self.group,
            "permits": self.permits,
        }


@attrs.frozen
class LeaseGranted(_LeaseEvent):
    """A new lease: ``permits`` the client may draw locally."""

    type: ClassVar[str] = "lease_granted"


@attrs.frozen
class LeaseRetired(_LeaseEvent):
    """A lease stopped drawing; ``permits`` is the undrawn headroom it was reported to hold."""

    type: ClassVar[str] = "lease_retired"


LeaseEvent: TypeAlias = LeaseGranted | LeaseRetired
Event: TypeAlias = RoundEvent | BlockedEvent | GrantReclaimed | LeaseGranted | LeaseRetired
