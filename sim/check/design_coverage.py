""" "Sometimes" coverage of the gate's and the leased worker's runs, read off their traces.

As :mod:`semsim.check.coverage` is for the semaphore: each counter names a
state ``semsim fuzz --design NAME`` is meant to reach, and a campaign's
summary lists those it never reached. The message and API faults are read
as the semaphore's are; the rest are each design's own events
(docs/WIRE.md) and figures (:mod:`semsim.check.trade_offs`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from semsim.check.coverage import coverage

#: The counters every design's campaign reads from the message and API faults, as the semaphore's.
_SHARED: Final = (
    "fault:request_loss",
    "fault:reply_loss",
    "fault:duplicate",
    "fault:delay",
    "fault:reorder",
    "fault:partition",
    "fault:eviction",
    "ops:api_error",
    "ops:api_slow",
    "ops:conflict",
    "ops:replay",
)
#: Each design's own, from its events: (counter, event kind, the fields it must have).
_OWN: Final[Mapping[str, tuple[tuple[str, str, Mapping[str, Any]], ...]]] = {
    "gate": (
        ("gate:shed", "shed", {}),
        ("gate:error", "gate_error", {}),
        ("gate:fail_open", "fail_open", {}),
        ("gate:release_lost", "release_lost", {}),
        ("gate:caller_paused", "paused", {}),
    ),
    "leased-worker": (
        ("leased:claim_failed", "claim_failed", {}),
        ("leased:renew_refused", "lease_renew", {"ok": False}),
        ("leased:lease_lost", "lease_lost", {}),
        ("leased:write_fenced", "write_fenced", {}),
        ("leased:write_skipped", "write_skipped", {}),
        ("leased:worker_paused", "paused", {}),
        ("leased:shutdown", "worker_shutdown", {}),
    ),
}
#: What each design's runs are expected to reach, in report order.
DESIGN_EXPECTED: Final[Mapping[str, tuple[str, ...]]] = {
    design: (
        *_SHARED,
        *(counter for counter, _, _ in own),
        *(("gate:slot_healed",) if design == "gate" else ()),
        "trade:over_cap",
        "trade:duplicate_run",
        "trade:leaked_capacity",
    )
    for design, own in _OWN.items()
}


def design_coverage(events: Iterable[Mapping[str, Any]], design: str, latency_ms: int) -> Counter[str]:
    """The counters one run of ``design`` reaches (each event counted once where it happened)."""
    seen = list(events)
    shared = coverage(seen, latency_ms)
    counts: Counter[str] = Counter({name: shared[name] for name in _SHARED if shared[name]})
    own = _OWN[design]
    for event in seen:
        kind = event["kind"]
        for counter, wanted, fields in own:
            if kind == wanted and all(event.get(name) == value for name, value in fields.items()):
                counts[counter] += 1
        if kind == "gate_acquire" and event.get("healed"):
            counts["gate:slot_healed"] += 1
        elif kind == "trade_offs":
            counts["trade:over_cap"] += 1 if event["peak_over_admission"] else 0
            counts["trade:duplicate_run"] += event["duplicate_executions"]
            counts["trade:leaked_capacity"] += 1 if event["leaked_cap_s"] else 0
    return +counts  # no counter at zero: a report lists what was reached


def design_missing(counts: Mapping[str, int], design: str) -> list[str]:
    """The counters ``design``'s campaign never reached."""
    return [name for name in DESIGN_EXPECTED[design] if not counts.get(name)]
