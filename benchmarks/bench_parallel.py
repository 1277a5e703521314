"""Benchmark: how much faster one campaign gets on more cores, and where the rest of the time goes.

    python benchmarks/bench_parallel.py                   # 100 runs, seed 5, 3 repetitions, 2 workers
    python benchmarks/bench_parallel.py --dask            # and on Dask LocalClusters of 2 workers
    python benchmarks/bench_parallel.py --runs 300 --reps 5 --project 16,64

The campaign is ``semsim fuzz --runs N --seed S``'s: the named scenarios, then
N drawn runs, on the faithful reference. Each repetition runs it serially,
then spread over ``--workers`` local processes (``local_pool``), then, with
``--dask``, over two Dask ``LocalCluster`` clusters of as many
single-threaded worker processes: one with Dask's default settings, one lean
(:data:`LEAN_DASK`: no statistical profiler, slower housekeeping ticks). Each
cluster is started for its campaign, in a process of its own, and warmed (its
workers import semsim) before the campaign's clock starts: a cluster left idle
beside the others' campaigns would take CPU from them (a tenth of a core,
measured). All must give the same result; the benchmark stops with exit 2 if
one does not.

Speed-ups are wall-clock ratios, which is the point of spreading a campaign
out, so they are taken within one repetition (serial and parallel a minute
apart), and the spread over repetitions is printed: this machine is shared.
The parts of the wall time come from the campaign's own callbacks: start-up
(executor ready to first report), the runs (first to last report in order),
and the replay (last report to the result). The coordinator's serial parts
are measured apart, in CPU seconds: drawing the plan (a campaign with a stub
runner) and replaying it (a campaign answered from its reports).

``--project W,W`` prints what W workers would give from those measured parts
(docs/BENCHMARKS.md, "Spreading a campaign": the model and its assumptions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from semsim.cli.main import runs_arg, seed_arg
from semsim.explore.campaigns import Dispatch, dask_pool, local_pool, parallel_campaign
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import Campaign, RunReport, campaign, run_case, tolerated_for
from semsim.explore.strategies import Case
from semsim.inputs.commands import run_printing

#: Most repetitions and workers this benchmark accepts (each repetition runs the campaign 2-3 times).
MAX_REPS = 20
MAX_WORKERS = 64
MAX_PROJECTED = 100_000


@attrs.frozen
class Timing:
    """One campaign's wall time, in parts, and its CPU seconds (this process's, and its workers')."""

    wall_s: float
    startup_s: float
    runs_s: float
    replay_s: float
    cpu_s: float
    worker_cpu_s: float
    #: The campaign's result, as a digest: every mode must give the same.
    result: str


def _timed(
    run: Callable[[Callable[[Campaign, RunReport, bool], None]], Campaign], dispatch: Dispatch
) -> Timing:
    """Run a campaign, noting when its first and last in-order reports arrive."""
    heard: list[float] = []

    def on_run(result: Campaign, report: RunReport, shrinking: bool) -> None:
        if not shrinking:
            heard.append(time.perf_counter())

    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = run(on_run)
    wall1, cpu1 = time.perf_counter(), time.process_time()
    first, last = (heard[0], heard[-1]) if heard else (wall1, wall1)
    return Timing(
        wall_s=wall1 - wall0,
        startup_s=first - wall0,
        runs_s=last - first,
        replay_s=wall1 - last,
        cpu_s=cpu1 - cpu0,
        worker_cpu_s=dispatch.worker_cpu_s,
        result=hashlib.sha256(repr(result).encode()).hexdigest()[:16],
    )


def _campaign(runs: int, seed: int, examples: list[Case], executor: Executor | None, workers: int) -> Timing:
    dispatch = Dispatch()
    if executor is None:
        return _timed(lambda on_run: campaign(runs, seed, examples=examples, on_run=on_run), dispatch)
    return _timed(
        lambda on_run: parallel_campaign(
            runs, seed, executor, workers, examples=examples, on_run=on_run, dispatch=dispatch
        ),
        dispatch,
    )


def _one(mode: str, runs: int, seed: int, workers: int, address: str | None) -> Timing:
    """One campaign in this (fresh) process: serially, on a local pool, or on the Dask cluster."""
    examples = fuzz_examples()
    if mode == "serial":
        return _campaign(runs, seed, examples, None, 1)
    if mode == "local":
        with local_pool(workers) as pool:
            return _campaign(runs, seed, examples, pool, workers)
    assert mode == "dask", mode
    assert address is not None
    with dask_pool(address) as (executor, threads):
        return _campaign(runs, seed, examples, executor, threads)


