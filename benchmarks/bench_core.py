"""Benchmark: one 10-request round and one sync against N live grants (and live leases).

    python benchmarks/bench_core.py            # full table (about a minute)
    python benchmarks/bench_core.py --quick    # fewer repetitions
    python benchmarks/bench_core.py --instructions   # callgrind counts (minutes; no noise)

Each measurement runs inside an outer transaction that is rolled back after
the call, so every repetition sees the same N rows. The same rounds run on
``tests/reference_port.py``, the literal port that lists every row as the
reference does, as the baseline. Wall-clock timing is fine here: this is a
benchmark, not a test (nothing asserts on it).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from semaphore_core import Holder, HolderConfig, LeaseOptions, Strict
from semaphore_core.protocol import Demand, GrantReport, LeaseReport, PermitRequest, PermitSync
from semaphore_core.store import GrantRow, HolderStore, LeaseRow
from tests.reference_port import ReferencePort

GROUPS = [f"group-{i}" for i in range(8)]
NOW = 1_000_000


def populate(conn: sqlite3.Connection, grants: int, leases: int, rng: random.Random) -> list[GrantRow]:
    """N live grants spread over clients and groups, claim deadlines in the future, some partly used."""
    store = HolderStore(conn)
    rows = []
    conn.execute("BEGIN")
    for i in range(grants):
        permits = rng.randint(1, 4)
        claimed = rng.randint(0, permits)
        row = GrantRow(
            grant_id=f"grant-{i:06d}",
            # Three grants per client, so every request can report on three.
            client_id=f"client-{i // 3:05d}",
            grp=GROUPS[i % len(GROUPS)],
            permits=permits,
            claimed=claimed,
            released=rng.randint(0, max(0, claimed - 1)) if claimed else 0,
            created_at=NOW - 5_000 + i % 4_000,
            expires_at=NOW + 5_000 + i % 4_000,
        )
        store.insert(row)
        rows.append(row)
    for i in range(leases):
        store.insert_lease(
            LeaseRow(
                lease_id=f"lease-{i:05d}",
                client_id=f"client-{i // 3:05d}",
                grp=GROUPS[i % len(GROUPS)],
                permits=8,
                released=rng.randint(0, 4),
                created_at=NOW - 10_000,
                expires_at=NOW + 600_000,
                retired=0,
            )
        )
    conn.execute("COMMIT")
    return rows


def requests(rows: list[GrantRow], leases: int, rng: random.Random) -> list[PermitRequest]:
    """10 requests from distinct clients, each with demand in two groups, cumulative
    reports on its three grants (fewer only at 10 grants) and on its leases."""
    clients = max(1, (len(rows) + 2) // 3)
    batch = []
    for r in range(10):
        owner = r * 7919 % clients
        own = rows[owner * 3 : owner * 3 + 3]
        client = f"client-{owner:05d}"
        reports = tuple(GrantReport(row.grant_id, row.permits, row.claimed) for row in own)
        lease_reports = None
        if leases:
            lease_reports = tuple(
                LeaseReport(f"lease-{i:05d}", 6, 5) for i in range(leases) if i // 3 == owner
            )
        batch.append(
            PermitRequest(
                client_id=client,
                demand=(Demand(GROUPS[r % 8], 3, NOW - 100 * r), Demand(GROUPS[(r + 3) % 8], 1, NOW - 50)),
                grants=reports,
                leases=lease_reports,
            )
        )
    return batch


def measure(conn: sqlite3.Connection, call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median and best milliseconds of ``call``, each run rolled back so the data never changes.

    The best run is the steadier figure on a shared virtual machine, where
    neighbours add noise only upwards.
    """
    samples = []
    for _ in range(repeat):
        conn.execute("BEGIN")
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
        conn.execute("ROLLBACK")
    return statistics.median(samples) * 1_000, min(samples) * 1_000


