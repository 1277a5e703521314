"""The fault model: what may go wrong in a run, as data.

A :class:`FaultPlan` holds per-message probabilities (a request lost, a reply
lost after the callee committed, a duplicate delivery, a bounded extra
delay, a message held back so it overtakes or is overtaken), scheduled
faults (an object evicted at a time, an object partitioned for a window,
periodic evictions), and platform faults (``alarm()`` throwing, a job's
completion notice lost). The network and objects draw each decision from
the run's seeded streams, so a plan plus a seed is one exact run.
"""

from __future__ import annotations

from random import Random
from typing import Any, Final

import attrs

from semsim.inputs.structure import structure
from semsim.inputs.validation import (
    MAX_TIME_MS,
    boolean,
    check_int,
    check_list,
    integer,
    js_int,
    list_as_tuple,
    named,
    one_of,
    optional,
    time_ms,
)

#: Upper bounds, so a plan can never make a run unbounded.
MAX_DELAY_MS: Final = 600_000
#: How long an eviction ``in_attempt`` waits for an attempt to strike; it strikes anyway after.
EVICT_AIM_MS: Final = 60_000
#: How far into an attempt an eviction ``in_attempt`` strikes: the attempt's call has left by then.
EVICT_INTO_ATTEMPT_MS: Final = 1


def _probability(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"faults.{name} must be a probability in [0, 1], got {value!r}")


@attrs.frozen
class Window:
    """``target`` is unreachable from ``start_ms`` until ``end_ms``: messages to and from it are lost."""

    target: str = attrs.field(validator=named)
    start_ms: int = attrs.field(converter=js_int, validator=time_ms())
    end_ms: int = attrs.field(converter=js_int, validator=time_ms())

    def __attrs_post_init__(self) -> None:
        if not self.start_ms < self.end_ms:
            raise ValueError(f"end_ms must be after start_ms ({self.start_ms}), got {self.end_ms}")

    def covers(self, name: str, t_ms: int) -> bool:
        return self.target == name and self.start_ms <= t_ms < self.end_ms


@attrs.frozen
class Eviction:
    """Evict ``target`` at ``at_ms``: its instance and everything in memory go.

    ``in_attempt``: aimed at a client's durable operation while it calls the
    external API. From ``at_ms`` it waits (up to ``EVICT_AIM_MS``) until an
    attempt of ``target`` starts, and strikes ``EVICT_INTO_ATTEMPT_MS`` into it
    (at the wait's end if none starts), so the attempt is lost with its call
    still running at the API (seed 002, "After eviction": "A remote effect may
    already have committed"). An eviction at a random moment seldom lands
    there, and what follows it (the stored alarm claiming the next attempt,
    or finding none left) is where the engine's attempt counting and the
    permit's return are tested. With F5's fix an attempt first waits while its
    operation's previous call may still run; struck then, it is lost before
    its own call leaves.
    """

    target: str = attrs.field(validator=named)
    at_ms: int = attrs.field(converter=js_int, validator=time_ms())
    in_attempt: bool = attrs.field(default=False, validator=boolean)

    @property
    def latest_ms(self) -> int:
        """The latest moment it can strike."""
        return self.at_ms + (EVICT_AIM_MS + EVICT_INTO_ATTEMPT_MS if self.in_attempt else 0)


@attrs.frozen
class Rollback:
    """At ``at_ms`` the deployment of ``holder:KEY`` rolls back one schema version, and forward again.

    A deploy rolled back and redone: the instance is evicted and its storage
    migrated down to the migration before the latest
    (``semaphore_core.migrations.migrate(conn, target)``, as the reference's
    ``migrate(ctx, target)``: the rows stay, what the older schema lacks
    goes); a new instance is built at once and migrates up again, as every
    holder does when built, and must rebuild what the newer schema keeps
    beside the rows. No other fault runs a migration's ``down`` path, or an
    ``up`` over rows that already exist. A holder never built yet has no
    schema to roll back: the fault is skipped (``fault_skipped``).
    """

    key: str = attrs.field(validator=named)
    at_ms: int = attrs.field(converter=js_int, validator=time_ms())


