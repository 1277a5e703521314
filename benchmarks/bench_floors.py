"""Benchmark: the speed floors issue 27 sets, measured against a fixed reference loop.

    python benchmarks/bench_floors.py            # every floor; exit 1 if one is below
    python benchmarks/bench_floors.py --only standard

A CPU second is not the same on every day of a shared machine: a neighbour's
load, a CPU's clock and its caches move this machine's figures by 10-15%
between runs. So each figure is read beside a reference loop, fixed work
that does not change when semsim does (pure Python, an in-memory SQLite
table, a Trio scheduler passing messages: the simulator's three costs), and
recorded as a ratio: *simulated seconds per loop*, the simulated seconds a
run covers in the CPU time the loop takes. A slow day makes both slower and
leaves the ratio where it was. The floors are today's ratios (2026-12-03,
docs/BENCHMARKS.md "Floors") less a tenth for the noise the ratio does not
cancel; a change that costs more than that reads as below.

The figures:

- ``standard``: the standard workload (``bench_sim.py``: 16 lease-capable
  clients, strict leases, 5% reply loss, an eviction every 10 minutes),
  every check on, a quarter of a simulated hour.
- ``fuzz``: the CI fuzz campaign of the faithful reference
  (``tests/test_fuzz.py``'s seed and runs), simulated seconds per loop.
- ``flat``: the standard workload's dearest simulated hour against its
  first, over two hours (``bench_flat.py``): at most 1.10.
- ``clients``: CPU per trace event with 64 clients against 16
  (``bench_scale.py``): at most 2.

Figures go to standard output; nothing is written. Exit 0 when every figure
is at its floor or better, 1 when one is not (say which), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from benchmarks.bench_sim import standard
from semsim.explore.fuzz import KNOWN_FINDINGS, campaign
from semsim.explore.mutants import CI_RUNS, CI_SEED
from semsim.harness.run import run_world
from semsim.inputs.commands import run_printing

#: The loop's fixed work: messages passed between Trio tasks, and rows written and read.
LOOP_MESSAGES: Final = 20_000
LOOP_ROWS: Final = 20_000
#: The standard workload's quarter hour runs this many times (the median ratio counts).
STANDARD_REPEATS: Final = 3


def reference_loop() -> float:
    """CPU seconds of fixed work shaped like a simulation's: Trio tasks, SQLite, Python objects."""
    started = time.process_time()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, owner TEXT, units INTEGER)")
    owners = [f"client-{i}" for i in range(16)]
    for row in range(LOOP_ROWS):
        db.execute("INSERT INTO items (owner, units) VALUES (?, ?)", (owners[row % 16], row % 7))
        if row % 8 == 0:
            db.execute("SELECT SUM(units) FROM items WHERE owner = ?", (owners[row % 16],)).fetchone()
    db.close()

    async def ping_pong() -> None:
        send, receive = trio.open_memory_channel[dict[str, int]](0)
        back_send, back_receive = trio.open_memory_channel[dict[str, int]](0)

        async def echo() -> None:
            async for message in receive:
                await back_send.send({**message, "seen": message["n"] * 2})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(echo)
            for n in range(LOOP_MESSAGES):
                await send.send({"n": n})
                reply = await back_receive.receive()
                assert reply["seen"] == n * 2
            await send.aclose()

    trio.run(ping_pong)
    return time.process_time() - started


@attrs.frozen
class Floor:
    """One figure's floor: ``higher`` says which way is better; ``unit`` names the figure."""

    floor: float
    higher: bool
    unit: str

    def holds(self, value: float) -> bool:
        """Whether ``value`` is at this floor or on its better side."""
        return value >= self.floor if self.higher else value <= self.floor


#: Today's ratios less a tenth (docs/BENCHMARKS.md, "Floors"), or the issue's ceilings.
FLOORS: Final = {
    "standard": Floor(250.0, True, "simulated s per loop"),
    "fuzz": Floor(1090.0, True, "simulated s per loop"),
    "flat": Floor(1.10, False, "dearest hour / first hour"),
    "clients": Floor(2.0, False, "CPU per event, 64 clients / 16"),
}


def per_loop(simulate: Callable[[], float], repeats: int) -> float:
    """Simulated seconds per loop: ``simulate()`` (its simulated seconds) between two loops, ``repeats``
    times; the median ratio. Interleaved, so a machine slowing down within the minute slows both."""
    ratios = []
    for _ in range(repeats):
        before = reference_loop()
        started = time.process_time()
        simulated_s = simulate()
        cpu_s = time.process_time() - started
        loop_s = (before + reference_loop()) / 2
        ratios.append(simulated_s / cpu_s * loop_s)
    return statistics.median(ratios)


def standard_s() -> float:
    """A quarter hour of the standard workload with every check: its simulated seconds of workload."""
    config, faults = standard(0.25)
    run_world(config, faults, 7, tolerated=KNOWN_FINDINGS)
    return config.duration_ms / 1000


def fuzz_s() -> float:
    """The CI fuzz campaign of the faithful reference: the simulated seconds of its runs."""
    return campaign(CI_RUNS, CI_SEED, shrink=False).sim_ms / 1000


def flat_ratio() -> float:
    """The dearest of two simulated hours against the first, in CPU seconds."""
    from benchmarks.bench_flat import hour_costs

    costs = hour_costs(2, 7)
    return max(costs) / costs[0]


def clients_ratio() -> float:
    """CPU per trace event with 64 clients against 16 (5 simulated minutes each)."""
    per_event = []
    for clients in (16, 64):
        config, faults = standard(5 / 60, clients, 1)
        started = time.process_time()
        run = run_world(config, faults, 7, tolerated=KNOWN_FINDINGS)
        per_event.append((time.process_time() - started) / len(run.trace))
    return per_event[1] / per_event[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        type=lambda text: [part for part in text.split(",") if part],
        default=list(FLOORS),
        metavar="NAME,NAME",
        help=f"measure only these figures ({', '.join(FLOORS)})",
    )
    args = parser.parse_args()
    unknown = [name for name in args.only if name not in FLOORS]
    if unknown or not args.only:
        parser.error(
            f"--only: unknown figure {', '.join(unknown) or '(none)'}; the figures are {', '.join(FLOORS)}"
        )
    print(f"reference loop: {reference_loop():.3f} CPU s now", flush=True)
    measures: dict[str, Callable[[], float]] = {
        "standard": lambda: per_loop(standard_s, STANDARD_REPEATS),
        "fuzz": lambda: per_loop(fuzz_s, 1),
        "flat": flat_ratio,
        "clients": clients_ratio,
    }
    below = []
    for name in args.only:
        floor = FLOORS[name]
        value = measures[name]()
        bound = ">=" if floor.higher else "<="
        verdict = "held" if floor.holds(value) else "BELOW"
        print(f"{name:<9} {value:>9.2f} {floor.unit} (floor {bound} {floor.floor:g}): {verdict}", flush=True)
        if not floor.holds(value):
            below.append(name)
    if below:
        print(f"below the floor: {', '.join(below)}")
        raise SystemExit(1)


if __name__ == "__main__":
    run_printing(main)
