"""Probe: CPU time per SQL statement text, per simulated hour, on the standard workload.

    python benchmarks/probe_sql.py --hours 8 --compare 1,8 [--profile 2,8]

Every connection the run opens is made with a ``sqlite3.Connection`` subclass
whose ``execute``/``executemany`` (and the returned cursor's row fetching)
add their CPU time (``time.process_time``) to the statement's text, in the
bucket of the simulated hour the run is in (the hour of the latest trace
event). Prints, for the statements whose CPU grew most between the two
compared hours, the calls and CPU of each. With ``--profile`` it instead
runs cProfile during the two given hours (no SQL timers) and prints the
functions whose self time grew most.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks  # noqa: F401  (semsim from this checkout: benchmarks/__init__.py)
from benchmarks.bench_sim import HOUR_MS, standard
from semsim.cli.main import seed_arg
from semsim.harness.run import run_world
from semsim.inputs.commands import run_printing
from semsim.runtime.trace import Trace

CPU = time.process_time
#: hour (1-based) -> sql -> [cpu, calls]
SPENT: defaultdict[int, defaultdict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
HOUR = [1]
MARKS: dict[int, float] = {}


def _timed(slot: list[float], fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, its CPU time added to ``slot[0]``."""
    start = CPU()
    try:
        return fn(*args)
    finally:
        slot[0] += CPU() - start


