"""Every design run from one config and one fault plan, and measured alike: ``run_design``.

``run_design(config, faults, seed)`` runs the design ``config.design``
names (:mod:`semsim.world.design`) under the workload, the fault plan and
the seed, and measures it with :class:`semsim.check.trade_offs.TradeOffMeter`
against the external API. The semaphore is :func:`semsim.harness.run.run_world`'s
world, watched by the meter (every judge of a semaphore run still judges
it); it needs ``config.operations``, since only then does its work call the
API. The gate and the leased worker are built here, each from its own
objects (:mod:`semsim.world.gate_object`, :mod:`semsim.world.gate_caller`,
:mod:`semsim.world.lease_store_object`, :mod:`semsim.world.leased_worker`)
on the same runtime and network, with the same workload and API.

Their runs are judged by their seeds' promises as they go
(:mod:`semsim.check.design_promises`: ``gate_exact``; ``lease_ceiling``,
``single_lease``, ``fenced_write``, ``lease_limit``), and at the end by ``items_end``: once
the faults have stopped, every submitted item's work ends (a gate caller's
handler ran to its end; a leased instance is completed or failed) and no
call is left running at the API. The run goes on past ``duration_ms`` until
that holds, and fails ``items_end`` if it does not within
``MAX_SETTLE_MS``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import attrs
import trio

from semaphore_core.leased import RateLimitRule, RateWindow
from semsim import __version__
from semsim.check import design_checkers
from semsim.check.checker import Checker, check_checkers
from semsim.check.design_checkers import DesignCheckers, check_design_checkers
from semsim.check.design_promises import GateExact, JudgedStore, LeaseCeiling, Verdicts, judges_for
from semsim.check.holder_reads import accounted
from semsim.check.invariants import DESIGN_FINDINGS, InvariantViolation
from semsim.check.trade_offs import TradeOffMeter, TradeOffs
from semsim.harness.run import (
    MAX_SETTLE_MS,
    PROGRESS_SAMPLE_MS,
    RESERVED_NAMES,
    World,
    WorldConfig,
    WorldRun,
    check_run,
    run_world,
    schedule_faults_at,
)
from semsim.runtime.durable import DurableObject
from semsim.runtime.kernel import SCHEDULE, Limits, RunResult, Sim, run
from semsim.runtime.network import Network
from semsim.runtime.trace import Trace
from semsim.world.design import LeasedSpec, coordinators
from semsim.world.external_api import ApiSpec, ExternalApi
from semsim.world.faults import FaultPlan
from semsim.world.gate_caller import GateCaller, unfinished
from semsim.world.gate_object import GateObject
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.lease_store_object import LeaseStoreObject
from semsim.world.leased_worker import LeasedWorkerObject
from semsim.world.variant import REFERENCE, Variant
from semsim.world.workload import arrivals

#: The fetch layer's cap on one call to the API when the config has no ``operations`` to say
#: (``OperationsSpec.attempt_timeout_ms``'s default).
FETCH_TIMEOUT_MS: Final = 60_000
#: The invariant every gate and leased-worker run is judged by (see the module docstring).
ITEMS_END: Final = design_checkers.ITEMS_END


@attrs.frozen(hash=False)
class DesignRun:
    """One run of a design: its trace, its verdict, and its figures (None if it did not complete)."""

    design: str
    trace: Trace
    result: RunResult
    trade_offs: TradeOffs | None
    #: The semaphore's world run (its monitor, variant and judges); None for the other designs.
    world: WorldRun | None = None
    #: The known findings the run met and tolerated, by name (the semaphore's: its monitor's).
    findings: Counter[str] = attrs.field(factory=Counter)

    def judges(self) -> tuple[str, ...]:
        """Who judged the run: the semaphore's variant and the user's invariants, or the design's
        promises (:mod:`semsim.check.design_promises`) and the user's invariants by name."""
        if self.world is not None:
            return self.world.judges()
        return (*self.trace.header["judges"], *self.trace.header.get("invariants", ()))


