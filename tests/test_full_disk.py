"""The user's machine failing: a full disk is exit status 2, one line, and no partial file.

A full disk is not a violation: CI reads exit 1 as one. Every file semsim
writes is written whole or not at all (``semsim.inputs.files.write_whole``),
and the results database's SQLite errors name the file. The disk is filled
by refusing ``write_whole``'s writes with ENOSPC, and the database by a
``max_page_count`` that SQLite itself refuses to grow past (its own
"database or disk is full").
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from contextlib import closing
from pathlib import Path

import pytest

import semsim.explore.results
import semsim.inputs.files
from semsim.cli.main import main
from semsim.explore.fuzz import Campaign, case_text, load_case, run_case
from semsim.explore.results import Recorder, open_db
from semsim.inputs.commands import EXIT_USAGE
from semsim.inputs.files import write_whole

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: A short scenario: its trace and plot are the files written.
SCENARIO = "reply-lost-after-commit"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of a whole file fails part-way, as on a full disk."""

    def no_space(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])  # part of it lands, as on a real disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(semsim.inputs.files, "_write_all", no_space)


def one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"semsim {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- write_whole ---------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_nothing_else(tmp_path: Path, full_disk: None) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"the old trace\n")
    with pytest.raises(OSError, match="No space left") as raised:
        write_whole(path, b"x" * 10_000)
    assert raised.value.filename == str(path)  # the file asked for, not the temporary one
    assert path.read_bytes() == b"the old trace\n"
    assert sorted(tmp_path.iterdir()) == [path]


def test_a_failed_write_of_a_new_file_leaves_no_file(tmp_path: Path, full_disk: None) -> None:
    with pytest.raises(OSError, match="No space left"):
        write_whole(tmp_path / "plot.png", b"x" * 10_000)
    assert list(tmp_path.iterdir()) == []


def test_a_whole_write_replaces_the_file_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "case.json"
    path.write_bytes(b"old")
    path.chmod(0o640)
    write_whole(path, b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(tmp_path.iterdir()) == [path]


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path: Path) -> None:
    write_whole(tmp_path / "a", b"1")
    with open(tmp_path / "b", "wb") as plain:
        plain.write(b"1")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "b").stat().st_mode)


def test_the_null_device_is_written_not_replaced() -> None:
    write_whole(os.devnull, b"discarded")
    assert stat.S_ISCHR(Path(os.devnull).stat().st_mode)


# --- the commands -------------------------------------------------------------------------------


def test_run_on_a_full_disk_is_exit_2_and_leaves_no_partial_trace_or_plot(
    tmp_path: Path, full_disk: None, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, plot = tmp_path / "t.jsonl", tmp_path / "u.png"
    trace.write_text("the old trace\n")
    assert main(["run", SCENARIO, "--trace", str(trace), "--plot", str(plot)]) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err, "run")
    assert "No space left on device" in line
    assert trace.read_text() == "the old trace\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_replay_with_a_trace_on_a_full_disk_is_exit_2(
    tmp_path: Path, full_disk: None, capsys: pytest.CaptureFixture[str]
) -> None:
    case = FIXTURES / "regressions" / "settled-while-a-grant-reply-was-on-the-wire-minimal.json"
    load_case(case)
    trace = tmp_path / "t.jsonl"
    assert main(["fuzz", "--replay", str(case), "--trace", str(trace)]) == EXIT_USAGE
    assert "No space left on device" in one_error_line(capsys.readouterr().err, "fuzz")
    assert list(tmp_path.iterdir()) == []


def test_plot_on_a_full_disk_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, plot = tmp_path / "t.jsonl", tmp_path / "u.png"
    assert main(["run", SCENARIO, "--trace", str(trace)]) == 0
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(semsim.inputs.files, "_write_all", _no_space)
        assert main(["plot", str(trace), "-o", str(plot)]) == EXIT_USAGE
    assert "No space left on device" in one_error_line(capsys.readouterr().err, "plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def _no_space(fd: int, data: bytes) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def full_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """The results database cannot grow: SQLite answers "database or disk is full"."""
    real_open = semsim.explore.results._open

    def small(path: Path) -> sqlite3.Connection:
        db = real_open(path)
        db.execute("PRAGMA max_page_count = 8")  # the schema fits; a campaign's runs do not
        return db

    monkeypatch.setattr(semsim.explore.results, "_open", small)


def test_a_campaign_whose_results_database_fills_up_is_exit_2_naming_it(
    tmp_path: Path, full_database: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "results.sqlite"
    argv = ["fuzz", "--runs", "60", "--quiet", "--workers", "1", "--db", str(db)]
    monkeypatch.setattr(semsim.explore.results, "RUNS_PER_TRANSACTION", 1)
    assert main(argv) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err, "fuzz")
    assert str(db) in line
    assert "database or disk is full" in line
    # What was recorded before the disk filled is whole: the campaign reads as unfinished.
    with sqlite3.connect(db) as read:
        [(status,)] = read.execute("SELECT status FROM campaigns").fetchall()
    assert status == "running"


def test_a_new_results_database_that_cannot_be_made_leaves_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path) -> sqlite3.Connection:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(semsim.explore.results, "_open", full)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "results.sqlite"
    assert main(["fuzz", "--runs", "1", "--quiet", "--workers", "1", "--db", str(db)]) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err, "fuzz")
    assert str(db) in line
    assert "database or disk is full" in line
    assert list(tmp_path.iterdir()) == []


def test_report_writing_cases_on_a_full_disk_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.sqlite"
    case, _ = load_case(FIXTURES / "findings" / "F3-claim-after-the-limit-fell.json")
    failure, _ = run_case(case, tolerated=frozenset())
    with closing(open_db(db)) as conn:
        recorder = Recorder.begin(
            conn,
            db,
            seed=0,
            runs=1,
            examples=0,
            fixes=(),
            tolerated=frozenset(),
            executor="serial",
            workers=1,
        )
        recorder(Campaign(runs=1), failure, False)
        recorder.finish(Campaign(runs=1, failure=failure), case_text(case, frozenset(), failure), "replay")
    cases = tmp_path / "cases"
    monkeypatch.setattr(semsim.inputs.files, "_write_all", _no_space)
    assert main(["report", str(db), "--cases", str(cases)]) == EXIT_USAGE
    assert "No space left on device" in one_error_line(capsys.readouterr().err, "report")
    assert list(cases.iterdir()) == []
