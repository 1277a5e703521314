"""What ``semsim fuzz --design NAME`` draws for the gate and the leased worker: a swarm of their faults.

The semaphore's cases are :func:`semsim.explore.strategies.cases`. The other
two designs meet fewer faults and some of their own
(:data:`semsim.world.design.FAULTS_FOR`), so they are drawn here, as a
swarm as the semaphore's are: each run switches on a random subset of the
kinds its design meets, and draws each one's sizes and times.

- every design: lost, duplicated, delayed and reordered messages; partitions
  of any object (the gates, the callers, the workers, the store); one-off
  evictions of the gates, callers and workers; the API's errors and slow
  calls;
- the gate: periodic evictions of every gate, the gate answering 500, and
  callers' stalls (a GC pause) from a second to past ``STALE_MS``;
- the leased worker: workers' stalls from a second to past the lease, and
  shutdowns (a deploy).

A world is drawn too: the cap, one to four clients, steady or bursty
arrivals of items of up to 45 s (below the fetch layer's 60 s cap) at half,
once or twice what the cap can run, an API that deduplicates or not, and
each design's settings within what its seed allows (the gate's
``STALE_MS`` stays its seed's 120 s, "generously above the fetch layer's
caps": a shorter one breaks ``gate_exact`` by construction, not by a
fault).

Every strategy is built once, as :mod:`semsim.explore.strategies`' are.
"""

# No ``from __future__ import annotations``: Hypothesis's composite strategies keep their
# annotations, which the API reference (pdoc) then resolves (as semsim.explore.strategies does).
import functools
from typing import Any, Final, Literal

import attrs
from hypothesis import strategies as st

from semsim.explore.strategies import FAULT_PHASE_MS, KEYS, LONG_FAULT_PHASE_MS, QUIET_MS, Case
from semsim.harness.run import HolderSpec, WorldConfig
from semsim.world.design import DesignName, DesignSpec, GateSpec, LeasedSpec, RateLimitSpec, coordinators
from semsim.world.faults import Eviction, FaultPlan, Pause, Shutdown, Window
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Workload

#: The designs drawn here (the semaphore's cases are drawn by ``semsim.explore.strategies``).
OTHER_DESIGNS: Final[tuple[DesignName, ...]] = ("gate", "leased-worker")
#: The fault kinds each design's swarm switches on and off, in the order they are drawn.
#: The message, partition, eviction and API faults every design meets, in the order they are drawn.
_SHARED_KINDS: Final = (
    "request_loss",
    "reply_loss",
    "duplicate",
    "delay",
    "reorder",
    "partitions",
    "evictions",
)
#: The fault kinds each design's swarm switches on and off, in the order they are drawn.
DESIGN_FAULT_KINDS: Final[dict[DesignName, tuple[str, ...]]] = {
    "gate": (*_SHARED_KINDS, "gate_evictions", "gate_error", "pauses", "api_error", "api_slow"),
    "leased-worker": (*_SHARED_KINDS, "pauses", "shutdowns", "api_error", "api_slow"),
}

_LIMITS: Final = st.integers(1, 6)
_CLIENTS: Final = st.integers(1, 4)
_PHASES_MS: Final = st.sampled_from([FAULT_PHASE_MS, LONG_FAULT_PHASE_MS])
_ARRIVALS: Final[st.SearchStrategy[Literal["steady", "bursts"]]] = st.sampled_from(["steady", "bursts"])
#: The offered load: the work arriving per unit of time, as a share of what the cap can run.
_LOADS: Final = st.sampled_from([0.5, 1.0, 2.0])
#: The most items a minute: a world of short items stays small.
MAX_ITEMS_PER_MINUTE: Final = 60.0
_BURST_SIZES: Final = st.integers(1, 8)
_LONGEST_ITEMS_MS: Final = st.sampled_from([2_000, 20_000, 45_000])
_BOOLEANS: Final = st.booleans()
_RETRY_AFTER_S: Final = st.sampled_from([10, 1])
_CONCURRENCY: Final = st.sampled_from([10, 1, 2])
_LEASES_MS: Final = st.sampled_from([30_000, 10_000])
_RATE_LIMITS: Final = st.one_of(
    st.none(),
    st.builds(RateLimitSpec, st.integers(1, 5), st.sampled_from([10_000, 60_000])),
)
_RATES: Final = st.sampled_from([0.02, 0.1, 0.3])
_DELAYS_MS: Final = st.sampled_from([50, 500, 3_000])
_REORDER_MS: Final = st.sampled_from([200, 2_000])
_EVERY_MS: Final = st.sampled_from([20_000, 60_000])
_GATE_ERRORS: Final = st.sampled_from([1.0, 0.3])
_API_RATES: Final = st.sampled_from([0.05, 0.2, 0.5])
_API_SLOW_FACTORS: Final = st.sampled_from([4, 20])
_SEEDS: Final = st.integers(0, 2**16)


