"""Holder and lease configuration, validated with the reference's rules.

Each rule cites the reference check it mirrors (``DurabilitySemaphoreServer``'s
constructor and ``resolveLeasePolicy``). An invalid value raises
:class:`SemaphoreConfigError` (a ``ValueError``) whose message names the field.

One deliberate tightening: the reference accepts any finite non-negative
*number* as an absolute ``reserve``/``extra``, so ``reserve: 2.5`` yields
fractional permit budgets. semsim requires an integer (use ``Ratio`` for
fractions); see docs/FINDINGS.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Final, Literal, TypeAlias

import attrs

from semaphore_core.errors import SemaphoreConfigError
from semaphore_core.events import Event
from semaphore_core.fixes import KNOWN_FIXES
from semaphore_core.numbers import MAX_DELAY_MS, MAX_SAFE_INTEGER, as_safe_int

LimitedGroups: TypeAlias = Literal["exclude", "within_group_limit"]
LIMITED_GROUPS: Final = ("exclude", "within_group_limit")


def _js_int(value: object) -> object:
    """Integral floats become ints (JavaScript cannot tell them apart); anything else passes through."""
    as_int = as_safe_int(value)
    return value if as_int is None else as_int


def _positive_int(name: str, value: object, maximum: int = MAX_SAFE_INTEGER) -> None:
    # assertPositiveInteger(name, value) (a safe integer, as Number.isSafeInteger has it),
    # then the 2^31 - 1 delay cap where the reference has one.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SemaphoreConfigError(f"{name} must be a positive integer, got {value!r}")
    if value > maximum:
        raise SemaphoreConfigError(f"{name} must be at most {maximum}, got {value!r}")


@attrs.frozen
class Ratio:
    """A share of the limit: ``floor(limit * value)`` permits."""

    value: float

    def __attrs_post_init__(self) -> None:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise SemaphoreConfigError(f"Ratio value must be a finite non-negative number, got {v!r}")
        if v > MAX_SAFE_INTEGER:  # limit * value must stay a finite number of permits
            raise SemaphoreConfigError(f"Ratio value must be at most {MAX_SAFE_INTEGER}, got {v!r}")


Amount: TypeAlias = int | Ratio


def _check_amount(name: str, amount: object) -> None:
    if isinstance(amount, Ratio):
        return
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= MAX_SAFE_INTEGER:
        raise SemaphoreConfigError(f"{name} must be a non-negative safe integer or a Ratio, got {amount!r}")


@attrs.frozen
class Strict:
    """Grants and live lease footprint share the limit, grants first."""


@attrs.frozen
class Under:
    """A reserve inside the limit is kept for leases; it never takes the last permit."""

    reserve: Amount = attrs.field(converter=_js_int)

    def __attrs_post_init__(self) -> None:
        _check_amount("leases.provisioning.reserve", self.reserve)


@attrs.frozen
class Over:
    """Leases come from a separate budget above the limit: the ceiling is limit + extra."""

    extra: Amount = attrs.field(converter=_js_int)

    def __attrs_post_init__(self) -> None:
        _check_amount("leases.provisioning.extra", self.extra)


Provisioning: TypeAlias = Strict | Under | Over


@attrs.frozen
class Budgets:
    """Permits grants may use and leases may hold, for one resolved limit."""

    grants: int
    leases: int
    #: True in strict mode: grants and lease footprint draw on one pool.
    shared: bool


def scaled(amount: Amount, limit: int) -> int:
    """``scaled`` in semaphore-leases.ts: absolute, or floor(limit * ratio) in IEEE doubles."""
    if isinstance(amount, Ratio):
        return math.floor(limit * amount.value)
    return amount


def budgets(provisioning: Provisioning, limit: int) -> Budgets:
    """``budgets`` in semaphore-leases.ts."""
    if isinstance(provisioning, Over):
        return Budgets(grants=limit, leases=scaled(provisioning.extra, limit), shared=False)
    if isinstance(provisioning, Under):
        # The reserve never takes the last permit: groups excluded from leases
        # and clients without lease support would otherwise never be admitted.
        reserve = min(max(0, limit - 1), scaled(provisioning.reserve, limit))
        return Budgets(grants=limit - reserve, leases=reserve, shared=False)
    return Budgets(grants=limit, leases=limit, shared=True)


@attrs.frozen
class LeaseOptions:
    """``SemaphoreLeaseOptions`` with the reference's defaults."""

    provisioning: Provisioning = attrs.field(factory=Strict)
    permits_per_lease: int = attrs.field(default=64, converter=_js_int)
    ttl_ms: int = attrs.field(default=30 * 60_000, converter=_js_int)
    max_groups: int = attrs.field(default=100, converter=_js_int)
    max_clients_per_group: int = attrs.field(default=100, converter=_js_int)
    limited_groups: LimitedGroups = "exclude"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.provisioning, Strict | Under | Over):
            raise SemaphoreConfigError(
                f"leases.provisioning must be Strict(), Under(...) or Over(...), got {self.provisioning!r}"
            )
        _positive_int("leases.permits_per_lease", self.permits_per_lease)
        _positive_int("leases.ttl_ms", self.ttl_ms, MAX_DELAY_MS)
        _positive_int("leases.max_groups", self.max_groups)
        _positive_int("leases.max_clients_per_group", self.max_clients_per_group)
        if self.limited_groups not in LIMITED_GROUPS:
            raise SemaphoreConfigError(
                f"leases.limited_groups must be 'exclude' or 'within_group_limit', "
                f"got {self.limited_groups!r}"
            )