class TimedCursor:
    """A cursor whose row fetching counts toward its statement's CPU."""

    __slots__ = ("_cursor", "_slot")

    def __init__(self, cursor: sqlite3.Cursor, slot: list[float]) -> None:
        self._cursor = cursor
        self._slot = slot

    def __iter__(self) -> TimedCursor:
        return self

    def __next__(self) -> Any:
        return _timed(self._slot, next, self._cursor)

    def fetchone(self) -> Any:
        return _timed(self._slot, self._cursor.fetchone)

    def fetchall(self) -> Any:
        return _timed(self._slot, self._cursor.fetchall)

    def fetchmany(self, *args: Any) -> Any:
        return _timed(self._slot, self._cursor.fetchmany, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class TimedConnection(sqlite3.Connection):
    """A connection that counts each statement's calls and CPU by its text and simulated hour."""

    def _slot(self, sql: str) -> list[float]:
        slot = SPENT[HOUR[0]][sql]
        slot[1] += 1
        return slot

    def execute(self, sql: str, params: Any = ()) -> Any:
        slot = self._slot(sql)
        return TimedCursor(_timed(slot, super().execute, sql, params), slot)

    def executemany(self, sql: str, params: Any) -> Any:
        return _timed(self._slot(sql), super().executemany, sql, params)


#: Longest run this probe accepts (simulated hours), as ``bench_flat.py``.
MAX_HOURS = 168


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {value}")
        return value

    return parse


def _two_hours(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        a, b = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be two hour numbers, e.g. 1,8, got {text!r}") from None
    if not 1 <= a < b:
        raise argparse.ArgumentTypeError(f"must be two hours from 1, the earlier first, got {text!r}")
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=_count(1, MAX_HOURS), default=8, help="simulated hours (default 8)")
    parser.add_argument(
        "--compare", type=_two_hours, default=None, help="two hours, e.g. 1,8 (default: the first and last)"
    )
    parser.add_argument(
        "--profile", type=_two_hours, default=None, help="two hours to cProfile instead, e.g. 2,8"
    )
    parser.add_argument("--seed", type=seed_arg, default=7)
    parser.add_argument("--top", type=_count(1, 1_000), default=25, help="statements to list (default 25)")
    args = parser.parse_args()
    for option in ("compare", "profile"):
        chosen = getattr(args, option)
        if chosen is not None and chosen[1] > args.hours:
            parser.error(f"--{option} names hour {chosen[1]} but --hours is {args.hours}")
    if args.compare is None:
        if args.hours < 2:
            parser.error("--hours must be at least 2 to compare two hours")
        args.compare = (1, args.hours)
    profiles: dict[int, cProfile.Profile] = {}
    wanted = list(args.profile) if args.profile else []
    active: list[cProfile.Profile | None] = [None]

    original_event = Trace.event

    def event(self: Trace, t_ms: int, kind: str, fields: dict[str, Any]) -> None:
        hour = t_ms // HOUR_MS + 1
        if hour != HOUR[0] or hour not in MARKS:
            if hour not in MARKS:
                if active[0] is not None:
                    active[0].disable()
                    active[0] = None
                MARKS[hour] = CPU()
                if hour in wanted:
                    profile = profiles[hour] = cProfile.Profile()
                    active[0] = profile
                    profile.enable()
            HOUR[0] = hour
        original_event(self, t_ms, kind, fields)

    if not args.profile:
        real_connect = sqlite3.connect

        def connect(*a: Any, **k: Any) -> sqlite3.Connection:
            k.setdefault("factory", TimedConnection)
            conn: sqlite3.Connection = real_connect(*a, **k)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]

    config, faults = standard(args.hours)
    Trace.event = event  # type: ignore[method-assign]
    run = run_world(config, faults, args.seed)
    end = CPU()
    if active[0] is not None:
        active[0].disable()
    Trace.event = original_event  # type: ignore[method-assign]
    MARKS.setdefault(args.hours + 1, end)
    print(f"outcome: {run.result.outcome}")
    per_hour = {h: MARKS[h + 1] - MARKS[h] for h in range(1, args.hours + 1) if h + 1 in MARKS and h in MARKS}
    print("CPU per hour:", " ".join(f"{h}:{s:.2f}" for h, s in sorted(per_hour.items())))

    if args.profile:
        a, b = wanted
        stats = {h: pstats.Stats(p).stats for h, p in profiles.items()}  # type: ignore[attr-defined]
        rows = []
        for func in set(stats[a]) | set(stats[b]):
            ca = stats[a].get(func, (0, 0, 0, 0, {}))
            cb = stats[b].get(func, (0, 0, 0, 0, {}))
            rows.append((cb[2] - ca[2], func, ca, cb))
        rows.sort(key=lambda r: -r[0])
        tot_a = sum(v[2] for v in stats[a].values())
        tot_b = sum(v[2] for v in stats[b].values())
        print(f"profiled total self time: hour {a} {tot_a:.2f} s, hour {b} {tot_b:.2f} s")
        heads = ("growth", f"tt{a}", f"tt{b}", f"calls{a}", f"calls{b}")
        print(" ".join(f"{h:>9}" for h in heads) + "  function")
        for growth, func, ca, cb in rows[: args.top]:
            name = f"{Path(func[0]).name}:{func[1]}({func[2]})"
            print(f"{growth:8.3f} {ca[2]:8.3f} {cb[2]:8.3f} {ca[1]:9d} {cb[1]:9d}  {name}")
        print("... and the most shrinking:")
        for growth, func, ca, cb in rows[-8:]:
            name = f"{Path(func[0]).name}:{func[1]}({func[2]})"
            print(f"{growth:8.3f} {ca[2]:8.3f} {cb[2]:8.3f} {ca[1]:9d} {cb[1]:9d}  {name}")
        return

    a, b = args.compare
    sa, sb = SPENT[a], SPENT[b]
    tot_a = sum(v[0] for v in sa.values())
    tot_b = sum(v[0] for v in sb.values())
    print(f"SQL CPU: hour {a} {tot_a:.2f} s, hour {b} {tot_b:.2f} s; statements {len(sa)} / {len(sb)}")
    rows = []
    for sql in set(sa) | set(sb):
        va, vb = sa.get(sql, [0.0, 0]), sb.get(sql, [0.0, 0])
        rows.append((vb[0] - va[0], sql, va, vb))
    rows.sort(key=lambda r: -r[0])
    columns = ("growth", f"cpu{a}", f"cpu{b}", f"calls{a}", f"calls{b}", f"us/c{a}", f"us/c{b}")
    print(" ".join(f"{h:>8}" for h in columns) + "  sql")
    for growth, sql, va, vb in rows[: args.top]:
        ua = 1e6 * va[0] / va[1] if va[1] else 0
        ub = 1e6 * vb[0] / vb[1] if vb[1] else 0
        print(
            f"{growth:7.3f} {va[0]:7.3f} {vb[0]:7.3f} {va[1]:8d} {vb[1]:8d} {ua:7.1f} {ub:7.1f}  "
            + " ".join(sql.split())[:230]
        )
    print("... and the most shrinking:")
    for growth, sql, va, vb in rows[-5:]:
        print(
            f"{growth:7.3f} {va[0]:7.3f} {vb[0]:7.3f} {va[1]:8d} {vb[1]:8d}  " + " ".join(sql.split())[:150]
        )
    # per-hour series of the top growers
    print("per-hour CPU of the top 8 growers:")
    for _growth, sql, _, _ in rows[:8]:
        series = " ".join(
            f"{SPENT[h][sql][0]:.3f}" if sql in SPENT[h] else "-" for h in range(1, args.hours + 1)
        )
        print(f"  {series}  {' '.join(sql.split())[:90]}")


if __name__ == "__main__":
    run_printing(main)
