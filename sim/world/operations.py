"""Admitted items as durable operations calling the external API: seed 000's account-concurrency world.

Seed 000's ``JobShard`` wires three things to one ``DurabilityScheduler``:

- ``admit``: every admitted item becomes a durable operation, id = item id
  (``jobs.run({id: item.id, payload: item.body})``), so a repeated admit is
  a no-op;
- the handler POSTs the job to ``JOB_API`` with ``Idempotency-Key: id`` and
  throws when the response is not ok; ``retries: {maxAttempts: 3}``;
- ``onLifecycleEvent``: the permit comes back (``permits.release(id)``) on
  ``terminal``, or on ``attempt_settled`` with ``outcome: 'completed'``;
  and ``finished`` (the queue's backstop for a hook that was lost) counts an
  item finished once its operation's status is no longer ``pending``.

This module holds the world's settings for that composition and the
example's two decisions (what the handler sends, which events release); the
client object (``semsim.world.client_object``) does the wiring. Note what the
hook does not do, faithfully: a failed *last* attempt emits
``attempt_settled`` with ``outcome: 'failed'``, which the example's hook
ignores, so that permit comes back only through ``finished`` (docs/DURABILITY.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from semaphore_core.durability import (
    AttemptSettled,
    DurabilityOptions,
    Event,
    RetryOptions,
    SchedulerOptions,
    Terminal,
)
from semaphore_core.durability.policy import ExponentialBackoff, MethodOptions, resolve_policy
from semaphore_core.numbers import MAX_DELAY_MS
from semsim.inputs.validation import boolean, integer, js_int

#: The one operation the example's shards run.
OPERATION: Final = "run"
#: The handler's own ceiling on one call to the API. The reference's ``fetch`` has none: its
#: ``AbortSignal`` (the attempt's timeout) is what ends the wait, so this only bounds a call the
#: network lost beyond every timeout.
CALL_TIMEOUT_MS: Final = MAX_DELAY_MS
#: ``alarmHandoffMs``: the reference's default, and a bound (a day).
DEFAULT_ALARM_HANDOFF_MS: Final = 14 * 60_000
MAX_ALARM_HANDOFF_MS: Final = 86_400_000


@attrs.frozen
class OperationsSpec:
    """The account-concurrency composition: present in a world's config, admitted items run as
    durable operations calling the external API instead of on the job service."""

    #: The API deduplicates by idempotency key (seed 000's handler sends the operation id).
    idempotent_api: bool = attrs.field(default=True, validator=boolean)
    #: The example's ``retries: {maxAttempts: 3}``.
    max_attempts: int = attrs.field(default=3, converter=js_int, validator=integer(1, 100))
    #: ``attemptTimeoutMs`` (the port's default, 60 s: the seed shows none).
    attempt_timeout_ms: int = attrs.field(
        default=60_000, converter=js_int, validator=integer(1, MAX_DELAY_MS)
    )
    #: The scheduler's ``alarmConcurrency`` (the reference's default, 10).
    alarm_concurrency: int = attrs.field(default=10, converter=js_int, validator=integer(1, 10_000))
    #: The scheduler's ``alarmHandoffMs`` (the reference's default, 14 minutes): an alarm pass
    #: still running this long hands its work on to a fresh alarm.
    alarm_handoff_ms: int = attrs.field(
        default=DEFAULT_ALARM_HANDOFF_MS, converter=js_int, validator=integer(1, MAX_ALARM_HANDOFF_MS)
    )

    #: Each admission registers its operation twice, the second time with the payload's keys in
    #: the other order, as a hook delivered again would (seed 002: "the same id and payload again
    #: is a no-op", compared canonically): how the world holds the port to that promise
    #: (``registration_idempotent``). Off by default, as seed 000 registers once (and as every
    #: record made before the field existed ran); the fuzz's drawn worlds turn it on.
    repeat_registration: bool = attrs.field(default=False, validator=boolean)

    def to_dict(self) -> dict[str, Any]:
        """As recorded; ``alarm_handoff_ms`` and ``repeat_registration`` only when not the default
        (older records keep their bytes, and replay as they ran)."""
        recorded = attrs.asdict(self)
        if recorded["alarm_handoff_ms"] == DEFAULT_ALARM_HANDOFF_MS:
            del recorded["alarm_handoff_ms"]
        if not recorded["repeat_registration"]:
            del recorded["repeat_registration"]
        return recorded

    def longest_ms(self, alarm_min_delay_ms: int) -> int:
        """How long an operation may take at most: every attempt timing out, each followed by the
        longest backoff and, after an eviction, the alarm's delay."""
        per_attempt = self.attempt_timeout_ms + ExponentialBackoff().max_ms + alarm_min_delay_ms
        return self.max_attempts * per_attempt

    def retry_delay(self) -> Callable[[int], float]:
        """The operation's retry policy as the engine resolves it: the delay after attempt ``n``
        failed (what ``lifecycle_recorded`` holds each retry's time to)."""
        options = self.durability_options()
        defaults = MethodOptions(attempt_timeout_ms=options.attempt_timeout_ms, retries=options.retries)
        return resolve_policy(defaults, {}, OPERATION).delay

    def durability_options(self, execute_only_due: bool = False) -> DurabilityOptions:
        """``execute_only_due``: F8's fix (``retries-wait-their-time``)."""
        return DurabilityOptions(
            handlers={OPERATION: None},
            attempt_timeout_ms=self.attempt_timeout_ms,
            retries=RetryOptions(max_attempts=self.max_attempts),
            execute_only_due=execute_only_due,
        )

    def scheduler_options(self, alarm_min_delay_ms: int) -> SchedulerOptions:
        return SchedulerOptions(
            alarm_concurrency=self.alarm_concurrency,
            alarm_min_delay_ms=alarm_min_delay_ms,
            alarm_handoff_ms=self.alarm_handoff_ms,
        )


def job_payload(key: str, work_ms: int, *, keys_reversed: bool = False) -> dict[str, Any]:
    """An admitted item's operation payload: the account (the semaphore key) and the work it asks for.

    ``keys_reversed``: the same payload with its keys in the other order. Seed 002 compares a
    re-registration's payload canonically ("the same id and payload again is a no-op"), so the
    order must not matter; the client's repeat registration uses it
    (``OperationsSpec.repeat_registration``, ``registration_idempotent``).
    """
    if keys_reversed:
        return {"workMs": work_ms, "account": key}
    return {"account": key, "workMs": work_ms}


def api_request(
    operation_id: str, payload: Any, attempt: int, deadline_at: int | None = None
) -> dict[str, Any]:
    """What the handler POSTs: the job, with the operation id as its idempotency key (and, with
    F5's fix, the attempt's deadline).

    ``attempt`` and ``operation`` ride along as tracing headers would (the API never keys
    anything by them: seed 002, "never by ``attempt``"): they tell the checker which attempt of
    which operation a call belongs to, however late the network delivered it, and whatever key
    the call was sent under (``effect_once`` counts effects per operation too).
    """
    request = {
        "account": payload["account"],
        "key": operation_id,
        "workMs": payload["workMs"],
        "attempt": attempt,
        "operation": operation_id,
    }
    if deadline_at is not None:
        request["deadlineAt"] = deadline_at
    return request


def releases_permit(event: Event) -> str | None:
    """The example's ``onLifecycleEvent``: the id whose permit comes back with ``event``, or None."""
    if isinstance(event, Terminal):
        return event.entity.id
    if isinstance(event, AttemptSettled) and event.outcome == "completed":
        return event.entity.id
    return None
