"""Arbitrary JSON raises nothing but SemaphoreProtocolError, and a rejected message writes nothing."""

from __future__ import annotations

import contextlib
import copy
import json
import sqlite3
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from semaphore_core import LeaseOptions, SemaphoreProtocolError, Strict
from semaphore_core.protocol import parse_message
from tests.helpers import holder, request, rows, sync

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

KEYS = st.sampled_from(
    [
        "type",
        "v",
        "clientId",
        "demand",
        "grants",
        "leases",
        "group",
        "count",
        "oldestAt",
        "grantId",
        "claimed",
        "released",
        "leaseId",
        "drawn",
        "retired",
    ]
)


def valid_messages() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(
        [
            request("a", [("g", 2, 0)], [("id-1", 1, 0)], [("id-2", 1, 0, True)]),
            request("b", [("g", 1, 5), ("h", 0, 5)], [], []),
            sync("a", [("id-1", 2, 1)], [("id-2", 2, 2)]),
            sync("c"),
        ]
    )


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def near_valid(draw: st.DrawFn) -> Any:
    """A valid message with one value replaced, one key dropped, or one junk key added."""
    message = copy.deepcopy(draw(valid_messages()))
    paths = _paths(message)
    path = draw(st.sampled_from(paths))
    parent: Any = message
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(JSON)
    elif action == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(KEYS)] = draw(JSON)
    return message


def seeded_holder() -> tuple[Any, sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    h = holder(conn, limit=5, leases=LeaseOptions(provisioning=Strict(), permits_per_lease=2))
    h.run_round([request("a", [("g", 2, 0)], leases=[])], now=0)  # grant id-1, lease id-2
    return h, conn


def check(message: Any) -> None:
    h, conn = seeded_holder()
    before = rows(conn)
    for call in (lambda: h.run_round([message], now=10), lambda: h.sync(message, now=10)):
        try:
            call()
        except SemaphoreProtocolError:
            assert rows(conn) == before
        else:
            before = rows(conn)


@given(JSON)
def test_arbitrary_json_only_raises_protocol_errors(value: Any) -> None:
    check(value)
    with contextlib.suppress(SemaphoreProtocolError):
        parse_message(value)


@given(near_valid())
def test_near_valid_messages_only_raise_protocol_errors_and_write_nothing(message: Any) -> None:
    check(message)


@given(near_valid())
def test_whatever_parses_serialises_to_json_and_parses_back_the_same(message: Any) -> None:
    try:
        parsed = parse_message(message)
    except SemaphoreProtocolError:
        return
    wire = json.loads(json.dumps(parsed.to_wire()))
    assert parse_message(wire) == parsed
