"""Fuzz campaign throughput: the ci campaigns of tests/test_fuzz.py, timed.

    python benchmarks/bench_fuzz.py [--runs N]

Prints, for the faithful reference and for the variant with every fix: runs,
simulated hours, wall seconds, runs per wall second, simulated seconds per
wall second. The campaigns are the same as the pytest fuzz suite's (same
seed and budget) but run outside pytest, so the Hypothesis constant pool
(and so the cases drawn) can differ slightly.
"""

from __future__ import annotations

import argparse
import time

from semaphore_core.fixes import ALL_FIXES
from sim.fuzz import KNOWN_FINDINGS, campaign
from sim.mutants import CI_RUNS, CI_SEED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=CI_RUNS)
    args = parser.parse_args()
    variants = {
        "reference": ((), KNOWN_FINDINGS),
        "every fix": (tuple(sorted(ALL_FIXES)), frozenset()),
    }
    print(f"{'variant':<10} {'runs':>5} {'sim h':>7} {'wall s':>7} {'runs/s':>7} {'sim s / wall s':>15}")
    for name, (fixes, tolerated) in variants.items():
        started = time.perf_counter()
        result = campaign(args.runs, CI_SEED, fixes=fixes, tolerated=tolerated, shrink=False)
        wall = time.perf_counter() - started
        sim_s = result.sim_ms / 1000
        print(
            f"{name:<10} {result.runs:>5} {sim_s / 3600:>7.2f} {wall:>7.1f} "
            f"{result.runs / wall:>7.2f} {sim_s / wall:>15,.0f}"
        )


if __name__ == "__main__":
    main()
