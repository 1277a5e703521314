"""The wire protocol: JSON objects in, frozen attrs messages out, and back.

docs/WIRE.md describes the shapes. Parsing is strict where the reference's
zod schema is strict (types, ``type`` and ``v``, non-negative integer counts)
and lenient where zod is lenient (unknown keys are ignored, as ``z.object``
strips them). Every parse error is a :class:`SemaphoreProtocolError` raised
before the holder touches storage.

Serialisation emits keys in the reference's order (the order its object
literals and spreads produce), so traces are byte-identical to what the
reference would put on the wire.

semsim bounds (the reference has none): lists hold at most
:data:`MAX_LIST_LENGTH` entries and ids at most :data:`MAX_ID_LENGTH`
characters; integers must be safe integers (|n| <= 2^53 - 1), which is what a
JavaScript peer can represent exactly anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from semaphore_core.errors import SemaphoreProtocolError
from semaphore_core.numbers import as_safe_int

PROTOCOL_VERSION: Final = 1
MAX_LIST_LENGTH: Final = 65_536
MAX_ID_LENGTH: Final = 1_024

BlockedReason: TypeAlias = Literal["group_limit", "limit", "not_permitted", "limit_resolution_error"]
GrantStatus: TypeAlias = Literal["ok", "expired", "not_found"]
BLOCKED_REASONS: Final = ("group_limit", "limit", "not_permitted", "limit_resolution_error")
GRANT_STATUSES: Final = ("ok", "expired", "not_found")

Wire: TypeAlias = dict[str, Any]


# --- client to holder ------------------------------------------------------


@attrs.frozen
class Demand:
    """Queued items of one group: how many, and when the oldest was enqueued."""

    group: str
    count: int
    oldest_at: int

    def to_wire(self) -> Wire:
        return {"group": self.group, "count": self.count, "oldestAt": self.oldest_at}


@attrs.frozen
class GrantReport:
    """Cumulative high-water marks for one grant."""

    grant_id: str
    claimed: int
    released: int

    def to_wire(self) -> Wire:
        return {"grantId": self.grant_id, "claimed": self.claimed, "released": self.released}


@attrs.frozen
class LeaseReport:
    """Cumulative high-water marks for one lease; ``retired`` is the client's own stop."""

    lease_id: str
    drawn: int
    released: int
    retired: bool | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"leaseId": self.lease_id, "drawn": self.drawn, "released": self.released}
        if self.retired is not None:
            wire["retired"] = self.retired
        return wire


@attrs.frozen
class PermitRequest:
    """Ask for permits; answered when the holder's next round runs.

    ``leases`` is None for a plain client; any list, even empty, marks a
    lease-capable one.
    """

    client_id: str
    demand: tuple[Demand, ...]
    grants: tuple[GrantReport, ...]
    leases: tuple[LeaseReport, ...] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {
            "type": "request",
            "v": PROTOCOL_VERSION,
            "clientId": self.client_id,
            "demand": [d.to_wire() for d in self.demand],
            "grants": [g.to_wire() for g in self.grants],
        }
        if self.leases is not None:
            wire["leases"] = [lease.to_wire() for lease in self.leases]
        return wire


@attrs.frozen
class PermitSync:
    """Reports only: applied at once, no round, no new permits."""

    client_id: str
    grants: tuple[GrantReport, ...]
    leases: tuple[LeaseReport, ...] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {
            "type": "sync",
            "v": PROTOCOL_VERSION,
            "clientId": self.client_id,
            "grants": [g.to_wire() for g in self.grants],
        }
        if self.leases is not None:
            wire["leases"] = [lease.to_wire() for lease in self.leases]
        return wire


SemaphoreRequest: TypeAlias = PermitRequest | PermitSync


# --- holder to client ------------------------------------------------------


@attrs.frozen
class GrantedPermits:
    """A new grant: permits the client may claim before the claim deadline."""

    grant_id: str
    group: str
    permits: int

    def to_wire(self) -> Wire:
        return {"grantId": self.grant_id, "group": self.group, "permits": self.permits}


@attrs.frozen
class Blocked:
    """Why demand of one group stayed queued."""

    group: str
    reason: BlockedReason

    def to_wire(self) -> Wire:
        return {"group": self.group, "reason": self.reason}


@attrs.frozen
class GrantResult:
    """The holder's answer to one grant report: the claim it accepted."""

    grant_id: str
    claimed: int
    status: GrantStatus

    def to_wire(self) -> Wire:
        return {"grantId": self.grant_id, "claimed": self.claimed, "status": self.status}


@attrs.frozen
class LeaseGrant:
    """A lease as the holder sees it; ``expires_at`` <= now means stop drawing."""

    lease_id: str
    group: str
    permits: int
    expires_at: int

    def to_wire(self) -> Wire:
        return {
            "leaseId": self.lease_id,
            "group": self.group,
            "permits": self.permits,
            "expiresAt": self.expires_at,
        }


