"""The results database: every campaign's runs, verdicts, coverage counters and counterexamples.

What this module owns: the SQLite file ``semsim fuzz`` records campaigns in
(``--db``, ``semsim-results.sqlite`` by default), its schema and migrations,
merging files from several machines, and the queries ``semsim report``
prints. It does not run campaigns or print anything.

The file is marked as ours by ``PRAGMA application_id`` (:data:`APPLICATION_ID`)
and versioned by ``PRAGMA user_version`` (:data:`SCHEMA_VERSION`). Opening a
file checks it before writing anything: an empty or new file gets the
schema; one of ours at an older version is migrated (:data:`MIGRATIONS`, in
one transaction); a newer version, another application's SQLite database,
or a file that is not SQLite at all is refused (:class:`ResultsError`) and
left as it was.

Tables (schema 4):

- ``campaigns``: one row a campaign: ``uid`` (its identity across merged
  files: a digest of what was asked and what every run gave, written when
  the campaign ends, so the same campaign recorded on two machines is one
  campaign, and merging a file twice adds nothing), what was asked (seed,
  runs, named scenarios run first, fixes, tolerated findings, the holder
  ``variant`` by the name it was found by, and the user's ``invariants``
  as the JSON list of their references: both added in schema 2; the
  ``design`` it fuzzed, added in schema 3), how it ran
  (``executor``: serial, local or dask, and ``workers``), semsim's version
  and the host's name (metadata only), and what it saw (``status``:
  running, passed, failed or interrupted; runs, simulated ms, shrink runs
  and work, whether the shrink was cut short).
- ``runs``: one row a run, ``idx`` from 0 in run order: the case (JSON, as a
  case file holds it), outcome, invariant, finding, detail, simulated ms,
  trace events, and the findings, documented behaviour and coverage
  counters it reached (JSON objects, name to count).
- ``failures``: a failed campaign's shrunk counterexample: the case file's
  text (``semsim fuzz --replay`` reads it), its plan steps, and the command
  that replays it.
- ``comparisons`` and ``cells`` (schema 3): what ``semsim compare`` ran (the
  world, designs, plans, seeds), where, its verdict, and one row a cell:
  design, plan, seed, outcome, invariant, detail, the findings it met, its
  trade-off figures (JSON, null for a run that did not complete) and the CPU
  seconds it took (metadata, not part of its identity). Schema 4 adds the
  user's ``invariants`` a comparison judged (the JSON list of their
  references; NULL in one recorded before, which could judge none).

Nothing in the file depends on the wall clock or on chance: the same
campaign records the same rows (but for ``host``, ``executor`` and ``workers``). Rows are written by the
process that runs the campaign (never by workers), one transaction per
chunk of runs, so a campaign stopped hard keeps every chunk before.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any, Final, NamedTuple

import attrs

from semsim import __version__
from semsim.explore.fuzz import Campaign, RunReport, case_length
from semsim.inputs.files import InputError, check_output_file, same_file

#: ``PRAGMA application_id``: "SemS". Marks a file as semsim's results.
APPLICATION_ID: Final = 0x53656D53
SCHEMA_VERSION: Final = 4
DEFAULT_DB: Final = Path("semsim-results.sqlite")
#: Runs written per transaction by :class:`Recorder`.
RUNS_PER_TRANSACTION: Final = 16
#: How long a writer waits for another writer's transaction (several campaigns, one file).
BUSY_TIMEOUT_S: Final = 30.0

_SCHEMA_1: Final = """
CREATE TABLE campaigns (
    id INTEGER PRIMARY KEY,
    uid TEXT,
    seed INTEGER NOT NULL,
    runs_asked INTEGER NOT NULL,
    examples INTEGER NOT NULL,
    fixes TEXT NOT NULL,
    tolerated TEXT NOT NULL,
    executor TEXT NOT NULL,
    workers INTEGER NOT NULL,
    semsim_version TEXT NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'passed', 'failed', 'interrupted')),
    runs INTEGER NOT NULL DEFAULT 0,
    sim_ms INTEGER NOT NULL DEFAULT 0,
    shrink_runs INTEGER NOT NULL DEFAULT 0,
    shrink_events INTEGER NOT NULL DEFAULT 0,
    shrink_cut_short INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE runs (
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    idx INTEGER NOT NULL,
    case_json TEXT NOT NULL,
    outcome TEXT NOT NULL,
    invariant TEXT,
    finding TEXT,
    detail TEXT NOT NULL,
    sim_ms INTEGER NOT NULL,
    events INTEGER NOT NULL,
    findings TEXT NOT NULL,
    documented TEXT NOT NULL,
    coverage TEXT NOT NULL,
    PRIMARY KEY (campaign_id, idx)
) WITHOUT ROWID;
CREATE TABLE failures (
    campaign_id INTEGER PRIMARY KEY REFERENCES campaigns(id),
    failure_name TEXT NOT NULL,
    outcome TEXT NOT NULL,
    invariant TEXT,
    finding TEXT,
    detail TEXT NOT NULL,
    steps INTEGER NOT NULL,
    case_text TEXT NOT NULL,
    replay TEXT NOT NULL
);
"""

#: Version 2: the holder variant each campaign ran and the user's invariants it judged (issue 24).
#: NULL in a campaign recorded before: what it ran was not recorded (it may have run a variant).
_SCHEMA_2: Final = """
ALTER TABLE campaigns ADD COLUMN variant TEXT;
ALTER TABLE campaigns ADD COLUMN invariants TEXT
"""

#: Version 3: the design each campaign fuzzed (issue 26), and the comparisons ``semsim compare``
#: ran, each cell with its figures. A campaign recorded before gets the design its runs' cases
#: name (NULL if it recorded no run).
_SCHEMA_3: Final = """
ALTER TABLE campaigns ADD COLUMN design TEXT;
UPDATE campaigns SET design = (
    SELECT COALESCE(json_extract(r.case_json, '$.config.design.name'), 'semaphore')
    FROM runs r WHERE r.campaign_id = campaigns.id ORDER BY r.idx LIMIT 1
);
CREATE TABLE comparisons (
    id INTEGER PRIMARY KEY,
    uid TEXT,
    config TEXT NOT NULL,
    designs TEXT NOT NULL,
    plans TEXT NOT NULL,
    seeds TEXT NOT NULL,
    executor TEXT NOT NULL,
    workers INTEGER NOT NULL,
    semsim_version TEXT NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('passed', 'failed'))
);
CREATE TABLE cells (
    comparison_id INTEGER NOT NULL REFERENCES comparisons(id),
    idx INTEGER NOT NULL,
    design TEXT NOT NULL,
    plan TEXT NOT NULL,
    seed INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    invariant TEXT,
    detail TEXT NOT NULL,
    findings TEXT NOT NULL,
    trade_offs TEXT,
    cpu_s REAL NOT NULL,
    PRIMARY KEY (comparison_id, idx)
) WITHOUT ROWID
"""

#: Version 4: the user's invariants each comparison judged (``semsim compare --invariant``).
#: NULL in a comparison recorded before: compare took none then.
_SCHEMA_4: Final = """
ALTER TABLE comparisons ADD COLUMN invariants TEXT
"""

#: Schema version -> the statements that bring the version before it up to it.
MIGRATIONS: Final[Mapping[int, str]] = {1: _SCHEMA_1, 2: _SCHEMA_2, 3: _SCHEMA_3, 4: _SCHEMA_4}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))

_TABLES: Final = ("campaigns", "cells", "comparisons", "failures", "runs")


class ResultsError(Exception):
    """A results database that cannot be used; the message names the file and why."""


# --- opening -------------------------------------------------------------------------------------


def _inspect(path: Path, option: str) -> tuple[int, int, list[str]]:
    """``(application_id, user_version, tables)`` of an existing file, read without writing."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.DatabaseError as error:
        raise ResultsError(f"{option} {path}: not a SQLite database ({error})") from None
    return application_id, version, sorted(tables)


