"""Attempt policy: ``maxAttempts``, ``attemptTimeoutMs`` and the retry delay (``policy.js``, inferred).

Seed 002 imports ``createPolicyResolver``, ``assertPositiveInteger`` and
the ``AttemptPolicy`` type from ``policy.js`` without their source. What it
shows: an instance-wide ``attemptTimeoutMs`` and ``retries: {maxAttempts}``
with per-operation overrides under ``methods`` (lines 341-370, the
``DurabilityOptions`` example), and an engine that reads
``policy.maxAttempts``, ``policy.attemptTimeoutMs`` and ``policy.delay(attempt)``
(``decideRetry``, lines 1034-1080; ``startExecution``, lines 1655-1693).

What the seed does not show, and so is semsim's choice (docs/DURABILITY.md,
"Inferred"): the defaults (3 attempts, a 60 s attempt timeout) and the
delay, an exponential backoff (1 s, doubling, capped at 60 s) with optional
jitter drawn from an injected ``random``. The engine validates whatever the
delay returns exactly as ``decideRetry`` does, so any callable may stand in.

Nothing here touches storage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import attrs

#: ``setTimeout`` treats longer delays as zero (scheduler.ts, line 961).
MAX_TIMER_MS: Final = 2**31 - 1
MAX_SAFE_INTEGER: Final = 2**53 - 1

DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_ATTEMPT_TIMEOUT_MS: Final = 60_000

#: ``delay(attempt)``: milliseconds before the attempt after ``attempt`` (1-based) may start.
Delay = Callable[[int], float]


def assert_positive_integer(name: str, value: object) -> None:
    """``assertPositiveInteger``: a positive safe integer, else ``ValueError`` naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SAFE_INTEGER:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@attrs.frozen
class ExponentialBackoff:
    """``initial_ms * factor**(attempt - 1)``, capped at ``max_ms``, less up to ``jitter`` of itself.

    With ``jitter > 0`` the share taken off is ``jitter * random()``, where
    ``random`` is injected (no module-level randomness).
    """

    initial_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 60_000
    jitter: float = 0.0
    random: Callable[[], float] | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.jitter and self.random is None:
            raise ValueError("ExponentialBackoff with jitter needs an injected random")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter!r}")

    def __call__(self, attempt: int) -> float:
        base = min(float(self.max_ms), self.initial_ms * self.factor ** max(0, attempt - 1))
        if not self.jitter:
            return base
        assert self.random is not None
        return base * (1 - self.jitter * self.random())


@attrs.frozen
class RetryOptions:
    """``retries``: how many attempts may start, and the delay between them (None: inherit)."""

    max_attempts: int | None = None
    delay: Delay | None = attrs.field(default=None, eq=False)


@attrs.frozen
class MethodOptions:
    """``DurabilityMethodOptions``: one operation's overrides (None: inherit)."""

    attempt_timeout_ms: int | None = None
    retries: RetryOptions | None = None


@attrs.frozen
class AttemptPolicy:
    """What the engine reads for one operation (``AttemptPolicy``)."""

    max_attempts: int
    attempt_timeout_ms: int
    delay: Delay = attrs.field(eq=False)


def resolve_policy(
    defaults: MethodOptions, methods: Mapping[str, MethodOptions], operation: str
) -> AttemptPolicy:
    """``createPolicyResolver``: the operation's overrides over the instance's options over the defaults."""
    method = methods.get(operation, MethodOptions())
    timeout = method.attempt_timeout_ms or defaults.attempt_timeout_ms or DEFAULT_ATTEMPT_TIMEOUT_MS
    own = method.retries or RetryOptions()
    shared = defaults.retries or RetryOptions()
    max_attempts = own.max_attempts or shared.max_attempts or DEFAULT_MAX_ATTEMPTS
    delay = own.delay or shared.delay or ExponentialBackoff()
    return AttemptPolicy(max_attempts=max_attempts, attempt_timeout_ms=timeout, delay=delay)


def validate_options(label: str, options: MethodOptions) -> None:
    """Refuse bad values at construction, naming the field (``methodOptionsSchema``, inferred)."""
    if options.attempt_timeout_ms is not None:
        assert_positive_integer(f"{label}attemptTimeoutMs", options.attempt_timeout_ms)
        if options.attempt_timeout_ms > MAX_TIMER_MS:
            raise ValueError(f"{label}attemptTimeoutMs must be at most {MAX_TIMER_MS}")
    if options.retries is not None and options.retries.max_attempts is not None:
        assert_positive_integer(f"{label}retries.maxAttempts", options.retries.max_attempts)
