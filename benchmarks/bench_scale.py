"""Benchmark: does the simulator's cost per event stay flat as clients and keys grow?

    python benchmarks/bench_scale.py                          # 16, 64, 256 clients x 1, 4 keys
    python benchmarks/bench_scale.py --clients 16,64,256,1000 --keys 1,4,16 --minutes 10

The standard workload of ``bench_sim.py`` (lease-capable clients at 6
items a minute each, 2 to 20 s of work per item, strict leases, a limit of
4 permits per client so contention stays alike, 5% reply loss, a holder
eviction every 10 simulated minutes), for every combination of
``--clients`` and ``--keys`` (items spread evenly over the keys, one holder
per key). For each it prints the CPU time (``time.process_time()``: the
machine is shared, so wall time is noise), the trace events, CPU
microseconds per event and per simulated second. The last line is the
ratio of the dearest to the cheapest CPU per event: issue 10's target is
at most 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from benchmarks.bench_sim import standard
from semsim.cli.main import seed_arg
from semsim.explore.fuzz import KNOWN_FINDINGS
from semsim.harness.run import run_world
from semsim.inputs.commands import run_printing
from semsim.world.workload import MAX_CLIENTS, MAX_KEYS

#: Longest run this benchmark accepts, in simulated minutes.
MAX_MINUTES = 24 * 60


def _list_of(name: str, most: int) -> Callable[[str], list[int]]:
    """An argparse type: distinct whole numbers from 1 to ``most``, comma-separated, sorted."""

    def parse(text: str) -> list[int]:
        try:
            values = sorted({int(part) for part in text.split(",") if part.strip()})
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be numbers separated by commas, got {text!r}"
            ) from None
        if not values or values[0] < 1 or values[-1] > most:
            raise argparse.ArgumentTypeError(f"{name} must be numbers from 1 to {most}, got {text!r}")
        return values

    return parse


def _minutes(text: str) -> int:
    minutes = int(text)
    if not 1 <= minutes <= MAX_MINUTES:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_MINUTES}, got {minutes}")
    return minutes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=_list_of("--clients", MAX_CLIENTS), default=[16, 64, 256])
    parser.add_argument("--keys", type=_list_of("--keys", MAX_KEYS), default=[1, 4])
    parser.add_argument("--minutes", type=_minutes, default=5, help="simulated minutes per run (default 5)")
    parser.add_argument("--seed", type=seed_arg, default=7)
    args = parser.parse_args()

    print(f"{'clients':>7} {'keys':>4} {'CPU s':>8} {'events':>9} {'us/event':>9} {'us/sim s':>9}  outcome")
    per_event: list[float] = []
    for clients in args.clients:
        for keys in args.keys:
            try:
                config, faults = standard(args.minutes / 60, clients, keys)
            except ValueError as error:
                parser.error(f"{clients} clients, {keys} keys: {error}")
            start = time.process_time()
            # Known findings (F4's idle leases, judged at the end) do not stop the run.
            run = run_world(config, faults, args.seed, tolerated=KNOWN_FINDINGS)
            cpu = time.process_time() - start
            events = len(run.trace)
            per_event.append(cpu / events * 1e6)
            print(
                f"{clients:7d} {keys:4d} {cpu:8.2f} {events:9d} {per_event[-1]:9.1f} "
                f"{cpu / (config.duration_ms / 1000) * 1e6:9.0f}  {run.result.outcome}",
                flush=True,
            )
    print(f"dearest / cheapest CPU per event: {max(per_event) / min(per_event):.2f} (target: at most 2)")


if __name__ == "__main__":
    run_printing(main)
