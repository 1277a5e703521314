"""Hypothesis strategies for whole simulated runs: a configuration, a fault plan, a seed.

Swarm testing: each run enables a random subset of fault kinds, then draws
their rates and times, so a campaign covers runs with only reply loss, only
evictions, everything at once, and so on; shrinking then removes whatever
a failure does not need. Runs are short (a couple of simulated minutes of
faults, then a quiet period for liveness) so a campaign can afford many.
"""

import functools
import math
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs
from hypothesis import strategies as st

from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig
from semsim.world.client_object import ClientSettings
from semsim.world.faults import (
    Cancel,
    Eviction,
    FaultPlan,
    GroupLimitChange,
    InputFault,
    LimitChange,
    Rollback,
    Window,
)
from semsim.world.operations import DEFAULT_ALARM_HANDOFF_MS, OperationsSpec
from semsim.world.workload import Workload

FAULT_KINDS: Final = (
    "request_loss",
    "reply_loss",
    "duplicate",
    "delay",
    "reorder",
    "partitions",
    "evictions",
    "alarm_failure",
    "release_loss",
    "limit_changes",
    "group_limit_changes",
    "forged_reports",
    "denials",
    "group_limit_failures",
    "limit_failures",
    "cancels",
)
#: The swarm's kind that turns on each holder callback's misbehaviour.
INPUT_KINDS: Final = {
    "can_grant": "denials",
    "group_limit": "group_limit_failures",
    "limit": "limit_failures",
}
#: Faults of the external API, drawn (as a swarm of their own) only in account-concurrency worlds.
API_FAULT_KINDS: Final = ("api_error", "api_error_after_effect", "api_slow")
KEYS: Final = ("acct",)
#: The key of a drawn world's second holder: one world in four has it (:func:`keys_for`).
SECOND_KEY: Final = "acct-b"
GROUPS: Final = ("wf-1", "wf-2")
#: Faults stop at the end of the fault phase; the quiet period after it is for
#: liveness. Some runs have a long phase: the platform's retries of a failing
#: alarm span about two minutes before it drops the alarm.
FAULT_PHASE_MS: Final = 90_000
LONG_FAULT_PHASE_MS: Final = 180_000
QUIET_MS: Final = 90_000


@attrs.frozen
class Case:
    """One run to try: what the trace header records, and how to replay it."""

    config: WorldConfig
    faults: FaultPlan
    seed: int
    #: The holder variant it runs, by the name it is found by (semsim.harness.variants).
    variant: str = "reference"
    #: The user's own invariants judged beside semsim's, by the references they are found by
    #: (semsim.harness.invariants).
    invariants: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seed": self.seed}
        if self.variant != "reference":  # a case of the reference reads as it always has
            data["variant"] = self.variant
        if self.invariants:
            data["invariants"] = list(self.invariants)
        return {**data, "config": self.config.to_dict(), "faults": self.faults.to_dict()}


