"""A team's own invariant is judged in every run it is handed to, and never silently dropped.

A :class:`~semsim.check.checker.Checker` hears a run's events; raising
``Violated`` (or failing an ``assert``) stops the run under its name, as a
built-in invariant does. It reaches runs through ``run_world``, ``semsim
run/fuzz --invariant``, entry points, case files and campaign workers; a
case that names one that cannot be loaded is refused (exit 2), never
replayed as "every invariant held".
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from semsim.check.checker import Checker, Violated, check_checkers
from semsim.check.events import Admission, ApiCallChange, Commit, Finish, Operation, Release, Round
from semsim.cli.main import main
from semsim.explore.campaigns import local_pool, parallel_campaign
from semsim.explore.fuzz import campaign, case_text, load_case, run_case
from semsim.explore.strategies import Case
from semsim.harness.invariants import InvariantLookupError, find_invariant
from semsim.harness.run import RESERVED_NAMES, HolderSpec, WorldConfig, run_world
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload
from tests.installed import install_entry_points

#: Busy enough that rounds grant several permits at once (tests/test_variants.py's world).
CONFIG = WorldConfig(
    holder=HolderSpec(limit=3),
    workload=Workload(clients=3, items_per_minute=40, until_ms=60_000),
    duration_ms=90_000,
)


class MaxGrant(Checker):
    """The example's promise: no grant is larger than 1 permit (the reference's are, when busy)."""

    name = "max_grant"
    description = "no grant is larger than 1 permit"

    def on_round(self, round: Round) -> None:
        for reply in round.replies:
            for grant in reply.grants:
                if grant.permits > 1:
                    raise Violated(f"{grant.grant_id} grants {grant.permits} permits")


class Hears(Checker):
    """Counts every event it hears and checks what each says against the others."""

    name = "hears"
    kind = "liveness"

    def __init__(self) -> None:
        self.heard: Counter[str] = Counter()
        #: Permits in use per key: each key's holder is judged on its own (drawn worlds may have two).
        self.in_use: Counter[str] = Counter()
        self.finished: Finish | None = None

    def on_commit(self, commit: Commit) -> None:
        self.heard["commit"] += 1
        assert commit.in_use == self.in_use[commit.key]
        assert commit.usage.granted + commit.usage.leased >= commit.in_use  # conservative
        assert len(commit.holder.grants()) >= 1 or commit.usage.granted == 0

    def on_admit(self, admission: Admission) -> None:
        self.heard["admit"] += 1
        self.in_use[admission.key] += 1
        assert admission.in_use == self.in_use[admission.key]
        assert (admission.grant is None) != (admission.lease is None)
        assert admission.limit >= 1  # the limit in force (no world here lowers it to 0)
        assert admission.accounted >= admission.in_use  # conservative, read at the admission

    def on_release(self, release: Release) -> None:
        self.heard["release"] += 1
        self.in_use[release.key] -= 1
        assert release.in_use == self.in_use[release.key]

    def on_round(self, round: Round) -> None:
        self.heard["round"] += 1
        assert len(round.requests) == len(round.replies)

    def on_finish(self, finish: Finish) -> None:
        self.heard["finish"] += 1
        self.finished = finish


class Asserts(Checker):
    name = "asserts"

    def on_admit(self, admission: Admission) -> None:
        assert admission.in_use < 2, f"{admission.in_use} items running at once"


class AssertsBare(Checker):
    name = "asserts_bare"

    def on_admit(self, admission: Admission) -> None:
        assert admission.in_use < 2


class Broken(Checker):
    name = "broken"

    def on_commit(self, commit: Commit) -> None:
        commit.usage.nonexistent  # type: ignore[attr-defined]  # noqa: B018 (the checker's own bug)


class SameName(Checker):
    name = "max_grant"


def test_a_checker_hears_every_event_in_order_and_the_finish_once() -> None:
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[Hears])
    assert run.result.outcome == "completed", run.result.detail
    (hears,) = run.monitor.checkers
    assert isinstance(hears, Hears)
    assert hears.heard["finish"] == 1
    assert hears.heard["admit"] == hears.heard["release"] > 10
    assert hears.heard["commit"] >= hears.heard["round"] > 10
    assert hears.finished is not None
    assert dict(hears.finished.in_use) == {"acct": 0}
    # Read-only rows, read on the finish: every grant was settled and removed.
    assert hears.finished.holders["acct"].grants() == []
    assert hears.finished.waiting == 0
    assert run.judges()[-1] == "hears"


def test_each_run_has_its_own_instance() -> None:
    first = run_world(CONFIG, FaultPlan(), 1, checkers=[Hears]).monitor.checkers[0]
    second = run_world(CONFIG, FaultPlan(), 1, checkers=[Hears]).monitor.checkers[0]
    assert first is not second
    assert isinstance(first, Hears)
    assert isinstance(second, Hears)
    assert first.heard == second.heard


def test_a_violation_stops_the_run_under_the_checkers_name() -> None:
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[MaxGrant])
    assert run.result.outcome == "violation"
    assert run.result.invariant == "max_grant"
    assert "permits" in (run.result.detail or "")
    assert run.trace.header["invariants"] == ["max_grant"]


def test_a_failed_assert_is_a_violation_with_its_message() -> None:
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[Asserts])
    assert run.result.invariant == "asserts"
    assert run.result.detail == "asserts at t=1984 ms: 2 items running at once"


def test_a_bare_assert_says_what_it_asserted_whether_rewritten_or_not() -> None:
    # This module's asserts are rewritten by pytest; a campaign's workers import it plainly.
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[AssertsBare])
    assert run.result.invariant == "asserts_bare"
    assert run.result.detail == "asserts_bare at t=1984 ms: assert admission.in_use < 2"


def test_the_same_bare_assert_unrewritten_says_the_same(tmp_path: Path) -> None:
    # A campaign's workers import a checker plainly; CPython then names the condition's line of a
    # multi-line assert, not the statement's first: the detail must not change with it.
    import importlib.util

    (tmp_path / "plainchecker.py").write_text(
        "from semsim.check.checker import Checker\n\n\n"
        "class AssertsBare(Checker):\n"
        "    name = 'asserts_bare'\n\n"
        "    def on_admit(self, admission):\n"
        "        for _ in range(1): assert (\n"
        "            admission.in_use\n"
        "            < 2\n"
        "        )\n",
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("plainchecker", tmp_path / "plainchecker.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not through pytest's import hook: not rewritten
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[module.AssertsBare])
    assert run.result.detail == "asserts_bare at t=1984 ms: assert admission.in_use < 2"


def test_a_checkers_own_bug_is_the_checker_verdict_naming_it() -> None:
    run = run_world(CONFIG, FaultPlan(), 1, checkers=[Broken])
    assert run.result.invariant == "checker"
    assert "invariant broken (Broken.on_commit) failed: AttributeError" in (run.result.detail or "")


def test_without_checkers_the_trace_is_the_reference_s_byte_for_byte() -> None:
    plain = run_world(CONFIG, FaultPlan(), 2)
    # A checker that hears everything and breaks nothing changes nothing but the header.
    heard = run_world(CONFIG, FaultPlan(), 2, checkers=[Hears])
    assert "invariants" not in plain.trace.header
    assert list(plain.trace.events()) == list(heard.trace.events())


@pytest.mark.parametrize(
    ("checkers", "says"),
    [
        ([MaxGrant()], "a checker is a subclass of semsim.check.checker.Checker"),
        ([Checker], "a checker is a subclass"),
        ("max_grant", "checkers must be a list"),
        ([MaxGrant, SameName], "are both named 'max_grant'"),
        ([type("Ceiling", (Checker,), {"name": "ceiling"})], "one of semsim's own invariants"),
        ([type("Crash", (Checker,), {"name": "crash"})], "one of semsim's own invariants"),
        ([type("Nameless", (Checker,), {})], "must be a non-empty string"),
        ([type("Spaced", (Checker,), {"name": "max grant"})], "letters, digits"),
        ([type("Kind", (Checker,), {"name": "k", "kind": "both"})], "kind is 'safety' or 'liveness'"),
        (
            [type("NeedsArgs", (Checker,), {"name": "n", "__init__": lambda self, limit: None})],
            "cannot be built without arguments",
        ),
    ],
)
def test_what_is_not_a_checker_is_refused_before_the_run(checkers: object, says: str) -> None:
    with pytest.raises((TypeError, ValueError), match=says.replace("(", r"\(").replace(")", r"\)")):
        run_world(CONFIG, FaultPlan(), 1, checkers=checkers)  # type: ignore[arg-type]


def test_the_same_checker_twice_is_judged_once() -> None:
    assert check_checkers([MaxGrant, MaxGrant], RESERVED_NAMES) == (MaxGrant,)


def test_a_module_that_fails_as_it_loads_is_exit_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "brokenchecks.py").write_text("raise RuntimeError('half-written')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["run", "strict-burst", "--invariant", "brokenchecks:X"]) == 2
    finally:
        sys.modules.pop("brokenchecks", None)
    err = capsys.readouterr().err
    assert "importing 'brokenchecks' (from 'brokenchecks:X') failed: RuntimeError: half-written" in err
    assert len(err.strip().splitlines()) == 1


def test_references_find_checkers_and_say_why_not() -> None:
    assert find_invariant("tests.test_user_invariants:MaxGrant") is MaxGrant
    with pytest.raises(
        InvariantLookupError, match=r"a checker is a subclass of semsim\.check\.checker\.Checker"
    ):
        find_invariant("tests.test_user_invariants:CONFIG")
    with pytest.raises(InvariantLookupError, match="one of semsim's own invariants"):
        find_invariant("ceiling")
    with pytest.raises(InvariantLookupError, match="unknown invariant 'max_grnt'"):
        find_invariant("max_grnt")


def test_an_invariant_an_installed_package_registers_is_found_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = {"registered-max-grant": "tests.test_user_invariants:MaxGrant"}
    install_entry_points(tmp_path, monkeypatch, "theirinvariants", "semsim.invariants", entries)
    assert main(["list", "--invariants"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[0] == "ceiling"
    assert listed[0].endswith("stays within the mode's ceiling (safety)")
    assert listed[-1].split()[0] == "registered-max-grant"
    assert "no grant is larger than 1 permit (safety; tests.test_user_invariants)" in listed[-1]
    assert main(["run", "strict-burst", "--invariant", "registered-max-grant"]) == 1
    captured = capsys.readouterr()
    assert "invariant max_grant violated" in captured.out
    assert "--invariant registered-max-grant" in captured.err  # the reproduce command keeps it
    assert main(["run", "strict-burst", "--invariant", "registered-max-grnt"]) == 2
    assert "(did you mean 'registered-max-grant'?)" in capsys.readouterr().err


def test_run_says_who_judged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "late-claim-not-found", "--invariant", "tests.test_user_invariants:Hears"]) == 0
    out = capsys.readouterr().out
    assert (
        "judged by: exact_accounting against the literal model, "
        "exact_queue against the literal queue model, safety, liveness, hears" in out
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "strict-burst", "--invariant", "tests.test_user_invariants:CONFIG"], "--invariant"),
        (["fuzz", "--invariant", "nosuchmodule:I", "--no-db"], "cannot import 'nosuchmodule'"),
        (
            ["fuzz", "--no-db", "--invariant", "tests.test_user_invariants:MaxGrant", "--invariant",
             "tests.test_user_invariants:SameName"],
            "are both named 'max_grant'",
        ),
    ],
)  # fmt: skip
def test_an_invariant_that_cannot_be_loaded_is_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_campaign_judges_it_saves_a_case_that_names_it_and_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = "tests.test_user_invariants:MaxGrant"
    argv = ["fuzz", "--invariant", reference, "--runs", "2", "--workers", "1", "--no-db"]
    assert main([*argv, "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "with invariants max_grant" in out
    assert "VIOLATED max_grant" in out
    (saved,) = tmp_path.glob("case-*.json")
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["invariants"] == [reference]
    assert data["expect"]["invariant"] == "max_grant"
    assert main(["fuzz", "--replay", str(saved)]) == 1
    replayed = capsys.readouterr().out
    assert "with invariants max_grant" in replayed
    assert "VIOLATED max_grant" in replayed


def test_a_replay_cannot_drop_an_invariant_its_case_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "gone.json"
    gone.write_text(
        case_text(Case(CONFIG, FaultPlan(), 1, invariants=("tests.test_user_invariants:GONE",)), frozenset()),
        encoding="utf-8",
    )
    assert main(["fuzz", "--replay", str(gone)]) == 2
    err = capsys.readouterr().err
    assert "invariant 'tests.test_user_invariants:GONE' cannot be loaded" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["fuzz", "--replay", str(gone), "--invariant", "x:Y"]) == 2
    assert "--invariant does not go with --replay" in capsys.readouterr().err

    # A case that broke an invariant of the user's, saved without naming where to find it.
    unnamed = tmp_path / "unnamed.json"
    data = json.loads(case_text(Case(CONFIG, FaultPlan(), 1), frozenset()))
    data["expect"] = {"invariant": "max_grant", "finding": None, "outcome": "violation"}
    unnamed.write_text(json.dumps(data), encoding="utf-8")
    assert main(["fuzz", "--replay", str(unnamed)]) == 2
    err = capsys.readouterr().err
    assert "expects invariant 'max_grant', which neither semsim nor the case's invariants" in err


@pytest.mark.parametrize("invariants", [[1], "max_grant", [""], ["x"] * 65])
def test_a_case_files_invariants_are_checked(tmp_path: Path, invariants: object) -> None:
    path = tmp_path / "case.json"
    data = json.loads(case_text(Case(CONFIG, FaultPlan(), 1), frozenset()))
    data["invariants"] = invariants
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="invariants must be a list"):
        load_case(path)


def test_a_case_keeps_its_invariants_through_a_file(tmp_path: Path) -> None:
    case = Case(CONFIG, FaultPlan(), 1, invariants=("tests.test_user_invariants:MaxGrant",))
    path = tmp_path / "case.json"
    path.write_text(case_text(case, frozenset()), encoding="utf-8")
    assert load_case(path) == (case, frozenset())
    assert '"invariants"' not in case_text(Case(CONFIG, FaultPlan(), 1), frozenset())
    report, _ = run_case(case, frozenset())
    assert report.invariant == "max_grant"


def test_campaign_workers_judge_it_as_the_serial_campaign_does() -> None:
    invariants = ("tests.test_user_invariants:Asserts",)
    serial = campaign(6, 3, invariants=invariants, shrink=False)
    with local_pool(2) as pool:
        parallel = parallel_campaign(6, 3, pool, 2, invariants=invariants, shrink=False)
    assert serial.failure is not None
    assert serial.failure.invariant == "asserts"
    assert parallel.failure == serial.failure
    assert parallel.runs == serial.runs


def test_listing_an_installed_invariant_that_cannot_load_is_exit_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_entry_points(tmp_path, monkeypatch, "brokeninvariants", "semsim.invariants", {"gone": "nosuch:X"})
    assert main(["list", "--invariants"]) == 2
    err = capsys.readouterr().err
    assert "invariant 'gone' cannot be loaded" in err
    assert len(err.strip().splitlines()) == 1


class HearsOperations(Checker):
    name = "hears_operations"

    def __init__(self) -> None:
        self.operations: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def on_operation(self, operation: Operation) -> None:
        self.operations[type(operation.event).__name__] += 1

    def on_api(self, call: ApiCallChange) -> None:
        self.calls[call.change] += 1
        assert call.effects >= 0
        # What the API runs for the account, as the checker is told it, after the change.
        assert call.in_flight == len(call.running)
        assert call.limit is not None
        assert all(running.attempt is not None for running in call.running)


def test_in_the_account_concurrency_world_a_checker_hears_operations_and_api_calls() -> None:
    from semsim.scenarios import SCENARIOS, run_scenario

    result = run_scenario(SCENARIOS["api-error-retried-under-one-permit"], checkers=[HearsOperations])
    assert result.passed, result.failures
    assert result.world is not None
    (heard,) = result.world.monitor.checkers
    assert isinstance(heard, HearsOperations)
    assert heard.operations["AttemptStarted"] >= 2  # the error, then the retry
    assert heard.calls["start"] == heard.calls["end"] >= 2


class GrantsOnlyGrow(Checker):
    """A promise only row changes show: a grant's permits never change once issued."""

    name = "grants_keep_their_permits"

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def on_commit(self, commit: Commit) -> None:
        for change in commit.changes.grants():
            if change.before is None:
                self.seen["inserted"] += 1
                assert change.after is not None
            elif change.after is None:
                self.seen["deleted"] += 1
            else:
                self.seen["updated"] += 1
                assert change.after.permits == change.before.permits, change
                assert change.after.claimed >= change.before.claimed
        for lease in commit.changes.leases():
            self.seen["lease " + ("inserted" if lease.before is None else "changed")] += 1


def test_a_checker_sees_the_rows_each_commit_changed_before_and_after() -> None:
    plan = FaultPlan(reply_loss=0.05)
    run = run_world(CONFIG, plan, seed=1, tolerated=frozenset({"F4"}), checkers=[GrantsOnlyGrow])
    assert run.result.invariant is None, run.result
    (seen,) = run.monitor.checkers
    assert isinstance(seen, GrantsOnlyGrow)
    assert seen.seen["inserted"] == len(run.trace.of_kind("grant")) > 0  # each grant issued, once
    assert seen.seen["updated"] > 0  # claims and releases
    assert seen.seen["deleted"] > 0  # grants done with, or reclaimed
    assert seen.seen["lease inserted"] == len(run.trace.of_kind("lease_granted"))
