"""``-`` is standard input for a file read and standard output for a file written.

A file written to ``-`` has standard output to itself: what the command
prints for a person goes to standard error. Two outputs (or one and
``--json``) cannot share it, and a database or a directory cannot be a
stream: each is exit 2 in one line, before anything runs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from semsim.cli.main import main
from semsim.explore.fuzz import case_text
from semsim.explore.strategies import Case
from semsim.harness.run import WorldConfig
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_a_trace_to_stdout_is_the_file_and_the_report_goes_to_stderr(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert main(["run", "late-claim-not-found", "--trace", str(tmp_path / "t.jsonl")]) == 0
    capsysbinary.readouterr()
    assert main(["run", "late-claim-not-found", "--trace", "-"]) == 0
    captured = capsysbinary.readouterr()
    assert captured.out == (tmp_path / "t.jsonl").read_bytes()
    assert b"trace written to standard output" in captured.err
    assert b"every expectation and invariant held" in captured.err


def test_a_trace_from_stdin_plots_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    trace = tmp_path / "t.jsonl"
    assert main(["run", "late-claim-not-found", "--trace", str(trace)]) == 0
    capsysbinary.readouterr()
    _stdin(monkeypatch, trace.read_bytes())
    assert main(["plot", "-", "-o", "-"]) == 0
    captured = capsysbinary.readouterr()
    assert captured.out.startswith(b"\x89PNG\r\n")
    assert b"plot written to standard output" in captured.err


def test_a_case_from_stdin_replays_with_its_trace_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    case = Case(WorldConfig(workload=Workload(clients=1), duration_ms=20_000), FaultPlan(), 3)
    # The case is read more than once (its fields, its schedule): standard input is read once.
    _stdin(monkeypatch, case_text(case, frozenset({"F4"})).encode())
    assert main(["fuzz", "--replay", "-", "--trace", "-"]) == 0
    captured = capsysbinary.readouterr()
    header = json.loads(captured.out.split(b"\n", 1)[0])
    assert (header["kind"], header["seed"]) == ("header", 3)
    assert b"replayed standard input: seed 3" in captured.err


def test_traffic_from_stdin_and_its_errors_name_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _stdin(monkeypatch, (ROOT / "examples" / "traffic.jsonl").read_bytes())
    assert main(["replay", "-"]) == 0
    assert "replayed standard input:" in capsys.readouterr().out
    _stdin(monkeypatch, b"{\n")
    assert main(["replay", "-"]) == 2
    err = capsys.readouterr().err
    assert "standard input:1: " in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "late-claim-not-found", "--trace", "-", "--json"], "--trace and --json would each write"),
        (["run", "late-claim-not-found", "--trace", "-", "--plot", "-"], "--trace and --plot would each"),
        (["fuzz", "--db", "-"], "--db names a results database, which cannot be"),
        (["fuzz", "--out", "-"], "--out names a directory, which cannot be"),
        (["report", "-"], "DB.sqlite names a results database, which cannot be"),
    ],
)
def test_what_cannot_share_or_be_a_stream_is_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert says in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.out == ""
