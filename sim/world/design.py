"""Which design a world runs: the semaphore (seeds 000-002), the gate (003) or the leased worker (004).

Every design meets the same workload, fault plan and seed, and is judged by
the same ground truth: the external API's calls in flight against the
world's cap (``config.holder.limit``). The semaphore reads the whole
``holder`` section; the gate takes the cap as its ``MAX_IN_FLIGHT`` and the
leased worker as each account's concurrency ``limits``, and neither reads
the rest of it (docs/DESIGNS.md, "One world, every design").

What each design's own settings are, with the seed lines they come from,
is in the classes below. Where a seed does not show a default (the leased
worker's loop, ``LeasedWorker``, is not in seed 004), the default here is a
modelling choice, listed in docs/DESIGNS.md.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import attrs

from semaphore_core.gate import RETRY_AFTER_S, STALE_MS
from semsim.inputs.validation import boolean, instance, integer, js_int, list_as_tuple, one_of, optional

DesignName: TypeAlias = Literal["semaphore", "gate", "leased-worker"]
#: The designs a world can run, in the order listings show them.
DESIGNS: Final[tuple[DesignName, ...]] = ("semaphore", "gate", "leased-worker")
#: The longest any of the designs' periods may be (an hour): a limit on everything.
MAX_PERIOD_MS: Final = 3_600_000


#: The opt-in fix of findings F6 and F7 (docs/FINDINGS.md): each call to the API carries its
#: fetch's deadline (``deadlineAt``), so it ends when its caller stops waiting for it, and a
#: slot or lease given back after a timeout is not still running at the API.
CALLS_END_WITH_THEIR_FETCH: Final = "calls-end-with-their-fetch"
#: The fixes the gate and the leased worker know, by name.
DESIGN_FIXES: Final = (CALLS_END_WITH_THEIR_FETCH,)


def _fixes(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(name, str) for name in value):
        raise TypeError(f"{attribute.name} must be a list of fix names, got {value!r}")
    unknown = [name for name in value if name not in DESIGN_FIXES]
    if unknown:
        raise ValueError(
            f"{attribute.name}: unknown fix {unknown[0]!r}; the fixes are {', '.join(DESIGN_FIXES)}"
        )
    if len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} names a fix twice: {list(value)!r}")


def _recorded(spec: Any) -> dict[str, Any]:
    """A design's settings as recorded: without ``fixes`` when it has none (older traces' bytes)."""
    recorded = attrs.asdict(spec)
    if not recorded["fixes"]:
        del recorded["fixes"]
    else:
        recorded["fixes"] = list(recorded["fixes"])
    return recorded


@attrs.frozen
class GateSpec:
    """The ConcurrencyGate (seed 003): its cap is the world's limit (the seed's ``MAX_IN_FLIGHT``, 6)."""

    #: False: the binding is missing, so every caller proceeds uncapped ("a DO error or missing
    #: binding never blocks an audit").
    binding: bool = attrs.field(default=True, validator=boolean)
    #: "leaked slots ... self-heal after STALE_MS (120s ...)".
    stale_ms: int = attrs.field(default=STALE_MS, converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    #: The shed answer's ``retry-after`` (seconds): "429 + retry-after: 10".
    retry_after_s: int = attrs.field(default=RETRY_AFTER_S, converter=js_int, validator=integer(1, 3_600))
    #: How soon a caller that died is running again, to take up its unfinished items (a modelling
    #: choice: the seed's callers are request handlers, restarted by whoever sent the request).
    restart_ms: int = attrs.field(default=5_000, converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    #: Opt-in fixes of the gate's findings (:data:`DESIGN_FIXES`); none: the seed's gate.
    fixes: tuple[str, ...] = attrs.field(default=(), converter=list_as_tuple, validator=_fixes)


@attrs.frozen
class RateLimitSpec:
    """One rate window per account (``rateLimits``): at most ``limit`` claims per ``window_ms``,
    and at most ``per_key`` of them per group (None: no per-group window)."""

    limit: int = attrs.field(converter=js_int, validator=integer(1, 1_000_000))
    window_ms: int = attrs.field(converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    per_key: int | None = attrs.field(
        default=None, converter=js_int, validator=optional(integer(1, 1_000_000))
    )


@attrs.frozen
class LeasedSpec:
    """The leased workflow worker (seed 004): ``LeasedWorker``'s options, one worker per client.

    Seed 004 passes ``concurrency``, ``pollInterval``, ``leaseDuration``,
    ``heartbeatInterval`` and ``shutdownTimeout`` through from the module's
    options and shows none of their defaults: the defaults here are modelling
    choices (docs/DESIGNS.md).
    """

    #: Executions one worker runs at once (the ``limit`` it claims up to).
    concurrency: int = attrs.field(default=10, converter=js_int, validator=integer(1, 10_000))
    poll_interval_ms: int = attrs.field(default=1_000, converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    lease_ms: int = attrs.field(default=30_000, converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    heartbeat_interval_ms: int = attrs.field(
        default=10_000, converter=js_int, validator=integer(1, MAX_PERIOD_MS)
    )
    shutdown_timeout_ms: int = attrs.field(
        default=10_000, converter=js_int, validator=integer(0, MAX_PERIOD_MS)
    )
    #: How soon a worker that died or shut down runs again (a process supervisor's restart).
    restart_ms: int = attrs.field(default=5_000, converter=js_int, validator=integer(1, MAX_PERIOD_MS))
    rate_limit: RateLimitSpec | None = attrs.field(default=None, validator=optional(instance(RateLimitSpec)))
    #: Opt-in fixes of the leased worker's findings (:data:`DESIGN_FIXES`); none: the seed's worker.
    fixes: tuple[str, ...] = attrs.field(default=(), converter=list_as_tuple, validator=_fixes)

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_interval_ms >= self.lease_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be shorter than lease_ms "
                f"({self.lease_ms}): a lease would run out between two renewals"
            )


@attrs.frozen
class DesignSpec:
    """The design a world runs, and its settings (the other designs' settings are not read)."""

    name: DesignName = attrs.field(default="semaphore", validator=one_of(*DESIGNS))
    gate: GateSpec = attrs.field(factory=GateSpec, validator=instance(GateSpec))
    leased: LeasedSpec = attrs.field(factory=LeasedSpec, validator=instance(LeasedSpec))

    def __attrs_post_init__(self) -> None:
        # Settings of a design the world does not run would be ignored: refused instead.
        if self.name != "gate" and self.gate != GateSpec():
            raise ValueError(f"gate settings are for design gate, and name is {self.name!r}")
        if self.name != "leased-worker" and self.leased != LeasedSpec():
            raise ValueError(f"leased settings are for design leased-worker, and name is {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """As recorded: the name, and the settings of the design it names."""
        recorded: dict[str, Any] = {"name": self.name}
        if self.name == "gate":
            recorded["gate"] = _recorded(self.gate)
        elif self.name == "leased-worker":
            recorded["leased"] = _recorded(self.leased)
        return recorded


#: The semaphore with its defaults: what a config that names no design runs.
SEMAPHORE: Final = DesignSpec()


#: The fault-plan fields that only some designs meet, and the designs that meet each; every other
#: field (message faults, partitions, drops, evictions, the API's faults) applies to every design.
#: A plan setting one for a design that does not meet it is refused, not ignored.
FAULTS_FOR: Final[dict[str, tuple[DesignName, ...]]] = {
    "alarm_retries": ("semaphore",),
    "limit_changes": ("semaphore",),
    "group_limit_changes": ("semaphore",),
    "input_faults": ("semaphore",),
    "forged_reports": ("semaphore",),
    "forged_lies": ("semaphore",),
    "cancels": ("semaphore",),
    "release_loss": ("semaphore",),
    "alarm_failure": ("semaphore",),
    "evict_holders_every_ms": ("semaphore", "gate"),
    "gate_error": ("gate",),
    "pauses": ("gate", "leased-worker"),
    "shutdowns": ("leased-worker",),
    "rollbacks": ("semaphore",),
}

#: The RPC methods each design's objects answer (what a drop may name).
METHODS_OF: Final[dict[DesignName, tuple[str, ...]]] = {
    "semaphore": ("permits", "usage", "limit_workflow", "submit", "release", "finished"),
    "gate": ("submit", "acquire", "release", "run"),
    "leased-worker": ("submit", "create", "claim", "renew", "write", "handBack", "run"),
}


def coordinators(design: DesignName, keys: tuple[str, ...]) -> list[str]:
    """The objects that keep each account's count: the semaphore's holders, the gates (the leased
    workers' store is a database, not an object: it is never evicted)."""
    if design == "semaphore":
        return [f"holder:{key}" for key in keys]
    if design == "gate":
        return [f"gate:{key}" for key in keys]
    return []