def check_db(path: Path, option: str = "--db") -> None:
    """Fail now, changing nothing, unless ``path`` is (or can become) a results database of this semsim."""
    if str(path) in ("", "."):
        raise ResultsError(f"{option}: needs a file name")
    if path.is_dir():
        raise ResultsError(f"{option} {path}: is a directory")
    if path.exists() and not path.is_file():
        raise ResultsError(f"{option} {path}: not a regular file")
    if not path.exists():
        try:
            check_output_file(path, option)
        except InputError as error:
            raise ResultsError(str(error)) from None
        return
    if not os.access(path, os.R_OK | os.W_OK):
        raise ResultsError(f"{option} {path}: cannot read and write it")
    _check_ours(path, option, *_inspect(path, option))


def _check_ours(path: Path, option: str, application_id: int, version: int, tables: list[str]) -> None:
    if application_id == 0 and version == 0 and not tables:
        return  # an empty SQLite file: it gets the schema
    if application_id != APPLICATION_ID:
        listed = ", ".join(tables[:5]) or "none"
        raise ResultsError(
            f"{option} {path}: a SQLite database of another application, not semsim's results "
            f"(tables: {listed})"
        )
    if version > SCHEMA_VERSION:
        raise ResultsError(
            f"{option} {path}: written by a newer semsim (results schema {version}; "
            f"this one reads up to {SCHEMA_VERSION})"
        )
    if version < SCHEMA_VERSION and set(tables) - set(_TABLES):
        raise ResultsError(f"{option} {path}: results schema {version} with unknown tables")