@attrs.frozen
class Drop:
    """Lose every ``leg`` message matching ``src``, ``dst``, ``method`` (None: any) in the window."""

    leg: str = attrs.field(validator=one_of("request", "reply"))
    start_ms: int = attrs.field(converter=js_int, validator=time_ms())
    end_ms: int = attrs.field(converter=js_int, validator=time_ms())
    src: str | None = attrs.field(default=None, validator=optional(named))
    dst: str | None = attrs.field(default=None, validator=optional(named))
    method: str | None = attrs.field(default=None, validator=optional(named))

    def __attrs_post_init__(self) -> None:
        if not self.start_ms < self.end_ms:
            raise ValueError(f"end_ms must be after start_ms ({self.start_ms}), got {self.end_ms}")

    def matches(self, leg: str, src: str, dst: str, method: str, t_ms: int) -> bool:
        return (
            self.leg == leg
            and self.start_ms <= t_ms < self.end_ms
            and self.src in (None, src)
            and self.dst in (None, dst)
            and self.method in (None, method)
        )


@attrs.frozen
class LimitChange:
    """The operator sets holder ``key``'s limit (None: every holder) at ``at_ms``."""

    at_ms: int = attrs.field(converter=js_int, validator=time_ms())
    limit: int = attrs.field(converter=js_int, validator=integer())
    key: str | None = attrs.field(default=None, validator=optional(named))


@attrs.frozen
class GroupLimitChange:
    """The operator caps ``group`` on holder ``key`` (``limitWorkflow``); None lifts the cap."""

    at_ms: int = attrs.field(converter=js_int, validator=time_ms())
    key: str = attrs.field(validator=named)
    group: str = attrs.field(validator=named)
    limit: int | None = attrs.field(converter=js_int, validator=optional(integer()))


#: The holder's callbacks a plan can make misbehave (``HolderConfig``'s inputs).
INPUTS: Final = ("can_grant", "group_limit", "limit")
#: What the forger may lie about (``semsim.world.forger``): its grants, and leases.
FORGED_LIES: Final = (
    "released_above_claimed",
    "claim_above_permits",
    "rewind",
    "negative_count",
    "unknown_lease",
    "foreign_lease",
    "replayed_lease",
)


@attrs.frozen
class InputFault:
    """A holder callback misbehaves on holder ``key`` (None: every holder) in [start_ms, end_ms).

    ``can_grant`` returns false for ``group`` (the holder answers ``not_permitted``);
    ``group_limit`` raises for ``group``, or with ``bad`` returns -1 (``limit_resolution_error``:
    the group fails closed); ``limit`` raises, or with ``bad`` returns -1, so every round in
    the window fails as a whole and its waiting calls are rejected. ``group`` None: every
    group (it must be None for ``limit``).

    ``flapping``: only every other call this fault covers misbehaves (its first, third, ...
    per group), as a setting that changes while a round reads it would (a call misbehaves
    when any fault covering it strikes). The reference reads each callback once per group
    per round (``#runRound``), so a round of it still judges each group by one answer;
    code that reads one twice in a round sees the two disagree.
    """

    input: str = attrs.field(validator=one_of(*INPUTS))
    start_ms: int = attrs.field(converter=js_int, validator=time_ms())
    end_ms: int = attrs.field(converter=js_int, validator=time_ms())
    group: str | None = attrs.field(default=None, validator=optional(named))
    key: str | None = attrs.field(default=None, validator=optional(named))
    bad: bool = attrs.field(default=False, validator=boolean)
    flapping: bool = attrs.field(default=False, validator=boolean)

    def __attrs_post_init__(self) -> None:
        if not self.start_ms < self.end_ms:
            raise ValueError(f"end_ms must be after start_ms ({self.start_ms}), got {self.end_ms}")
        if self.input == "limit" and self.group is not None:
            raise ValueError(f"group must be null for the limit, which has no group, got {self.group!r}")
        if self.input == "can_grant" and self.bad:
            raise ValueError("bad is for limit and group_limit: can_grant only denies")

    def covers(self, input: str, group: str | None, t_ms: int) -> bool:
        """Whether this fault makes ``input`` (for ``group``) misbehave at ``t_ms``."""
        return (
            self.input == input
            and self.start_ms <= t_ms < self.end_ms
            and (self.group is None or self.group == group)
        )


