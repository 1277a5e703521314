"""Wire messages: strict parsing, exact serialisation, clear errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from semaphore_core import SemaphoreProtocolError
from semaphore_core.protocol import (
    MAX_ID_LENGTH,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
    parse_message,
    parse_request,
    parse_response,
)
from tests.helpers import request, sync

FULL_REQUEST: dict[str, Any] = {
    "type": "request",
    "v": 1,
    "clientId": "c1",
    "demand": [{"group": "g", "count": 3, "oldestAt": 5}],
    "grants": [{"grantId": "x", "claimed": 2, "released": 1}],
    "leases": [
        {"leaseId": "L", "drawn": 4, "released": 1, "retired": True},
        {"leaseId": "M", "drawn": 0, "released": 0},
    ],
}
FULL_GRANT: dict[str, Any] = {
    "type": "grant",
    "v": 1,
    "grants": [{"grantId": "x", "group": "g", "permits": 3}],
    "blocked": [{"group": "h", "reason": "group_limit"}],
    "grantResults": [{"grantId": "y", "claimed": 1, "status": "expired"}],
    "nextRequestAt": 2000,
    "leases": [{"leaseId": "L", "group": "g", "permits": 4, "expiresAt": 99}],
    "contended": True,
}
FULL_SYNCED: dict[str, Any] = {
    "type": "synced",
    "v": 1,
    "grantResults": [{"grantId": "y", "claimed": 0, "status": "not_found"}],
    "leases": [],
    "contended": True,
}


@pytest.mark.parametrize(
    "wire",
    [
        FULL_REQUEST,
        request("c", [("g", 0, -3)], [], None),
        sync("c", [("x", 1, 1)], [("L", 1, 0)]),
        sync("c"),
        FULL_GRANT,
        FULL_SYNCED,
        {"type": "synced", "v": 1, "grantResults": []},
    ],
)
def test_round_trip_is_byte_identical(wire: dict[str, Any]) -> None:
    # Same keys, same order: traces and replies serialise exactly as the reference does.
    assert json.dumps(parse_message(wire).to_wire()) == json.dumps(wire)


def test_request_and_reply_types() -> None:
    assert isinstance(parse_request(FULL_REQUEST), PermitRequest)
    assert isinstance(parse_request(sync("c")), PermitSync)
    assert isinstance(parse_response(FULL_GRANT), PermitGrant)
    assert isinstance(parse_response(FULL_SYNCED), PermitSyncResult)


def test_lease_key_marks_a_lease_capable_client() -> None:
    plain = parse_request(request("c", [("g", 1, 0)]))
    capable = parse_request(request("c", [("g", 1, 0)], leases=[]))
    assert isinstance(plain, PermitRequest)
    assert isinstance(capable, PermitRequest)
    assert plain.leases is None
    assert capable.leases == ()
    assert "leases" not in plain.to_wire()
    assert capable.to_wire()["leases"] == []


def test_unknown_keys_are_ignored_as_zod_strips_them() -> None:
    wire = copy.deepcopy(FULL_REQUEST)
    wire["extra"] = {"anything": 1}
    wire["demand"][0]["note"] = "x"
    parsed = parse_request(wire)
    assert parsed == parse_request(FULL_REQUEST)


def test_integral_floats_are_integers_as_in_javascript() -> None:
    wire = copy.deepcopy(FULL_REQUEST)
    wire["demand"][0]["count"] = 3.0
    parsed = parse_request(wire)
    assert isinstance(parsed, PermitRequest)
    assert parsed.demand[0].count == 3
    assert type(parsed.demand[0].count) is int


def _mutated(path: list[Any], value: Any, base: dict[str, Any] = FULL_REQUEST) -> dict[str, Any]:
    wire = copy.deepcopy(base)
    target: Any = wire
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return wire


_DELETE = object()

MALFORMED = [
    ("not an object", ["type"], None, "must be an object"),
    ("wrong type", ["type"], "grant", "type must be"),
    ("missing type", ["type"], _DELETE, "type must be"),
    ("wrong version", ["v"], 2, "v must be 1"),
    ("version as bool", ["v"], True, "v must be 1"),
    ("version as string", ["v"], "1", "v must be 1"),
    ("missing clientId", ["clientId"], _DELETE, "clientId is missing"),
    ("numeric clientId", ["clientId"], 7, "clientId must be a string"),
    ("demand not a list", ["demand"], {"group": "g"}, "demand must be an array"),
    ("missing demand", ["demand"], _DELETE, "demand is missing"),
    ("negative count", ["demand", 0, "count"], -1, "count must be a non-negative integer"),
    ("fractional count", ["demand", 0, "count"], 1.5, "count must be a safe integer"),
    ("boolean count", ["demand", 0, "count"], True, "count must be a safe integer"),
    ("string count", ["demand", 0, "count"], "3", "count must be a safe integer"),
    ("infinite count", ["demand", 0, "count"], float("inf"), "count must be a safe integer"),
    ("nan count", ["demand", 0, "count"], float("nan"), "count must be a safe integer"),
    ("unsafe count", ["demand", 0, "count"], 2**53, "count must be a safe integer"),
    ("null oldestAt", ["demand", 0, "oldestAt"], None, "oldestAt must be a safe integer"),
    ("numeric group", ["demand", 0, "group"], 1, "group must be a string"),
    ("demand entry not object", ["demand", 0], "g", "must be an object"),
    ("missing grants", ["grants"], _DELETE, "grants is missing"),
    ("numeric grantId", ["grants", 0, "grantId"], 5, "grantId must be a string"),
    ("negative claimed", ["grants", 0, "claimed"], -2, "claimed must be a non-negative integer"),
    ("boolean released", ["grants", 0, "released"], False, "released must be a safe integer"),
    ("leases null", ["leases"], None, "leases must be an array"),
    ("negative drawn", ["leases", 0, "drawn"], -1, "drawn must be a non-negative integer"),
    ("retired not bool", ["leases", 0, "retired"], 1, "retired must be a boolean"),
    ("retired null", ["leases", 0, "retired"], None, "retired must be a boolean"),
    ("long id", ["clientId"], "x" * (MAX_ID_LENGTH + 1), "at most"),
    ("lone surrogate in clientId", ["clientId"], "c\ud800", "no lone surrogates"),
    ("lone surrogate in group", ["demand", 0, "group"], "\udfff", "no lone surrogates"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_requests_raise_a_clear_protocol_error(path: list[Any], value: Any, message: str) -> None:
    wire: Any = 42 if message == "must be an object" and path == ["type"] else _mutated(path, value)
    with pytest.raises(SemaphoreProtocolError, match="Malformed semaphore message") as caught:
        parse_request(wire)
    assert message in str(caught.value)


def test_sync_needs_no_demand_and_ignores_one() -> None:
    parsed = parse_request({**sync("c"), "demand": "ignored"})
    assert isinstance(parsed, PermitSync)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["blocked", 0, "reason"], "because"),
        (["grantResults", 0, "status"], "fine"),
        (["nextRequestAt"], 1.5),
        (["contended"], "yes"),
        (["leases", 0, "expiresAt"], None),
        (["grants", 0, "permits"], -1),
    ],
)
def test_malformed_replies_raise_a_protocol_error(path: list[Any], value: Any) -> None:
    with pytest.raises(SemaphoreProtocolError):
        parse_response(_mutated(path, value, FULL_GRANT))


def test_long_values_are_shortened_in_the_message() -> None:
    with pytest.raises(SemaphoreProtocolError) as caught:
        parse_request(_mutated(["demand", 0, "count"], "x" * 500))
    assert len(str(caught.value)) < 200