def open_db(path: Path, option: str = "--db") -> sqlite3.Connection:
    """The results database at ``path``, created or migrated to :data:`SCHEMA_VERSION` (checked first).

    A new file is made whole: the schema is written to a temporary file beside
    ``path``, which then takes its name, so a full disk leaves no file rather
    than an empty or half-made one. SQLite's errors are :class:`ResultsError`
    naming the file.
    """
    check_db(path, option)
    if not path.exists():
        _create(path, option)
    try:
        return _open(path)
    except sqlite3.Error as error:
        raise ResultsError(f"{option} {path}: cannot open it: {error}") from None


def _create(path: Path, option: str) -> None:
    """A new results database at ``path``, with its schema, or none at all."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as error:
        raise ResultsError(f"{option} {path}: cannot create it: {error.strerror or error}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        with closing(_open(temporary)):
            pass
        os.replace(temporary, path)
    except (OSError, sqlite3.Error) as error:
        temporary.unlink(missing_ok=True)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ResultsError(f"{option} {path}: cannot create it: {reason}") from None


def _open(path: Path) -> sqlite3.Connection:
    # As a URI, so that ATTACH (merging) can open other files read-only by URI too.
    db = sqlite3.connect(path.resolve().as_uri(), timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        with _transaction(db):
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for target in range(version + 1, SCHEMA_VERSION + 1):
                # One statement at a time: executescript() would commit the transaction first.
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
            if version < SCHEMA_VERSION:  # an up-to-date file is not written to just by opening it
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.close()
        raise
    return db


def read_db(path: Path, option: str = "DB") -> sqlite3.Connection:
    """An existing results database, opened read-only (``semsim report``)."""
    if not path.exists():
        raise ResultsError(f"{option} {path}: no such file")
    if path.is_dir():
        raise ResultsError(f"{option} {path}: is a directory")
    if not path.is_file():
        raise ResultsError(f"{option} {path}: not a regular file")
    found = _inspect(path, option)
    _check_ours(path, option, *found)
    if found[0] != APPLICATION_ID:
        raise ResultsError(f"{option} {path}: an empty SQLite file, no campaigns recorded")
    # An older schema is read as it is (read-only: nothing migrates it here); what it lacks
    # reads as not recorded (see :func:`_columns`).
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _columns(db: sqlite3.Connection, schema: str, table: str) -> list[str]:
    """The columns ``table`` has in ``schema`` (a file of an older schema has fewer)."""
    assert schema in ("main", "other"), schema
    return [row[1] for row in db.execute(f"PRAGMA {schema}.table_info({table})")]


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One transaction: committed whole, or rolled back (a failed ``COMMIT`` too: a full disk)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # SQLite may have rolled back already (after SQLITE_FULL, say)
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


# --- recording ------------------------------------------------------------------------------------


def _counts(counter: Counter[str]) -> str:
    return json.dumps(dict(sorted(counter.items())))


def _case_json(report: RunReport) -> str:
    return json.dumps(report.case.to_dict(), sort_keys=True)


@attrs.define
class Recorder:
    """Writes one campaign as it runs: its ``on_run`` records runs, :meth:`finish` the verdict.

    A write that fails (a full disk, a locked or read-only file) raises
    :class:`ResultsError` naming the file; the transaction it was in is rolled
    back, so what was recorded before stays whole (the campaign's row says
    ``running``, as for a campaign stopped hard).
    """

    db: sqlite3.Connection
    campaign_id: int
    #: The file, for messages.
    path: Path
    buffered: list[tuple[Any, ...]] = attrs.field(factory=list)
    recorded: int = 0

    @classmethod
    def begin(
        cls,
        db: sqlite3.Connection,
        path: Path,
        *,
        seed: int,
        runs: int,
        examples: int,
        fixes: Sequence[str],
        tolerated: frozenset[str],
        executor: str,
        workers: int,
        variant: str = "reference",
        invariants: Sequence[str] = (),
        design: str = "semaphore",
    ) -> Recorder:
        with _recording(path), _transaction(db):
            cursor = db.execute(
                "INSERT INTO campaigns (seed, runs_asked, examples, fixes, tolerated, executor, workers,"
                " semsim_version, host, status, variant, invariants, design)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (
                    seed,
                    runs,
                    examples,
                    json.dumps(list(fixes)),
                    json.dumps(sorted(tolerated)),
                    executor,
                    workers,
                    __version__,
                    socket.gethostname(),
                    variant,
                    json.dumps(list(invariants)),
                    design,
                ),
            )
        assert cursor.lastrowid is not None
        return cls(db, cursor.lastrowid, path)

    def __call__(self, state: Campaign, report: RunReport, shrinking: bool) -> None:
        """``on_run``: a campaign's run (not a shrink run) becomes a row; a chunk of them, a transaction."""
        if shrinking:
            return
        assert state.runs == self.recorded + len(self.buffered) + 1, (state.runs, self.recorded)
        self.buffered.append(
            (
                self.campaign_id,
                state.runs - 1,
                _case_json(report),
                report.outcome,
                report.invariant,
                report.finding,
                report.detail,
                report.sim_ms,
                report.events,
                _counts(report.findings),
                _counts(report.documented),
                _counts(report.coverage),
            )
        )
        if len(self.buffered) >= RUNS_PER_TRANSACTION:
            with _recording(self.path), _transaction(self.db):
                self._flush()

    def _flush(self) -> None:
        self.db.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self.buffered)
        self.recorded += len(self.buffered)
        self.buffered.clear()

    def finish(self, result: Campaign, case_text: str | None = None, replay: str | None = None) -> None:
        """The campaign's verdict, its last runs and (if it failed) its shrunk case, in one transaction."""
        failure = result.failure
        status = "failed" if failure is not None else "interrupted" if result.interrupted else "passed"
        with _recording(self.path), _transaction(self.db):
            self._flush()
            self.db.execute(
                "UPDATE campaigns SET status = ?, runs = ?, sim_ms = ?, shrink_runs = ?, shrink_events = ?,"
                " shrink_cut_short = ? WHERE id = ?",
                (
                    status,
                    result.runs,
                    result.sim_ms,
                    result.shrink_runs,
                    result.shrink_events,
                    int(result.shrink_cut_short),
                    self.campaign_id,
                ),
            )
            if failure is not None:
                self._failure(failure, case_text, replay)
            self.db.execute(
                "UPDATE campaigns SET uid = ? WHERE id = ?",
                (digest(self.db, "main", self.campaign_id), self.campaign_id),
            )

    def _failure(self, failure: RunReport, case_text: str | None, replay: str | None) -> None:
        assert case_text is not None
        assert replay is not None
        self.db.execute(
            "INSERT INTO failures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.campaign_id,
                failure.failure_name,
                failure.outcome,
                failure.invariant,
                failure.finding,
                failure.detail,
                case_length(failure.case),
                case_text,
                replay,
            ),
        )