#: The strategies a case is drawn with are built once (here, and per kind of world in
#: :func:`_plan_strategies`): a strategy built anew for every draw costs Hypothesis its
#: validation again, which was more than half the cost of drawing a case (16 CPU ms a case
#: before, 7 after). The draws, and so every campaign's cases, are the same either way:
#: tests/test_strategies.py holds a digest of the cases some seeds draw.
_MODES: Final = st.sampled_from(["none", "strict", "under", "over"])
# A ratio of 1.0 asks for the whole limit: under mode must still keep one permit for grants.
_LEASE_AMOUNTS: Final = st.one_of(st.integers(0, 4), st.sampled_from([0.25, 0.5, 1.0]))
_PERMITS_PER_LEASE: Final = st.integers(1, 4)
_LEASE_TTLS_MS: Final = st.sampled_from([20_000, 60_000])
_MAX_GROUPS: Final = st.integers(1, 2)
_MAX_CLIENTS_PER_GROUP: Final = st.integers(1, 3)
_LIMITED_GROUPS: Final[st.SearchStrategy[Literal["exclude", "within_group_limit"]]] = st.sampled_from(
    ["exclude", "within_group_limit"]
)
_CLIENTS: Final = st.integers(1, 4)
_PLAIN_CLIENTS: Final = tuple(st.integers(0, clients) for clients in range(5))
_ARRIVALS: Final[st.SearchStrategy[Literal["steady", "bursts"]]] = st.sampled_from(["steady", "bursts"])
_FAULT_PHASES_MS: Final = st.sampled_from([FAULT_PHASE_MS, LONG_FAULT_PHASE_MS])
_LIMITS: Final = st.integers(1, 10)
_GRANT_TIMEOUTS_MS: Final = st.sampled_from([3_000, 10_000, 1_000])
_ALARM_MIN_DELAYS_MS: Final = st.sampled_from([1_000, 15_000])
_ENGINE_FALLBACKS: Final = st.sampled_from([True, False])
_ITEMS_PER_MINUTE: Final = st.sampled_from([10.0, 30.0, 90.0])
_BURST_SIZES: Final = st.integers(1, 8)
_BURST_EVERY_MS: Final = st.sampled_from([10_000, 30_000])
_BOOLEANS: Final = st.booleans()
_CLIENT_IDS: Final[st.SearchStrategy[Literal["numbered", "case_twins"]]] = st.sampled_from(
    ["numbered", "case_twins"]
)
_LONGEST_ITEMS_MS: Final = st.sampled_from([2_000, 10_000, 45_000])
#: Arrivals stop by the end of the shorter phase, whatever the phase: a long phase is for the
#: platform's retries of a failing alarm, not for more traffic. Three minutes of arrivals made a
#: fifth of the runs half the CPU; stopped at 90 s, a campaign's runs cost a quarter less and
#: kill as many planted bugs (docs/BENCHMARKS.md, "Levers tried": shorter worlds).
_UNTIL_MS: Final = st.sampled_from([FAULT_PHASE_MS, 15_000])
_SEEDS: Final = st.integers(0, 2**16)
#: The most a drawn world's arrivals offer, as a multiple of what its starting limit can run
#: (items a minute against ``limit * 60 s / mean item``). Past it a world only grows a backlog
#: it can never serve within the run: a limit of 1 with four clients at 90 items a minute
#: offers 136 times its capacity, queues hundreds of items, and costs a hundred ordinary runs
#: (docs/BENCHMARKS.md, "Bounded load"). A steady rate is cut to the bound, a burst to as
#: many items (at least one); the choices drawn stay as they were, so the draws are unchanged.
MAX_LOAD: Final = 32.0


def bounded_load(workload: Workload, limit: int, most: float = MAX_LOAD) -> Workload:
    """``workload`` with its arrivals offering at most ``most`` times what ``limit`` can run
    (a burst keeps at least one item, which may offer more; no drawn world comes near that).

    ``limit`` is the drawn starting limit: a limit change later in the run, the engine's
    ``alarmConcurrency`` or an over-provisioned lease budget is not taken into account."""
    assert limit >= 1, limit
    assert most > 0, most
    mean_ms = sum(workload.duration_ms) / 2
    most_per_minute = most * limit * 60_000 / max(1.0, mean_ms)
    if workload.arrival == "steady":
        if workload.items_per_minute * workload.clients <= most_per_minute:
            return workload
        return attrs.evolve(workload, items_per_minute=round(most_per_minute / workload.clients, 3))
    per_burst = most_per_minute * workload.burst_every_ms / 60_000 / workload.clients
    if workload.burst_size <= per_burst:
        return workload
    return attrs.evolve(workload, burst_size=max(1, math.floor(per_burst)))


