"""A whole simulated system: holders, clients, the job service, the network, a workload.

``run_world(config, faults, seed)`` builds everything from one config and
one fault plan, runs it under the deterministic runtime, and returns the
trace (whose header records the seed, the config and the plan) with the
objects for inspection. The same three inputs give the same trace bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
import trio

from semaphore_core import HolderConfig, LeaseOptions, Over, Ratio, Strict, Under, migrations
from semaphore_core.durability.engine import MAX_ALARM_DELAY_MS, MIN_ALARM_DELAY_MS
from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
from semaphore_core.numbers import MAX_DELAY_MS, MAX_SAFE_INTEGER
from semsim import __version__
from semsim.check.checker import Checker, check_checkers
from semsim.check.invariants import INVARIANTS, KNOWN_FINDINGS, PROGRESS_WINDOW_MS, Monitor, Pending
from semsim.inputs.structure import structure
from semsim.inputs.validation import (
    boolean,
    check_int,
    check_number,
    check_seed,
    instance,
    integer,
    js_int,
    list_as_tuple,
    one_of,
    optional,
    time_ms,
)
from semsim.runtime.durable import DurableObject, Factory
from semsim.runtime.kernel import SCHEDULE, Limits, RunResult, Sim, run
from semsim.runtime.network import DEFAULT_LATENCY_MS, Network
from semsim.runtime.scheduler import NO_ALARM_FAULTS, AlarmFaults
from semsim.runtime.timers import Signal, Tie
from semsim.runtime.trace import Trace
from semsim.world.client_object import ALARM_FLOOR_MS, ClientObject, ClientSettings
from semsim.world.design import FAULTS_FOR, METHODS_OF, SEMAPHORE, DesignSpec, coordinators
from semsim.world.external_api import NAME as API
from semsim.world.external_api import ApiSpec, ExternalApi
from semsim.world.faults import EVICT_AIM_MS, EVICT_INTO_ATTEMPT_MS, FaultPlan, InputFault
from semsim.world.forger import forge, forge_leases, lease_rows
from semsim.world.holder_object import Env, HolderObject
from semsim.world.jobs import Jobs
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.operations import OperationsSpec
from semsim.world.variant import REFERENCE, Variant
from semsim.world.workload import Workload, arrivals

PROGRESS_SAMPLE_MS = 5_000
#: Names a user's invariant may not take: semsim's own invariants, and the outcomes a failed
#: run reports where no invariant broke (a case file's ``expect`` could not tell them apart).
RESERVED_NAMES = (*INVARIANTS, "violation", "crash", "deadlock", "time_limit", "step_limit")
#: Every RPC method a semaphore world's objects answer (what a drop may name).
METHODS = METHODS_OF["semaphore"]
#: A fault plan's fields as a plan without faults has them.
_NO_FAULT = {field.name: getattr(FaultPlan(), field.name) for field in attrs.fields(FaultPlan)}
#: The most items a run's workload may submit: every item costs memory and trace events
#: (a day of the standard workload, 138,240 items and about 3 million trace events, peaks
#: near 2 GiB: docs/BENCHMARKS.md).
MAX_ITEMS = 200_000
#: How long a run may go on past ``duration_ms`` to settle (virtual time): at least this,
#: more when much work is left (each item may take a stall window), at most the maximum.
MIN_SETTLE_MS = 6 * 3_600_000
MAX_SETTLE_MS = 48 * 3_600_000


def _amount(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Under's reserve or over's extra: an absolute count (int) or a ratio of the limit (float)."""
    if isinstance(value, float):
        check_number(attribute.name, value, -1.0, float(MAX_SAFE_INTEGER))  # a ratio: 0 allowed
        if value < 0:
            raise ValueError(f"{attribute.name} must be a non-negative ratio, got {value!r}")
    else:
        check_int(attribute.name, value)


@attrs.frozen
class LeaseSpec:
    """Lease options as plain data (what a trace header records)."""

    provisioning: Literal["strict", "under", "over"] = attrs.field(
        default="strict", validator=one_of("strict", "under", "over")
    )
    #: Under's reserve or over's extra: an int is absolute, a float a ratio of the limit.
    amount: int | float = attrs.field(default=0, validator=_amount)
    permits_per_lease: int = attrs.field(default=64, converter=js_int, validator=integer(1))
    ttl_ms: int = attrs.field(default=1_800_000, converter=js_int, validator=integer(1, MAX_DELAY_MS))
    max_groups: int = attrs.field(default=100, converter=js_int, validator=integer(1))
    max_clients_per_group: int = attrs.field(default=100, converter=js_int, validator=integer(1))
    limited_groups: Literal["exclude", "within_group_limit"] = attrs.field(
        default="exclude", validator=one_of("exclude", "within_group_limit")
    )

    def __attrs_post_init__(self) -> None:
        self.options()  # the holder's own rules too (they raise naming the field)

    def options(self) -> LeaseOptions:
        amount: int | Ratio = Ratio(self.amount) if isinstance(self.amount, float) else self.amount
        provisioning: Strict | Under | Over
        if self.provisioning == "under":
            provisioning = Under(reserve=amount)
        elif self.provisioning == "over":
            provisioning = Over(extra=amount)
        else:
            provisioning = Strict()
        return LeaseOptions(
            provisioning=provisioning,
            permits_per_lease=self.permits_per_lease,
            ttl_ms=self.ttl_ms,
            max_groups=self.max_groups,
            max_clients_per_group=self.max_clients_per_group,
            limited_groups=self.limited_groups,
        )