def _as_fixes(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        raise SemaphoreConfigError(f"fixes must be a collection of fix names, got the string {value!r}")
    try:
        names = frozenset(value)
    except TypeError:  # not iterable, or holds something unhashable (a list)
        raise SemaphoreConfigError(f"fixes must be a collection of fix names, got {value!r}") from None
    odd = sorted(repr(name) for name in names if not isinstance(name, str))
    if odd:
        raise SemaphoreConfigError(f"fixes must be fix names (strings), got {', '.join(odd)}")
    return names


LimitSource: TypeAlias = int | Callable[[], int]
GroupLimit: TypeAlias = Callable[[str], "int | None"]
CanGrant: TypeAlias = Callable[[str], bool]


@attrs.frozen
class HolderConfig:
    """``DurabilitySemaphoreConfig`` minus the scheduler attachment, plus semsim's ``fixes``.

    ``fixes`` opts into corrections of reference behaviour recorded in
    docs/FINDINGS.md; the default (empty) is the faithful reference.
    """

    limit: LimitSource = attrs.field(converter=_js_int)
    group_limit: GroupLimit | None = None
    can_grant: CanGrant | None = None
    round_wait_ms: int = attrs.field(default=1_000, converter=_js_int)
    round_period_ms: int = attrs.field(default=2_000, converter=_js_int)
    grant_timeout_ms: int = attrs.field(default=10_000, converter=_js_int)
    leases: LeaseOptions | None = None
    #: ``onLifecycleEvent``: each lifecycle event of a round, sync or reclaim, in emission
    #: order, after the commit it describes. The reference's emitter is best effort; here an
    #: exception from the hook is not swallowed (a checker's hook may be judging the run): it
    #: propagates after the commit, the rows stay, and the call's reply and later events are lost.
    on_event: Callable[[Event], None] | None = None
    fixes: frozenset[str] = attrs.field(default=frozenset(), converter=_as_fixes)

    def __attrs_post_init__(self) -> None:
        limit = self.limit
        if not callable(limit) and (
            isinstance(limit, bool) or not isinstance(limit, int) or as_safe_int(limit) is None or limit < 0
        ):
            raise SemaphoreConfigError(f"limit must be a non-negative safe integer, got {limit!r}")
        for name in ("group_limit", "can_grant", "on_event"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise SemaphoreConfigError(f"{name} must be callable or None, got {value!r}")
        _positive_int("round_wait_ms", self.round_wait_ms, MAX_DELAY_MS)
        _positive_int("round_period_ms", self.round_period_ms, MAX_DELAY_MS)
        _positive_int("grant_timeout_ms", self.grant_timeout_ms, MAX_DELAY_MS)
        if self.leases is not None and not isinstance(self.leases, LeaseOptions):
            raise SemaphoreConfigError(f"leases must be LeaseOptions or None, got {self.leases!r}")
        unknown = sorted(self.fixes - KNOWN_FIXES.keys())
        if unknown:
            raise SemaphoreConfigError(
                f"fixes: unknown fix {unknown[0]!r}; known fixes: {', '.join(sorted(KNOWN_FIXES)) or 'none'}"
            )