@st.composite
def configs(draw: st.DrawFn, fixes: tuple[str, ...] = ()) -> WorldConfig:
    mode = draw(_MODES)
    leases = None
    if mode != "none":
        leases = LeaseSpec(
            provisioning=mode,  # type: ignore[arg-type]
            amount=draw(_LEASE_AMOUNTS),
            permits_per_lease=draw(_PERMITS_PER_LEASE),
            ttl_ms=draw(_LEASE_TTLS_MS),
            max_groups=draw(_MAX_GROUPS),
            max_clients_per_group=draw(_MAX_CLIENTS_PER_GROUP),
            limited_groups=draw(_LIMITED_GROUPS),
        )
    clients = draw(_CLIENTS)
    arrival: Literal["steady", "bursts"] = draw(_ARRIVALS)
    fault_phase_ms = draw(_FAULT_PHASES_MS)
    config = WorldConfig(
        holder=HolderSpec(
            limit=draw(_LIMITS),
            grant_timeout_ms=draw(_GRANT_TIMEOUTS_MS),
            leases=leases,
            fixes=fixes,
            alarm_min_delay_ms=draw(_ALARM_MIN_DELAYS_MS),
            # Without the engine's fallback re-arm, the platform may drop a failing alarm.
            engine_fallback=draw(_ENGINE_FALLBACKS),
        ),
        workload=Workload(
            clients=clients,
            plain_clients=draw(_PLAIN_CLIENTS[clients]),
            keys=KEYS,
            groups=GROUPS,
            arrival=arrival,
            items_per_minute=draw(_ITEMS_PER_MINUTE),
            burst_size=draw(_BURST_SIZES),
            burst_every_ms=draw(_BURST_EVERY_MS),
            # Clients that burst together send equally old demand: the clientId tie-break decides.
            aligned=arrival == "bursts" and draw(_BOOLEANS),
            # Ids that differ only in case: localeCompare and code points order them apart.
            client_ids=draw(_CLIENT_IDS),
            # Some items outlive a lease's ttl, so leases expire with work running.
            duration_ms=(500, draw(_LONGEST_ITEMS_MS)),
            # Arrivals may stop well before the faults do, leaving a quiet holder under faults.
            until_ms=draw(_UNTIL_MS),
        ),
        client=ClientSettings(finished_check_ms=20_000),
        duration_ms=fault_phase_ms + QUIET_MS,
        # Half the runs are seed 000's account-concurrency world (shrinks to none). Every choice
        # draws a different world: a weighting such as "2 of 3 choices give none" would draw
        # the same case twice.
        operations=draw(_OPERATIONS_OR_NONE),
    )
    return attrs.evolve(config, workload=bounded_load(config.workload, config.holder.limit))


def operations() -> st.SearchStrategy[OperationsSpec]:
    """Admitted items as durable operations calling the external API: attempt timeouts shorter
    than the longest items (zombies), one attempt at a time (handoffs, passes that wait), an
    API that deduplicates or not."""
    return st.builds(
        OperationsSpec,
        idempotent_api=st.booleans(),
        max_attempts=st.integers(1, 4),
        attempt_timeout_ms=st.sampled_from([60_000, 10_000, 3_000]),
        alarm_concurrency=st.sampled_from([10, 1, 2]),
        # A pass that runs this long hands off: with one attempt at a time, often.
        alarm_handoff_ms=st.sampled_from([DEFAULT_ALARM_HANDOFF_MS, 5_000]),
        # Every drawn world registers each admission again, its payload's keys reversed.
        repeat_registration=st.just(True),
    )


_OPERATIONS_OR_NONE: Final = st.one_of(st.none(), operations())


def _targets(config: WorldConfig) -> list[str]:
    return [f"holder:{key}" for key in config.workload.keys] + config.workload.client_names()