@attrs.frozen
class Pause(Window):
    """``target``'s process stalls from ``start_ms`` until ``end_ms`` (a GC pause): its heartbeats,
    claims and writes wait for the end, while the calls it already sent run on. (A window, as a
    partition is, of another fault.)"""


@attrs.frozen
class Shutdown:
    """At ``at_ms`` worker ``target`` shuts down as a deploy does (seed 004's ``shutdown()``), and
    its supervisor starts it again later."""

    target: str = attrs.field(validator=named)
    at_ms: int = attrs.field(converter=js_int, validator=time_ms())


@attrs.frozen
class Cancel:
    """At ``at_ms`` the user cancels the newest ``count`` items still queued on ``target``.

    One cancelled while the request carrying it waits for its round leaves a
    grant that is claimed only in part: the holder reclaims the rest at the
    claim deadline, while the claimed part runs on.

    With ``in_part`` the cancel aims there: it waits for a request on its way
    whose group has two or more items queued, and cancels up to ``count`` of
    that group's newest, always leaving its oldest (``ClientObject.cancel_in_part``).
    Without it, the newest ``count`` of any group go, and a request of one item,
    the common case, is left with nothing to claim. The swarm draws ``in_part``
    cancels (docs/BENCHMARKS.md, "A grant claimed in part").
    """

    target: str = attrs.field(validator=named)
    at_ms: int = attrs.field(converter=js_int, validator=time_ms())
    count: int = attrs.field(default=1, converter=js_int, validator=integer(1, 10_000))
    in_part: bool = attrs.field(default=False, validator=boolean)