def run_design(
    config: WorldConfig,
    faults: FaultPlan,
    seed: int,
    limits: Limits | None = None,
    progress: Callable[[int], None] | None = None,
    tolerated: frozenset[str] = frozenset(),
    full_checks: bool = False,
    variant: Variant = REFERENCE,
    checkers: Sequence[type[Checker]] = (),
) -> DesignRun:
    """Run ``config.design`` and measure it (see the module docstring).

    Arguments are checked before anything runs, as :func:`run_world` checks them, and a plan's
    faults must be ones the design meets (``semsim.world.design.FAULTS_FOR``). ``tolerated``,
    ``full_checks``, ``variant`` and ``checkers`` are the semaphore's (``run_world``'s: the
    known findings a run may meet, the checker's debug mode, the holder variant, the user's
    invariants). The other designs take a variant of their own part (a gate's ledger, the
    leased workers' store: :meth:`Variant.check_design`), their own findings, and checkers
    that hear only what they share with the semaphore (the API, the end of the run:
    :mod:`semsim.check.design_checkers`), and refuse the rest.
    """
    check_run(config, faults, seed, tolerated)
    if config.design.name != "semaphore":
        theirs = DESIGN_FINDINGS[config.design.name]
        if not tolerated <= theirs:
            strange = sorted(tolerated - theirs)[0]
            raise ValueError(
                f"tolerated names {strange!r}, not a finding of design {config.design.name!r} "
                f"({', '.join(sorted(theirs))})"
            )
        if full_checks:
            raise ValueError(f"full_checks is the semaphore's; design {config.design.name!r} has no holder")
        checkers = check_checkers(checkers, (*RESERVED_NAMES, ITEMS_END, *judges_for(config.design.name)))
        check_design_checkers(checkers, config.design.name)
        if not isinstance(variant, Variant):
            raise TypeError(f"variant must be a semsim.world.variant.Variant, got {variant!r}")
        variant.check_design(config.design.name)
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a semsim.runtime.kernel.Limits or None, got {limits!r}")
    if config.design.name == "semaphore":
        return _run_semaphore(
            config, faults, seed, limits, progress, tolerated, full_checks, variant, checkers
        )
    return _run_other(config, faults, seed, limits, progress, tolerated, variant, checkers)


def _run_semaphore(
    config: WorldConfig,
    faults: FaultPlan,
    seed: int,
    limits: Limits | None,
    progress: Callable[[int], None] | None,
    tolerated: frozenset[str],
    full_checks: bool,
    variant: Variant,
    checkers: Sequence[type[Checker]],
) -> DesignRun:
    if config.operations is None:
        raise ValueError(
            "the semaphore is measured at the external API, which only a world with config.operations "
            "calls: set config.operations (OperationsSpec() for the seed's example)"
        )
    measured: list[TradeOffs] = []

    def observe(sim: Sim, world: World, quiet_from_ms: int) -> Callable[[], None]:
        assert world.api is not None
        holders = world.holders

        def held(now_ms: int) -> Mapping[str, int]:
            return {key: sum(accounted(obj.storage, now_ms)) for key, obj in holders.items()}

        def orphaned(now_ms: int) -> int:
            return world.monitor.unknown_lease_footprint(world.clients)

        meter = TradeOffMeter(sim, world.api, "semaphore", config.holder.limit, held, quiet_from_ms, orphaned)
        world.submit_watchers.append(meter.submitted)
        return lambda: measured.append(meter.finish())

    done = run_world(
        config,
        faults,
        seed,
        limits,
        tolerated,
        full_checks=full_checks,
        variant=variant,
        checkers=checkers,
        progress=progress,
        observe=observe,
    )
    findings = Counter(v.finding for v in done.monitor.violations if v.finding is not None)
    return DesignRun("semaphore", done.trace, done.result, measured[0] if measured else None, done, findings)