_FAULT_KIND_SETS: Final = st.sets(st.sampled_from(FAULT_KINDS))
_RATES: Final = st.sampled_from([0.02, 0.1, 0.3])
_DELAYS_MS: Final = st.sampled_from([50, 500, 3_000])
#: A drawn run with delays delivers on this tick while its faults last (``FaultPlan.delay_tick_ms``):
#: it divides every timeout and expiry the swarm draws (grant timeouts of 1, 3 and 10 s, alarm
#: delays of 1 and 15 s, lease TTLs of 20 and 60 s) and the holder's round timings (1 and 2 s),
#: so a round on a tick has its deadlines on ticks too, and a claim or report can land on the
#: very millisecond of one. Semaphore campaigns only: the designs draw plans of their own.
DELAY_TICK_MS: Final = 500
_REORDER_MS: Final = st.sampled_from([200, 2_000])
_EVERY_MS: Final = st.sampled_from([None, 20_000, 5_000])
_ALARM_FAILURES: Final = st.sampled_from([1.0, 0.3])
# Without the engine's fallback, a platform that gives up at once: a failing alarm is dropped
# (six retries span two minutes and are rarely left alone).
_ALARM_RETRIES: Final = {True: st.sampled_from([6, 0]), False: st.just(0)}
_FORGED: Final = st.sampled_from([0.5, 0.2])
#: The drawn cancel of many items, aimed at a claim in part: it leaves the asked group's oldest
#: item (``Cancel.in_part``; see ``cancels``).
_CANCEL_MANY: Final = 20


@attrs.frozen
class _PlanStrategies:
    """What a fault plan is drawn with where it depends on the world (its targets and phase)."""

    partitions: st.SearchStrategy[list[Window]]
    evictions: st.SearchStrategy[list[Eviction]]
    limit_changes: st.SearchStrategy[list[LimitChange]]
    group_limit_changes: st.SearchStrategy[list[GroupLimitChange]]
    input_faults: dict[str, st.SearchStrategy[list[InputFault]]]
    cancels: st.SearchStrategy[list[Cancel]]


def _input_fault(input: str, start_ms: int, end_ms: int, group: str | None, bad: bool) -> InputFault:
    """A window of odd length flaps (``InputFault.flapping``): it misbehaves on every other call
    it covers, so one round can meet two answers, and code that reads a callback more often than
    the reference falls out of step with the model. Taken from the length already drawn, not from
    a choice of its own: a new choice would change every world every campaign draws, so nothing
    could pair the runs before and after (docs/BENCHMARKS.md, "Kill rates"). It
    shrinks away with the window, towards the even 1 s floor."""
    return InputFault(input, start_ms, end_ms, group=group, bad=bad, flapping=(end_ms - start_ms) % 2 == 1)


_HOLDER: Final = "holder:"


#: How long a limit change that closes the holder (``_with_closings``) keeps it at 0, in ms.
CLOSED_MS: Final = 10_000
#: ``(modulus, remainder)``: a limit change drawn at such a moment closes the holder first
#: (``_with_closings``).
_CLOSING: Final = (4, 3)


def _with_closings(plan: FaultPlan) -> FaultPlan:
    """A limit change drawn at a moment of 3 modulo 4 ms first closes the holder: the limit is 0
    for ``CLOSED_MS`` (to the end of the fault phase at most), then the limit drawn.

    Drawn uniformly from 0 to 10, a change reached 0 one time in eleven: 42 of the first 150
    drawn runs of seeds 1-6 (900) had one. A limit of 0 is an edge of its own (the holder must
    grant nothing, keep its reserve at 0, and answer the demand waiting), and so is the limit
    that comes back after it. A limit left at 0 to the end starves the world, and a starved world
    shows little else (docs/BENCHMARKS.md, "A limit of 0 on purpose"), so the drawn limit
    follows. About a quarter of the changes close first now. Taken from the moment already
    drawn, as deploys are (``_with_deploys``), so every other choice of every campaign stays as
    drawn; a moment shrinks towards 0, where a change does not close.
    """
    if not plan.limit_changes:
        return plan
    modulus, remainder = _CLOSING
    assert plan.faults_until_ms is not None
    changes: list[LimitChange] = []
    for change in plan.limit_changes:
        if change.at_ms % modulus == remainder:
            reopen_ms = min(change.at_ms + CLOSED_MS, plan.faults_until_ms - 1)
            changes += [attrs.evolve(change, limit=0), attrs.evolve(change, at_ms=reopen_ms)]
        else:
            changes.append(change)
    return attrs.evolve(plan, limit_changes=tuple(changes))