def _lease_spec(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, LeaseSpec):
        raise ValueError(f"{attribute.name} must be lease options or null, got {value!r}")


@attrs.frozen
class HolderSpec:
    """The holder's settings as plain data, checked by the holder's own rules when built."""

    limit: int = attrs.field(default=10, converter=js_int)
    round_wait_ms: int = attrs.field(default=1_000, converter=js_int)
    round_period_ms: int = attrs.field(default=2_000, converter=js_int)
    grant_timeout_ms: int = attrs.field(default=10_000, converter=js_int)
    leases: LeaseSpec | None = attrs.field(default=LeaseSpec(), validator=_lease_spec)
    fixes: tuple[str, ...] = attrs.field(
        default=(),
        converter=list_as_tuple,
        validator=instance(tuple, "a list or tuple of fix names (a set has no order to keep)"),
    )
    #: The engine's bounds (seed 002's ``alarmMinDelayMs``): checked here so a case file says so.
    alarm_min_delay_ms: int = attrs.field(
        default=MAX_ALARM_DELAY_MS,
        converter=js_int,
        validator=integer(MIN_ALARM_DELAY_MS, MAX_ALARM_DELAY_MS),
    )
    engine_fallback: bool = attrs.field(default=True, validator=boolean)

    def __attrs_post_init__(self) -> None:
        # The same rules, and messages, as the holder: ``HolderConfig`` raises naming the field.
        HolderConfig(
            limit=self.limit,
            round_wait_ms=self.round_wait_ms,
            round_period_ms=self.round_period_ms,
            grant_timeout_ms=self.grant_timeout_ms,
            fixes=self.fixes,
        )

    def env(
        self,
        alarm_failure: float = 0.0,
        faults_until_ms: int | None = None,
        input_faults: tuple[InputFault, ...] = (),
    ) -> Env:
        return Env(
            limit=self.limit,
            round_wait_ms=self.round_wait_ms,
            round_period_ms=self.round_period_ms,
            grant_timeout_ms=self.grant_timeout_ms,
            leases=None if self.leases is None else self.leases.options(),
            fixes=frozenset(self.fixes),
            alarm_min_delay_ms=self.alarm_min_delay_ms,
            engine_fallback=self.engine_fallback,
            alarm_failure=alarm_failure,
            faults_until_ms=faults_until_ms,
            input_faults=input_faults,
        )


@attrs.frozen
class WorldConfig:
    holder: HolderSpec = attrs.field(factory=HolderSpec, validator=instance(HolderSpec))
    workload: Workload = attrs.field(factory=Workload, validator=instance(Workload))
    client: ClientSettings = attrs.field(factory=ClientSettings, validator=instance(ClientSettings))
    #: How long the story lasts: arrivals stop here, and so do faults the plan does not stop
    #: sooner. The run goes on past it until it settles, for liveness (see ``run_world``).
    duration_ms: int = attrs.field(default=3_600_000, converter=js_int, validator=time_ms(1))
    latency_ms: int = attrs.field(
        default=DEFAULT_LATENCY_MS, converter=js_int, validator=integer(0, MAX_DELAY_MS)
    )
    #: The account-concurrency world (seed 000's example): admitted items run as durable
    #: operations calling the external API. None: they run on the job service.
    operations: OperationsSpec | None = attrs.field(
        default=None, validator=optional(instance(OperationsSpec))
    )
    #: The design its objects run (:mod:`semsim.world.design`): the semaphore unless told.
    design: DesignSpec = attrs.field(default=SEMAPHORE, validator=instance(DesignSpec))

    def __attrs_post_init__(self) -> None:
        if not self.client.lease_capable:
            raise ValueError(
                "client.lease_capable is set for each client by workload.plain_clients; leave it out"
            )
        offered = offered_items(self.workload, self.duration_ms)
        if offered > MAX_ITEMS:
            raise ValueError(
                f"workload would submit about {offered:,} items in duration_ms; at most {MAX_ITEMS:,} a run"
            )

    def to_dict(self) -> dict[str, Any]:
        """As recorded in a trace header; ``operations`` only when set (older records keep their bytes)."""
        recorded = attrs.asdict(self, recurse=True)
        if self.operations is None:
            del recorded["operations"]
        else:
            recorded["operations"] = self.operations.to_dict()
        if self.workload.paced_by_intake:  # the default: older records keep their bytes
            del recorded["workload"]["paced_by_intake"]
        if self.design == SEMAPHORE:
            del recorded["design"]
        else:
            recorded["design"] = self.design.to_dict()
        return recorded

    @classmethod
    def from_dict(cls, data: Any) -> WorldConfig:
        """The inverse of ``to_dict`` (a trace header's or case file's ``config``).

        ValueError names the field that is wrong, with its path (``config.holder.limit``):
        :func:`semsim.inputs.structure.structure` walks it by the classes' annotations.
        """
        return structure(data, cls, "config")