def _run_other(
    config: WorldConfig,
    faults: FaultPlan,
    seed: int,
    limits: Limits | None,
    progress: Callable[[int], None] | None,
    tolerated: frozenset[str],
    variant: Variant,
    checkers: Sequence[type[Checker]],
) -> DesignRun:
    design = config.design.name
    trace = Trace(seed, config.to_dict(), faults.to_dict())
    trace.header["semsim"] = __version__
    trace.header["schedule"] = SCHEDULE
    trace.header["judges"] = [ITEMS_END, *judges_for(design)]
    if variant != REFERENCE:
        trace.header["variant"] = {"name": variant.name, "judges": trace.header["judges"]}
    if checkers:
        trace.header["invariants"] = [checker.name for checker in checkers]
    quiet_from_ms = faults.quiet_from_ms(config.duration_ms)
    if faults.faults_until_ms is None:
        faults = attrs.evolve(faults, faults_until_ms=quiet_from_ms)
    measured: list[TradeOffs] = []
    found: list[Verdicts] = []

    async def main(sim: Sim) -> None:
        verdicts = Verdicts(sim, tolerated)
        found.append(verdicts)
        async with trio.open_nursery() as nursery:
            network = Network(sim, faults, nursery, config.latency_ms)
            idempotent = config.operations is None or config.operations.idempotent_api
            api = ExternalApi(sim, network, ApiSpec(idempotent=idempotent), faults)
            fetch_timeout_ms = (
                FETCH_TIMEOUT_MS if config.operations is None else config.operations.attempt_timeout_ms
            )
            cap = config.holder.limit
            objects: dict[str, DurableObject] = {}
            clients = config.workload.client_names()
            if design == "gate":
                spec = config.design.gate
                gate_rng = sim.rng("gate")
                for name in coordinators("gate", config.workload.keys):
                    objects[name] = DurableObject(
                        sim, name, lambda ctx: GateObject(ctx, spec, cap, faults, gate_rng, variant), nursery
                    )
                    # POST /acquire and /release over HTTP: delivered once or not at all, as the API.
                    network.register(name, objects[name], duplicates=False)
                for name in clients:
                    objects[name] = DurableObject(
                        sim,
                        name,
                        lambda ctx: GateCaller(
                            ctx,
                            spec,
                            network,
                            lambda account: f"gate:{account}",
                            faults.pauses,
                            fetch_timeout_ms,
                        ),
                        nursery,
                    )
                    network.register(name, objects[name])
                callers = [objects[name] for name in clients]
                gates = {name: objects[name] for name in coordinators("gate", config.workload.keys)}
                GateExact(
                    verdicts,
                    api,
                    cap,
                    spec.stale_ms,
                    {account: objects[f"gate:{account}"] for account in config.workload.keys},
                    callers,
                )

                def held(now_ms: int) -> Mapping[str, int]:
                    return {
                        name.removeprefix("gate:"): _ledger_size(obj, now_ms)
                        for name, obj in gates.items()
                        if obj.live
                    }

                def left() -> tuple[int, int]:
                    return _gate_items(callers)

                def orphaned(now_ms: int) -> int:
                    return _orphaned_slots(gates.values(), callers, now_ms)

            else:
                leased = config.design.leased
                store = LeaseStoreObject(
                    sim, config.workload.keys, cap, _rate_limits(leased, config.workload.keys), variant
                )
                limits_of = {account: cap for account in config.workload.keys}
                judged = JudgedStore(sim, verdicts, store, limits_of)
                network.register(STORE, judged, duplicates=False)
                for name in clients:
                    objects[name] = DurableObject(
                        sim,
                        name,
                        lambda ctx: LeasedWorkerObject(ctx, leased, network, faults.pauses, fetch_timeout_ms),
                        nursery,
                    )
                    network.register(name, objects[name])
                    sim.call_at(0, functools.partial(_boot, objects[name]))

                def held(now_ms: int) -> Mapping[str, int]:
                    return store.leased(now_ms)

                def left() -> tuple[int, int]:
                    return store.created(), store.unfinished()

                workers = [objects[name] for name in clients]
                LeaseCeiling(verdicts, api, judged, limits_of, workers)

                def orphaned(now_ms: int) -> int:
                    return _orphaned_leases(store, workers, now_ms)

            meter = TradeOffMeter(sim, api, design, cap, held, quiet_from_ms, orphaned)
            theirs = DesignCheckers(sim, verdicts, api, cap, held, checkers)
            workload = attrs.evolve(
                config.workload, until_ms=min(config.workload.until_ms, config.duration_ms)
            )
            for index, name in enumerate(clients):
                nursery.start_soon(
                    arrivals, sim, network, workload, name, index, meter.submitted, name=f"workload.{name}"
                )
            _schedule_faults(sim, config, faults, objects)
            await _items_end(sim, config, quiet_from_ms, meter, api, left)
            theirs.finish(config.workload.keys)
            measured.append(meter.finish())
            nursery.cancel_scope.cancel()

    bound = limits or Limits(time_limit_ms=config.duration_ms + MAX_SETTLE_MS + 1)
    with variant.applied():  # a patch, for this run only, whatever happens in it
        result = run(seed, main, trace, bound, progress)
    findings = found[0].findings if found else Counter[str]()
    return DesignRun(design, trace, result, measured[0] if measured else None, findings=findings)


def _boot(obj: DurableObject) -> None:
    """A worker's process starts at the run's start (its supervisor's first start)."""
    instance = obj.instance()
    assert isinstance(instance, LeasedWorkerObject)
    instance.start()


def _ledger_size(obj: DurableObject, now_ms: int) -> int:
    """The gate's slots that count against its cap now: a stale slot is free to the next acquire
    (the ledger heals it then), so it holds nothing back."""
    instance = obj.instance()
    assert isinstance(instance, GateObject)
    stale_ms = instance.ledger.stale_ms
    return sum(1 for slot in instance.ledger.slots() if now_ms - slot.acquired_at_ms <= stale_ms)


