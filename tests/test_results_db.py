"""The results database and ``semsim report``; ``semsim fuzz``'s --workers, --scheduler and --db.

A failing campaign from the command line is made cheap by tolerating
nothing (``tolerated_for`` patched): a named scenario that meets a known
finding then fails as an explicit example, before any generated run.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import semsim.cli.fuzz_command
from semsim.cli.main import main
from semsim.explore import campaigns
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import load_case
from semsim.explore.results import (
    APPLICATION_ID,
    RUNS_PER_TRANSACTION,
    SCHEMA_VERSION,
    Recorder,
    ResultsError,
    merge,
    open_db,
)
from semsim.inputs.commands import EXIT_OK, EXIT_USAGE, EXIT_VIOLATION
from tests.helpers import TEAM_INVARIANTS


def _fuzz(db: Path, *extra: str) -> int:
    return main(["fuzz", "--runs", "3", "--seed", "4", "--quiet", "--db", str(db), *extra])


def _summary_lines(out: str) -> list[str]:
    # Everything but the header (where the runs went) and the wall time.
    skip = ("semsim fuzz:", "recorded in ")
    return [line.split(", wall:")[0] for line in out.splitlines() if not line.startswith(skip)]


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semsim.cli.fuzz_command, "tolerated_for", lambda fixes: frozenset())


def _rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def test_workers_2_prints_and_records_what_workers_1_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outs, dbs = [], []
    for workers in ("1", "2"):
        db = tmp_path / f"w{workers}.sqlite"
        assert _fuzz(db, "--workers", workers) == EXIT_OK
        outs.append(capsys.readouterr().out)
        dbs.append(_rows(db, "SELECT * FROM runs ORDER BY idx"))
    assert "serially" in outs[0]
    assert "on 2 worker processes" in outs[1]
    assert _summary_lines(outs[0]) == _summary_lines(outs[1])
    assert dbs[0] == dbs[1]  # every run's row, the same
    assert len(dbs[0]) == 3 + len(fuzz_examples())
    assert _rows(tmp_path / "w2.sqlite", "SELECT executor, workers, status FROM campaigns") == [
        ("local", 2, "passed")
    ]


def test_the_database_holds_every_run_and_the_failure_with_its_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], failing: None
) -> None:
    db, out_dir = tmp_path / "r.sqlite", tmp_path / "cases"
    assert _fuzz(db, "--workers", "2", "--out", str(out_dir)) == EXIT_VIOLATION
    out = capsys.readouterr().out
    [(campaign_id, status, runs, sim_ms)] = _rows(db, "SELECT id, status, runs, sim_ms FROM campaigns")
    assert status == "failed"
    rows = _rows(db, "SELECT idx, case_json, outcome, sim_ms FROM runs ORDER BY idx")
    assert [row[0] for row in rows] == list(range(runs))
    assert sum(row[3] for row in rows) == sim_ms
    assert [row[2] for row in rows].count("completed") == runs - 1  # the last run is the failure
    [(name, case_text, replay)] = _rows(db, "SELECT failure_name, case_text, replay FROM failures")
    assert f"VIOLATED {name}" in out
    assert f"replay: {replay}" in out
    # The recorded case is the saved case file, and the failing run's case is recorded as run.
    saved = next(out_dir.glob("*.json"))
    assert case_text == saved.read_text()
    saved_case = {key: json.loads(case_text)[key] for key in ("seed", "config", "faults")}
    assert json.loads(rows[-1][1]) == saved_case  # a named scenario fails as it is: no shrink
    load_case(saved)
    assert campaign_id == 1


def test_report_summarises_and_writes_the_cases_to_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.sqlite"
    assert _fuzz(db, "--workers", "1") == EXIT_OK
    monkeypatch.setattr(semsim.cli.fuzz_command, "tolerated_for", lambda fixes: frozenset())
    assert _fuzz(db, "--workers", "1", "--out", str(tmp_path / "out")) == EXIT_VIOLATION
    capsys.readouterr()
    cases = tmp_path / "replay-here"
    assert main(["report", str(db), "--cases", str(cases)]) == EXIT_OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("campaigns: 2, runs: ")
    assert lines[1].startswith("  #1 seed 4: passed, ")
    assert lines[2].startswith("  #2 seed 4: failed, ")
    assert "violations by invariant: capacity_returns:F4 1" in out
    assert "coverage:" in out
    assert "cases to replay (1):" in out
    [written] = cases.glob("*.json")
    assert f"semsim fuzz --replay {written}" in out
    assert main(["fuzz", "--replay", str(written)]) == EXIT_VIOLATION  # it replays, anywhere
    capsys.readouterr()
    assert main(["report", str(db), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in data["campaigns"]] == ["passed", "failed"]
    assert data["violations"] == {"capacity_returns:F4": 1}
    assert data["failures"][0]["case"] == json.loads(written.read_text())
    assert set(data["never_reached"]) <= set(data["coverage"])
    # The same file, the same report: stable order.
    assert main(["report", str(db), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == data


def test_merge_copies_other_machines_campaigns_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here, there = tmp_path / "here.sqlite", tmp_path / "there.sqlite"
    assert _fuzz(here, "--workers", "1") == EXIT_OK
    assert _fuzz(there, "--workers", "1", "--fixes", "all") == EXIT_OK
    capsys.readouterr()
    assert main(["report", str(here), "--merge", str(there)]) == EXIT_OK
    merged = capsys.readouterr()
    assert "merged 1 campaign from 1 file" in merged.err
    assert merged.out.startswith("campaigns: 2, ")
    runs_there = _rows(there, "SELECT case_json, outcome, coverage FROM runs ORDER BY idx")
    assert _rows(
        here, "SELECT case_json, outcome, coverage FROM runs WHERE campaign_id = 2 ORDER BY idx"
    ) == (runs_there)
    before = here.read_bytes()
    assert main(["report", str(here), "--merge", str(there)]) == EXIT_OK  # again: nothing new
    assert "merged 0 campaigns" in capsys.readouterr().err
    assert _rows(here, "SELECT COUNT(*) FROM campaigns") == [(2,)]
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_text("not a database, not at all" * 100)
    assert main(["report", str(here), "--merge", str(there), str(garbage)]) == EXIT_USAGE
    assert "not a SQLite database" in capsys.readouterr().err
    assert here.read_bytes() == before  # all or nothing


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE accounts (id INTEGER)")


def _newer(path: Path) -> None:
    open_db(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00garbage" * 1000)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "is a directory"),
        (_garbage, "not a SQLite database"),
        (_foreign, "a SQLite database of another application, not semsim's results (tables: accounts)"),
        (_newer, f"written by a newer semsim (results schema {SCHEMA_VERSION + 1}"),
    ],
    ids=["directory", "garbage", "foreign", "newer"],
)
def test_a_bad_database_is_refused_before_any_run_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message: str
) -> None:
    path = tmp_path / "db.sqlite"
    make(path)
    before = path.read_bytes() if path.is_file() else None
    assert _fuzz(path) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert main(["report", str(path)]) == EXIT_USAGE
    assert message in capsys.readouterr().err
    if before is not None:
        assert path.read_bytes() == before


def test_an_unwritable_database_path_and_a_missing_report_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _fuzz(Path("/proc/semsim.sqlite")) == EXIT_USAGE
    assert _fuzz(tmp_path / "no" / "dir.sqlite") == EXIT_USAGE
    assert main(["report", str(tmp_path / "missing.sqlite")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--db /proc/semsim.sqlite" in err
    assert "no directory" in err
    assert "missing.sqlite: no such file" in err
    assert list(tmp_path.iterdir()) == []


def test_a_new_database_is_marked_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    open_db(path).close()
    assert _rows(path, "PRAGMA application_id") == [(APPLICATION_ID,)]
    assert _rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # an empty file is an empty SQLite database: it gets the schema
    open_db(empty).close()
    assert _rows(empty, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


@pytest.mark.parametrize("workers", ["0", "-1", "abc", "1025", " 2"])
def test_bad_workers_are_a_usage_error(workers: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["fuzz", "--workers", workers])
    assert caught.value.code == EXIT_USAGE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"], "--workers does not go with --scheduler"),
        (["--no-db", "--db", "x.sqlite"], "--db does not go with --no-db"),
        (["--replay", "case.json", "--workers", "2"], "--workers does not go with --replay"),
        (["--replay", "case.json", "--db", "x.sqlite"], "--db does not go with --replay"),
        (["--replay", "case.json", "--no-db"], "--no-db does not go with --replay"),
    ],
)
def test_options_that_do_not_go_together_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["fuzz", *argv]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_scheduler_is_a_usage_error_within_its_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(campaigns, "CONNECT_TIMEOUT_S", 1.0)
    db = tmp_path / "r.sqlite"
    assert main(["fuzz", "--scheduler", "tcp://127.0.0.1:9", "--db", str(db)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "cannot reach a Dask scheduler at 'tcp://127.0.0.1:9' within 1 s" in captured.err
    assert "Traceback" not in captured.err
    assert not db.exists()  # nothing recorded, nothing created


def test_scheduler_without_the_dask_extra_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)  # as if not installed
    assert main(["fuzz", "--scheduler", "tcp://127.0.0.1:9", "--no-db"]) == EXIT_USAGE
    assert "pip install 'semsim[dask]'" in capsys.readouterr().err


def _same_file_as_db(db: Path, tmp_path: Path) -> list[str]:
    link = tmp_path / "link.sqlite"
    link.symlink_to(db)
    return [str(link)]


def _hard_link_to_db(db: Path, tmp_path: Path) -> list[str]:
    hard = tmp_path / "hard-link.sqlite"
    hard.hardlink_to(db)
    return [str(hard)]


@pytest.mark.parametrize(
    ("others", "message"),
    [
        (lambda db, tmp: [str(db)], "the same file as DB"),
        (lambda db, tmp: [f"{db.parent}/./{db.name}"], "the same file as DB"),
        (_same_file_as_db, "the same file as DB"),
        (_hard_link_to_db, "the same file as DB"),
        (lambda db, tmp: [str(tmp / "there.sqlite"), str(tmp / "there.sqlite")], "(given twice)"),
    ],
    ids=["itself", "dot", "symlink", "hard-link", "twice"],
)
def test_merging_a_database_into_itself_or_a_file_twice_exits_2_changing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], others, message: str
) -> None:
    db, there = tmp_path / "here.sqlite", tmp_path / "there.sqlite"
    for path in (db, there):
        open_db(path).close()  # results databases, with no campaign yet
    files = sorted(tmp_path.iterdir())
    before = db.read_bytes()
    assert main(["report", str(db), "--merge", *others(db, tmp_path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.count("\n") == 1  # one line, no traceback
    assert "merged 0 campaigns" not in captured.err
    assert captured.out == ""
    assert db.read_bytes() == before
    assert sorted(path for path in tmp_path.iterdir() if "link" not in path.name) == files


def test_merge_refuses_its_own_file_before_writing(tmp_path: Path) -> None:
    db = tmp_path / "here.sqlite"
    open_db(db).close()
    with (
        closing(open_db(db)) as connection,
        pytest.raises(ResultsError, match="cannot be merged into itself"),
    ):
        merge(connection, [db])


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("notanaddress", "--scheduler 'notanaddress': missing port number"),
        ("", "--scheduler: needs an address"),
        ("tcp://host:port", "--scheduler 'tcp://host:port': invalid literal"),
        ("tcp://127.0.0.1:99999", "port 99999 is not between 1 and 65535"),
        ("tcp://:8786", "no host"),
        ("inproc://x", "--scheduler 'inproc://x': don't know how to extract host and port"),
        ("tls://127.0.0.1:9", "cannot use a Dask scheduler at 'tls://127.0.0.1:9': TLS expects"),
    ],
)
def test_a_bad_scheduler_address_is_one_line_at_once(tmp_path: Path, address: str, message: str) -> None:
    # In a process of its own: a half-made Client used to hang 20 s at exit, then print a traceback.
    pytest.importorskip("distributed")
    db = tmp_path / "r.sqlite"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "semsim", "fuzz", "--scheduler", address, "--runs", "1", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.startswith("semsim fuzz: error: ")
    assert message in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # no "Exception ignored", no traceback
    assert done.stdout == ""
    assert time.monotonic() - started < 15  # no connection was tried, nothing waited for
    assert list(tmp_path.iterdir()) == []


def test_report_cases_makes_its_directory_only_for_a_case_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    open_db(db).close()  # no campaign, so no failure
    cases = tmp_path / "no" / "such" / "cases"
    assert main(["report", str(db), "--cases", str(cases)]) == EXIT_OK
    assert "cases to replay: none" in capsys.readouterr().out
    assert not (tmp_path / "no").exists()  # as fuzz --out: made when there is a case to write
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert main(["report", str(db), "--cases", str(a_file)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--cases {a_file}: {a_file} is not a directory" in err
    assert err.count("\n") == 1
    assert main(["report", str(db), "--cases", str(a_file / "under")]) == EXIT_USAGE
    assert "is not a directory" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file", "r.sqlite"]


def test_an_unfinished_campaign_counts_the_runs_it_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A campaign stopped hard (kill -9) never records its verdict: as if finish() never ran.
    db = tmp_path / "r.sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(Recorder, "finish", lambda self, *args, **kwargs: None)
        assert _fuzz(db, "--workers", "1") == EXIT_OK
    total = 3 + len(fuzz_examples())
    recorded = total // RUNS_PER_TRANSACTION * RUNS_PER_TRANSACTION  # the last chunk is lost
    assert recorded > 0
    [(status, runs)] = _rows(db, "SELECT status, runs FROM campaigns")
    assert (status, runs) == ("running", 0)
    [(sim_ms,)] = _rows(db, "SELECT SUM(sim_ms) FROM runs")
    assert _fuzz(db, "--workers", "1") == EXIT_OK  # and a finished one beside it
    capsys.readouterr()
    assert main(["report", str(db)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(
        "  #1 seed 4: unfinished (still running, or stopped before its verdict was recorded), "
        f"{recorded} of {total} runs so far ("
    )
    assert f", {sim_ms / 3_600_000:.2f} h, " in lines[1]
    assert lines[2].startswith(f"  #2 seed 4: passed, {total} of {total} runs (")
    assert lines[0].startswith(f"campaigns: 2, runs: {recorded + total}, ")
    assert main(["report", str(db), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [(c["status"], c["runs"]) for c in data["campaigns"]] == [("running", recorded), ("passed", total)]
    assert data["runs"] == sum(c["runs"] for c in data["campaigns"])  # the totals are the lines' sums
    assert data["sim_hours"] == round(sum(c["sim_ms"] for c in data["campaigns"]) / 3_600_000, 6)


def test_a_campaign_records_its_variant_and_invariants_and_the_report_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    invariant = "tests.test_user_invariants:Hears"
    argv = ["--variant", "tests.test_variants:RESERVE", "--invariant", invariant, "--workers", "1"]
    assert _fuzz(db, *argv) == EXIT_OK
    assert _rows(db, "SELECT variant, invariants FROM campaigns") == [
        ("tests.test_variants:RESERVE", json.dumps([invariant]))
    ]
    capsys.readouterr()
    assert main(["report", str(db)]) == EXIT_OK
    line = capsys.readouterr().out.splitlines()[1]
    assert f"variant tests.test_variants:RESERVE, the faithful reference, with invariants {invariant}" in line
    assert main(["report", str(db), "--json"]) == EXIT_OK
    (campaign,) = json.loads(capsys.readouterr().out)["campaigns"]
    assert (campaign["variant"], campaign["invariants"]) == ("tests.test_variants:RESERVE", [invariant])


def _schema_1_file(db: Path) -> str:
    """A results file as schema 1 wrote it, with one campaign; its identity as schema 1 computed it."""
    from semsim.explore.results import MIGRATIONS

    with closing(sqlite3.connect(db)) as old:
        old.executescript(MIGRATIONS[1])
        old.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        old.execute("PRAGMA user_version = 1")
        old.execute(
            "INSERT INTO campaigns (uid, seed, runs_asked, examples, fixes, tolerated, executor, workers,"
            " semsim_version, host, status) VALUES ('u', 4, 3, 0, '[]', '[]', 'serial', 1, '0.1.0', 'h',"
            " 'passed')"
        )
        old.commit()
        return hashlib_of(old)


def test_a_schema_1_database_reads_as_it_is_and_merges_into_a_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.sqlite"
    _schema_1_file(old)
    before = old.read_bytes()
    assert main(["report", str(old)]) == EXIT_OK  # read-only: not migrated, not refused
    assert "variant not recorded (results schema 1)" in capsys.readouterr().out
    assert main(["report", str(old), "--json"]) == EXIT_OK
    (campaign,) = json.loads(capsys.readouterr().out)["campaigns"]
    assert (campaign["variant"], campaign["invariants"]) == (None, None)
    assert old.read_bytes() == before
    new = tmp_path / "new.sqlite"
    with closing(open_db(new)) as db:
        assert merge(db, [old]).campaigns == 1
        assert merge(db, [old]).campaigns == 0  # the same campaign, by its identity


def test_a_schema_1_database_is_migrated_keeping_its_campaigns_and_their_identity(tmp_path: Path) -> None:
    from semsim.explore.results import digest

    db = tmp_path / "old.sqlite"
    before = _schema_1_file(db)
    with closing(open_db(db)) as migrated:
        assert migrated.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        # What a schema 1 campaign ran was not recorded: NULL, not a guess.
        assert migrated.execute("SELECT seed, variant, invariants FROM campaigns").fetchall() == [
            (4, None, None)
        ]
        # A campaign of the reference keeps the identity schema 1 gave it (merges still dedupe);
        # one of a variant is another campaign.
        assert digest(migrated, "main", 1) == before
        migrated.execute("UPDATE campaigns SET variant = 'mine'")
        assert digest(migrated, "main", 1) != before


def hashlib_of(db: sqlite3.Connection) -> str:
    """Campaign 1's identity as schema 1 computed it: its fields, runs and failure, nothing else."""
    import hashlib

    fields = db.execute(
        "SELECT seed, runs_asked, examples, fixes, tolerated, semsim_version, status, runs, sim_ms,"
        " shrink_runs, shrink_events, shrink_cut_short FROM campaigns WHERE id = 1"
    ).fetchone()
    return hashlib.sha256(json.dumps([list(fields), [], []]).encode()).hexdigest()


