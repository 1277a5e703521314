"""Kill rates: the share of drawn runs that kill each planted bug, on one fixed sample of runs.

    python benchmarks/bench_kill_rates.py [--seeds 1,2,3] [--cases 50] [--arm NAME]
        [--only NAME,NAME | --variants MODULE:ATTR,...] [--baseline F.json] [--workers N] [--json F.json]
    python benchmarks/bench_kill_rates.py --compare A.json B.json

Why not time to bug alone (``bench_time_to_bug.py``): its cell is the first kill of one
campaign, so it rests on one draw. A lever that changes the draws reshuffles which rare world
comes early, cells move both ways, and three seeds cannot tell a better distribution from a
different one (docs/BENCHMARKS.md, "Levers tried"). Here every variant meets the same runs --
the runs of each seed's reference campaign of ``--cases`` runs (what ``semsim fuzz --runs N``
draws, tolerating F1-F5 as the reference campaign does; Hypothesis draws by the budget, so the
tenth run of a 50-run campaign is not the tenth of a 150-run one) -- whatever the runs before
found, and gets a
rate ``p``: the share of those runs that break an invariant. From ``p`` and the variant's CPU
seconds per run follow what a campaign can expect: it kills the variant within 150 runs with
probability ``1 - (1 - p) ** 150``, after ``(1 - p) / p`` misses on average, each costing a
missed run's mean CPU, then the killing run. That takes the runs as independent draws, which
they nearly are since every run is drawn afresh (2026-12-05: no run is a copy of another,
though the first tenth of a budget is held small); before, three runs in four were
near-copies of another, so a campaign's chance was lower than these figures said. (Only the
reference campaign: in the time-to-bug record 166 of 167 drawn kills came from it.) The
reference itself runs as a control: a case it fails, beyond what it tolerates, is a false
positive of the draws, and is reported.

An *arm* (``--arm``, :data:`ARMS`) rewrites each drawn case by a rule that keeps every choice
already drawn, so the baseline's runs and the arm's pair up case by case; with ``--baseline``,
a case the arm leaves as it was takes its results from that record (a run is deterministic)
instead of being run again. ``--compare A.json B.json`` sets two records of the same runs side
by side: per variant, the runs only one of them kills, with McNemar's exact two-sided test on
them, so a lever is judged on the cases it changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_time_to_bug import (
    cannot_write,
    planted_variant,
    variant_names,
)  # semsim from this checkout, as that script's
from semsim.check.invariants import SEMAPHORE_FINDINGS
from semsim.cli.main import runs_arg
from semsim.explore.campaigns import default_workers, local_pool
from semsim.explore.fuzz import RunReport, campaign, run_case
from semsim.explore.strategies import QUIET_MS, Case, _drawn_for, bounded_load
from semsim.harness.catalog import mutant
from semsim.inputs.commands import UsageError, output_file, run_printing
from semsim.inputs.files import write_text_whole
from semsim.world.faults import Eviction, Rollback

#: The control: the reference, run on every case like any variant.
REFERENCE = "reference"
#: Runs a campaign makes per seed in issue 27's measure.
CAMPAIGN_RUNS = 150
#: Cases a job runs: small enough that the pool stays busy to the end.
CHUNK = 10


def _flapping_odd(case: Case) -> Case:
    """Input-fault windows whose length in ms is odd flap (``InputFault.flapping``): kept, so
    the draws do this themselves since 2026-12-04, and on them the arm changes nothing."""
    faults = tuple(
        attrs.evolve(fault, flapping=True) if (fault.end_ms - fault.start_ms) % 2 == 1 else fault
        for fault in case.faults.input_faults
    )
    return attrs.evolve(case, faults=attrs.evolve(case.faults, input_faults=faults))


def _aimed_odd(case: Case) -> Case:
    """In worlds with durable operations, a client's evictions at an odd ms aim at an attempt."""
    if case.config.operations is None:
        return case
    evictions = tuple(
        attrs.evolve(eviction, in_attempt=True)
        if not eviction.target.startswith("holder:") and eviction.at_ms % 2 == 1
        else eviction
        for eviction in case.faults.evictions
    )
    return attrs.evolve(case, faults=attrs.evolve(case.faults, evictions=evictions))


