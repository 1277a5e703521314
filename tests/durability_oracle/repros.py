"""Short scripts, one per known way the port differed from the reference (issue 25: M1-M4).

M1-M3 from the durability oracle's ``repro_semsim/`` (issue 25, "Measured"), M4 from the
widened differential; as data: a config and the steps, in the differential's action shapes. The recorder keeps
the reference's answers to them (``record --repros``), and
``tests/test_durability_corpus.py`` replays them through the port.
"""

from __future__ import annotations

from typing import Any, Final


def _succeed(value: Any = "done", ms: int = 0) -> dict[str, Any]:
    return {"kind": "succeed", "value": value, "ms": ms}


def _fail(message: str = "scripted failure", ms: int = 0) -> dict[str, Any]:
    return {"kind": "fail", "message": message, "ms": ms}


def _non_retryable(message: str = "scripted non-retryable failure", ms: int = 0) -> dict[str, Any]:
    return {"kind": "nonRetryable", "message": message, "ms": ms}


def _hang() -> dict[str, Any]:
    return {"kind": "hang", "ignoreAbort": False}


def _register(id: str, outcomes: list[dict[str, Any]], operation: str = "op") -> dict[str, Any]:
    return {"op": "register", "id": id, "operation": operation, "payload": id, "outcomes": outcomes}


#: The scripts whose divergence is known and not yet fixed: each is an expected failure at the
#: step it differs (tests/test_durability_corpus.py), and docs/DURABILITY.md says why.
OPEN: Final[frozenset[str]] = frozenset()

#: name -> (why, config, steps).
REPROS: Final[dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]]] = {
    "m1-timer": (
        "M1: with liveTimers, a runConcurrent worker whose item finished at once (x: attempts "
        "exhausted) takes the next item (b) before x's settled.finally re-arms the in-memory timer",
        {"operations": ["op"], "alarmConcurrency": 1, "retries": {"maxAttempts": 1}, "liveTimers": True},
        [
            _register("x", [_hang()]),
            _register("b", [_hang()]),
            {"op": "evict"},
            {"op": "alarm", "due": False},
            {"op": "advance", "ms": 0},
            {"op": "advance", "ms": 1},
        ],
    ),
    "m2-terminal": (
        "M2: terminal (failExhausted, after an async transaction) against a concurrent claim in "
        "the same alarm pass",
        {"operations": ["op"], "alarmConcurrency": 2, "retries": {"maxAttempts": 1}},
        [
            _register("x", [_hang()]),
            _register("z", [_hang()]),
            _register("b", [_hang()]),
            {"op": "settle", "handle": 2, "outcome": _succeed("ok")},
            {"op": "evict"},
            {"op": "alarm", "due": False},
        ],
    ),
    "m2-settle": (
        "M2: a retryable failure (settleFailure: event after an async transaction) against a "
        "success (transactionSync: event at once) of two handlers settling in the same drain",
        {"operations": ["op"], "alarmConcurrency": 2, "retries": {"maxAttempts": 2}},
        [
            _register("x", [_hang()]),
            _register("z", [_hang()]),
            _register("a", [_fail("boom")]),
            _register("b", [_succeed(1)]),
            {"op": "settle", "handle": 1, "outcome": _succeed("ok")},
            {"op": "settle", "handle": 2, "outcome": _succeed("ok")},
            {"op": "alarm", "due": False},
        ],
    ),
    "m3-timeout": (
        "M3: a timed-out handler that honours its abort settles before the policy in the "
        "reference, so waiters on `settled` wake before the execution's and take the permit",
        {
            "operations": ["op", "other"],
            "alarmConcurrency": 1,
            "attemptTimeoutMs": 200,
            "alarmMinDelayMs": 2000,
        },
        [
            _register("k1", [_fail("boom", ms=10)], "other"),
            {"op": "advance", "ms": 100},
            {"op": "advance", "ms": 3000},
            _register("k2", [_non_retryable("bad input", ms=8000)]),
            {"op": "advance", "ms": 3000},
            _register("k4", [_fail("boom", ms=1500)]),
            _register("k5", [_succeed("ok")]),
            {"op": "advance", "ms": 500},
        ],
    ),
    "m4-rejected-purge": (
        "M4: a call whose promise rejects still did its step. purgeBefore aborts a running "
        "handler, whose retry is scheduled in the same drain, then its transaction fails: the "
        "reference emits the attempt's events and rejects; the port's purge_before raised and its "
        "step, events and all, never reached the shell (CallRejected now carries it)",
        {"operations": ["op"], "alarmConcurrency": 1, "retries": {"maxAttempts": 2}},
        [
            _register("k1", [_hang(), _succeed("ok")]),
            {"op": "advance", "ms": 1_000},
            {"op": "fault", "transactions": 1, "alarms": 0},
            {"op": "purge", "before": 1_001},
        ],
    ),
}