def _on_a_tick(plan: FaultPlan) -> FaultPlan:
    """A run with delays delivers on a tick (``DELAY_TICK_MS``): messages meet in one round, and
    land on the millisecond of a deadline or an expiry, where off-by-one bugs live; uniform
    delays almost never do (docs/BENCHMARKS.md, "Kill rates": a claim on its deadline's
    millisecond came in no drawn run measured before).
    Taken from the delay kind already drawn, so every other choice stays as drawn."""
    return attrs.evolve(plan, delay_tick_ms=DELAY_TICK_MS) if plan.delay_ms else plan


def _with_deploys(plan: FaultPlan) -> FaultPlan:
    """A holder eviction drawn at an odd millisecond is a deploy rolled back and forward
    (``Rollback``): the instance is evicted, its storage migrated down a version and up again,
    so the draws run the migrations' down paths and an up over rows that exist. Taken from the
    time already drawn, as flapping is from a window's length (see ``_input_fault``), so every
    other choice of every campaign stays as drawn; it shrinks away with the time, towards 0."""

    def deploy(eviction: Eviction) -> bool:
        return eviction.target.startswith(_HOLDER) and eviction.at_ms % 2 == 1

    rolled = tuple(Rollback(e.target.removeprefix(_HOLDER), e.at_ms) for e in plan.evictions if deploy(e))
    if not rolled:
        return plan
    kept = tuple(e for e in plan.evictions if not deploy(e))
    return attrs.evolve(plan, evictions=kept, rollbacks=plan.rollbacks + rolled)


#: A stride of about the golden ratio of the range spreads neighbouring draws furthest apart.
_GOLDEN: Final = (math.sqrt(5) - 1) / 2


def _spread(count: int) -> Callable[[int], int]:
    """What turns an integer drawn in ``[0, count)`` into a moment in ``[0, count)`` ms, as likely
    late in the fault phase as early.

    Hypothesis draws a bounded integer by first drawing how many bits it has, so small values
    come far more often than large ones: of 0-89,999, 41% of draws fall in the first second and
    69% in the first ten (2,000 draws). Drawn so, half the cancels and evictions struck in the
    first second, before the world had any work (docs/BENCHMARKS.md, "Kill rates",
    ``spread-moments``). A moment is the drawn integer times a stride coprime with ``count``, modulo
    ``count``: a bijection, so every moment can still be drawn, 0 stays 0 (where shrinking
    ends), and the bias towards small numbers is spread over the whole phase. An odd stride
    keeps a moment's parity where ``count`` is even, so the choices taken from it
    (``_with_deploys``) are those the integer drawn gives. Applied inside the strategies'
    builders rather than as a ``map``: a mapped strategy is another node in the draws' tree,
    and Hypothesis then mutates a campaign's later cases differently, so nothing but the
    moments could no longer be compared before and after.
    """
    stride = int(count * _GOLDEN)
    while math.gcd(stride, count) != 1:
        stride += 1
    return lambda drawn: drawn * stride % count


@functools.cache
def _drawn_for(count: int) -> dict[int, int]:
    """``_spread(count)`` undone: the integer drawn for each moment in ``[0, count)``. For what
    pairs a case with its draws (tests/test_strategies.py, benchmarks/bench_kill_rates.py);
    cached, as a campaign's phases are few."""
    spread = _spread(count)
    drawn = {spread(integer): integer for integer in range(count)}
    assert len(drawn) == count, "the spread is a bijection"
    return drawn


