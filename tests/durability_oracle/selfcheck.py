"""Scripted checks that the oracle behaves as the seed's Durability docs say.

Run after node/setup.sh:  python -m tests.durability_oracle.selfcheck [-v]
One line per check, then 'N passed, N failed'; exits 1 on any failure.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

from tests.durability_oracle.oracle_client import Oracle, fail, hang, non_retryable, succeed

VERBOSE = "-v" in sys.argv
CHECKS: list[Callable[[Oracle], None]] = []


def check(fn: Callable[[Oracle], None]) -> Callable[[Oracle], None]:
    CHECKS.append(fn)
    return fn


def stored(o: Oracle, id: str) -> dict[str, Any]:
    """The id's ``durability_calls`` row, which must exist."""
    row = o.state(id)
    assert row is not None, f"no row for {id}"
    return row


def ok(reply: dict[str, Any]) -> Any:
    assert "ok" in reply, reply
    return reply["result"]


def kinds(events: list[Any], id: str | None = None) -> list[tuple[Any, Any, Any]]:
    return [
        (e["type"], e.get("attempt"), e.get("outcome")) for e in events if id is None or e.get("id") == id
    ]


@check
def idempotent_reregistration_same_payload(o: Oracle):
    o.init({"retries": {"maxAttempts": 3}})
    assert ok(o.register("a", {"x": 1, "y": [1, 2]}, outcomes=[hang()])) is None
    # Same operation, same data, other key order: a no-op.
    assert ok(o.register("a", {"y": [1, 2], "x": 1})) is None
    assert len(o.dump()["calls"]) == 1
    assert len(o.invocations("a")["invocations"]) == 1, "the handler is not started again"
    assert [k for k in kinds(o.events()) if k[0] == "registered"] == [("registered", 0, None)]
    o.settle(1, succeed(7))
    assert o.result("a") == {"status": "completed", "result": 7}
    # Also a no-op once completed: the result stays.
    assert ok(o.register("a", {"x": 1, "y": [1, 2]})) is None
    assert o.result("a") == {"status": "completed", "result": 7}
    assert len(o.invocations("a")["invocations"]) == 1


@check
def duplicate_payload_and_operation_errors(o: Oracle):
    o.init({"operations": ["op", "other"]})
    ok(o.register("a", {"x": 1}, outcomes=[hang()]))
    r = o.register("a", {"x": 2})
    assert r.get("error", {}).get("name") == "DuplicateDurablePayloadError", r
    r = o.register("a", [1])
    assert r.get("error", {}).get("name") == "DuplicateDurablePayloadError", r
    r = o.register("a", {"x": 1}, operation="other")
    assert r.get("error", {}).get("name") == "DuplicateDurableCallError", r
    r = o.get_result("a", operation="other")
    assert r.get("error", {}).get("name") == "DuplicateDurableCallError", r
    row = stored(o, "a")
    assert row["payload"] == '{"x":1}', "the first registration stays"
    assert row["operation"] == "op", "the first registration stays"


@check
def retries_until_max_attempts_then_failed(o: Oracle):
    o.init({"retries": {"maxAttempts": 3, "delaysMs": [100, 200]}})
    ok(o.register("a", "p", outcomes=[fail("boom")]))
    st = o.result("a")
    assert st == {"status": "pending", "attempt": 1, "nextAttemptAt": 100, "lastError": "boom"}, st
    o.advance(99)
    assert len(o.invocations("a")["invocations"]) == 1
    o.advance(1)
    assert o.result("a")["attempt"] == 2
    o.advance(200)
    st = o.result("a")
    assert st == {"status": "failed", "attempt": 3, "error": {"name": "Error", "message": "boom"}}, st
    assert [i["attempt"] for i in o.invocations("a")["invocations"]] == [1, 2, 3]
    settled = [k for k in kinds(o.events()) if k[0] == "attempt_settled"]
    assert settled == [
        ("attempt_settled", 1, "retry_scheduled"),
        ("attempt_settled", 2, "retry_scheduled"),
        ("attempt_settled", 3, "failed"),
    ], settled
    assert o.next_alarm()["alarmAt"] is None, "no pending work: the alarm is deleted"
    o.advance(60_000)
    assert len(o.invocations("a")["invocations"]) == 3


@check
def non_retryable_fails_at_once(o: Oracle):
    o.init({"retries": {"maxAttempts": 5}})
    ok(o.register("a", 1, outcomes=[non_retryable("bad input")]))
    st = o.result("a")
    assert st == {
        "status": "failed",
        "attempt": 1,
        "error": {"name": "NonRetryableError", "message": "bad input"},
    }, st