def offered_items(workload: Workload, duration_ms: int) -> int:
    """About how many items ``workload`` submits before ``duration_ms`` (its expected count)."""
    if workload.script:
        return sum(arrival.count for arrival in workload.script)
    window_ms = min(workload.until_ms, duration_ms)
    if workload.arrival == "steady":
        per_client = workload.items_per_minute * window_ms / 60_000
    else:
        per_client = workload.burst_size * (window_ms // workload.burst_every_ms + 1)
    return round(workload.clients * per_client)


@attrs.define
class World:
    """The objects of a run, kept for inspection after it ends."""

    sim: Sim
    network: Network
    jobs: Jobs
    monitor: Monitor
    holders: dict[str, DurableObject]
    clients: dict[str, DurableObject]
    envs: dict[str, Env]
    #: The external API (worlds with ``config.operations`` only).
    api: ExternalApi | None = None
    #: Told of each batch the workload first sends (a meter, say: :func:`run_world`'s ``observe``).
    submit_watchers: list[Callable[[list[dict[str, Any]]], None]] = attrs.field(factory=list)
    #: Evictions ``in_attempt`` waiting for an attempt of their client, by client.
    attempt_aims: dict[str, list[Signal]] = attrs.field(factory=dict)

    def submitted(self, items: list[dict[str, Any]]) -> None:
        for watcher in self.submit_watchers:
            watcher(items)

    def attempt_starting(self, client: str) -> None:
        """Told by a client as one of its operations' attempts starts: wakes an eviction aimed at it."""
        for aim in self.attempt_aims.pop(client, ()):
            aim.set()

    def holder_name(self, key: str) -> str:
        return f"holder:{key}"


@attrs.frozen(hash=False)
class WorldRun:
    trace: Trace
    result: RunResult
    world: World

    @property
    def monitor(self) -> Monitor:
        return self.world.monitor

    @property
    def variant(self) -> Variant:
        """The holder design the run judged, and by whom (``variant.judges()``)."""
        return self.world.monitor.variant

    def judges(self) -> tuple[str, ...]:
        """Who judged the run, in words a verdict can print: the variant's judges, then the
        user's invariants by name."""
        return (*self.variant.judges(), *(checker.name for checker in self.monitor.checkers))


def run_world(
    config: WorldConfig,
    faults: FaultPlan,
    seed: int,
    limits: Limits | None = None,
    tolerated: frozenset[str] = frozenset(),
    full_checks: bool = False,
    variant: Variant = REFERENCE,
    checkers: Sequence[type[Checker]] = (),
    progress: Callable[[int], None] | None = None,
    observe: Callable[[Sim, World, int], Callable[[], None]] | None = None,
) -> WorldRun:
    """Build and run one world; the trace header records seed, config and faults.

    ``variant`` is the holder design its holders run and who judges it
    (:mod:`semsim.world.variant`): the reference, judged against the literal
    model, unless told. The header names any other, with its judges; the
    variant's fixes join the config's, and its patch is entered around the run.
    ``checkers`` are the user's own invariants (:mod:`semsim.check.checker`),
    judged beside semsim's; the header names them. ``progress`` is told the
    virtual time now and then (a command's progress bar); it changes nothing.
    ``observe`` is called with the simulation, the world just built and when
    its faults stop, and returns what to call once liveness is judged: a
    watcher that reads and never writes (``semsim.harness.designs``' meter).

    The world runs the semaphore: a config naming another design
    (``config.design``) is run by :func:`semsim.harness.designs.run_design`,
    and refused here.

    Invariants are checked throughout; a violation ends the run (outcome
    ``violation``) unless it is a known finding named in ``tolerated``.
    ``full_checks`` is the checker's debug mode: every commit is judged from
    every row and every client's storage rather than from what changed, and
    the incremental state is asserted to agree (the verdicts are the same;
    the run is slower, more so the more clients it has).

    Arguments are checked before anything runs (:func:`check_world_run`): TypeError or ValueError
    naming the argument and what it may be.
    """
    checkers = check_world_run(config, faults, seed, limits, tolerated, full_checks, variant, checkers)
    if not variant.fixes <= set(config.holder.fixes):
        # The variant's own fixes are the config's too, so the trace and the model say so.
        config = attrs.evolve(
            config, holder=attrs.evolve(config.holder, fixes=variant.with_fixes(config.holder.fixes))
        )
    trace = Trace(seed, config.to_dict(), faults.to_dict())
    trace.header["semsim"] = __version__
    trace.header["schedule"] = SCHEDULE
    if variant != REFERENCE:
        trace.header["variant"] = {"name": variant.name, "judges": list(variant.judges())}
    if checkers:
        trace.header["invariants"] = [checker.name for checker in checkers]
    quiet_from_ms = faults.quiet_from_ms(config.duration_ms)
    # Random faults stop at the quiet point when the plan does not stop them sooner.
    if faults.faults_until_ms is None:
        faults = attrs.evolve(faults, faults_until_ms=quiet_from_ms)
    built: list[World] = []

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:

            def judge(
                network: Network,
                api: ExternalApi | None,
                clients: Mapping[str, DurableObject],
                jobs: Jobs,
            ) -> Monitor:
                return Monitor(
                    sim,
                    tolerated,
                    full=full_checks,
                    variant=variant,
                    checkers=checkers,
                    network=network,
                    api=api,
                    clients=clients,
                    max_attempts=None if config.operations is None else config.operations.max_attempts,
                    retry_delay=None if config.operations is None else config.operations.retry_delay(),
                    attempt_timeout_ms=None
                    if config.operations is None
                    else config.operations.attempt_timeout_ms,
                    jobs=jobs,
                    releases_at_end=config.operations is not None
                    and CALLS_END_WITHIN_THEIR_PERMIT not in config.holder.fixes,
                )

            world = _build(sim, config, faults, nursery, judge, variant)
            built.append(world)
            finish = None if observe is None else observe(sim, world, quiet_from_ms)
            await _judge_liveness(sim, world, config, quiet_from_ms)
            if finish is not None:
                finish()
            nursery.cancel_scope.cancel()

    bound = limits or Limits(time_limit_ms=config.duration_ms + MAX_SETTLE_MS + 1)
    with variant.applied():  # a planted bug, say: for this run only, whatever happens in it
        result = run(seed, main, trace, bound, progress)
    return WorldRun(trace=trace, result=result, world=built[0])


def check_world_run(
    config: object,
    faults: object,
    seed: object,
    limits: object = None,
    tolerated: object = frozenset(),
    full_checks: object = False,
    variant: object = REFERENCE,
    checkers: Sequence[type[Checker]] = (),
) -> tuple[type[Checker], ...]:
    """Everything :func:`run_world` checks before it runs (TypeError or ValueError naming the
    argument), so a caller that treats what the run raises as a crash can tell a caller's
    error apart first. Returns ``checkers`` as the run takes them.
    """
    check_run(config, faults, seed, tolerated)
    assert isinstance(config, WorldConfig)
    if config.design.name != "semaphore":
        raise ValueError(
            f"config.design names {config.design.name!r}: run_world runs the semaphore; "
            f"semsim.harness.designs.run_design runs every design"
        )
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a semsim.runtime.kernel.Limits or None, got {limits!r}")
    if not isinstance(full_checks, bool):
        raise TypeError(f"full_checks must be True or False, got {full_checks!r}")
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a semsim.world.variant.Variant, got {variant!r}")
    variant.check_design(config.design.name)  # a gate's ledger, say, would be ignored here
    return check_checkers(checkers, RESERVED_NAMES)


def check_run(config: object, faults: object, seed: object, tolerated: object = frozenset()) -> None:
    """What :func:`run_world` checks before it runs: TypeError or ValueError naming the argument.

    ``config`` a :class:`WorldConfig`; ``faults`` a :class:`~semsim.world.faults.FaultPlan` that
    fits it (:func:`check_plan`); ``seed`` an ``int`` in ``[0, MAX_SEED]`` (``1.0`` and ``True``
    are not seed 1); ``tolerated`` a set or frozenset of known finding names (a string is not
    one: ``"F4"`` is not ``{"F4"}``).
    """
    if not isinstance(config, WorldConfig):
        raise TypeError(f"config must be a semsim.harness.run.WorldConfig, got {config!r}")
    if not isinstance(faults, FaultPlan):
        raise TypeError(
            f"faults must be a semsim.world.faults.FaultPlan (FaultPlan() for none), got {faults!r}"
        )
    check_seed(seed)
    check_tolerated(tolerated)
    check_plan(config, faults)


def check_tolerated(tolerated: object, name: str = "tolerated") -> None:
    """A set or frozenset of known finding names (docs/FINDINGS.md): TypeError or ValueError otherwise."""
    known = ", ".join(sorted(KNOWN_FINDINGS))
    if not isinstance(tolerated, set | frozenset):
        raise TypeError(
            f"{name} must be a set or frozenset of known finding names ({known}), "
            f'e.g. frozenset({{"F4"}}), got {tolerated!r}'
        )
    strange = sorted((item for item in tolerated if item not in KNOWN_FINDINGS), key=repr)
    if strange:
        raise ValueError(f"{name} names {strange[0]!r}, not a known finding ({known})")


def check_plan(config: WorldConfig, faults: FaultPlan) -> None:
    """A plan's faults must happen within the run's story: ValueError naming the field otherwise.

    Liveness is judged once every fault has stopped, so nothing may be
    scheduled after ``duration_ms`` (the run may go on past it to settle).
    """
    end = config.duration_ms
    design = config.design.name
    for field, designs in FAULTS_FOR.items():
        if design not in designs and getattr(faults, field) != _NO_FAULT[field]:
            raise ValueError(
                f"faults.{field} is a fault of design {' and '.join(designs)}: config.design is {design!r}"
            )
    if faults.api_faults() and config.operations is None and design == "semaphore":
        raise ValueError(
            "faults.api_error, api_error_after_effect and api_slow are faults of the external API, "
            "which only a world with config.operations calls"
        )
    if faults.faults_until_ms is not None and faults.faults_until_ms > end:
        raise ValueError(f"faults.faults_until_ms ({faults.faults_until_ms}) is after duration_ms ({end})")
    for name in ("partitions", "drops", "input_faults", "pauses"):
        for index, window in enumerate(getattr(faults, name)):
            if window.end_ms > end:
                raise ValueError(
                    f"faults.{name}[{index}].end_ms ({window.end_ms}) is after duration_ms ({end})"
                )
    for name in ("evictions", "limit_changes", "group_limit_changes", "cancels", "shutdowns", "rollbacks"):
        for index, entry in enumerate(getattr(faults, name)):
            if entry.at_ms >= end:
                raise ValueError(
                    f"faults.{name}[{index}].at_ms ({entry.at_ms}) is not before duration_ms ({end})"
                )
    clients = config.workload.client_names()
    objects = [*coordinators(design, config.workload.keys), *clients]
    if design == "semaphore":
        endpoints = [
            *objects,
            "jobs",
            "workload",
            "forger",
            *([API] if config.operations is not None else []),
        ]
    else:
        endpoints = [*objects, "workload", API, *([STORE] if design == "leased-worker" else [])]
    for name, entries, field, known in (
        (
            "partitions",
            faults.partitions,
            "target",
            [*objects, *([STORE] if design == "leased-worker" else [])],
        ),
        ("evictions", faults.evictions, "target", objects),
        ("drops", faults.drops, "src", endpoints),
        ("drops", faults.drops, "dst", endpoints),
        ("drops", faults.drops, "method", METHODS_OF[design]),
        ("pauses", faults.pauses, "target", clients),
        ("shutdowns", faults.shutdowns, "target", clients),
        ("limit_changes", faults.limit_changes, "key", config.workload.keys),
        ("group_limit_changes", faults.group_limit_changes, "key", config.workload.keys),
        ("group_limit_changes", faults.group_limit_changes, "group", config.workload.groups),
        ("input_faults", faults.input_faults, "key", config.workload.keys),
        ("input_faults", faults.input_faults, "group", config.workload.groups),
        ("cancels", faults.cancels, "target", config.workload.client_names()),
        ("rollbacks", faults.rollbacks, "key", config.workload.keys),
    ):
        for index, entry in enumerate(entries):
            value = getattr(entry, field)
            if value is not None and value not in known:
                shown = ", ".join(known[:6]) + (f", ... ({len(known)} in all)" if len(known) > 6 else "")
                raise ValueError(
                    f"faults.{name}[{index}].{field} {value!r} names nothing in this world: {shown}"
                )
    for index, eviction in enumerate(faults.evictions):
        if not eviction.in_attempt:
            continue
        if design != "semaphore" or config.operations is None:
            raise ValueError(
                f"faults.evictions[{index}].in_attempt aims at a client's durable operation: "
                "only a semaphore world with config.operations runs them"
            )
        if eviction.latest_ms >= end:
            raise ValueError(
                f"faults.evictions[{index}].in_attempt may strike as late as {eviction.latest_ms} "
                f"(at_ms + {EVICT_AIM_MS + EVICT_INTO_ATTEMPT_MS}), not before duration_ms ({end})"
            )
        if eviction.target not in clients:
            raise ValueError(
                f"faults.evictions[{index}].in_attempt aims at a client's operation, and "
                f"{eviction.target!r} is not a client: {', '.join(clients[:6])}"
            )
    for index, arrival in enumerate(config.workload.script):
        if arrival.at_ms >= end:
            raise ValueError(
                f"config.workload.script[{index}].at_ms ({arrival.at_ms}) is not before duration_ms ({end})"
            )
        if arrival.client >= config.workload.clients:
            raise ValueError(
                f"config.workload.script[{index}].client ({arrival.client}) names no client: "
                f"there are {config.workload.clients}"
            )


def _build(
    sim: Sim,
    config: WorldConfig,
    faults: FaultPlan,
    nursery: trio.Nursery,
    judge: Callable[[Network, ExternalApi | None, Mapping[str, DurableObject], Jobs], Monitor],
    variant: Variant = REFERENCE,
) -> World:
    """The world's objects, built in order; ``judge`` makes its monitor once the network, the
    external API (if any), the clients' map and the job service it watches exist (the clients
    join the map)."""
    network = Network(sim, faults, nursery, config.latency_ms)
    network.extra_loss["release"] = faults.release_loss
    jobs = Jobs(sim, network, nursery)
    api = None
    if config.operations is not None:
        api = ExternalApi(sim, network, ApiSpec(idempotent=config.operations.idempotent_api), faults)
    clients: dict[str, DurableObject] = {}
    monitor = judge(network, api, clients, jobs)
    if api is not None:
        api.watch(monitor.api_changed)
    world = World(
        sim=sim, network=network, jobs=jobs, monitor=monitor, holders={}, clients=clients, envs={}, api=api
    )

    for key in config.workload.keys:
        name = world.holder_name(key)
        mine = tuple(fault for fault in faults.input_faults if fault.key in (None, key))
        env = config.holder.env(faults.alarm_failure, faults.faults_until_ms, mine)
        obj = DurableObject(
            sim, name, _holder_factory(env, key, monitor, variant), nursery, faults.alarm_retries
        )
        obj.monitor = monitor
        monitor.attach(key, obj, env)
        network.register(name, obj)
        world.holders[key] = obj
        world.envs[key] = env

    # No new work after the story: what is left must drain for liveness to be judged.
    workload = attrs.evolve(config.workload, until_ms=min(config.workload.until_ms, config.duration_ms))
    for index, name in enumerate(config.workload.client_names()):
        settings = attrs.evolve(config.client, lease_capable=not config.workload.is_plain(index))
        obj = DurableObject(
            sim,
            name,
            _client_factory(
                settings,
                network,
                jobs,
                world,
                monitor,
                frozenset(config.holder.fixes),
                config.operations,
                # Clients' alarm passes throw only where operations depend on them (older worlds
                # keep their traces): the fallback re-arm always works for them.
                AlarmFaults(faults.alarm_failure, faults.faults_until_ms)
                if config.operations is not None
                else NO_ALARM_FAULTS,
            ),
            nursery,
        )
        network.register(name, obj)
        monitor.watch_client(obj)
        world.clients[name] = obj
        nursery.start_soon(
            arrivals, sim, network, workload, name, index, world.submitted, name=f"workload.{name}"
        )

    if faults.forged_reports:
        until = faults.faults_until_ms if faults.faults_until_ms is not None else config.duration_ms
        for key in config.workload.keys:
            nursery.start_soon(
                forge,
                sim,
                network,
                world.holder_name(key),
                config.workload.groups[0],
                faults.forged_reports,
                until,
                faults.forged_lies,
                name=f"forger.{key}",
            )
            nursery.start_soon(
                forge_leases,
                sim,
                network,
                world.holder_name(key),
                faults.forged_reports,
                until,
                faults.forged_lies,
                functools.partial(lease_rows, world.holders[key].storage),
                name=f"forger.leases.{key}",
            )
    _schedule_faults(sim, world, faults, nursery)
    return world


async def _judge_liveness(sim: Sim, world: World, config: WorldConfig, quiet_from_ms: int) -> None:
    """Every run's liveness: ``progress`` from the quiet point, the rest once the run settles.

    From ``quiet_from_ms`` (every fault has stopped) ``progress`` is sampled
    every few seconds. The story ends at ``duration_ms`` (no new work after
    it); the run then goes on, if it must, until it settles (no client has
    anything running, claiming or unreported, and nothing waits that the
    holder could serve), and at least ``min_quiet_ms`` after the quiet point,
    so an orphaned grant has had its deadline and the alarm's delay. Then
    ``capacity_returns`` and ``reclaimed`` are judged.

    A run that has not settled is a ``progress`` violation when nothing was
    admitted or released for ``stall_ms`` (work that moves, however slowly,
    is not stuck), or once it has gone on past the story for a stall window
    per item it had left (at least ``MIN_SETTLE_MS``, at most ``MAX_SETTLE_MS``).
    """
    monitor = world.monitor
    judge_from = max(config.duration_ms, quiet_from_ms + min_quiet_ms(config))
    stall = stall_ms(config)
    give_up_at: int | None = None
    await sim.sleep_until(quiet_from_ms)
    while True:
        now = sim.now()
        monitor.sample_progress(world.clients)
        pending = monitor.pending(world.clients) if now >= judge_from else Pending(now)
        if pending is None:
            monitor.finish(world.clients)
            return
        if give_up_at is None and now >= config.duration_ms:
            # A long queue left at the story's end may drain slowly but steadily: allow each
            # item a stall window, within bounds.
            left = monitor.outstanding(world.clients)
            give_up_at = now + min(MAX_SETTLE_MS, max(MIN_SETTLE_MS, left * stall))
        moved = max(monitor.last_moved_ms, quiet_from_ms)
        # Waiting on an end already known (a zombie call at the API, permits the alarm will take
        # back) is not being stuck, as long as that end comes within the run's bound.
        waits = pending.known_end and pending.at_ms <= config.duration_ms + MAX_SETTLE_MS
        if give_up_at is not None and not waits and (now - moved >= stall or now >= give_up_at):
            # Raises, unless a finding this run tolerates explains it: then the run ends here.
            monitor.unsettled(world.clients, quiet_from_ms, moved)
            return
        wake = now + PROGRESS_SAMPLE_MS
        # What keeps it from settling may be over before the next sample (a reply landing, a
        # claim deadline): look again then, so when it settles does not hang on the sampler.
        for at in (config.duration_ms, judge_from, pending.at_ms):
            if now < at < wake:
                wake = at
        await sim.sleep_until(wake)


def min_quiet_ms(config: WorldConfig) -> int:
    """How long after the quiet point liveness is judged at the earliest.

    Long enough for a grant orphaned just before it to pass its claim
    deadline and the alarm's delay, and for one whole ``progress`` window.
    """
    holder = config.holder
    reclaim_ms = holder.grant_timeout_ms + holder.alarm_min_delay_ms
    return max(PROGRESS_WINDOW_MS, reclaim_ms) + holder.round_period_ms


def stall_ms(config: WorldConfig) -> int:
    """How long an unsettled run may go without one admission or release before it is stuck.

    The longest item, a claim's round trips and a grant's deadline, and the
    clients' check for completion notices that were lost: any work still
    outstanding moves within that. With ``config.operations`` an attempt
    starting or settling moves the run too (operations waiting for their
    scheduler's pool run one after another), so one operation's attempts
    are the longest wait.
    """
    longest = max([config.workload.duration_ms[1], *(a.duration_ms for a in config.workload.script)])
    if config.operations is not None:
        # An operation's every attempt may time out, wait out its longest backoff and (evicted)
        # the alarm's delay before the next: its item runs until the last one ends.
        longest = max(longest, config.operations.longest_ms(ALARM_FLOOR_MS))
    holder, client = config.holder, config.client
    claim_ms = holder.round_wait_ms + 2 * holder.round_period_ms + holder.grant_timeout_ms
    return longest + claim_ms + 2 * client.rpc_timeout_ms + client.finished_check_ms + min_quiet_ms(config)


def _holder_factory(env: Env, key: str, monitor: Monitor, variant: Variant) -> Factory:
    return lambda ctx: HolderObject(ctx, env, key, monitor, variant)


def _client_factory(
    settings: ClientSettings,
    network: Network,
    jobs: Jobs,
    world: World,
    monitor: Monitor,
    fixes: frozenset[str],
    operations: OperationsSpec | None,
    alarm_faults: AlarmFaults,
) -> Factory:
    return lambda ctx: ClientObject(
        ctx,
        settings,
        network,
        jobs,
        world.holder_name,
        monitor,
        fixes,
        operations,
        alarm_faults,
        world.attempt_starting,
    )


def _schedule_faults(sim: Sim, world: World, faults: FaultPlan, nursery: trio.Nursery) -> None:
    """Evictions, the operator's limit changes and the user's cancels, at their times.

    Each is an entry in the runtime's heap, in plan order on ties. Where a
    fault falls among the other work due in its millisecond (a round, a
    delivery, a client's wake-up) is drawn from the seed, once per
    millisecond: all of that millisecond's faults go first, or all go last.
    So a seed reaches both an eviction just before a round and one just
    after it.
    """
    objects = {**{o.name: o for o in world.holders.values()}, **world.clients}
    actions: list[tuple[int, int, Callable[[], None]]] = []

    def add(at_ms: int, action: Callable[[], None]) -> None:
        actions.append((at_ms, len(actions), action))

    for eviction in faults.evictions:
        if eviction.in_attempt:
            # Aimed evictions wait for their moment in a task of their own, as aimed cancels do.
            aimed_eviction = functools.partial(_evict_in_attempt, sim, world, objects, eviction.target)
            add(eviction.at_ms, functools.partial(nursery.start_soon, aimed_eviction, name="evict"))
        else:
            add(eviction.at_ms, functools.partial(_evict, sim, objects, eviction.target))
    every = faults.evict_holders_every_ms
    if every is not None:
        # Until the faults stop (the run's effective plan always says when).
        assert faults.faults_until_ms is not None
        for t in range(every, faults.faults_until_ms, every):
            for obj in world.holders.values():
                add(t, functools.partial(_evict, sim, objects, obj.name))
    for change in faults.limit_changes:
        add(change.at_ms, functools.partial(_set_limit, sim, world, change.key, change.limit))
    for group_change in faults.group_limit_changes:
        add(
            group_change.at_ms,
            functools.partial(
                _set_group_limit, sim, world, group_change.key, group_change.group, group_change.limit
            ),
        )
    for rollback in faults.rollbacks:
        add(rollback.at_ms, functools.partial(_roll_back, sim, world, rollback.key))
    for cancel in faults.cancels:
        # Aimed cancels wait for their moment in a task of their own, not holding up the rest.
        aimed = functools.partial(_cancel, sim, world, cancel.target, cancel.count, cancel.in_part)
        add(cancel.at_ms, functools.partial(nursery.start_soon, aimed, name="cancel"))
    schedule_faults_at(sim, actions)


def schedule_faults_at(sim: Sim, actions: list[tuple[int, int, Callable[[], None]]]) -> None:
    """Each ``(at_ms, order, action)`` at its time, in ``order`` on ties; whether a millisecond's
    faults go before or after its other work is drawn from the seed, once per millisecond (every
    design's world schedules its faults so)."""
    ties = sim.rng("fault-ties")
    tie: dict[int, Tie] = {}
    for at_ms, _, action in sorted(actions, key=lambda entry: entry[:2]):
        if at_ms not in tie:
            tie[at_ms] = "first" if ties.random() < 0.5 else "last"
        sim.call_at(at_ms, action, tie[at_ms])


def _evict(sim: Sim, objects: dict[str, DurableObject], target: str) -> None:
    obj = objects.get(target)
    if obj is None:
        sim.event("fault_skipped", target=target, reason="no such object")
        return
    sim.event("fault", fault="evict", target=target)
    obj.evict()


async def _evict_in_attempt(sim: Sim, world: World, objects: dict[str, DurableObject], target: str) -> None:
    """Evict client ``target`` as one of its operations' attempts starts (``Eviction.in_attempt``).

    From its time on it waits (up to ``EVICT_AIM_MS``) for the client's next
    attempt, then lets the attempt's call leave (``EVICT_INTO_ATTEMPT_MS``):
    the call runs on at the API with nobody to hear its answer.
    """
    aim = sim.signal()
    world.attempt_aims.setdefault(target, []).append(aim)
    # Set in the very millisecond the wait expired, it is still struck (its list is gone then).
    struck = await aim.wait(sim.now() + EVICT_AIM_MS) or aim.is_set
    if struck:
        await sim.sleep(EVICT_INTO_ATTEMPT_MS)
    else:
        world.attempt_aims[target].remove(aim)
    sim.event("fault", fault="evict", target=target, in_attempt=struck)
    objects[target].evict()


def _roll_back(sim: Sim, world: World, key: str) -> None:
    """``Rollback``: evict holder ``key``, migrate its storage down one version, and build its next
    instance, which migrates up again."""
    names = [m.name for m in migrations.SEMAPHORE_MIGRATIONS]  # as bound now: a variant's own
    assert len(names) >= 2, names  # the holder's tables and its totals
    obj = world.holders[key]
    if migrations.schema_version(obj.storage) is None:  # no instance was ever built
        sim.event("fault_skipped", target=obj.name, reason="no schema to roll back yet")
        return
    sim.event("fault", fault="rollback", target=obj.name, to=names[-2])
    obj.evict()
    migrations.migrate(obj.storage, names[-2])
    # Rolled forward at once: the new instance migrates up as it is built, before any request
    # (no older holder runs on the older schema; the checkers read the newer one).
    obj.instance()


def _set_limit(sim: Sim, world: World, key: str | None, limit: int) -> None:
    """The deployment's limit changes (``env.ACCOUNT_CONCURRENCY``): it outlives instances."""
    for holder_key, env in world.envs.items():
        if key in (None, holder_key):
            env.limit = limit
            sim.event("operator", action="limit", key=holder_key, limit=limit)


def _set_group_limit(sim: Sim, world: World, key: str, group: str, limit: int | None) -> None:
    """``limitWorkflow()`` on the live instance (built if needed): eviction forgets it. A cap of
    None lifts the group's cap, which the reference's operator cannot do."""
    obj = world.holders.get(key)
    if obj is None:
        sim.event("fault_skipped", target=key, reason="no such holder")
        return
    instance = obj.instance()
    assert isinstance(instance, HolderObject)
    if limit is None:
        instance.group_limits.pop(group, None)  # semsim's own: the reference cannot lift a cap
    else:
        # The object's own method, as seed 000's operator calls ``limitWorkflow``.
        instance.handle("limit_workflow", {"group": group, "limit": limit})
    sim.event("operator", action="group_limit", key=key, group=group, limit=limit)
    world.monitor.operator_capped(key, group, limit, instance.group_limits)


#: A cancel waits at most this long for its client to have a request out, checking this often.
CANCEL_AIM_MS = 30_000
CANCEL_POLL_MS = 100


async def _cancel(sim: Sim, world: World, target: str, count: int, in_part: bool) -> None:
    """The user cancels the newest ``count`` items still queued on client ``target``.

    Aimed: from its time on, it waits (up to ``CANCEL_AIM_MS``) until the client
    has a request waiting for its round, so that the grant answering it is
    claimed in part; a cancel at a random moment rarely lands there. With
    ``in_part``, until a request asks for a group with two or more items
    queued, and then in that group only (``ClientObject.cancel_in_part``);
    if none comes in time, as without it.
    """
    waited = 0
    while True:
        instance = world.clients[target].instance()
        if isinstance(instance, ClientObject):
            if in_part:
                aimed = instance.cancel_in_part(count)
                if aimed is not None:
                    cancelled = aimed
                    break
            elif instance.asking():
                cancelled = instance.cancel_newest(count)
                break
        if waited >= CANCEL_AIM_MS:
            assert isinstance(instance, ClientObject)
            cancelled = instance.cancel_newest(count)
            break
        await sim.sleep(CANCEL_POLL_MS)
        waited += CANCEL_POLL_MS
    sim.event("fault", fault="cancel", target=target, items=cancelled)
