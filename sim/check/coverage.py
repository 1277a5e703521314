""" "Sometimes" coverage: which interesting states a run reached, read off its trace.

A campaign that never drops an alarm cannot say anything about dropped
alarms. Each counter below names a state the fuzzer is meant to reach
(Antithesis's ``sometimes`` assertions); a campaign sums them and its
summary lists every counter that stayed at zero, so a blind spot is visible
rather than silent.

Counting from the trace keeps the simulator free of bookkeeping on its hot
path and makes coverage checkable on any trace file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

#: Every counter a campaign is expected to reach, in report order.
EXPECTED: Final = (
    "fault:request_loss",
    "fault:reply_loss",
    "fault:duplicate",
    "fault:delay",
    "fault:reorder",
    "fault:partition",
    "fault:eviction",
    "fault:rollback",
    "fault:alarm_failure",
    "fault:release_loss",
    "fault:limit_change",
    "fault:group_limit_change",
    "fault:forged_report",
    "forged:negative_count",
    "forged:unknown_lease",
    "forged:foreign_lease",
    "forged:replayed_lease",
    "fault:cancel",
    "blocked:limit",
    "blocked:group_limit",
    "blocked:not_permitted",
    "blocked:limit_resolution_error",
    "round_failed",
    "grant_claimed_in_part",
    "grant_expired",
    "late_claim_clamped",
    "lease_retired",
    "lease_settled_by_report",
    "contended_reply",
    "eviction_with_requests_waiting",
    "alarm_dropped",
    # The account-concurrency world (config.operations): its handler, the API, the scheduler.
    "ops:api_error",
    "ops:lost_completion",
    "ops:api_slow",
    "ops:zombie_call",
    "ops:eviction_mid_attempt",
    "ops:retries_exhausted",
    "ops:conflict",
    "ops:replay",
    "ops:handoff",
    "ops:client_alarm_retry",
    # Runs judged with the checker's full checks too (semsim.explore.fuzz.judged_in_full).
    "checks:full",
)
#: The counter of runs whose incremental checks were cross-checked from scratch.
FULL_CHECKS: Final = "checks:full"


def coverage(events: Iterable[Mapping[str, Any]], latency_ms: int) -> Counter[str]:
    """The counters one trace reaches (each event counted once where it happened).

    ``latency_ms`` is the network's base one-way latency: a delivery slower
    than it was delayed by the plan. A message delivered before one sent
    earlier on the same path (source to destination) was reordered.
    """
    counts: Counter[str] = Counter()
    granted: dict[str, int] = {}  # grant id -> permits
    sent: dict[str, tuple[int, str, str]] = {}  # msg -> (t, src, method)
    last_sent_delivered: dict[tuple[str, str], int] = {}  # (src, dst) -> latest send time delivered
    ops = _OperationsState()
    for event in events:
        kind = event["kind"]
        if kind.startswith(("api_", "operation", "alarm_handoff")):
            _operations(event, counts, ops)
            continue
        if kind == "send":
            sent[event["msg"]] = (event["t"], event["src"], event["method"])
        elif kind == "deliver":
            if event["dst"] == "api":
                ops.delivered = event["msg"]  # the API's event for it comes next, in the same step
            origin = sent.get(event["msg"])
            if origin is None:
                continue
            t_sent, src, _ = origin
            if event["t"] - t_sent > latency_ms:
                counts["fault:delay"] += 1
            path = (src, event["dst"])
            if t_sent < last_sent_delivered.get(path, -1):
                counts["fault:reorder"] += 1
            last_sent_delivered[path] = max(t_sent, last_sent_delivered.get(path, -1))
        elif kind == "drop":
            reason, leg = event["reason"], event["leg"]
            if leg == "reply" and event["msg"] in ops.effect_replies:
                counts["ops:lost_completion"] += 1  # the effect happened; the caller never hears
            if reason == "partitioned":
                counts["fault:partition"] += 1
            elif reason == "lost":
                origin = sent.get(event["msg"])
                if leg == "request" and origin is not None and origin[2] == "release":
                    counts["fault:release_loss"] += 1
                else:
                    counts[f"fault:{leg}_loss"] += 1
        elif kind == "duplicate":
            counts["fault:duplicate"] += 1
        elif kind == "fault" and event.get("fault") == "evict":
            counts["fault:eviction"] += 1
        elif kind == "fault" and event.get("fault") == "rollback":
            counts["fault:rollback"] += 1
        elif kind == "fault" and event.get("fault") == "forged_report":
            counts["fault:forged_report"] += 1
            if event.get("lie") == "negative_count":
                counts["forged:negative_count"] += 1
        elif kind == "fault" and event.get("fault") == "forged_lease_report":
            counts[f"forged:{event['lie']}"] += 1
        elif kind == "fault" and event.get("fault") == "cancel":
            counts["fault:cancel"] += 1
        elif kind == "round_failed":
            counts["round_failed"] += 1
        elif kind == "grant":
            granted[event["grant"]] = event["permits"]
        elif kind == "claim":
            if 0 < event["items"] < granted.get(event["grant"], 0):
                counts["grant_claimed_in_part"] += 1
        elif kind == "evict":
            if event["object"].startswith("holder:") and event.get("calls", 0) > 0:
                counts["eviction_with_requests_waiting"] += 1
            if ops.attempts_running.pop(event["object"], None):
                counts["ops:eviction_mid_attempt"] += 1
        elif kind in ("alarm_failed", "alarm_retry"):  # the platform's retry, or the engine's own
            counts["fault:alarm_failure"] += 1
            if kind == "alarm_retry" and event["object"].startswith("client-"):
                # A client's pass threw: its engine re-armed, its operations' retries wait on it.
                counts["ops:client_alarm_retry"] += 1
        elif kind == "alarm_dropped":
            counts["alarm_dropped"] += 1
        elif kind == "operator":
            counts["fault:limit_change" if event["action"] == "limit" else "fault:group_limit_change"] += 1
        elif kind == "blocked":
            counts[f"blocked:{event['reason']}"] += 1
        elif kind == "grant_reclaimed":
            counts["grant_expired"] += 1
        elif kind == "lease_retired":
            counts["lease_retired"] += 1
        elif kind == "lease_settled":
            counts["lease_settled_by_report"] += 1
        elif kind == "reply":
            body = event.get("body")
            if isinstance(body, dict):
                if body.get("contended") is True:
                    counts["contended_reply"] += 1
                for result in body.get("grantResults", ()):
                    if result.get("status") == "expired":
                        counts["late_claim_clamped"] += 1
    return counts


class _OperationsState:
    """What the account-concurrency counters remember while reading a trace."""

    def __init__(self) -> None:
        #: The request last delivered to the API: the API's event that follows is about it.
        self.delivered: str | None = None
        #: Call running at the API -> (its request; its idempotency key, the operation id; when
        #: its work ends).
        self.calls_running: dict[str, tuple[str | None, str, int]] = {}
        #: Requests to the API whose reply tells of an effect (``ok``, or a replay of a stored one).
        self.effect_replies: set[str] = set()
        #: Client object -> operations with an attempt running.
        self.attempts_running: dict[str, set[str]] = {}


def _operations(event: Mapping[str, Any], counts: Counter[str], ops: _OperationsState) -> None:
    """The account-concurrency world's events: the API's calls and the operations' lifecycle."""
    kind = event["kind"]
    calls_running, attempts_running = ops.calls_running, ops.attempts_running
    if kind == "api_start":
        calls_running[event["call"]] = (ops.delivered, event["key"], event["until"])
        if event.get("slow"):
            counts["ops:api_slow"] += 1
    elif kind == "api_end":
        request, _, _ = calls_running.pop(event["call"])
        if event["outcome"] == "error":
            counts["ops:api_error"] += 1
        elif event["outcome"] == "error_after_effect":
            counts["ops:lost_completion"] += 1
        elif event["outcome"] == "ok" and request is not None:
            ops.effect_replies.add(request)
    elif kind == "api_conflict":
        counts["ops:conflict"] += 1
    elif kind == "api_replay":
        counts["ops:replay"] += 1
        if event["outcome"] == "ok" and ops.delivered is not None:
            ops.effect_replies.add(ops.delivered)
    elif kind == "alarm_handoff":
        counts["ops:handoff"] += 1
    elif kind == "operation":
        running = attempts_running.setdefault(event["object"], set())
        if event["type"] == "attempt_started":
            running.add(event["id"])
        elif event["type"] == "attempt_settled":
            running.discard(event["id"])
            # The attempt is over, its call runs on (a call ending this very ms, as F5's fix cuts
            # one at its attempt's deadline, does not).
            if event["outcome"] != "completed" and any(
                key == event["id"] and until > event["t"] for _, key, until in calls_running.values()
            ):
                counts["ops:zombie_call"] += 1
            if event["outcome"] == "failed":
                counts["ops:retries_exhausted"] += 1
        elif event["type"] == "terminal":
            counts["ops:retries_exhausted"] += 1


def missing(counts: Mapping[str, int]) -> list[str]:
    """The expected counters a campaign never reached."""
    return [name for name in EXPECTED if not counts.get(name)]