@functools.cache
def _plan_strategies(phase_ms: int, targets: tuple[str, ...], clients: tuple[str, ...]) -> _PlanStrategies:
    """Built once per kind of world (a handful in all), as the configuration's are (see above)."""
    at = st.integers(0, phase_ms - 1)
    moment, starting = _spread(phase_ms), _spread(phase_ms - 1)

    def input_faults(input: str) -> st.SearchStrategy[list[InputFault]]:
        """Windows in which one holder callback misbehaves (for one group or all)."""
        group = st.none() if input == "limit" else st.one_of(st.none(), st.sampled_from(GROUPS))
        bad = st.just(False) if input == "can_grant" else st.booleans()
        window = st.builds(
            lambda start, length, group, bad: _input_fault(
                input, starting(start), min(phase_ms, starting(start) + length), group, bad
            ),
            st.integers(0, phase_ms - 2),
            st.integers(1_000, 30_000),
            group,
            bad,
        )
        return st.lists(window, min_size=1, max_size=2)

    return _PlanStrategies(
        partitions=st.lists(
            st.builds(
                lambda target, start, length: Window(
                    target, moment(start), min(phase_ms, moment(start) + length)
                ),
                st.sampled_from(targets),
                at,
                st.integers(500, 45_000),
            ),
            min_size=1,
            max_size=2,
        ),
        evictions=st.lists(
            st.builds(lambda target, at_ms: Eviction(target, moment(at_ms)), st.sampled_from(targets), at),
            min_size=1,
            max_size=3,
        ),
        limit_changes=st.lists(
            st.builds(lambda at_ms, limit: LimitChange(moment(at_ms), limit), at, st.integers(0, 10)),
            min_size=1,
            max_size=2,
        ),
        group_limit_changes=st.lists(
            st.builds(
                lambda at_ms, key, group, limit: GroupLimitChange(moment(at_ms), key, group, limit),
                at,
                st.sampled_from(KEYS),
                st.sampled_from(GROUPS),
                # A cap of 0 (admit nothing) a third of the time: it must meet demand,
                # and grants still running in its group, to show how 0 is read.
                st.one_of(st.none(), st.just(0), st.integers(1, 4)),
            ),
            min_size=1,
            max_size=3,
        ),
        input_faults={input: input_faults(input) for input in INPUT_KINDS},
        # The user withdraws queued items: one cancelled while its request waits for the
        # round leaves a grant claimed in part, or with none. A cancel of 20 is aimed at a
        # group the request asked two or more of, and leaves its oldest (``Cancel.in_part``):
        # the grant is claimed in part. One of 1, 2 or 5 takes the newest of any group, most
        # often every item a one-item request asked for: the grant is claimed with none. Taken
        # from the count already drawn, so every other choice stays as drawn (see
        # ``_input_fault``).
        cancels=st.lists(
            st.builds(
                lambda target, at_ms, count: Cancel(
                    target, moment(at_ms), count, in_part=count == _CANCEL_MANY
                ),
                st.sampled_from(clients),
                at,
                st.sampled_from([1, 2, 5, _CANCEL_MANY]),
            ),
            min_size=1,
            max_size=6,
        ),
    )


