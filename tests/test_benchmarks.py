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
