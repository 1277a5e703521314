"""Fuzz campaign throughput: the ci campaigns of tests/test_fuzz.py, timed.

    python benchmarks/bench_fuzz.py [--runs N]

Prints, for the faithful reference and for the variant with every fix: runs,
simulated hours, CPU seconds (this process's user + system time: the
machine is shared, so wall time is noise), runs per CPU second, simulated
seconds per CPU second. A campaign draws the same cases here as in pytest.
"""

from __future__ import annotations

import argparse
import time

from semaphore_core.fixes import ALL_FIXES
from semsim.cli.main import runs_arg
from semsim.explore.fuzz import KNOWN_FINDINGS, campaign
from semsim.explore.mutants import CI_RUNS, CI_SEED
from semsim.inputs.commands import run_printing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=runs_arg, default=CI_RUNS)
    args = parser.parse_args()
    variants = {
        "reference": ((), KNOWN_FINDINGS),
        "every fix": (tuple(sorted(ALL_FIXES)), frozenset()),
    }
    print(
        f"{'variant':<10} {'runs':>5} {'sim h':>7} {'cpu s':>7} {'runs/s':>7} {'sim s / cpu s':>14}",
        flush=True,
    )
    for name, (fixes, tolerated) in variants.items():
        started = time.process_time()
        result = campaign(args.runs, CI_SEED, fixes=fixes, tolerated=tolerated, shrink=False)
        cpu = time.process_time() - started
        sim_s = result.sim_ms / 1000
        print(
            f"{name:<10} {result.runs:>5} {sim_s / 3600:>7.2f} {cpu:>7.1f} "
            f"{result.runs / cpu:>7.2f} {sim_s / cpu:>14,.0f}",
            flush=True,
        )


if __name__ == "__main__":
    run_printing(main)
