"""Benchmark: is the simulator's cost flat in run length? CPU seconds per simulated hour, hour by hour.

    python benchmarks/bench_flat.py                  # 4 simulated hours
    python benchmarks/bench_flat.py --hours 24 --report 1,4,24

Runs the standard workload of ``bench_sim.py`` (one holder, 16 lease-capable
clients, strict leases, 5% reply loss, a holder eviction every 10 simulated
minutes) for ``--hours`` and prints, for each simulated hour, the CPU time
(user + system of this process: the machine is shared, so wall time is
noise) spent simulating it. A simulator whose cost grows with history (a
query that scans every item ever enqueued) shows it here as later hours
costing more than the first. The last line is the ratio of the slowest
reported hour to the first: the target is within 10%.

The CPU clock is read when the first trace event of each simulated hour is
recorded, so an hour's figure is the work done between two such events.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from benchmarks.bench_sim import HOUR_MS, standard
from semsim.cli.main import seed_arg
from semsim.harness.run import run_world
from semsim.inputs.commands import run_printing
from semsim.runtime.trace import Trace

#: Longest run this benchmark accepts (simulated hours): a week of simulated time.
MAX_HOURS = 168


def _hours(text: str) -> int:
    hours = int(text)
    if not 1 <= hours <= MAX_HOURS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_HOURS}, got {hours}")
    return hours


def _report(text: str) -> list[int]:
    try:
        hours = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be hour numbers separated by commas, got {text!r}") from None
    if not hours or hours[0] < 1:
        raise argparse.ArgumentTypeError(f"must be hour numbers from 1, got {text!r}")
    return hours


def hour_costs(hours: int, seed: int) -> list[float]:
    """CPU seconds of each simulated hour of the standard workload, first to last."""
    per_hour, _, _ = _hours_run(hours, seed)
    return [per_hour[hour] for hour in range(1, hours + 1)]


def _hours_run(hours: int, seed: int) -> tuple[dict[int, float], str, float]:
    """Run the standard workload for ``hours``: CPU seconds per simulated hour, the verdict, the CPU s."""
    #: CPU time when the first event of each simulated hour was recorded.
    marks: dict[int, float] = {}
    original = Trace.event

    def event(self: Trace, t_ms: int, kind: str, fields: dict[str, Any]) -> None:
        hour = t_ms // HOUR_MS
        if hour not in marks:
            marks[hour] = time.process_time()
        original(self, t_ms, kind, fields)

    config, faults = standard(hours)
    Trace.event = event  # type: ignore[method-assign]
    try:
        start = time.process_time()
        run = run_world(config, faults, seed)
        end = time.process_time()
    finally:
        Trace.event = original  # type: ignore[method-assign]
    marks.setdefault(hours, end)
    result = run.result
    verdict: str = result.outcome
    if result.invariant is not None:  # no finding is tolerated: F4's capacity_returns may end it
        finding = f":{result.finding}" if result.finding else ""
        verdict += f" ({result.invariant}{finding} at {result.end_ms} ms)"
    per_hour = {h: marks[h] - marks[h - 1] for h in range(1, hours + 1) if h in marks and h - 1 in marks}
    return per_hour, verdict, end - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=_hours, default=4, help="simulated hours to run (default 4)")
    parser.add_argument(
        "--report", type=_report, default=None, help="hours to compare, e.g. 1,4,24 (default: every hour)"
    )
    parser.add_argument("--seed", type=seed_arg, default=7)
    args = parser.parse_args()
    report = args.report or list(range(1, args.hours + 1))
    if report[-1] > args.hours:
        parser.error(f"--report names hour {report[-1]} but --hours is {args.hours}")

    try:
        standard(args.hours)
    except ValueError as error:  # e.g. more items than a run may submit
        parser.error(f"--hours {args.hours}: {error}")
    per_hour, verdict, cpu_s = _hours_run(args.hours, args.seed)
    print(f"outcome: {verdict}; {args.hours} simulated h in {cpu_s:.1f} CPU s")
    for hour in report:
        print(f"  hour {hour:3d}: {per_hour[hour]:6.2f} CPU s per simulated hour")
    first, worst = per_hour[report[0]], max(per_hour[h] for h in report)
    print(f"slowest reported hour / hour {report[0]}: {worst / first:.2f} (target: at most 1.10)")


if __name__ == "__main__":
    run_printing(main)