def bench(grants: int, leases: int, repeat: int) -> dict[str, tuple[float, float]]:
    rng = random.Random(grants * 31 + leases)
    config = HolderConfig(
        limit=10**9,
        leases=LeaseOptions(provisioning=Strict(), permits_per_lease=8) if leases else None,
    )
    results: dict[str, tuple[float, float]] = {}
    for name, factory in (("semsim", Holder), ("reference", ReferencePort)):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        counter = itertools.count()
        holder: Any = factory(conn, config, lambda c=counter: f"new-{next(c)}")  # type: ignore[misc]
        rows = populate(conn, grants, leases, rng)
        batch = requests(rows, leases, rng)
        # The setup's own 10,000 row objects are not the holder's: keep the
        # cyclic GC from billing their traversal to the measured calls.
        gc.collect()
        gc.freeze()
        one = batch[0]
        message = PermitSync(client_id=one.client_id, grants=one.grants, leases=one.leases)
        if name == "semsim":
            results["round_ms"] = measure(conn, functools.partial(holder.round, batch, NOW), repeat)
            results["sync_ms"] = measure(conn, functools.partial(holder.sync_message, message, NOW), repeat)
        else:
            if grants > 1_000 and repeat > 5:
                repeat = 5  # the literal port lists every row: slow by design
            results["reference_round_ms"] = measure(conn, functools.partial(holder.round, batch, NOW), repeat)
            results["reference_sync_ms"] = measure(conn, functools.partial(holder.sync, message, NOW), repeat)
        gc.unfreeze()
    return results


def _run_rounds(grants: int, leases: int, rounds: int) -> None:
    """Setup, then ``rounds`` measured rounds; what callgrind counts (see --instructions)."""
    rng = random.Random(grants * 31 + leases)
    config = HolderConfig(
        limit=10**9,
        leases=LeaseOptions(provisioning=Strict(), permits_per_lease=8) if leases else None,
    )
    conn = sqlite3.connect(":memory:", isolation_level=None)
    counter = itertools.count()
    holder = Holder(conn, config, lambda: f"new-{next(counter)}")
    rows = populate(conn, grants, leases, rng)
    batch = requests(rows, leases, rng)
    for _ in range(rounds):
        conn.execute("BEGIN")
        holder.round(batch, NOW)
        conn.execute("ROLLBACK")


def instructions_per_round(grants: int, leases: int, rounds: int = 20) -> float:
    """Instructions of one round: callgrind totals of setup + N rounds minus setup + 0 rounds."""
    totals = []
    for n in (0, rounds):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "callgrind.out"
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    __file__,
                    "--rounds",
                    f"{grants},{leases},{n}",
                ],
                check=True,
                capture_output=True,
                env={**os.environ, "PYTHONHASHSEED": "0"},
            )
            summary = next(line for line in out.read_text().splitlines() if line.startswith("summary:"))
            totals.append(int(summary.split()[1]))
    return (totals[1] - totals[0]) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per round with valgrind's callgrind (slow, but free of noise)",
    )
    parser.add_argument("--rounds", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds:
        grants, leases, rounds = (int(part) for part in args.rounds.split(","))
        _run_rounds(grants, leases, rounds)
        return
    if args.instructions:
        print("| live grants | live leases | instructions per round of 10 requests |")
        print("|---:|---:|---:|")
        for leases in (0, 200):
            for grants in (10, 100, 1_000, 10_000):
                count = instructions_per_round(grants, leases)
                print(f"| {grants:,} | {leases} | {count / 1e6:.2f} M |", flush=True)
        return
    repeat = 15 if args.quick else 101
    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {platform.machine()}")
    print()
    print(
        "| live grants | live leases | round of 10 requests, ms: median (best) "
        "| sync, ms: median (best) | literal port's round, ms: median |"
    )
    print("|---:|---:|---:|---:|---:|")
    for leases in (0, 200):
        for grants in (10, 100, 1_000, 10_000):
            r = bench(grants, leases, repeat)
            print(
                f"| {grants:,} | {leases} | {r['round_ms'][0]:.2f} ({r['round_ms'][1]:.2f}) "
                f"| {r['sync_ms'][0]:.3f} ({r['sync_ms'][1]:.3f}) | {r['reference_round_ms'][0]:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