def _in_a_process(mode: str, args: argparse.Namespace, address: str | None) -> Timing:
    """``_one`` in a new process, so each campaign starts as ``semsim fuzz`` would (measured: the
    serial campaign ran 10-15% slower in a process that had run others, and the Dask client's event
    loop thread, left running, took the GIL from it)."""
    command = [sys.executable, __file__, "--one", mode, "--runs", str(args.runs), "--seed", str(args.seed)]
    command += ["--workers", str(args.workers)] + (["--address", address] if address else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: the {mode} campaign failed:\n{done.stderr[-2000:]}")
    return Timing(**json.loads(done.stdout.splitlines()[-1]))


#: Dask settings for a cluster that runs campaigns (as environment variables, which a
#: ``dask worker`` and a ``LocalCluster`` both read): the statistical profiler samples the running
#: task's stack every 10 ms, and the event-loop tick and system monitor wake every process
#: 50 and 2 times a second, busy or idle (docs/BENCHMARKS.md: what each costs here).
LEAN_DASK = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
}

#: A Dask LocalCluster in a process of its own (as a user's cluster would be): it warms its
#: workers (each imports semsim), prints its scheduler's address, then lives until its standard
#: input closes.
_CLUSTER = """
import logging, sys
from distributed import Client, LocalCluster
cluster = LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,
                       dashboard_address=None, silence_logs=logging.ERROR)
with Client(cluster) as client:
    client.run(__import__, "semsim.explore.campaigns")
print(cluster.scheduler_address, flush=True)
sys.stdin.read()
cluster.close()
"""