def _orphaned_slots(gates: Iterable[DurableObject], callers: list[DurableObject], now_ms: int) -> int:
    """The gates' slots, not yet stale, that no live caller's handler holds: its caller died, or its
    release was lost."""
    held: set[str] = set()
    for obj in callers:
        if obj.live:
            caller = obj.instance()
            assert isinstance(caller, GateCaller)
            held |= caller.tokens
    orphans = 0
    for obj in gates:
        if obj.live:
            gate = obj.instance()
            assert isinstance(gate, GateObject)
            stale_ms = gate.ledger.stale_ms
            orphans += sum(
                1
                for slot in gate.ledger.slots()
                if now_ms - slot.acquired_at_ms <= stale_ms and slot.token not in held
            )
    return orphans


def _orphaned_leases(store: LeaseStoreObject, workers: list[DurableObject], now_ms: int) -> int:
    """The store's live leases that no live worker's execution holds: its worker died, or the claim's
    reply was lost."""
    running: set[tuple[str, str]] = set()
    for obj in workers:
        if obj.live:
            worker = obj.instance()
            assert isinstance(worker, LeasedWorkerObject)
            running |= set(worker.running)
    return sum(1 for lease in store.live_leases(now_ms) if lease not in running)


def _gate_items(callers: list[DurableObject]) -> tuple[int, int]:
    """(items stored, items unfinished) over every caller's storage."""
    stored = left = 0
    for obj in callers:
        if obj.storage.execute("SELECT 1 FROM sqlite_master WHERE name = 'gate_items'").fetchone() is None:
            continue
        (count,) = obj.storage.execute("SELECT COUNT(*) FROM gate_items").fetchone()
        stored += int(count)
        left += unfinished(obj.storage)
    return stored, left


def _rate_limits(spec: LeasedSpec, accounts: tuple[str, ...]) -> tuple[RateLimitRule, ...]:
    rule = spec.rate_limit
    if rule is None:
        return ()
    per_key = None if rule.per_key is None else RateWindow(rule.per_key, rule.window_ms)
    return tuple(
        RateLimitRule(account, RateWindow(rule.limit, rule.window_ms), per_key) for account in accounts
    )


def _schedule_faults(
    sim: Sim, config: WorldConfig, faults: FaultPlan, objects: dict[str, DurableObject]
) -> None:
    """Evictions (one-off, and the gates' periodic ones) and shutdowns, at their times; ties with
    the other work of their millisecond drawn as the semaphore's world draws them."""
    actions: list[tuple[int, int, Callable[[], None]]] = []

    def evict(target: str) -> None:
        sim.event("fault", fault="evict", target=target)
        objects[target].evict()

    def shutdown(target: str) -> None:
        obj = objects[target]
        if not obj.live:
            sim.event("fault_skipped", target=target, reason="not running")
            return
        sim.event("fault", fault="shutdown", target=target)
        instance = obj.instance()
        assert isinstance(instance, LeasedWorkerObject)
        instance.shutdown()

    for eviction in faults.evictions:
        actions.append((eviction.at_ms, len(actions), functools.partial(evict, eviction.target)))
    every = faults.evict_holders_every_ms
    if every is not None:
        assert faults.faults_until_ms is not None
        for t in range(every, faults.faults_until_ms, every):
            for name in coordinators(config.design.name, config.workload.keys):
                actions.append((t, len(actions), functools.partial(evict, name)))
    for planned in faults.shutdowns:
        actions.append((planned.at_ms, len(actions), functools.partial(shutdown, planned.target)))
    schedule_faults_at(sim, actions)


async def _items_end(
    sim: Sim,
    config: WorldConfig,
    quiet_from_ms: int,
    meter: TradeOffMeter,
    api: ExternalApi,
    left: Callable[[], tuple[int, int]],
) -> None:
    """Wait until every submitted item's work has ended, past the story and the faults; fail
    ``items_end`` if that takes longer than ``MAX_SETTLE_MS`` past the story."""
    judge_from = max(config.duration_ms, quiet_from_ms)
    give_up_at = config.duration_ms + MAX_SETTLE_MS
    await sim.sleep_until(judge_from)
    while True:
        stored, unfinished_items = left()
        if stored >= meter.submitted_count and not unfinished_items and not api.running:
            return
        if sim.now() >= give_up_at:
            detail = (
                f"{unfinished_items} of {stored} items unfinished and {len(api.running)} calls running "
                f"at the API "
                f"{sim.now() - config.duration_ms} ms after the story ended "
                f"({meter.submitted_count - stored} submitted items never stored)"
            )
            sim.event("violation", invariant=ITEMS_END, finding=None, detail=detail)
            raise InvariantViolation(ITEMS_END, sim.now(), detail)
        await sim.sleep(PROGRESS_SAMPLE_MS)
