"""A seed sweep: many campaigns, one per seed, the figure behind "nothing breaks with every fix".

    python benchmarks/sweep.py [--fixes all] [--seeds 10] [--first-seed 0] [--runs 300]
                               [--workers 2] [--out DIR]

Each seed is one campaign of ``--runs`` drawn runs (no named scenarios, no
shrinking: a sweep counts, ``semsim fuzz --seed N`` then shrinks what it
found). A campaign stops at its first unexpected violation; its unshrunk
case is saved under ``--out``. Campaigns draw their cases from their seed
alone, so the figures do not depend on how many workers ran them.

Prints one line per seed and a total: runs, violations by name, known
findings counted (reference only), CPU seconds (user + system of the
workers, not wall time: the machine is shared) and runs per CPU second.
Exit 1 if any campaign found an unexpected violation.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from semsim.cli.main import runs_arg, seed_arg, workers_arg
from semsim.explore.fuzz import campaign, case_text, fixes_arg, tolerated_for
from semsim.inputs.commands import run_printing
from semsim.inputs.files import write_text_whole
from semsim.inputs.validation import MAX_SEED


def one(job: tuple[int, int, tuple[str, ...], str]) -> dict[str, Any]:
    """One campaign: what it ran and found, and its CPU time (this worker process's)."""
    seed, runs, fixes, out = job
    started = time.process_time()
    result = campaign(runs, seed, fixes, shrink=False)
    line: dict[str, Any] = {
        "seed": seed,
        "runs": result.runs,
        "sim_h": result.sim_ms / 3_600_000,
        "findings": dict(result.findings),
        "cpu_s": time.process_time() - started,
    }
    failure = result.failure
    if failure is not None:
        path = Path(out) / f"sweep-{seed}-{failure.failure_name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_whole(path, case_text(failure.case, tolerated_for(fixes), failure))
        line |= {"violation": failure.failure_name, "detail": failure.detail, "case": str(path)}
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixes", default="", help="'all', names, or '' for the faithful reference")
    parser.add_argument("--seeds", type=runs_arg, default=10, help="how many seeds (default 10)")
    parser.add_argument("--first-seed", type=seed_arg, default=0)
    parser.add_argument("--runs", type=runs_arg, default=300, help="runs per seed (default 300)")
    parser.add_argument("--workers", type=workers_arg, default=2)
    parser.add_argument("--out", type=Path, default=Path("semsim-sweep"), help="failing cases go here")
    parser.add_argument("--json", action="store_true", help="one JSON object per seed instead of a table")
    args = parser.parse_args()
    if args.first_seed + args.seeds - 1 > MAX_SEED:
        parser.error(
            f"--first-seed {args.first_seed} and --seeds {args.seeds} go past the last seed ({MAX_SEED})"
        )
    try:
        fixes = fixes_arg(args.fixes)
    except ValueError as error:
        parser.error(f"--fixes: {error}")
    jobs = [
        (seed, args.runs, fixes, str(args.out))
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    variant = "every fix" if fixes else "the faithful reference"
    print(f"sweep: {len(jobs)} seeds x {args.runs} runs, {variant}, {args.workers} workers", flush=True)
    lines = []
    with multiprocessing.Pool(args.workers) as pool:
        for line in pool.imap_unordered(one, jobs):
            lines.append(line)
            if args.json:
                print(json.dumps(line), flush=True)
            else:
                found = line.get("violation", "-")
                print(
                    f"  seed {line['seed']:>6}  runs {line['runs']:>5}  sim {line['sim_h']:7.1f} h  "
                    f"cpu {line['cpu_s']:7.1f} s  violation {found}",
                    flush=True,
                )
    runs = sum(line["runs"] for line in lines)
    cpu = sum(line["cpu_s"] for line in lines)
    violations = Counter(line["violation"] for line in lines if "violation" in line)
    findings: Counter[str] = Counter()
    for line in lines:
        findings.update(line["findings"])
    sim_h = sum(line["sim_h"] for line in lines)
    print(
        f"total: {runs} runs over {len(lines)} seeds, {sim_h:.0f} simulated h, "
        f"{cpu:.0f} CPU s ({runs / cpu:.2f} runs per CPU s)"
    )
    print("violations:", ", ".join(f"{k} {v}" for k, v in sorted(violations.items())) or "none")
    if not fixes:
        print("known findings counted:", ", ".join(f"{k} {v}" for k, v in sorted(findings.items())) or "none")
    for line in sorted(lines, key=lambda entry: entry["seed"]):
        if "violation" in line:
            print(f"  seed {line['seed']}: {line['violation']}: {line['detail']}\n    case: {line['case']}")
    return 1 if violations else 0


if __name__ == "__main__":
    status: list[int] = []
    run_printing(lambda: status.append(main()))  # a closed pipe (| head) ends it quietly
    sys.exit(status[0])
