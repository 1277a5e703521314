"""The literal model (sim/check/literal_holder.py) and its lockstep with the holder in every simulated run.

The model must share no code with ``semaphore_core`` (else a bug there is on
both sides of the comparison), must agree with Node's ``localeCompare`` and
with the core's parser on what is malformed, and, run beside the holder in
a simulation, must end the run as ``exact_accounting`` when the holder
answers differently, without changing a passing run's trace.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import semsim.check.lockstep
from semaphore_core import Holder, SemaphoreProtocolError
from semaphore_core.events import BlockedEvent
from semaphore_core.protocol import parse_request
from semsim.check.invariants import SAFETY
from semsim.check.literal_holder import LiteralHolder, LiteralProtocolError, locale_compare, parse, same_wire
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload
from tests.helpers import NoLockstep

ROOT = Path(__file__).resolve().parent.parent


def test_the_model_imports_nothing_from_the_code_it_checks() -> None:
    tree = ast.parse((ROOT / "sim" / "check" / "literal_holder.py").read_text())
    imported = {
        name
        for node in ast.walk(tree)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert not {name for name in imported if name.split(".")[0] in ("semaphore_core", "sim", "tests")}


def test_locale_compare_sorts_like_node_icu() -> None:
    data = json.loads((ROOT / "tests" / "fixtures" / "collation.json").read_text())
    assert sorted(data["input"], key=functools.cmp_to_key(locale_compare)) == data["sorted"]
    assert locale_compare("a", "B") == -1
    assert locale_compare("b", "A") == 1
    assert locale_compare("a", "A") == -1
    assert locale_compare("aB", "Ab") == -1  # case decides only once every letter is equal
    assert locale_compare("a\x01b", "ab") == 0


VALID: dict[str, Any] = {
    "type": "request",
    "v": 1,
    "clientId": "c",
    "demand": [{"group": "g", "count": 1, "oldestAt": -5}],
    "grants": [{"grantId": "x", "claimed": 0, "released": 0}],
    "leases": [{"leaseId": "l", "drawn": 0, "released": 0, "retired": False}],
}


def _with(path: tuple[Any, ...], value: Any, drop: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(json.dumps(VALID))
    parent: Any = message
    for step in path[:-1]:
        parent = parent[step]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return message


CASES: list[Any] = [
    VALID,
    {**VALID, "type": "sync"},
    {**VALID, "extra": 1},
    _with(("v",), 1.0),
    _with(("v",), True),
    _with(("v",), 2),
    _with(("type",), "grant"),
    _with(("clientId",), 5),
    _with(("clientId",), "x" * 1_025),
    _with(("clientId",), "\ud800"),
    _with(("clientId",), "\u00e9"),
    _with(("demand", 0, "count"), -1),
    _with(("demand", 0, "count"), 2.0),
    _with(("demand", 0, "count"), 2.5),
    _with(("demand", 0, "count"), 2**53),
    _with(("demand", 0, "oldestAt"), -(2**53 - 1)),
    _with(("demand", 0, "oldestAt"), math.nan),
    _with(("demand",), None),
    _with(("demand",), [], drop=True),
    _with(("grants",), [], drop=True),
    _with(("leases",), None),
    _with(("leases",), [], drop=True),
    _with(("leases", 0, "retired"), None),
    _with(("leases", 0, "retired"), "yes"),
    _with(("leases", 0, "drawn"), True),
    [VALID],
    "request",
]


@pytest.mark.parametrize("message", CASES)
def test_the_model_and_the_core_accept_and_reject_the_same_messages(message: Any) -> None:
    try:
        parse_request(message)
        core = True
    except SemaphoreProtocolError:
        core = False
    try:
        parse(message)
        model = True
    except LiteralProtocolError:
        model = False
    assert core == model


def test_an_evicted_model_forgets_contended_but_keeps_its_rows() -> None:
    conn = sqlite3.connect(":memory:")
    counter = iter(range(100))
    options = {"limit": 1, "leases": {"provisioning": {"mode": "strict"}, "permitsPerLease": 4}}
    model = LiteralHolder(conn, options, lambda: f"id-{next(counter)}")
    ask: dict[str, Any] = {"type": "request", "v": 1, "demand": [{"group": "g", "count": 3, "oldestAt": 0}]}
    replies, _ = model.round([{**ask, "clientId": "a", "grants": [], "leases": []}], 0)
    assert replies[0]["contended"] is True
    sync = {"type": "sync", "v": 1, "clientId": "a", "grants": [], "leases": []}
    assert model.handle_sync(sync, 1)["contended"] is True
    rebuilt = LiteralHolder(conn, options, lambda: "unused")
    assert "contended" not in rebuilt.handle_sync(sync, 2)
    assert rebuilt.rows() == model.rows() != {"grants": {}, "leases": {}}


def _world(seed: int = 2) -> Any:
    config = WorldConfig(
        holder=HolderSpec(limit=3, leases=LeaseSpec(permits_per_lease=2)),
        workload=Workload(clients=3, items_per_minute=40, until_ms=40_000, duration_ms=(1_000, 4_000)),
        duration_ms=60_000,
    )
    return run_world(config, FaultPlan(), seed=seed)


def test_exact_accounting_is_a_safety_invariant() -> None:
    assert "exact_accounting" in SAFETY


def test_a_holder_that_misreports_blocked_permits_ends_the_run_as_exact_accounting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A planted bug no other invariant reads: the blocked event over-counts by one.
    assert _world().result.outcome == "completed"
    original = BlockedEvent.to_wire
    monkeypatch.setattr(BlockedEvent, "to_wire", lambda self: {**original(self), "count": self.count + 1})
    result = _world().result
    assert (result.outcome, result.invariant) == ("violation", "exact_accounting")
    assert "round events" in result.detail


def test_a_holder_whose_usage_is_off_ends_the_run_as_exact_accounting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # usage() alone (not a round's usage): its grant room is one too many.
    original = Holder._grant_room
    monkeypatch.setattr(Holder, "_grant_room", lambda self, *args: original(self, *args) + 1)
    result = _world().result
    assert (result.outcome, result.invariant) == ("violation", "exact_accounting")


def test_the_lockstep_leaves_a_passing_runs_trace_bytes_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    with_model = _world(seed=4)
    assert with_model.result.outcome == "completed"
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    without = _world(seed=4)
    assert with_model.trace.to_bytes() == without.trace.to_bytes()


def test_wire_values_compare_as_equal_bytes_or_equal_with_groups_sorted() -> None:
    usage = {
        "limit": 4,
        "granted": 2,
        "leased": 0,
        "available": 2,
        "groups": {"a": {"granted": 1}, "b": {"granted": 1}},
    }
    by_oldest = {**usage, "groups": {"b": {"granted": 1}, "a": {"granted": 1}}}
    assert same_wire(usage, usage)
    assert same_wire(usage, by_oldest)  # the reference orders groups by oldest grant, the core by name
    assert not same_wire(usage, {**usage, "granted": 3})
    reordered = {"granted": 2, "limit": 4, "leased": 0, "available": 2, "groups": usage["groups"]}
    assert not same_wire(usage, reordered)  # key order outside groups is part of the wire
    assert same_wire([{"groups": {"x": 1}}], [{"groups": {"x": 1}}])


def test_wire_values_that_python_calls_equal_can_differ_on_the_wire() -> None:
    # Python's == conflates these; the wire (and the reference) does not.
    conflated = [
        ({"granted": 1}, {"granted": True}),
        ({"limit": 1}, {"limit": 1.0}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    ]
    for core, model in conflated:
        assert core == model
        assert not same_wire(core, model)
    # And the other way: a tuple is the same JSON array as a list, though its repr differs.
    assert same_wire({"grants": (1, 2)}, {"grants": [1, 2]})


def test_a_holder_whose_usage_fails_after_a_commit_is_judged_by_the_model_not_blamed_on_the_checkers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drawn case (limit-zero-rejected planted: ``usage()`` raises at a limit of 0): after a
    commit under a limit of 0 the checkers read the holder's ``usage()``, and it raises. The
    holder failed where the literal model does not: ``exact_accounting``. It read ``checker``
    ("the checker failed after a commit"), as if a checker had a bug. Without a model beside the
    holder, nothing can be judged: still ``checker``, naming the holder's ``usage()``."""
    from semsim.check.invariants import Monitor
    from semsim.explore.fuzz import load_case, run_case

    case, tolerated = load_case(Path(__file__).parent / "fixtures" / "drawn_usage_fails_after_a_commit.json")
    report, _ = run_case(case, tolerated)
    assert report.invariant == "exact_accounting", report
    assert "the holder's usage failed (limit must resolve" in report.detail
    monkeypatch.setattr(Monitor, "lockstep", lambda self, obj, config, key: None)
    unjudged, _ = run_case(case, tolerated)
    assert unjudged.invariant == "checker", unjudged
    assert "the holder's usage() failed after a commit" in unjudged.detail