def _fewer_items(most: int) -> Callable[[Case], Case]:
    """Arrivals stop once the workload has offered about ``most`` items (``offered_items``):
    ``until_ms`` is cut, every other choice stays as drawn. Not kept (docs/BENCHMARKS.md)."""

    def arm(case: Case) -> Case:
        workload = case.config.workload
        if workload.arrival == "steady":
            until_ms = max(1, round(most * 60_000 / (workload.clients * workload.items_per_minute)))
        else:
            bursts = max(1, most // (workload.clients * workload.burst_size))
            until_ms = bursts * workload.burst_every_ms + 1
        if until_ms >= workload.until_ms:
            return case
        workload = attrs.evolve(workload, until_ms=until_ms)
        return attrs.evolve(case, config=attrs.evolve(case.config, workload=workload))

    return arm


def _start_edge(every: int) -> Callable[[Case], Case]:
    """A timed fault whose drawn integer is a multiple of ``every`` strikes at that integer over
    ``every`` ms instead of its spread moment: a run's first seconds as an edge of their own,
    beside the spread. A window cut at the phase's end keeps its time (its drawn length is
    gone); a holder eviction moved to an odd ms becomes a rollback, as the draws make one.
    Not kept (docs/BENCHMARKS.md)."""

    def arm(case: Case) -> Case:
        faults = case.faults
        phase_ms = case.config.duration_ms - QUIET_MS
        at_moment, at_start = _drawn_for(phase_ms), _drawn_for(phase_ms - 1)

        def moved(at_ms: int, drawn: dict[int, int] = at_moment) -> int:
            integer = drawn[at_ms]
            return integer // every if integer % every == 0 else at_ms

        def window(fault: Any, drawn: dict[int, int]) -> Any:
            if fault.end_ms >= phase_ms:
                return fault
            start_ms = moved(fault.start_ms, drawn)
            return attrs.evolve(fault, start_ms=start_ms, end_ms=start_ms + fault.end_ms - fault.start_ms)

        evictions: list[Eviction] = []
        rollbacks = list(faults.rollbacks)
        for eviction in faults.evictions:
            at_ms = moved(eviction.at_ms)
            if eviction.target.startswith("holder:") and at_ms % 2 == 1:
                rollbacks.append(Rollback(eviction.target.removeprefix("holder:"), at_ms))
            else:
                evictions.append(attrs.evolve(eviction, at_ms=at_ms))
        rewritten = attrs.evolve(
            faults,
            evictions=tuple(evictions),
            rollbacks=tuple(rollbacks),
            partitions=tuple(window(fault, at_moment) for fault in faults.partitions),
            input_faults=tuple(window(fault, at_start) for fault in faults.input_faults),
            limit_changes=tuple(attrs.evolve(c, at_ms=moved(c.at_ms)) for c in faults.limit_changes),
            group_limit_changes=tuple(
                attrs.evolve(c, at_ms=moved(c.at_ms)) for c in faults.group_limit_changes
            ),
            cancels=tuple(attrs.evolve(c, at_ms=moved(c.at_ms)) for c in faults.cancels),
        )
        return case if rewritten == faults else attrs.evolve(case, faults=rewritten)

    return arm


def _limit_per_lease(odd_only: bool) -> Callable[[Case], Case]:
    """In a lease world (with ``odd_only``: one whose drawn limit is odd), the drawn limit counts
    leases of ``permits_per_lease`` permits, not permits: room for leases of more than one or
    two permits, which drawn worlds seldom grant (21 of 2,395 in the sample). Not kept
    (docs/BENCHMARKS.md)."""

    def arm(case: Case) -> Case:
        holder = case.config.holder
        if holder.leases is None or holder.leases.permits_per_lease == 1:
            return case
        if odd_only and holder.limit % 2 == 0:
            return case
        holder = attrs.evolve(holder, limit=holder.limit * holder.leases.permits_per_lease)
        return attrs.evolve(case, config=attrs.evolve(case.config, holder=holder))

    return arm


def _two_keys_odd(case: Case) -> Case:
    """A case whose seed is odd runs two accounts (two holders), its items spread over both:
    the drawn worlds have one key (``strategies.KEYS``), so nothing drawn has a client asking
    several holders at once, or a checker asking one question per key. Not kept
    (docs/BENCHMARKS.md)."""
    if case.seed % 2 == 0:
        return case
    workload = attrs.evolve(case.config.workload, keys=(*case.config.workload.keys, "acct-2"))
    return attrs.evolve(case, config=attrs.evolve(case.config, workload=workload))


def _load_32(case: Case) -> Case:
    """Arrivals offer at most 32 times what the limit can run (``strategies.bounded_load``):
    kept, so the draws do this themselves since 2026-12-05, and on them the arm changes
    nothing. Measured at e8212e7 against ``kill-rates-catalog-fresh.json``."""
    workload = bounded_load(case.config.workload, case.config.holder.limit, 32.0)
    if workload == case.config.workload:
        return case
    return attrs.evolve(case, config=attrs.evolve(case.config, workload=workload))


#: Rewrites of drawn cases that keep every drawn choice (see the module docstring).
ARMS: dict[str, Callable[[Case], Case]] = {
    "flapping-odd": _flapping_odd,
    "aimed-odd": _aimed_odd,
    "items-48": _fewer_items(48),
    "items-24": _fewer_items(24),
    "start-edge-4": _start_edge(4),
    "limit-per-lease": _limit_per_lease(odd_only=False),
    "limit-per-lease-odd": _limit_per_lease(odd_only=True),
    "two-keys-odd": _two_keys_odd,
    "load-32": _load_32,
}


def drawn_cases(seed: int, count: int) -> list[Case]:
    """The runs of the ``count``-run reference campaign of ``seed``, as it draws them."""
    seen: list[Case] = []

    def note(case: Case, tolerated: frozenset[str]) -> RunReport:
        seen.append(case)
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    campaign(count, seed, runner=note, shrink=False)
    assert len(seen) == count, (seed, count, len(seen))
    return seen


def digest(case: Case) -> str:
    """A case's identity across processes and records."""
    return hashlib.sha256(json.dumps(case.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def run_chunk(name: str, cases: Sequence[Case]) -> list[tuple[str | None, float]]:
    """One job: ``cases`` run as the variant ``name``; per case, the broken invariant (or None)
    and this process's CPU seconds for the run."""
    planted = planted_variant(name)
    results: list[tuple[str | None, float]] = []
    for case in cases:
        started = time.process_time()
        report, _ = run_case(attrs.evolve(case, variant=planted), SEMAPHORE_FINDINGS)
        results.append((report.failure_name if report.failed else None, time.process_time() - started))
    return results


@attrs.frozen
class Rate:
    """One variant over the sample: its kills and what they predict for a campaign."""

    name: str
    kills: int
    runs: int
    #: Mean CPU seconds of a run that kills it, and of one that does not.
    hit_cpu_s: float
    miss_cpu_s: float

    @property
    def rate(self) -> float:
        return self.kills / self.runs

    @property
    def killed_within_campaign(self) -> float:
        """The chance a campaign of ``CAMPAIGN_RUNS`` drawn runs kills it."""
        return 1 - (1 - self.rate) ** CAMPAIGN_RUNS

    @property
    def cpu_s_to_kill(self) -> float:
        """Expected CPU seconds to the end of the first killing run (inf if none killed)."""
        if self.kills == 0:
            return math.inf
        return (1 - self.rate) / self.rate * self.miss_cpu_s + self.hit_cpu_s


def rates(record: dict[str, Any]) -> list[Rate]:
    out = []
    for name, results in record["results"].items():
        hits = [cpu for failure, cpu in results if failure is not None]
        misses = [cpu for failure, cpu in results if failure is None]
        out.append(
            Rate(
                name,
                len(hits),
                len(results),
                sum(hits) / len(hits) if hits else 0.0,
                sum(misses) / len(misses) if misses else 0.0,
            )
        )
    return out


def summary(record: dict[str, Any]) -> list[str]:
    all_rates = rates(record)
    lines = [
        f"{'variant':<44} {'kills':>9} {'rate':>6} {'P(150)':>7} {'CPU s/run':>10} {'CPU s to kill':>14}"
    ]
    control = [rate for rate in all_rates if rate.name == REFERENCE]
    variants = [rate for rate in all_rates if rate.name != REFERENCE]
    for rate in sorted(variants, key=lambda rate: (-rate.rate, rate.name)):
        lines.append(
            f"{rate.name.rpartition(':')[2]:<44} {rate.kills:>4}/{rate.runs:<4} {rate.rate:>6.1%} "
            f"{rate.killed_within_campaign:>7.0%} {rate.miss_cpu_s:>10.3f} {rate.cpu_s_to_kill:>14.2f}"
        )
    if variants:
        expected = sum(rate.killed_within_campaign for rate in variants) / len(variants)
        fast = sum(rate.cpu_s_to_kill <= 5 for rate in variants)
        lines.append(
            f"{len(variants)} variants on {variants[0].runs} runs: a {CAMPAIGN_RUNS}-run campaign is "
            f"expected to kill {expected:.1%}; {fast} expect a kill within 5 CPU s; "
            f"{sum(rate.kills == 0 for rate in variants)} never killed"
        )
    for rate in control:
        lines.append(
            f"control: the reference broke an invariant in {rate.kills} of {rate.runs} runs "
            f"({rate.miss_cpu_s:.3f} CPU s a run)"
        )
    return lines


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test: the chance of a split this uneven if both kill alike."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Two records of the same runs (arms of one sample) side by side, variant by variant."""
    if [case["seed"] for case in a["cases"]] != [case["seed"] for case in b["cases"]]:
        raise UsageError("--compare: the two records do not hold the same sample of runs")
    changed = sum(x["digest"] != y["digest"] for x, y in zip(a["cases"], b["cases"], strict=True))
    lines = [
        f"{changed} of {len(a['cases'])} runs differ between the two records",
        f"{'variant':<44} {'A kills':>8} {'B kills':>8} {'only A':>7} {'only B':>7} {'p':>6}",
    ]
    total_a = total_b = 0
    for name in a["results"]:
        if name not in b["results"]:
            continue
        ra, rb = a["results"][name], b["results"][name]
        only_a = sum(x[0] is not None and y[0] is None for x, y in zip(ra, rb, strict=True))
        only_b = sum(x[0] is None and y[0] is not None for x, y in zip(ra, rb, strict=True))
        total_a += only_a
        total_b += only_b
        kills_a = sum(x[0] is not None for x in ra)
        kills_b = sum(y[0] is not None for y in rb)
        mark = "" if only_a == only_b == 0 else f"{mcnemar_p(only_a, only_b):>6.3f}"
        lines.append(
            f"{name.rpartition(':')[2]:<44} {kills_a:>8} {kills_b:>8} {only_a:>7} {only_b:>7} {mark:>6}"
        )
    cpu_a = sum(cpu for results in a["results"].values() for _, cpu in results)
    cpu_b = sum(cpu for results in b["results"].values() for _, cpu in results)
    lines.append(
        f"all variants: {total_a} kills only in A, {total_b} only in B "
        f"(p {mcnemar_p(total_a, total_b):.3f}); "
        f"CPU s of every run {cpu_a:,.0f} (A) and {cpu_b:,.0f} (B)"
    )
    return lines


def _read(parser: argparse.ArgumentParser, option: str, path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not (
            isinstance(record, dict)
            and isinstance(record.get("cases"), list)
            and all(isinstance(case, dict) and {"seed", "digest"} <= case.keys() for case in record["cases"])
            and isinstance(record.get("results"), dict)
            and all(
                isinstance(runs, list)
                and len(runs) == len(record["cases"])
                and all(isinstance(run, list) and len(run) == 2 for run in runs)
                for runs in record["results"].values()
            )
        ):
            raise ValueError("not a record of bench_kill_rates.py")
    except (OSError, ValueError) as error:
        parser.error(f"{option}: {path}: {error}")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="campaign seeds, comma-separated (default 1,2,3)")
    parser.add_argument("--cases", type=runs_arg, default=50, help="drawn runs per seed (default 50)")
    parser.add_argument("--arm", choices=sorted(ARMS), help="rewrite the drawn runs by this rule")
    parser.add_argument("--only", help="these mutants only, comma-separated")
    parser.add_argument(
        "--variants", help="these holder variants (module:attribute, comma-separated) instead of the catalog"
    )
    parser.add_argument("--baseline", type=Path, help="take the results of unchanged runs from this record")
    parser.add_argument("--workers", type=runs_arg, help="processes (default: every core)")
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A.json", "B.json"))
    args = parser.parse_args()
    if args.compare is not None:
        first, second = (_read(parser, "--compare", path) for path in args.compare)
        try:
            print("\n".join(compare(first, second)))
        except UsageError as error:
            parser.error(str(error))
        return
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: integers separated by commas, got {args.seeds!r}")
    asked = variant_names(parser, args)
    # The sample is the semaphore's reference campaign: a design's planted bug runs in its own
    # design's campaigns (bench_time_to_bug.py measures those).
    of_designs = [n for n in asked if ":" not in n and mutant(n).design != "semaphore"]
    if of_designs and args.only is not None:
        parser.error(
            f"--only: {of_designs[0]} is a planted bug of the {mutant(of_designs[0]).design} design; "
            "kill rates sample the semaphore's campaign (bench_time_to_bug.py measures the designs')"
        )
    names = [REFERENCE, *(n for n in asked if n not in of_designs)]
    baseline = _read(parser, "--baseline", args.baseline) if args.baseline is not None else None
    if args.json is not None:
        try:
            output_file(args.json, "--json")
        except UsageError as error:
            parser.error(str(error))
    arm = ARMS[args.arm] if args.arm is not None else (lambda case: case)
    drawn = [
        (seed, index, arm(case)) for seed in seeds for index, case in enumerate(drawn_cases(seed, args.cases))
    ]
    cases = [case for _, _, case in drawn]
    digests = [digest(case) for case in cases]
    known: dict[tuple[str, str], tuple[str | None, float]] = {}
    if baseline is not None:
        for name, results in baseline["results"].items():
            for case, result in zip(baseline["cases"], results, strict=True):
                known[(name, case["digest"])] = (result[0], result[1])
    results = {name: [known.get((name, d)) for d in digests] for name in names}
    # Only the runs each variant has no result for yet (a run is deterministic).
    todo = {name: [i for i, result in enumerate(results[name]) if result is None] for name in names}
    jobs = [(name, mine[at : at + CHUNK]) for name, mine in todo.items() for at in range(0, len(mine), CHUNK)]
    workers = args.workers or default_workers()
    print(
        f"{len(cases)} runs ({len(seeds)} seeds x {args.cases}) x {len(names)} variants, "
        f"{sum(map(len, todo.values()))} to run (the rest from the baseline): {len(jobs)} jobs on {workers} "
        "processes",
        flush=True,
    )
    with local_pool(workers) as pool:
        futures = {
            pool.submit(run_chunk, name, [cases[i] for i in chunk]): (name, chunk) for name, chunk in jobs
        }
        for done, future in enumerate(as_completed(futures), start=1):
            name, chunk = futures[future]
            for i, result in zip(chunk, future.result(), strict=True):
                results[name][i] = result
            if done % 20 == 0 or done == len(jobs):
                print(f"[{done}/{len(jobs)}] jobs done", flush=True)
    record = {
        "arm": args.arm,
        "cases": [
            {"seed": seed, "index": index, "digest": d}
            for (seed, index, _), d in zip(drawn, digests, strict=True)
        ],
        "results": {name: [[failure, round(cpu, 4)] for failure, cpu in results[name]] for name in names},
    }
    print("\n".join(summary(record)))
    if args.json is not None:
        try:
            write_text_whole(args.json, json.dumps(record, indent=None) + "\n")
        except OSError as error:
            cannot_write(parser, f"--json {args.json}", error)
        print(f"written to {args.json}", file=sys.stderr)


if __name__ == "__main__":
    run_printing(main)