@attrs.frozen
class PermitGrant:
    """A round's reply. ``leases`` is None when the request carried no ``leases``."""

    grants: tuple[GrantedPermits, ...]
    blocked: tuple[Blocked, ...]
    grant_results: tuple[GrantResult, ...]
    next_request_at: int
    leases: tuple[LeaseGrant, ...] | None = None
    contended: bool = False

    def to_wire(self) -> Wire:
        wire: Wire = {
            "type": "grant",
            "v": PROTOCOL_VERSION,
            "grants": [g.to_wire() for g in self.grants],
            "blocked": [b.to_wire() for b in self.blocked],
            "grantResults": [r.to_wire() for r in self.grant_results],
            "nextRequestAt": self.next_request_at,
        }
        if self.leases is not None:
            wire["leases"] = [lease.to_wire() for lease in self.leases]
            if self.contended:
                wire["contended"] = True
        return wire


@attrs.frozen
class PermitSyncResult:
    """A sync's reply. ``leases`` is None unless the holder leases and the sync reported leases."""

    grant_results: tuple[GrantResult, ...]
    leases: tuple[LeaseGrant, ...] | None = None
    contended: bool = False

    def to_wire(self) -> Wire:
        wire: Wire = {
            "type": "synced",
            "v": PROTOCOL_VERSION,
            "grantResults": [r.to_wire() for r in self.grant_results],
        }
        if self.leases is not None:
            wire["leases"] = [lease.to_wire() for lease in self.leases]
            if self.contended:
                wire["contended"] = True
        return wire


SemaphoreResponse: TypeAlias = PermitGrant | PermitSyncResult
Message: TypeAlias = SemaphoreRequest | SemaphoreResponse


# --- parsing -----------------------------------------------------------------


def _fail(path: str, problem: str, value: object) -> SemaphoreProtocolError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return SemaphoreProtocolError(f"Malformed semaphore message: {path} {problem}, got {shown}")