@contextmanager
def _dask_cluster(workers: int, settings: dict[str, str]) -> Iterator[str]:
    """A LocalCluster of ``workers`` single-threaded processes with Dask ``settings``, outside
    this process.

    In this process, its scheduler's event loop would take the GIL from the serial
    campaign (measured: serial 93 s instead of 60 s), so the cluster runs apart.
    """
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SystemExit("--dask needs Dask's distributed package: pip install 'semsim[dask]'") from None
    process = subprocess.Popen(
        [sys.executable, "-c", _CLUSTER, str(workers)],
        env={**os.environ, **settings},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        address = process.stdout.readline().strip()
        if not address:
            raise SystemExit("error: the Dask LocalCluster did not start")
        yield address
    finally:
        process.stdin.close()
        process.wait(timeout=60)


@attrs.frozen
class Parts:
    """The coordinator's serial work per run, and the runs' own cost, in CPU seconds."""

    draw_s_per_run: float
    replay_s_per_run: float
    run_s_per_run: float
    longest_run_s: float


def _parts(runs: int, seed: int, examples: list[Case]) -> Parts:
    """Draw the plan with a stub, run its cases one by one, then replay it from their reports."""
    tolerated = tolerated_for(())
    cases: list[Case] = []

    def stub(case: Case, allowed: frozenset[str]) -> RunReport:
        cases.append(case)
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    started = time.process_time()
    campaign(runs, seed, examples=examples, runner=stub, shrink=False)
    draw_s = time.process_time() - started
    reports, costs = [], []
    for case in cases:
        started = time.process_time()
        reports.append(run_case(case, tolerated)[0])
        costs.append(time.process_time() - started)
    answers = iter(reports)
    started = time.process_time()
    campaign(runs, seed, examples=examples, runner=lambda case, allowed: next(answers), shrink=False)
    replay_s = time.process_time() - started
    count = len(cases)
    return Parts(draw_s / count, replay_s / count, sum(costs) / count, max(costs))


def project(parts: Parts, runs: int, workers: int, startup_s: float, tail: bool) -> float:
    """The speed-up over serial of a passing campaign of ``runs`` on ``workers``.

    The model: the coordinator draws each run on its one core, overlapped
    with the workers; the workers share the runs; with ``tail``, the slowest
    run starts last (Graham's bound for greedy scheduling: the worst case);
    a passing campaign is not replayed. Start-up is measured. Serial is
    ``runs`` times a run.
    """
    assert workers >= 1, workers
    assert runs >= 1, runs
    serial_s = runs * parts.run_s_per_run
    shared_s = serial_s / workers + (parts.longest_run_s if tail and workers > 1 else 0.0)
    return serial_s / (startup_s + max(runs * parts.draw_s_per_run, shared_s))


def _positive_list(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or values[0] < 1 or values[-1] > MAX_PROJECTED:
        raise argparse.ArgumentTypeError(f"expected numbers from 1 to {MAX_PROJECTED}, got {text!r}")
    return values


def _bounded(most: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"must be 1..{most}, got {value}")
        return value

    return parse


def _row(name: str, timing: Timing, serial: Timing | None, workers: int) -> str:
    speedup = "" if serial is None else f"{serial.wall_s / timing.wall_s:>8.2f}x"
    return (
        f"  {name:<14} {timing.wall_s:>7.1f} {timing.startup_s:>8.2f} {timing.runs_s:>7.1f} "
        f"{timing.replay_s:>7.2f} {timing.cpu_s:>8.1f} {timing.worker_cpu_s:>8.1f} {speedup}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=runs_arg, default=100, help="drawn runs after the named scenarios")
    parser.add_argument("--seed", type=seed_arg, default=5)
    parser.add_argument("--reps", type=_bounded(MAX_REPS), default=3)
    parser.add_argument("--workers", type=_bounded(MAX_WORKERS), default=2)
    parser.add_argument(
        "--dask", action="store_true", help="Dask LocalClusters of --workers workers too (default and lean)"
    )
    parser.add_argument(
        "--project", type=_positive_list, default=[], metavar="W,W", help="project to W workers"
    )
    parser.add_argument("--one", choices=("serial", "local", "dask"), help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(attrs.asdict(_one(args.one, args.runs, args.seed, args.workers, args.address))))
        return

    examples = fuzz_examples()
    print(
        f"campaign: {len(examples)} named scenarios, then {args.runs} runs, seed {args.seed}; "
        f"{args.workers} workers; {args.reps} repetitions; each campaign in a new process",
        flush=True,
    )
    header = (
        f"  {'':<14} {'wall s':>7} {'start s':>8} {'runs s':>7} {'replay s':>7} {'CPU s':>8} "
        f"{'workers':>8} {'speed-up':>9}"
    )
    clusters = (("dask", {}), ("dask lean", LEAN_DASK)) if args.dask else ()
    speedups: dict[str, list[float]] = {"local": [], **{name: [] for name, _ in clusters}}
    startups: list[float] = []
    print(header, flush=True)
    for rep in range(1, args.reps + 1):
        serial = _in_a_process("serial", args, None)
        print(f"repetition {rep}", flush=True)
        print(_row("serial", serial, None, 1), flush=True)
        local = _in_a_process("local", args, None)
        _same(serial, local, "local")
        speedups["local"].append(serial.wall_s / local.wall_s)
        startups.append(local.startup_s)
        print(_row(f"local x{args.workers}", local, serial, args.workers), flush=True)
        for name, settings in clusters:
            with _dask_cluster(args.workers, settings) as address:
                spread = _in_a_process("dask", args, address)
            _same(serial, spread, name)
            speedups[name].append(serial.wall_s / spread.wall_s)
            print(_row(f"{name} x{args.workers}", spread, serial, args.workers), flush=True)
    for name, values in speedups.items():
        if values:
            print(
                f"{name}: speed-up median {statistics.median(values):.2f}x, "
                f"range {min(values):.2f}-{max(values):.2f}x over {len(values)} repetitions"
            )
    if args.project:
        parts = _parts(args.runs, args.seed, examples)
        print(
            f"parts (CPU s per run): draw {parts.draw_s_per_run * 1000:.1f} ms, replay "
            f"{parts.replay_s_per_run * 1000:.1f} ms, run {parts.run_s_per_run * 1000:.0f} ms; "
            f"longest run {parts.longest_run_s:.2f} s"
        )
        startup_s = statistics.median(startups)
        for runs in (args.runs + len(examples), 10_000):
            cells = ", ".join(
                f"{workers} workers {project(parts, runs, workers, startup_s, True):.1f}"
                f"-{project(parts, runs, workers, startup_s, False):.1f}x"
                for workers in args.project
            )
            print(f"projected, {runs} runs (slowest run last - no tail): {cells}")


def _same(serial: Timing, other: Timing, name: str) -> None:
    if other.result != serial.result:
        raise SystemExit(f"error: the {name} campaign's result differs from the serial one's")


if __name__ == "__main__":
    run_printing(main)