@contextmanager
def _recording(path: Path) -> Iterator[None]:
    """SQLite's errors while recording, as :class:`ResultsError` naming the file."""
    try:
        yield
    except sqlite3.Error as error:
        raise ResultsError(f"the results database {path}: cannot record the campaign: {error}") from None


def record_comparison(
    db: sqlite3.Connection,
    path: Path,
    *,
    config: Mapping[str, Any],
    designs: Sequence[str],
    plans: Sequence[str],
    seeds: Sequence[int],
    cells: Sequence[Mapping[str, Any]],
    executor: str,
    workers: int,
    invariants: Sequence[str] = (),
) -> int:
    """One comparison (``semsim compare``) and its cells (each ``Cell.to_dict()``), in one transaction.

    Its ``uid`` is a digest of what was asked (the user's ``invariants`` among it, by their
    references) and what every cell gave, not of where, how or how fast it ran (the cells' CPU
    seconds are kept, as metadata): recorded twice, merged twice, it is one comparison. Returns
    its row id.
    """
    status = "passed" if all(_judged(cell) for cell in cells) else "failed"
    rows = [
        (
            index,
            cell["design"],
            cell["plan"],
            cell["seed"],
            cell["outcome"],
            cell["invariant"],
            cell["detail"],
            json.dumps(list(cell["findings"])),
            None if cell["trade_offs"] is None else json.dumps(cell["trade_offs"], sort_keys=True),
            float(cell["cpu_s"]),
        )
        for index, cell in enumerate(cells)
    ]
    asked = [json.dumps(dict(config), sort_keys=True), json.dumps(list(designs)), json.dumps(list(plans))]
    content: list[Any] = [*asked, list(seeds), [list(row[:-1]) for row in rows]]
    if invariants:  # only then: a comparison judged by semsim's own keeps the identity it had before
        content.append(["invariants", list(invariants)])
    uid = hashlib.sha256(json.dumps(content).encode()).hexdigest()
    with _recording(path), _transaction(db):
        cursor = db.execute(
            "INSERT INTO comparisons (uid, config, designs, plans, seeds, executor, workers, semsim_version,"
            " host, status, invariants) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                uid,
                *asked,
                json.dumps(list(seeds)),
                executor,
                workers,
                __version__,
                socket.gethostname(),
                status,
                json.dumps(list(invariants)),
            ),
        )
        assert cursor.lastrowid is not None
        db.executemany(
            "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(cursor.lastrowid, *row) for row in rows],
        )
    return cursor.lastrowid