@st.composite
def design_configs(draw: st.DrawFn, design: DesignName, fixes: tuple[str, ...] = ()) -> WorldConfig:
    """A world of ``design`` (module docstring), with the design's ``fixes`` on."""
    assert design in OTHER_DESIGNS, design
    phase_ms = draw(_PHASES_MS)
    clients = draw(_CLIENTS)
    limit = draw(_LIMITS)
    longest_ms = draw(_LONGEST_ITEMS_MS)
    # Items last (500 + longest_ms) / 2 on average: so many a minute keep the cap busy `load` times
    # over. An overloaded world's backlog then drains within a few minutes of its phase.
    per_minute = draw(_LOADS) * limit * 60_000 / ((500 + longest_ms) / 2)
    if design == "gate":
        spec = DesignSpec(name="gate", gate=GateSpec(retry_after_s=draw(_RETRY_AFTER_S), fixes=fixes))
    else:
        lease_ms = draw(_LEASES_MS)
        spec = DesignSpec(
            name="leased-worker",
            leased=LeasedSpec(
                concurrency=draw(_CONCURRENCY),
                lease_ms=lease_ms,
                heartbeat_interval_ms=lease_ms // 3,
                rate_limit=draw(_RATE_LIMITS),
                fixes=fixes,
            ),
        )
    return WorldConfig(
        holder=HolderSpec(limit=limit),
        operations=OperationsSpec(idempotent_api=draw(_BOOLEANS)),
        workload=Workload(
            clients=clients,
            keys=KEYS,
            arrival=draw(_ARRIVALS),
            items_per_minute=round(min(per_minute, MAX_ITEMS_PER_MINUTE), 3),
            burst_size=draw(_BURST_SIZES),
            burst_every_ms=30_000,
            duration_ms=(500, longest_ms),
            until_ms=phase_ms,
            paced_by_intake=False,
        ),
        duration_ms=phase_ms + QUIET_MS,
        design=spec,
    )


@attrs.frozen
class _Scheduled:
    """What a plan's scheduled faults are drawn with, per kind of world."""

    partitions: st.SearchStrategy[list[Window]]
    evictions: st.SearchStrategy[list[Eviction]]
    pauses: st.SearchStrategy[list[Pause]]
    shutdowns: st.SearchStrategy[list[Shutdown]]


@functools.cache
def _scheduled(design: DesignName, phase_ms: int, clients: tuple[str, ...]) -> _Scheduled:
    at = st.integers(0, phase_ms - 1)
    objects = (*coordinators(design, KEYS), *clients)
    reachable = objects if design == "gate" else (STORE, *clients)

    def windows(kind: type[Window], targets: tuple[str, ...], longest_ms: int) -> st.SearchStrategy[Any]:
        return st.lists(
            st.builds(
                lambda target, start, length: kind(target, start, min(phase_ms, start + length)),
                st.sampled_from(targets),
                st.integers(0, phase_ms - 2),
                st.integers(1_000, longest_ms),
            ),
            min_size=1,
            max_size=3,
        )

    return _Scheduled(
        partitions=windows(Window, reachable, 45_000),
        evictions=st.lists(st.builds(Eviction, st.sampled_from(objects), at), min_size=1, max_size=3),
        # Up to past STALE_MS (120 s) and past any lease: the stalls the seeds' caps do not bound.
        pauses=windows(Pause, clients, 150_000),
        shutdowns=st.lists(st.builds(Shutdown, st.sampled_from(clients), at), min_size=1, max_size=2),
    )


@st.composite
def design_fault_plans(draw: st.DrawFn, config: WorldConfig) -> FaultPlan:
    """A swarm of the faults ``config.design`` meets (module docstring)."""
    design = config.design.name
    # One yes or no per kind, in a fixed order: a set drawn in two orders would be one plan twice.
    enabled = {kind for kind in DESIGN_FAULT_KINDS[design] if draw(_BOOLEANS)}
    phase_ms = config.duration_ms - QUIET_MS
    scheduled = _scheduled(design, phase_ms, tuple(config.workload.client_names()))

    def on(kind: str, strategy: st.SearchStrategy[Any], off: Any) -> Any:
        return draw(strategy) if kind in enabled else off

    reorder = on("reorder", _RATES, 0.0)
    return FaultPlan(
        request_loss=on("request_loss", _RATES, 0.0),
        reply_loss=on("reply_loss", _RATES, 0.0),
        duplicate=on("duplicate", _RATES, 0.0),
        delay_ms=on("delay", _DELAYS_MS, 0),
        reorder=reorder,
        reorder_ms=draw(_REORDER_MS) if reorder else 0,
        partitions=tuple(on("partitions", scheduled.partitions, [])),
        evictions=tuple(on("evictions", scheduled.evictions, [])),
        evict_holders_every_ms=on("gate_evictions", _EVERY_MS, None),
        gate_error=on("gate_error", _GATE_ERRORS, 0.0),
        pauses=tuple(on("pauses", scheduled.pauses, [])),
        shutdowns=tuple(on("shutdowns", scheduled.shutdowns, [])),
        api_error=on("api_error", _API_RATES, 0.0),
        api_slow=on("api_slow", _API_RATES, 0.0),
        api_slow_factor=on("api_slow", _API_SLOW_FACTORS, 4),
        faults_until_ms=phase_ms,
    )


@st.composite
def design_cases(draw: st.DrawFn, design: DesignName, fixes: tuple[str, ...] = ()) -> Case:
    """A case of ``design``: its world (with its ``fixes`` on), a swarm of its faults, a seed."""
    config = draw(design_configs(design, fixes))
    faults = draw(design_fault_plans(config))
    return Case(config=config, faults=faults, seed=draw(_SEEDS))