def _object(value: object, path: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _fail(path, "must be an object", value)
    return value


def _field(obj: Mapping[str, object], key: str, path: str) -> object:
    if key not in obj:
        raise SemaphoreProtocolError(f"Malformed semaphore message: {path}.{key} is missing")
    return obj[key]


def _string(obj: Mapping[str, object], key: str, path: str) -> str:
    value = _field(obj, key, path)
    if not isinstance(value, str):
        raise _fail(f"{path}.{key}", "must be a string", value)
    if len(value) > MAX_ID_LENGTH:
        raise _fail(f"{path}.{key}", f"must be at most {MAX_ID_LENGTH} characters", value)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate ("\ud800" in JSON): JavaScript keeps it, but no store can.
            raise _fail(f"{path}.{key}", "must be Unicode text (no lone surrogates)", value) from None
    return value


def _integer(obj: Mapping[str, object], key: str, path: str, *, count: bool) -> int:
    value = _field(obj, key, path)
    as_int = as_safe_int(value)
    if as_int is None:
        raise _fail(f"{path}.{key}", "must be a safe integer", value)
    if count and as_int < 0:
        raise _fail(f"{path}.{key}", "must be a non-negative integer", value)
    return as_int


def _list(obj: Mapping[str, object], key: str, path: str) -> Sequence[object]:
    value = _field(obj, key, path)
    if not isinstance(value, list | tuple):
        raise _fail(f"{path}.{key}", "must be an array", value)
    if len(value) > MAX_LIST_LENGTH:
        raise _fail(f"{path}.{key}", f"must hold at most {MAX_LIST_LENGTH} entries", len(value))
    return value


def _header(obj: Mapping[str, object], expected: tuple[str, ...]) -> str:
    kind = obj.get("type")
    if kind not in expected:
        raise _fail("type", "must be " + " or ".join(repr(e) for e in expected), kind)
    version = obj.get("v")
    if isinstance(version, bool) or version != PROTOCOL_VERSION:
        raise _fail("v", f"must be {PROTOCOL_VERSION}", version)
    assert isinstance(kind, str)
    return kind


def _demand(value: object, path: str) -> Demand:
    obj = _object(value, path)
    return Demand(
        group=_string(obj, "group", path),
        count=_integer(obj, "count", path, count=True),
        oldest_at=_integer(obj, "oldestAt", path, count=False),
    )


def _grant_report(value: object, path: str) -> GrantReport:
    obj = _object(value, path)
    return GrantReport(
        grant_id=_string(obj, "grantId", path),
        claimed=_integer(obj, "claimed", path, count=True),
        released=_integer(obj, "released", path, count=True),
    )


def _lease_report(value: object, path: str) -> LeaseReport:
    obj = _object(value, path)
    retired = obj.get("retired")
    if "retired" in obj and not isinstance(retired, bool):
        raise _fail(f"{path}.retired", "must be a boolean when present", retired)
    return LeaseReport(
        lease_id=_string(obj, "leaseId", path),
        drawn=_integer(obj, "drawn", path, count=True),
        released=_integer(obj, "released", path, count=True),
        retired=retired if isinstance(retired, bool) else None,
    )


def _reports(obj: Mapping[str, object]) -> tuple[tuple[GrantReport, ...], tuple[LeaseReport, ...] | None]:
    grants = tuple(
        _grant_report(entry, f"grants[{i}]") for i, entry in enumerate(_list(obj, "grants", "message"))
    )
    leases: tuple[LeaseReport, ...] | None = None
    if "leases" in obj:
        leases = tuple(
            _lease_report(entry, f"leases[{i}]") for i, entry in enumerate(_list(obj, "leases", "message"))
        )
    return grants, leases


def parse_request(value: object) -> SemaphoreRequest:
    """A client message (``request`` or ``sync``), validated; raises SemaphoreProtocolError."""
    obj = _object(value, "message")
    kind = _header(obj, ("request", "sync"))
    client_id = _string(obj, "clientId", "message")
    if kind == "request":
        demand = tuple(
            _demand(entry, f"demand[{i}]") for i, entry in enumerate(_list(obj, "demand", "message"))
        )
        grants, leases = _reports(obj)
        return PermitRequest(client_id=client_id, demand=demand, grants=grants, leases=leases)
    grants, leases = _reports(obj)
    return PermitSync(client_id=client_id, grants=grants, leases=leases)


def _granted(value: object, path: str) -> GrantedPermits:
    obj = _object(value, path)
    return GrantedPermits(
        grant_id=_string(obj, "grantId", path),
        group=_string(obj, "group", path),
        permits=_integer(obj, "permits", path, count=True),
    )


def _blocked(value: object, path: str) -> Blocked:
    obj = _object(value, path)
    reason = _field(obj, "reason", path)
    if reason not in BLOCKED_REASONS:
        raise _fail(f"{path}.reason", "must be a blocked reason", reason)
    return Blocked(group=_string(obj, "group", path), reason=reason)


def _grant_result(value: object, path: str) -> GrantResult:
    obj = _object(value, path)
    status = _field(obj, "status", path)
    if status not in GRANT_STATUSES:
        raise _fail(f"{path}.status", "must be ok, expired or not_found", status)
    return GrantResult(
        grant_id=_string(obj, "grantId", path),
        claimed=_integer(obj, "claimed", path, count=True),
        status=status,
    )


def _lease_grant(value: object, path: str) -> LeaseGrant:
    obj = _object(value, path)
    return LeaseGrant(
        lease_id=_string(obj, "leaseId", path),
        group=_string(obj, "group", path),
        permits=_integer(obj, "permits", path, count=True),
        expires_at=_integer(obj, "expiresAt", path, count=False),
    )


def _contended(obj: Mapping[str, object]) -> bool:
    value = obj.get("contended", False)
    if not isinstance(value, bool):
        raise _fail("contended", "must be a boolean when present", value)
    return value


def _lease_grants(obj: Mapping[str, object]) -> tuple[LeaseGrant, ...] | None:
    if "leases" not in obj:
        return None
    return tuple(
        _lease_grant(entry, f"leases[{i}]") for i, entry in enumerate(_list(obj, "leases", "message"))
    )


def _grant_results(obj: Mapping[str, object]) -> tuple[GrantResult, ...]:
    return tuple(
        _grant_result(entry, f"grantResults[{i}]")
        for i, entry in enumerate(_list(obj, "grantResults", "message"))
    )


def parse_response(value: object) -> SemaphoreResponse:
    """A holder reply (``grant`` or ``synced``), validated; raises SemaphoreProtocolError."""
    obj = _object(value, "message")
    kind = _header(obj, ("grant", "synced"))
    if kind == "grant":
        return PermitGrant(
            grants=tuple(
                _granted(entry, f"grants[{i}]") for i, entry in enumerate(_list(obj, "grants", "message"))
            ),
            blocked=tuple(
                _blocked(entry, f"blocked[{i}]") for i, entry in enumerate(_list(obj, "blocked", "message"))
            ),
            grant_results=_grant_results(obj),
            next_request_at=_integer(obj, "nextRequestAt", "message", count=False),
            leases=_lease_grants(obj),
            contended=_contended(obj),
        )
    return PermitSyncResult(
        grant_results=_grant_results(obj), leases=_lease_grants(obj), contended=_contended(obj)
    )


def parse_message(value: object) -> Message:
    """Any of the four message types; used by traffic replay and traces."""
    obj = _object(value, "message")
    if obj.get("type") in ("grant", "synced"):
        return parse_response(obj)
    return parse_request(obj)