# --- schema 3: the design a campaign fuzzed, and the comparisons --------------------------------


def _schema_2_file(db: Path, design: str | None) -> None:
    """A schema 2 file holding one campaign whose one run's case is of ``design`` (None: no run)."""
    from semsim.explore.results import MIGRATIONS

    with closing(sqlite3.connect(db)) as old:
        old.executescript(MIGRATIONS[1] + ";" + MIGRATIONS[2])
        old.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        old.execute("PRAGMA user_version = 2")
        old.execute(
            "INSERT INTO campaigns (uid, seed, runs_asked, examples, fixes, tolerated, executor, workers,"
            " semsim_version, host, status, variant, invariants) VALUES ('u', 4, 3, 0, '[]', '[]',"
            " 'serial', 1, '0.1.0', 'h', 'passed', 'reference', '[]')"
        )
        if design is not None:
            config = {} if design == "semaphore" else {"design": {"name": design}}
            old.execute(
                "INSERT INTO runs VALUES (1, 0, ?, 'completed', NULL, NULL, '', 1, 1, '{}', '{}', '{}')",
                (json.dumps({"config": config}),),
            )
        old.commit()


@pytest.mark.parametrize(("design", "recorded"), [("gate", "gate"), ("semaphore", "semaphore"), (None, None)])
def test_a_schema_2_database_is_migrated_with_the_design_its_runs_name(
    tmp_path: Path, design: str | None, recorded: str | None
) -> None:
    from semsim.explore.results import digest

    db = tmp_path / "old.sqlite"
    _schema_2_file(db, design)
    with closing(open_db(db)) as migrated:
        assert migrated.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert migrated.execute("SELECT design FROM campaigns").fetchall() == [(recorded,)]
        assert migrated.execute("SELECT COUNT(*) FROM comparisons").fetchone() == (0,)
        identity = digest(migrated, "main", 1)
        migrated.execute("UPDATE campaigns SET design = 'semaphore'")
        # A campaign of the semaphore keeps its identity; one of another design is another campaign.
        assert (digest(migrated, "main", 1) == identity) == (recorded in (None, "semaphore"))