def _judged(cell: Mapping[str, Any]) -> bool:
    return cell["outcome"] == "completed" and cell["trade_offs"] is not None


# --- merging ----------------------------------------------------------------------------------------


class Merged(NamedTuple):
    """What a merge copied: campaigns, and comparisons (``semsim compare``)."""

    campaigns: int
    comparisons: int


def merge(db: sqlite3.Connection, others: Sequence[Path]) -> Merged:
    """Copy every campaign and comparison of ``others`` that ``db`` lacks (by ``uid``) into it.

    All files are checked before anything is written (each must be another file than
    ``db``'s and than the others: :func:`check_distinct`), and each file is copied in
    one transaction; merging a file twice adds nothing.
    """
    for other in others:
        read_db(other, "--merge").close()
    main_file = next(row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main")
    check_distinct(Path(main_file) if main_file else None, others)
    copied = compared = 0
    for other in others:
        # Attached (and detached) outside the transaction, as SQLite requires; one file at a
        # time, as SQLite attaches at most ten.
        try:
            db.execute("ATTACH DATABASE ? AS other", (f"{other.resolve().as_uri()}?mode=ro",))
            try:
                with _transaction(db):
                    copied += _copy_campaigns(db, "other")
                    if "comparisons" in _tables(db, "other"):
                        compared += _copy_comparisons(db)
            finally:
                db.execute("DETACH DATABASE other")
        except sqlite3.Error as error:
            raise ResultsError(f"DB {main_file}: cannot merge {other} into it: {error}") from None
    return Merged(copied, compared)


def check_distinct(target: Path | None, others: Sequence[Path]) -> None:
    """Fail unless each file of ``others`` is neither ``target`` nor another of ``others``.

    The same file is found however it is named (``./x``, a symlink, a hard link:
    :func:`~semsim.inputs.files.same_file`). Merging a database into itself would
    deadlock SQLite on its own lock; a file given twice is a slip (the second time
    would add nothing).
    """
    named: list[tuple[str, Path]] = [] if target is None else [(f"DB {target}", target)]
    for other in others:
        for label, earlier in named:
            if same_file(other, earlier):
                why = "a database cannot be merged into itself" if label.startswith("DB ") else "given twice"
                raise ResultsError(f"--merge {other}: the same file as {label} ({why})")
        named.append((f"--merge {other}", other))


def digest(db: sqlite3.Connection, schema: str, campaign_id: int) -> str:
    """A campaign's identity: what was asked and what every run and the shrink gave.

    Not where or how it ran (host, executor, workers): the same campaign gives the
    same results anywhere, so recorded twice it is still one campaign.
    """
    assert schema in ("main", "other"), schema
    variant, invariants = None, None
    if "variant" in _columns(db, schema, "campaigns"):
        variant, invariants = db.execute(
            f"SELECT variant, invariants FROM {schema}.campaigns WHERE id = ?", (campaign_id,)
        ).fetchone()
    content: list[Any] = [
        list(
            db.execute(
                f"SELECT seed, runs_asked, examples, fixes, tolerated, semsim_version, status, runs, sim_ms,"
                f" shrink_runs, shrink_events, shrink_cut_short FROM {schema}.campaigns WHERE id = ?",
                (campaign_id,),
            ).fetchone()
        ),
        [
            list(row)
            for row in db.execute(
                f"SELECT idx, case_json, outcome, invariant, finding, detail, sim_ms, events, findings,"
                f" documented, coverage FROM {schema}.runs WHERE campaign_id = ? ORDER BY idx",
                (campaign_id,),
            )
        ],
        [
            list(row)
            for row in db.execute(
                f"SELECT failure_name, outcome, invariant, finding, detail, steps, case_text"
                f" FROM {schema}.failures WHERE campaign_id = ?",
                (campaign_id,),
            )
        ],
    ]
    if (variant or "reference", invariants or "[]") != ("reference", "[]"):
        # Only then: a campaign of the reference keeps the identity it had before version 2.
        content.append([variant, json.loads(invariants or "[]")])
    if "design" in _columns(db, schema, "campaigns"):
        (design,) = db.execute(
            f"SELECT design FROM {schema}.campaigns WHERE id = ?", (campaign_id,)
        ).fetchone()
        if design not in (None, "semaphore"):  # likewise: the semaphore's keep theirs
            content.append(["design", design])
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def _tables(db: sqlite3.Connection, schema: str) -> set[str]:
    assert schema in ("main", "other"), schema
    return {row[0] for row in db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}


def _copy_comparisons(db: sqlite3.Connection) -> int:
    """Copy the comparisons of ``other`` that ``main`` lacks (by ``uid``), with their cells."""
    known = {row[0] for row in db.execute("SELECT uid FROM main.comparisons")}
    theirs = set(_columns(db, "other", "comparisons"))  # an older file lacks some: they stay NULL
    ours = _columns(db, "main", "comparisons")
    columns = ", ".join(name for name in ours if name != "id" and name in theirs)
    copied = 0
    for old_id, uid in db.execute("SELECT id, uid FROM other.comparisons ORDER BY id").fetchall():
        if uid in known:
            continue
        known.add(uid)
        cursor = db.execute(
            f"INSERT INTO main.comparisons ({columns}) SELECT {columns} FROM other.comparisons WHERE id = ?",
            (old_id,),
        )
        db.execute(
            "INSERT INTO main.cells SELECT ?, idx, design, plan, seed, outcome, invariant, detail, findings,"
            " trade_offs, cpu_s FROM other.cells WHERE comparison_id = ?",
            (cursor.lastrowid, old_id),
        )
        copied += 1
    return copied


def _copy_campaigns(db: sqlite3.Connection, alias: str) -> int:
    assert alias == "other", alias
    theirs = set(_columns(db, "other", "campaigns"))  # an older file lacks some: they stay NULL
    columns = [name for name in _columns(db, "main", "campaigns") if name != "id" and name in theirs]
    listed = ", ".join(columns)
    known = {row[0] for row in db.execute("SELECT uid FROM main.campaigns WHERE uid IS NOT NULL")}
    copied = 0
    for (old_id,) in db.execute("SELECT id FROM other.campaigns ORDER BY id").fetchall():
        uid = digest(db, "other", old_id)  # recomputed: a campaign stopped hard has none recorded
        if uid in known:
            continue
        known.add(uid)
        cursor = db.execute(
            f"INSERT INTO main.campaigns ({listed}) SELECT {listed} FROM other.campaigns WHERE id = ?",
            (old_id,),
        )
        new_id = cursor.lastrowid
        db.execute("UPDATE main.campaigns SET uid = ? WHERE id = ?", (uid, new_id))
        for table in ("runs", "failures"):
            info = db.execute(f"PRAGMA main.table_info({table})")
            fields = ", ".join(row[1] for row in info if row[1] != "campaign_id")
            db.execute(
                f"INSERT INTO main.{table} (campaign_id, {fields}) "
                f"SELECT ?, {fields} FROM other.{table} WHERE campaign_id = ?",
                (new_id, old_id),
            )
        copied += 1
    return copied


# --- queries ------------------------------------------------------------------------------------------


@attrs.frozen
class CampaignRow:
    """A campaign as ``semsim report`` shows it.

    ``status`` ``running`` is a campaign with no verdict recorded: still running, or
    stopped hard (killed, a power cut). Its ``runs`` and ``sim_ms`` are then those of
    the runs recorded so far (written :data:`RUNS_PER_TRANSACTION` at a time), as the
    report's totals count them; once it ends, its verdict's.
    """

    id: int
    uid: str | None
    seed: int
    runs_asked: int
    examples: int
    fixes: list[str]
    executor: str
    workers: int
    status: str
    runs: int
    sim_ms: int
    host: str
    semsim_version: str
    #: The holder variant it ran, by the name it was found by, and the user's invariants it judged
    #: (None: not recorded, a campaign recorded under results schema 1).
    variant: str | None = "reference"
    invariants: list[str] | None = attrs.Factory(list)
    #: The design it fuzzed (None: not recorded, a campaign of schema 2 or before that recorded no run).
    design: str | None = "semaphore"


@attrs.frozen
class FailureRow:
    campaign_id: int
    failure_name: str
    detail: str
    steps: int
    case_text: str
    replay: str
    seed: int


@attrs.frozen
class Summary:
    """What ``semsim report`` prints: everything in stable order."""

    campaigns: list[CampaignRow]
    runs: int
    sim_ms: int
    #: Runs that broke an invariant (or crashed), by invariant and finding (``ceiling:F2``).
    violations: dict[str, int]
    #: Known findings the runs tolerated, by name.
    findings: dict[str, int]
    documented: dict[str, int]
    coverage: dict[str, int]
    failures: list[FailureRow]
    #: The comparisons ``semsim compare`` recorded, in the order they were.
    comparisons: list[ComparisonRow] = attrs.Factory(list)


@attrs.frozen
class ComparisonRow:
    """A comparison as ``semsim report`` shows it: what it ran, where, its verdict and its cells
    (each as ``Cell.to_dict()`` gives it)."""

    id: int
    uid: str
    designs: list[str]
    plans: list[str]
    seeds: list[int]
    executor: str
    workers: int
    semsim_version: str
    host: str
    status: str
    cells: list[dict[str, Any]]
    #: The user's invariants it judged, by their references (None: recorded before schema 4).
    invariants: list[str] | None = None


def summary(db: sqlite3.Connection) -> Summary:
    columns = _columns(db, "main", "campaigns")
    recorded = "c.variant, c.invariants" if "variant" in columns else "NULL, NULL"  # schema 1: not recorded
    # Schema 2 and before: only the semaphore was fuzzed, but for the runs' cases to say otherwise.
    recorded += ", c.design" if "design" in columns else ", NULL"
    campaigns = [
        CampaignRow(
            id=row[0],
            uid=row[1],
            seed=row[2],
            runs_asked=row[3],
            examples=row[4],
            fixes=json.loads(row[5]),
            executor=row[6],
            workers=row[7],
            status=row[8],
            runs=row[9],
            sim_ms=row[10],
            host=row[11],
            semsim_version=row[12],
            variant=row[13],
            invariants=None if row[14] is None else json.loads(row[14]),
            design=row[15],
        )
        for row in db.execute(
            # A campaign still running, or stopped hard, has no verdict yet: its runs so far are in `runs`.
            "SELECT c.id, c.uid, c.seed, c.runs_asked, c.examples, c.fixes, c.executor, c.workers, c.status,"
            " CASE c.status WHEN 'running' THEN COALESCE(r.runs, 0) ELSE c.runs END,"
            " CASE c.status WHEN 'running' THEN COALESCE(r.sim_ms, 0) ELSE c.sim_ms END,"
            f" c.host, c.semsim_version, {recorded} FROM campaigns c LEFT JOIN"
            " (SELECT campaign_id, COUNT(*) AS runs, SUM(sim_ms) AS sim_ms FROM runs GROUP BY campaign_id) r"
            " ON r.campaign_id = c.id ORDER BY c.id"
        )
    ]
    runs, sim_ms = db.execute("SELECT COUNT(*), COALESCE(SUM(sim_ms), 0) FROM runs").fetchone()
    violations = dict(
        db.execute(
            "SELECT CASE WHEN invariant IS NULL THEN outcome WHEN finding IS NULL THEN invariant"
            " ELSE invariant || ':' || finding END AS name, COUNT(*) FROM runs"
            " WHERE outcome != 'completed' GROUP BY name ORDER BY name"
        ).fetchall()
    )
    failures = [
        FailureRow(*row)
        for row in db.execute(
            "SELECT f.campaign_id, f.failure_name, f.detail, f.steps, f.case_text, f.replay, c.seed"
            " FROM failures f JOIN campaigns c ON c.id = f.campaign_id ORDER BY f.campaign_id"
        )
    ]
    return Summary(
        campaigns=campaigns,
        runs=runs,
        sim_ms=sim_ms,
        violations=violations,
        findings=_summed(db, "findings"),
        documented=_summed(db, "documented"),
        coverage=_summed(db, "coverage"),
        failures=failures,
        comparisons=_comparisons(db),
    )


def _comparisons(db: sqlite3.Connection) -> list[ComparisonRow]:
    """Every comparison with its cells (none in a file of schema 2 or before)."""
    if "comparisons" not in _tables(db, "main"):
        return []
    found = []
    # Schema 3: no comparison judged the user's invariants, and none were recorded.
    recorded = "invariants" if "invariants" in _columns(db, "main", "comparisons") else "NULL"
    for row in db.execute(
        "SELECT id, uid, designs, plans, seeds, executor, workers, semsim_version, host, status,"
        f" {recorded} FROM comparisons ORDER BY id"
    ).fetchall():
        cells = [
            {
                "design": design,
                "plan": plan,
                "seed": seed,
                "outcome": outcome,
                "invariant": invariant,
                "detail": detail,
                "findings": json.loads(findings),
                "trade_offs": None if trade_offs is None else json.loads(trade_offs),
                "cpu_s": cpu_s,
            }
            for design, plan, seed, outcome, invariant, detail, findings, trade_offs, cpu_s in db.execute(
                "SELECT design, plan, seed, outcome, invariant, detail, findings, trade_offs, cpu_s"
                " FROM cells WHERE comparison_id = ? ORDER BY idx",
                (row[0],),
            )
        ]
        found.append(
            ComparisonRow(
                id=row[0],
                uid=row[1],
                designs=json.loads(row[2]),
                plans=json.loads(row[3]),
                seeds=json.loads(row[4]),
                executor=row[5],
                workers=row[6],
                semsim_version=row[7],
                host=row[8],
                status=row[9],
                cells=cells,
                invariants=None if row[10] is None else json.loads(row[10]),
            )
        )
    return found


def _summed(db: sqlite3.Connection, column: str) -> dict[str, int]:
    """A JSON counter column summed over every run, by name."""
    assert column in ("findings", "documented", "coverage"), column
    return dict(
        db.execute(
            f"SELECT j.key, SUM(j.value) FROM runs, json_each(runs.{column}) AS j"
            " GROUP BY j.key ORDER BY j.key"
        ).fetchall()
    )