@check
def eviction_mid_attempt_runs_second_attempt_same_id(o: Oracle):
    o.init({"retries": {"maxAttempts": 3}})
    ok(o.register("img", {"imageId": "i1"}, outcomes=[hang(), succeed({"url": "u"})]))
    assert o.next_alarm()["alarmAt"] == 15_000, "alarm no sooner than alarmMinDelayMs (15 s)"
    o.advance(1_000)
    o.evict()
    row = stored(o, "img")
    assert (row["status"], row["attempt"]) == ("pending", 1), row
    assert o.next_alarm()["alarmAt"] == 15_000, "the stored alarm survives eviction"
    assert o.next_alarm()["timerAt"] is None, "a new instance has no in-memory timer"
    r = o.alarm(due=True)
    assert r.get("ok"), r
    assert r["firedAlarm"] == 15_000, r
    invs = o.invocations("img")["invocations"]
    assert [(i["instance"], i["attempt"], i["result"]) for i in invs] == [
        (1, 1, "lost"),
        (2, 2, "succeeded"),
    ], invs
    assert invs[1]["payload"] == {"imageId": "i1"}
    assert invs[1]["id"] == "img"
    assert o.result("img") == {"status": "completed", "result": {"url": "u"}}
    assert stored(o, "img")["attempt"] == 2, "the interrupted attempt counted"


@check
def eviction_on_last_attempt_exhausts(o: Oracle):
    o.init({"retries": {"maxAttempts": 1}})
    ok(o.register("a", 1, outcomes=[hang()]))
    o.evict()
    o.alarm(due=True)
    st = o.result("a")
    assert (st["status"], st["attempt"]) == ("failed", 1), st
    assert st["error"]["name"] == "DurableAttemptsExhaustedError", st
    assert len(o.invocations("a")["invocations"]) == 1, "no attempt beyond maxAttempts"
    assert ("terminal", 1, None) in kinds(o.events(), "a")


@check
def stale_generation_completion_is_fenced(o: Oracle):
    o.init({})
    ok(o.register("a", "old", outcomes=[hang(ignore_abort=True)]))
    gen1 = stored(o, "a")["generation_id"]
    o.advance(10)
    assert ok(o.purge(11)) == 1
    assert o.state("a") is None
    inv1 = o.invocations("a")["invocations"][0]
    assert inv1["abortedAt"] == 10, "purge aborts the running handler"
    ok(o.register("a", "new", outcomes=[hang()]))
    gen2 = stored(o, "a")["generation_id"]
    assert (gen1, gen2) == ("gen-000001", "gen-000002")
    o.settle(1, succeed("stale"))
    row = stored(o, "a")
    assert (row["status"], row["result"], row["generation_id"]) == ("pending", None, gen2), row
    o.settle(2, succeed("fresh"))
    assert o.result("a") == {"status": "completed", "result": "fresh"}
    completed = [e for e in o.events() if e["type"] == "attempt_settled"]
    assert [e["generation"] for e in completed] == [gen2], completed


@check
def alarm_concurrency_bounds_running_attempts(o: Oracle):
    o.init({"alarmConcurrency": 2, "retries": {"maxAttempts": 3}})
    for i in range(6):
        ok(o.register(f"j{i}", i, outcomes=[succeed(i, ms=1_000)]))
    inv = o.invocations()
    assert inv["running"] == 2, inv
    o.advance(10_000)
    inv = o.invocations()
    assert inv["maxRunning"] == 2, inv["maxRunning"]
    done = [o.result(f"j{i}")["status"] for i in range(6)]
    if done.count("completed") < 6:
        o.alarm(due=True)
        o.advance(10_000)
        done = [o.result(f"j{i}")["status"] for i in range(6)]
    assert done == ["completed"] * 6, done
    assert o.invocations()["maxRunning"] == 2


@check
def alarm_concurrency_bounds_after_eviction(o: Oracle):
    o.init({"alarmConcurrency": 3})
    for i in range(3):
        ok(o.register(f"h{i}", i, outcomes=[hang(), succeed(i, ms=500)]))
    for i in range(3, 7):
        ok(o.register(f"w{i}", i, outcomes=[succeed(i, ms=500)]))
    o.evict()
    o.alarm(due=True)
    o.advance(5_000)
    inv = o.invocations()
    assert inv["maxRunning"] <= 3, inv["maxRunning"]
    states = [o.result(k)["status"] for k in ["h0", "h1", "h2", "w3", "w4", "w5", "w6"]]
    assert states == ["completed"] * 7, states


@check
def attempt_timeout_aborts_and_retries(o: Oracle):
    o.init({"attemptTimeoutMs": 1_000, "retries": {"maxAttempts": 2, "delaysMs": [50]}})
    ok(o.register("a", 1, outcomes=[hang(), succeed("late ok")]))
    o.advance(1_000)
    inv = o.invocations("a")["invocations"][0]
    assert (inv["result"], inv["abortReason"]["name"]) == ("aborted", "DurableAttemptTimeoutError"), inv
    st = o.result("a")
    assert (st["status"], st["attempt"], st["nextAttemptAt"]) == ("pending", 1, 1_050), st
    o.advance(50)
    assert o.result("a") == {"status": "completed", "result": "late ok"}


def main() -> int:
    passed = failed = 0
    for fn in CHECKS:
        with Oracle() as o:
            try:
                fn(o)
                passed += 1
                print(f"PASS {fn.__name__}")
            except Exception as exc:
                failed += 1
                print(f"FAIL {fn.__name__}: {type(exc).__name__}: {exc}")
                if VERBOSE:
                    traceback.print_exc()
                    for cmd, reply in o.transcript[-8:]:
                        print("   ", cmd, "->", reply)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