@st.composite
def fault_plans(draw: st.DrawFn, config: WorldConfig) -> FaultPlan:
    enabled = draw(_FAULT_KIND_SETS)
    if "alarm_failure" in enabled:
        # The alarm only has work when grants go unclaimed: lost replies give it some.
        enabled = enabled | {"reply_loss"}
    phase_ms = config.duration_ms - QUIET_MS
    plan = _plan_strategies(phase_ms, tuple(_targets(config)), tuple(config.workload.client_names()))

    def on(kind: str, strategy: st.SearchStrategy[Any], off: Any) -> Any:
        return draw(strategy) if kind in enabled else off

    def input_faults(input: str) -> list[InputFault]:
        return list(on(INPUT_KINDS[input], plan.input_faults[input], []))

    partitions = on("partitions", plan.partitions, [])  # first: the order every campaign drew in
    drawn = FaultPlan(
        request_loss=on("request_loss", _RATES, 0.0),
        reply_loss=on("reply_loss", _RATES, 0.0),
        duplicate=on("duplicate", _RATES, 0.0),
        delay_ms=on("delay", _DELAYS_MS, 0),
        reorder=on("reorder", _RATES, 0.0),
        reorder_ms=on("reorder", _REORDER_MS, 0),
        partitions=tuple(partitions),
        evictions=tuple(on("evictions", plan.evictions, [])),
        # Holders evicted over and over: reclaim rests on the stored alarm alone.
        evict_holders_every_ms=on("evictions", _EVERY_MS, None),
        alarm_failure=on("alarm_failure", _ALARM_FAILURES, 0.0),
        alarm_retries=on("alarm_failure", _ALARM_RETRIES[config.holder.engine_fallback], 6),
        release_loss=on("release_loss", _RATES, 0.0),
        forged_reports=on("forged_reports", _FORGED, 0.0),
        limit_changes=tuple(on("limit_changes", plan.limit_changes, [])),
        group_limit_changes=tuple(on("group_limit_changes", plan.group_limit_changes, [])),
        input_faults=tuple(input_faults("can_grant") + input_faults("group_limit") + input_faults("limit")),
        cancels=tuple(on("cancels", plan.cancels, [])),
        faults_until_ms=phase_ms,
        **(_api_faults(draw) if config.operations is not None else {}),
    )
    return _with_closings(_with_deploys(_on_a_tick(drawn)))


_API_RATES: Final = st.sampled_from([0.05, 0.2, 0.5])
_API_SLOW_FACTORS: Final = st.sampled_from([4, 20])


def _api_faults(draw: st.DrawFn) -> dict[str, Any]:
    """The API's part of a plan: a swarm of its own kinds, drawn only where there is an API."""
    # One yes or no per kind, not a set: a set drawn in two orders would be the same plan twice.
    enabled = {kind for kind in API_FAULT_KINDS if draw(_BOOLEANS)}
    return {
        "api_error": draw(_API_RATES) if "api_error" in enabled else 0.0,
        "api_error_after_effect": draw(_API_RATES) if "api_error_after_effect" in enabled else 0.0,
        "api_slow": draw(_API_RATES) if "api_slow" in enabled else 0.0,
        "api_slow_factor": draw(_API_SLOW_FACTORS) if "api_slow" in enabled else 4,
    }


@st.composite
def cases(
    draw: st.DrawFn,
    fixes: tuple[str, ...] = (),
    variant: str = "reference",
    invariants: tuple[str, ...] = (),
) -> Case:
    config = draw(configs(fixes))
    faults = draw(fault_plans(config))  # the plan, then the seed: the order every campaign drew in
    seed = draw(_SEEDS)
    keys = keys_for(seed)
    if keys != config.workload.keys:
        config = attrs.evolve(config, workload=attrs.evolve(config.workload, keys=keys))
    return Case(config=config, faults=faults, seed=seed, variant=variant, invariants=invariants)


def keys_for(seed: int) -> tuple[str, ...]:
    """The keys of a drawn world whose run seed is ``seed``: one in four has a second holder.

    A client then keeps a queue, reports and a ``nextRequestAt`` per key, and each key's
    holder judges only its own: what a single key never shows (a client's report naming the
    other key's grants, one key's wakeup hiding another's). Taken from the seed already drawn,
    not a draw of its own, so every other choice of every case stays as it was. The fault plan
    was drawn for the first key, so the second key's holder is never a fault's target.
    """
    return (*KEYS, SECOND_KEY) if seed % 4 == 3 else KEYS