def test_a_design_campaign_records_its_design_and_the_report_reads_its_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    assert _fuzz(db, "--design", "gate", "--workers", "1") == EXIT_OK
    capsys.readouterr()
    assert _rows(db, "SELECT design FROM campaigns") == [("gate",)]
    assert main(["report", str(db)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "design gate; serial" in out
    assert "gate:shed" in out
    assert "not an expected counter" not in out
    assert "blocked:limit" not in out  # the semaphore's counters are not the gate's to reach


def _compare(db: Path, *extra: str) -> int:
    argv = ["compare", "--designs", "gate,leased-worker", "--plans", "calm", "--seeds", "1", "--quiet"]
    return main([*argv, "--workers", "1", "--db", str(db), *extra])


def test_compare_records_each_cell_and_report_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    assert _compare(db, "--json") == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert result["db"] == str(db)
    cells = _rows(db, "SELECT idx, design, plan, seed, outcome, trade_offs FROM cells ORDER BY idx")
    assert [row[:5] for row in cells] == [
        (0, "gate", "calm", 1, "completed"),
        (1, "leased-worker", "calm", 1, "completed"),
    ]
    assert [json.loads(row[5]) for row in cells] == [cell["trade_offs"] for cell in result["cells"]]
    assert main(["report", str(db)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "comparisons: 1" in out
    assert "#1 gate, leased-worker under 1 fault plan, 1 seed each: passed, 2 of 2 runs judged; serial" in out
    assert "| gate | calm | 1/1 |" in out
    assert main(["report", str(db), "--json"]) == EXIT_OK
    (comparison,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert comparison["summary"] == result["summary"]
    assert (comparison["designs"], comparison["status"]) == (["gate", "leased-worker"], "passed")


def test_a_comparison_merges_once_whatever_its_cpu_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, theirs = tmp_path / "ours.sqlite", tmp_path / "theirs.sqlite"
    assert _compare(ours) == EXIT_OK
    assert _compare(theirs) == EXIT_OK  # the same comparison on another machine: other CPU seconds
    capsys.readouterr()
    assert main(["report", str(ours), "--merge", str(theirs)]) == EXIT_OK
    assert "merged 0 campaigns from 1 file" in capsys.readouterr().err
    other = tmp_path / "other.sqlite"
    assert (
        main(
            [
                "compare",
                "--designs",
                "gate",
                "--plans",
                "lossy",
                "--seeds",
                "1",
                "--quiet",
                "--workers",
                "1",
                "--db",
                str(other),
            ]
        )
        == EXIT_OK
    )
    capsys.readouterr()
    assert main(["report", str(ours), "--merge", str(other)]) == EXIT_OK
    assert "merged 0 campaigns and 1 comparison from 1 file" in capsys.readouterr().err
    assert _rows(ours, "SELECT COUNT(*) FROM comparisons") == [(2,)]


# --- schema 4: the user's invariants a comparison judged ------------------------------------------


def test_a_comparison_records_the_invariants_it_judged_and_report_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "team_cap.py").write_text(TEAM_INVARIANTS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    judged, plain = tmp_path / "judged.sqlite", tmp_path / "plain.sqlite"
    assert _compare(judged, "--invariant", "team_cap:NeverOverCap") == EXIT_OK
    assert _compare(plain) == EXIT_OK
    capsys.readouterr()
    assert _rows(judged, "SELECT invariants FROM comparisons") == [('["team_cap:NeverOverCap"]',)]
    assert _rows(plain, "SELECT invariants FROM comparisons") == [("[]",)]
    # The same cells judged by more are another comparison: merged, both are kept.
    assert _rows(judged, "SELECT uid FROM comparisons") != _rows(plain, "SELECT uid FROM comparisons")
    assert main(["report", str(judged), "--merge", str(plain)]) == EXIT_OK
    out = capsys.readouterr().out
    each = "gate, leased-worker under 1 fault plan, 1 seed each"
    assert f"#1 {each}, with invariants team_cap:NeverOverCap: passed" in out
    assert "#2 gate, leased-worker under 1 fault plan, 1 seed each: passed" in out
    assert main(["report", str(judged), "--json"]) == EXIT_OK
    first, second = json.loads(capsys.readouterr().out)["comparisons"]
    assert (first["invariants"], second["invariants"]) == (["team_cap:NeverOverCap"], [])


def _schema_3_file(db: Path) -> None:
    """A schema 3 file holding one comparison of one cell (recorded before compare took invariants)."""
    from semsim.explore.results import MIGRATIONS

    with closing(sqlite3.connect(db)) as old:
        old.executescript(";".join(MIGRATIONS[version] for version in (1, 2, 3)))
        old.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        old.execute("PRAGMA user_version = 3")
        old.execute(
            "INSERT INTO comparisons (uid, config, designs, plans, seeds, executor, workers, semsim_version,"
            " host, status) VALUES ('old', '{}', '[\"gate\"]', '[\"calm\"]', '[1]', 'serial', 1, '0.1.0',"
            " 'h', 'passed')"
        )
        old.execute(
            "INSERT INTO cells VALUES (1, 0, 'gate', 'calm', 1, 'completed', NULL, '', '[]', NULL, 0.5)"
        )
        old.commit()


def test_a_schema_3_comparison_is_read_merged_and_migrated_with_no_invariants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, ours = tmp_path / "old.sqlite", tmp_path / "ours.sqlite"
    _schema_3_file(old)
    open_db(ours).close()
    before = old.read_bytes()
    assert main(["report", str(ours), "--merge", str(old)]) == EXIT_OK
    assert "merged 0 campaigns and 1 comparison from 1 file" in capsys.readouterr().err
    assert old.read_bytes() == before  # merged from, never written
    assert _rows(ours, "SELECT uid, invariants FROM comparisons") == [("old", None)]
    assert main(["report", str(old), "--json"]) == EXIT_OK  # read as it is, at schema 3
    (comparison,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert comparison["invariants"] is None
    with closing(open_db(old)) as migrated:
        assert migrated.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert migrated.execute("SELECT uid, invariants FROM comparisons").fetchall() == [("old", None)]


def test_compare_refuses_a_bad_database_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign.sqlite"
    _foreign(foreign)
    before = foreign.read_bytes()
    assert _compare(foreign) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "a SQLite database of another application" in captured.err
    assert "comparing" not in captured.out  # refused before the first run
    assert foreign.read_bytes() == before
    assert _compare(tmp_path / "x.sqlite", "--no-db") == EXIT_USAGE
    assert "--db does not go with --no-db" in capsys.readouterr().err
