"""semsim's own invariants, by name: what each promises and when it is judged.

One table, in the order semsim has always listed them, from which the rest of semsim
reads the names: ``SAFETY``, ``LIVENESS`` and ``ALLOCATION`` (the kinds), the
names a user's invariant may not take, ``semsim list --invariants``. A
user's own invariants (:mod:`semsim.check.checker`) are listed beside these
by the same fields. docs/INVARIANTS.md has a section on each (a test holds
the two to the same names), saying how it is checked.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

Kind = Literal["safety", "liveness", "allocation"]


@attrs.frozen
class Builtin:
    """One of semsim's invariants: its name, kind and promise, in one line."""

    name: str
    kind: Kind
    promise: str


#: Every invariant semsim judges.
BUILTIN: Final = (
    Builtin("ceiling", "safety", "holder-accounted usage stays within the mode's ceiling"),
    Builtin("group_ceiling", "safety", "a group's grants (and leases, within its limit) stay within its cap"),
    Builtin("reports_monotone", "safety", "claimed, drawn and released only move forward"),
    Builtin("conservative", "safety", "holder-accounted usage >= permits actually in use"),
    Builtin("real_ceiling", "safety", "in strict and under modes, permits actually in use <= limit"),
    Builtin("released_when_done", "safety", "a client gives an item's permit back only once its job is done"),
    Builtin("caps_live", "safety", "a group cap the operator sets is the cap the holder reads from then on"),
    Builtin("requests_prompt", "safety", "a client asks for its queued items as soon as it may"),
    Builtin("released_at_end", "safety", "an operation's permit comes back in the step its operation ends"),
    Builtin("durable", "safety", "an eviction loses or alters no committed row"),
    Builtin("alarm_armed", "safety", "while permits wait to be claimed, an alarm is set in time"),
    Builtin("deterministic", "safety", "same seed and plan, same trace bytes"),
    Builtin("exact_accounting", "safety", "the holder agrees with the model run in lockstep"),
    Builtin("exact_queue", "safety", "each client's queue agrees with the literal queue model in lockstep"),
    Builtin("external_ceiling", "safety", "calls in flight at the external API stay within the limit"),
    Builtin("effect_once", "safety", "at an idempotent API, each operation takes effect at most once"),
    Builtin("completed_took_effect", "safety", "an operation told completed took effect at the external API"),
    Builtin("fenced", "safety", "an operation records only the outcome of its latest attempt"),
    Builtin(
        "attempts_bounded",
        "safety",
        "an operation's attempts stay within maxAttempts, and none starts once it ended",
    ),
    Builtin(
        "attempts_in_turn",
        "safety",
        "an operation's next attempt starts only once its last settled, not before its retry time",
    ),
    Builtin(
        "retry_before_last",
        "safety",
        "a retryable failure before the last attempt is retried, and only such a failure",
    ),
    Builtin(
        "lifecycle_recorded",
        "safety",
        "an operation's row and its retries' times are what its lifecycle events and policy say",
    ),
    Builtin(
        "engine_permits",
        "safety",
        "every attempt handler running holds one of the engine's alarmConcurrency permits",
    ),
    Builtin(
        "due_work_runs",
        "safety",
        "an alarm pass reads every due row and hands each to an attempt before its work ends",
    ),
    Builtin(
        "engine_timers",
        "safety",
        "an alarm pass hands off exactly alarmHandoffMs after it started; early timers as reconcile asks",
    ),
    Builtin(
        "handoff_alarm", "safety", "after an alarm pass hands off, an alarm is set within alarmMinDelayMs"
    ),
    Builtin(
        "alarm_follows_work",
        "safety",
        "after each reconcile, an object's alarm is set no later than its earliest work needs",
    ),
    Builtin(
        "replies_applied",
        "safety",
        "a client's leases follow each reply's echoes, and it returns idle leases when contended",
    ),
    Builtin(
        "registration_idempotent",
        "safety",
        "registering an operation again with an equal payload is accepted as a no-op",
    ),
    Builtin("capacity_returns", "liveness", "once settled, usage is back to 0 (the documented leak aside)"),
    Builtin("progress", "liveness", "waiting demand is served while capacity exists, oldest first"),
    Builtin("reclaimed", "liveness", "unclaimed grant permits come back after their deadline"),
    Builtin("operation_progress", "liveness", "once settled, no durable operation is still pending"),
    Builtin("reuse", "allocation", "capacity a report released is offered in the round that applies it"),
    Builtin("lease_fairness", "allocation", "each round issues exactly the reference's leases"),
    Builtin(
        "no_overask",
        "allocation",
        "a client never asks for more than its uncovered queued items, dated by the oldest",
    ),
)


def names(kind: Kind) -> tuple[str, ...]:
    """The names of one kind, in the table's order."""
    return tuple(invariant.name for invariant in BUILTIN if invariant.kind == kind)