def _lies(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_list(f"faults.{attribute.name}", value)
    for index, lie in enumerate(value):
        if lie not in FORGED_LIES:
            raise ValueError(
                f"faults.{attribute.name}[{index}] must be one of {', '.join(FORGED_LIES)}, got {lie!r}"
            )


@attrs.frozen
class FaultPlan:
    """Everything that goes wrong in one run, apart from the seed's own draws."""

    request_loss: float = 0.0
    reply_loss: float = 0.0
    duplicate: float = 0.0
    #: Extra one-way delay, uniform in [0, delay_ms], on top of the base latency.
    delay_ms: int = 0
    #: Probability a message is held back by up to ``reorder_ms`` more.
    reorder: float = 0.0
    reorder_ms: int = 0
    #: While random faults last, every message lands on the next multiple of this many ms at
    #: or after its time (a network that delivers in batches on a clock tick): messages meet
    #: in one round, and a claim or report lands on the very millisecond of a deadline or an
    #: expiry that is a multiple of it. Messages landing on one tick land in the order they
    #: were sent, so delays and reordering shorter than the tick no longer reorder anything.
    #: 0: off.
    delay_tick_ms: int = 0
    partitions: tuple[Window, ...] = ()
    #: Targeted losses: every matching message in a window (a scenario's "this reply is lost").
    drops: tuple[Drop, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    #: Evict every holder object this often (None: never).
    evict_holders_every_ms: int | None = None
    #: Probability one ``alarm()`` run throws (a storage hiccup in due work).
    alarm_failure: float = 0.0
    #: How often the platform retries a throwing ``alarm()`` before dropping it (it does
    #: 6 times; fewer models a platform that gives up sooner).
    alarm_retries: int = 6
    #: Probability a job's completion notice to its client is lost.
    release_loss: float = 0.0
    #: A forging client (``semsim.world.forger``) sends reports that lie with this probability (0: none).
    forged_reports: float = 0.0
    #: The lies the forger tells (empty: every one of ``FORGED_LIES``).
    forged_lies: tuple[str, ...] = attrs.field(default=(), converter=list_as_tuple, validator=_lies)
    #: The operator's changes during the run.
    limit_changes: tuple[LimitChange, ...] = ()
    group_limit_changes: tuple[GroupLimitChange, ...] = ()
    #: The holder's callbacks misbehaving in windows (can_grant denials, failing limits).
    input_faults: tuple[InputFault, ...] = ()
    #: The user cancels queued items (grants then claimed in part).
    cancels: tuple[Cancel, ...] = ()
    #: Random per-message faults, alarm failures and lost notices stop here (None: never),
    #: so liveness can be judged once the system has been quiet for a while.
    faults_until_ms: int | None = None
    #: The external API's faults (``semsim.world.external_api``; worlds with ``config.operations``
    #: only), probabilities per call: it fails part-way through its work, before its write ...
    api_error: float = 0.0
    #: ... it does its work and write, then answers an error (a lost completion) ...
    api_error_after_effect: float = 0.0
    #: ... or its work takes ``api_slow_factor`` times longer.
    api_slow: float = 0.0
    api_slow_factor: int = 4
    #: The gate's faults (design ``gate``): the probability it answers an acquire with an error
    #: (a non-ok, non-429 answer, on which its callers proceed uncapped) ...
    gate_error: float = 0.0
    #: ... and, for workers (designs ``gate`` and ``leased-worker``), stalls and shutdowns.
    pauses: tuple[Pause, ...] = ()
    shutdowns: tuple[Shutdown, ...] = ()
    #: The semaphore's deployments rolled back one schema version and forward again.
    rollbacks: tuple[Rollback, ...] = ()

    def __attrs_post_init__(self) -> None:
        for name in (
            "request_loss",
            "reply_loss",
            "duplicate",
            "reorder",
            "alarm_failure",
            "release_loss",
            "forged_reports",
            "api_error",
            "api_error_after_effect",
            "api_slow",
            "gate_error",
        ):
            _probability(name, getattr(self, name))
        if self.api_error + self.api_error_after_effect > 1.0:
            raise ValueError("faults.api_error + faults.api_error_after_effect must be at most 1")
        factor = self.api_slow_factor
        if isinstance(factor, bool) or not isinstance(factor, int) or not 1 <= factor <= 100:
            raise ValueError(f"faults.api_slow_factor must be an integer in [1, 100], got {factor!r}")
        for name in ("delay_ms", "reorder_ms", "delay_tick_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DELAY_MS:
                raise ValueError(f"faults.{name} must be an integer in [0, {MAX_DELAY_MS}], got {value!r}")
        retries = self.alarm_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 6:
            raise ValueError(f"faults.alarm_retries must be an integer in [0, 6], got {retries!r}")
        every = self.evict_holders_every_ms
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every <= 0):
            raise ValueError(f"faults.evict_holders_every_ms must be a positive integer, got {every!r}")
        until = self.faults_until_ms
        if until is not None:
            check_int("faults.faults_until_ms", until, 0, MAX_TIME_MS)
        for name, kind in _SCHEDULED:
            entries = getattr(self, name)
            check_list(f"faults.{name}", entries)
            for index, entry in enumerate(entries):
                if not isinstance(entry, kind):
                    raise ValueError(f"faults.{name}[{index}] must be a {kind.__name__}, got {entry!r}")

    def random(self) -> bool:
        """Whether the plan has faults that may strike at any moment (rates, periodic evictions)."""
        return bool(
            self.request_loss
            or self.reply_loss
            or self.duplicate
            or self.delay_ms
            or self.delay_tick_ms
            or self.reorder
            or self.alarm_failure
            or self.release_loss
            or self.forged_reports
            or self.evict_holders_every_ms is not None
            or self.api_faults()
            or self.gate_error
        )

    def api_faults(self) -> bool:
        """Whether the plan has faults of the external API."""
        return bool(self.api_error or self.api_error_after_effect or self.api_slow)

    def quiet_from_ms(self, duration_ms: int) -> int:
        """When the last fault of this plan is over, in a run whose story lasts ``duration_ms``.

        Random faults stop at ``faults_until_ms``, or at ``duration_ms`` when
        the plan does not say; scheduled ones at their last time or window end.
        """
        ends = [0]
        if self.random():
            ends.append(duration_ms if self.faults_until_ms is None else self.faults_until_ms)
        ends += [window.end_ms for window in self.partitions]
        ends += [drop.end_ms for drop in self.drops]
        ends += [eviction.latest_ms for eviction in self.evictions]
        ends += [change.at_ms for change in self.limit_changes]
        ends += [change.at_ms for change in self.group_limit_changes]
        ends += [fault.end_ms for fault in self.input_faults]
        ends += [cancel.at_ms for cancel in self.cancels]
        ends += [pause.end_ms for pause in self.pauses]
        ends += [shutdown.at_ms for shutdown in self.shutdowns]
        ends += [rollback.at_ms for rollback in self.rollbacks]
        return min(duration_ms, max(ends))

    def active(self, t_ms: int) -> bool:
        """Whether random faults still apply at ``t_ms``."""
        return self.faults_until_ms is None or t_ms < self.faults_until_ms

    def partitioned(self, name: str, t_ms: int) -> bool:
        return any(window.covers(name, t_ms) for window in self.partitions)

    def dropped(self, leg: str, src: str, dst: str, method: str, t_ms: int) -> bool:
        return any(drop.matches(leg, src, dst, method, t_ms) for drop in self.drops)

    def to_dict(self) -> dict[str, Any]:
        """As recorded in a trace header (and read back by ``from_dict``).

        The API's faults are written only when set: a plan without them is
        recorded as it was before they existed, so older traces and cases
        read back the same and keep their bytes.
        """
        recorded = attrs.asdict(self, recurse=True)
        for name in _WRITTEN_WHEN_SET:
            if recorded[name] == _DEFAULTS[name] or recorded[name] == []:
                del recorded[name]
        for eviction in recorded["evictions"]:  # an eviction at its time reads as it always has
            if not eviction["in_attempt"]:
                del eviction["in_attempt"]
        for fault in recorded["input_faults"]:  # a steady callback fault reads as it always has
            if not fault["flapping"]:
                del fault["flapping"]
        for cancel in recorded["cancels"]:  # a cancel of any group reads as it always has
            if not cancel["in_part"]:
                del cancel["in_part"]
        return recorded

    @classmethod
    def from_dict(cls, data: Any) -> FaultPlan:
        """The inverse of ``to_dict``; ValueError names the field, with its path (``faults.drops[0].leg``)."""
        return structure(data, cls, "faults")


#: The plan's scheduled faults: each list's field and the class of its entries.
_SCHEDULED: Final[tuple[tuple[str, type], ...]] = (
    ("partitions", Window),
    ("drops", Drop),
    ("evictions", Eviction),
    ("limit_changes", LimitChange),
    ("group_limit_changes", GroupLimitChange),
    ("input_faults", InputFault),
    ("cancels", Cancel),
    ("pauses", Pause),
    ("shutdowns", Shutdown),
    ("rollbacks", Rollback),
)

NO_FAULTS: Final = FaultPlan()


def random_plan(seed: int, targets: list[str], duration_ms: int) -> FaultPlan:
    """A random fault plan for ``seed``: a few fault kinds on, at random rates and times."""
    rng = Random(f"semsim-fault-plan:{seed}")

    def maybe(p: float) -> float:
        return round(rng.uniform(0.01, p), 3) if rng.random() < 0.5 else 0.0

    def window() -> tuple[int, int]:
        start = rng.randrange(0, max(1, duration_ms - 1_000))
        return start, min(duration_ms, start + rng.randint(500, 20_000))

    partitions = tuple(Window(rng.choice(targets), *window()) for _ in range(rng.randint(0, 2)) if targets)
    evictions = tuple(
        Eviction(rng.choice(targets), rng.randrange(0, duration_ms))
        for _ in range(rng.randint(0, 3))
        if targets
    )
    return FaultPlan(
        request_loss=maybe(0.2),
        reply_loss=maybe(0.2),
        duplicate=maybe(0.2),
        delay_ms=rng.choice([0, 0, 50, 500]),
        reorder=maybe(0.3),
        reorder_ms=rng.choice([0, 100, 1_000]),
        partitions=partitions,
        evictions=evictions,
        alarm_failure=maybe(0.5),
        release_loss=maybe(0.3),
    )


#: Fields added with the account-concurrency world and the other designs: absent from a recorded
#: plan that leaves them unset.
_WRITTEN_WHEN_SET: Final = (
    "delay_tick_ms",
    "api_error",
    "api_error_after_effect",
    "api_slow",
    "api_slow_factor",
    "gate_error",
    "pauses",
    "shutdowns",
    "rollbacks",
)
_DEFAULTS: Final = {field.name: field.default for field in attrs.fields(FaultPlan)}
