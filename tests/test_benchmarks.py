"""The benchmark scripts end like semsim's commands: a closed pipe is exit 141, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sim.inputs.commands import EXIT_BROKEN_PIPE

ROOT = Path(__file__).resolve().parent.parent


def test_a_benchmark_whose_reader_goes_away_stops_quietly() -> None:
    script = ROOT / "benchmarks" / "bench_scale.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--clients", "16", "--keys", "1,4", "--minutes", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline().startswith(b"clients")
    process.stdout.close()  # the reader (``| head -1``) goes away
    error = process.stderr.read()
    assert process.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert b"Traceback" not in error


def test_the_standard_benchmark_runs_with_and_without_the_literal_model_and_with_operations() -> None:
    # Both ways, the run must complete, the known findings tolerated as the documented figures are.
    script = ROOT / "benchmarks" / "bench_sim.py"
    for extra in ([], ["--without-model"], ["--operations"]):
        done = subprocess.run(
            [sys.executable, str(script), "--hours", "0.02", *extra],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("outcome: completed"), done.stdout
        assert f"literal model in lockstep: {'off' if '--without-model' in extra else 'on'}" in done.stdout
        where = "as durable operations" if "--operations" in extra else "on the job service"
        assert f"items admitted and run {where}" in done.stdout


def test_the_sql_probe_refuses_bad_arguments_before_it_runs_anything() -> None:
    script = ROOT / "benchmarks" / "probe_sql.py"
    for args, says in (
        (["--hours", "2", "--compare", "1,9"], "names hour 9"),
        (["--hours", "0"], "must be 1..168"),
        (["--compare", "x"], "two hour numbers"),
        (["--hours", "1"], "at least 2"),
    ):
        done = subprocess.run(
            [sys.executable, str(script), *args], capture_output=True, text=True, cwd=ROOT, timeout=60
        )
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.stdout == "", args
