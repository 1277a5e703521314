"""Benchmark: the simulator on the standard workload.

    python benchmarks/bench_sim.py             # one simulated hour
    python benchmarks/bench_sim.py --hours 0.25
    python benchmarks/bench_sim.py --without-model   # no literal model in lockstep (its cost)
    python benchmarks/bench_sim.py --operations      # the account-concurrency world (issue 11)

One holder, 16 lease-capable clients, strict leases, 5% reply loss, one
holder eviction per simulated 10 minutes, one simulated hour. Reports
simulated seconds per wall second, RPCs per wall second, peak memory, and
where the wall time went: ``semaphore_core``'s holder, its queue client,
and the rest (the runtime: Trio scheduling, network, objects, trace). With
``--operations`` admitted items run as durable operations calling the
external API (``config.operations``) instead of on the job service; the
items per wall second (and per CPU second) are the figure to set beside
the bare semaphore's.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
import semaphore_core.holder as holder_module
import semaphore_core.queue as queue_module
from semsim.cli.main import seed_arg
from semsim.explore.fuzz import KNOWN_FINDINGS
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Workload

HOUR_MS = 3_600_000
MAX_HOURS = 168


def standard(hours: float, clients: int = 16, keys: int = 1) -> tuple[WorldConfig, FaultPlan]:
    """The standard workload: 16 clients and one key unless told; 4 permits of limit per client."""
    duration = int(hours * HOUR_MS)
    config = WorldConfig(
        holder=HolderSpec(limit=4 * clients, leases=LeaseSpec(provisioning="strict", permits_per_lease=4)),
        workload=Workload(
            clients=clients,
            keys=("acct",) if keys == 1 else tuple(f"acct-{i}" for i in range(keys)),
            items_per_minute=6,
            duration_ms=(2_000, 20_000),
            until_ms=duration,
        ),
        duration_ms=duration,
    )
    return config, FaultPlan(reply_loss=0.05, evict_holders_every_ms=600_000)


class Stopwatch:
    """Wall time spent inside the wrapped methods (outermost calls only)."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._depth = 0

    def wrap(self, cls: type, bucket: str, names: list[str]) -> None:
        for name in names:
            original = getattr(cls, name)

            @functools.wraps(original)
            def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if self._depth:
                    return _original(*args, **kwargs)
                self._depth += 1
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.spent[bucket] += time.perf_counter() - start
                    self._depth -= 1

            setattr(cls, name, timed)


class _NoLockstep:
    """Stands in for ``semsim.check.lockstep.Lockstep`` with ``--without-model``: checks nothing."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def drew(self, new_id: str) -> str:
        return new_id

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _hours(text: str) -> float:
    try:
        if "_" in text:  # float() reads 1_0 as 10: as the CLI's integers, refused
            raise ValueError(text)
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of hours, got {text!r}") from None
    if not 0 < hours <= MAX_HOURS:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_HOURS}, got {text}")
    if int(hours * HOUR_MS) < 1:
        raise argparse.ArgumentTypeError(f"must be at least a simulated millisecond, got {text}")
    return hours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=_hours, default=1.0, help="simulated hours (default 1)")
    parser.add_argument("--seed", type=seed_arg, default=7)
    parser.add_argument(
        "--without-model",
        action="store_true",
        help="run without the literal model in lockstep (exact_accounting), to measure what it costs",
    )
    parser.add_argument(
        "--operations",
        action="store_true",
        help="items run as durable operations calling the external API (the account-concurrency world)",
    )
    args = parser.parse_args()
    if args.without_model:
        import semsim.check.lockstep

        semsim.check.lockstep.Lockstep = _NoLockstep  # type: ignore[misc, assignment]

    watch = Stopwatch()
    watch.wrap(
        holder_module.Holder, "holder", ["round", "sync_message", "reclaim_expired", "usage", "next_alarm_at"]
    )
    watch.wrap(
        queue_module.QueueClient,
        "queue",
        [
            n
            for n in vars(queue_module.QueueClient)
            if not n.startswith("__") and callable(getattr(queue_module.QueueClient, n))
        ],
    )
    config, faults = standard(args.hours)
    if args.operations:
        config = attrs.evolve(config, operations=OperationsSpec())
    start, cpu_start = time.perf_counter(), time.process_time()
    run = run_world(config, faults, args.seed, tolerated=KNOWN_FINDINGS)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    kinds = Counter(event["kind"] for event in run.trace.events())
    simulated_s = config.duration_ms / 1000
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tolerated = sorted({str(violation.finding) for violation in run.monitor.violations})
    print(
        f"outcome: {run.result.outcome}"
        + (f" (known findings tolerated: {', '.join(tolerated)})" if tolerated else "")
        + f", simulated {simulated_s:.0f} s of workload in {wall:.1f} s of wall time"
        + f" (the run went on to settle until {run.result.end_ms / 1000:.0f} s)"
    )
    print(f"simulated seconds per wall second: {simulated_s / wall:.0f}")
    model = "off" if args.without_model else "on"
    print(
        f"CPU time: {cpu:.2f} s, {simulated_s / cpu:.0f} simulated seconds of workload per CPU second "
        f"(literal model in lockstep: {model})"
    )
    print(
        f"RPCs: {kinds['send']} ({kinds['send'] / wall:.0f} per wall second), trace events: {len(run.trace)}"
    )
    print(f"rounds: {kinds['round']}, admissions: {kinds['admit']}, evictions: {kinds['evict']}")
    where = "as durable operations calling the external API" if args.operations else "on the job service"
    print(
        f"items admitted and run {where}: {kinds['admit'] / wall:.0f} per wall second, "
        f"{kinds['admit'] / cpu:.0f} per CPU second"
    )
    print(f"peak memory (max RSS): {peak_mib:.0f} MiB")
    holder_s, queue_s = watch.spent["holder"], watch.spent["queue"]
    print(
        f"wall time in semaphore_core: holder {holder_s:.2f} s ({holder_s / wall:.0%}), "
        f"queue client {queue_s:.2f} s ({queue_s / wall:.0%}); "
        f"runtime and the rest {wall - holder_s - queue_s:.2f} s ({(wall - holder_s - queue_s) / wall:.0%})"
    )


if __name__ == "__main__":
    main()
