"""The named failure scenarios: each passes, each check can fail, and the ``semsim list``/``run`` commands.

A scenario that passes proves nothing unless its check would notice a
different outcome, so a few are rerun here with the fault that makes their
story happen taken away (or a neighbouring story's setup) and must then
report what did not happen.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from semsim.cli.main import main
from semsim.harness.run import WorldRun, run_world
from semsim.runtime.trace import read_trace
from semsim.scenarios import SCENARIOS, Scenario, run_scenario
from semsim.scenarios.base import HOLDER, Check, Expect
from semsim.world.faults import Eviction, FaultPlan
from semsim.world.mutant_catalog import mutant
from semsim.world.workload import Workload
from tests.helpers import full_checks_seen

NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


# --- the registry ----------------------------------------------------------------------------


def test_there_are_at_least_15_scenarios_with_kebab_case_names_one_line_descriptions_and_sources() -> None:
    assert len(SCENARIOS) >= 15
    for name, scenario in SCENARIOS.items():
        assert scenario.name == name
        assert NAME.match(name), name
        assert scenario.description, name
        assert "\n" not in scenario.description, name
        # Each story says what the reference promises, and where.
        # 000: the account-concurrency example; 003 and 004: the other designs
        assert re.search(r"Seed 00[0-4]", scenario.promise), name


def test_the_required_stories_are_all_there() -> None:
    required = {
        "evicted-before-round",
        "reply-lost-after-commit",
        "alarm-reclaims-after-eviction",
        "group-limits-reset-after-eviction",
        "late-claim-expired",
        "claims-stay-charged",
        "lowered-limit-stops-admissions",
        "lease-heartbeat",
        "unreported-lease-retired",
        "retired-report-settles",
        "lease-lost-in-reply",
        "contended-returns-idle-headroom",
        "oldest-demand-first",
        "strict-burst",
        "under-burst",
        "over-burst",
        "alarm-dropped-by-platform",
        "alarm-engine-fallback",
    }
    assert required <= set(SCENARIOS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_holds_its_documented_outcome_and_its_plot_renders(name: str, tmp_path: Path) -> None:
    result = run_scenario(SCENARIOS[name])
    assert result.failures == ()
    assert result.run.result.outcome == "completed"
    assert result.expectations
    assert all(outcome.held for outcome in result.expectations)
    from semsim.report.plot import plot_trace

    out = tmp_path / f"{name}.png"
    plot_trace(result.run.trace.header, list(result.run.trace.events()), out, title=name)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_scenario_is_deterministic() -> None:
    scenario = SCENARIOS["retired-report-settles"]
    assert run_scenario(scenario).run.trace.digest() == run_scenario(scenario).run.trace.digest()


# --- each check notices a wrong outcome ------------------------------------------------------


def failures_with(name: str, **changes: Any) -> tuple[str, ...]:
    result = run_scenario(attrs.evolve(SCENARIOS[name], **changes))
    return result.failures


def test_without_the_eviction_nothing_fails_and_the_eviction_story_says_so() -> None:
    failures = failures_with("evicted-before-round", faults=FaultPlan())
    assert any("sent a request, then another" in f for f in failures)


def test_without_the_lost_reply_there_is_no_reserved_grant_to_see() -> None:
    failures = failures_with("reply-lost-after-commit", faults=FaultPlan())
    assert any("two grants" in f for f in failures)


def test_without_the_cut_off_the_release_is_reported_before_the_jobs_could_be_waited_on() -> None:
    failures = failures_with("claims-stay-charged", faults=FaultPlan())
    assert any("after the cut-off ended" in f for f in failures)


def test_without_the_lost_reply_no_lease_leaks() -> None:
    failures = failures_with("lease-lost-in-reply", faults=FaultPlan(faults_until_ms=10_000))
    assert any("reply carrying the lease was lost" in f for f in failures)
    assert any("lease_lost_in_reply" in f for f in failures)


def test_an_idle_lease_whose_client_never_talks_keeps_the_other_client_waiting() -> None:
    # Take away client 0's item in another group: it never hears `contended` (finding F4),
    # so the idle lease holds the room until it expires.
    scenario = SCENARIOS["contended-returns-idle-headroom"]
    workload = scenario.config.workload
    quiet = attrs.evolve(workload, script=tuple(a for a in workload.script if a.group != "wf-2"))
    failures = failures_with(scenario.name, config=attrs.evolve(scenario.config, workload=quiet))
    assert any("heard a `contended` reply" in f for f in failures)


def test_the_two_alarm_stories_tell_the_engines_fallback_apart() -> None:
    dropped, fallback = SCENARIOS["alarm-dropped-by-platform"], SCENARIOS["alarm-engine-fallback"]
    assert any("dropped the alarm" in f for f in failures_with(dropped.name, config=fallback.config))
    assert any("re-armed a fallback" in f for f in failures_with(fallback.name, config=dropped.config))


def test_alarm_armed_judges_the_moment_the_platform_drops_the_alarm() -> None:
    # With the engine's fallback on, no alarm is dropped; a drop while permits wait is the
    # violation at that moment, though the client's next call (after the story) would re-arm
    # the alarm and every commit from then on would pass.
    fallback = SCENARIOS["alarm-engine-fallback"]
    assert run_world(fallback.config, fallback.faults, seed=fallback.seed).result.outcome == "completed"
    with mutant("engine-without-fallback").patch():
        result = run_world(fallback.config, fallback.faults, seed=fallback.seed).result
    assert (result.outcome, result.invariant) == ("violation", "alarm_armed"), result
    assert "the platform dropped the alarm" in result.detail
    # With the fallback off, the drop is what seed 002 documents: no violation.
    dropped = SCENARIOS["alarm-dropped-by-platform"]
    run = run_world(dropped.config, dropped.faults, seed=dropped.seed)
    assert run.trace.of_kind("alarm_dropped")
    assert run.result.outcome == "completed", run.result


def test_the_retired_report_story_tells_drawn_from_released() -> None:
    # The catalogued mutant shrinks a retired lease to what was released (1), not drawn (2).
    with mutant("retired-report-shrinks-to-released").patch():
        failures = failures_with("retired-report-settles")
    assert any("shrank the lease to what it drew (2)" in f for f in failures)
    assert any("kept the lease and charged exactly its 1 running permit" in f for f in failures)


def test_the_under_story_sees_a_reserve_that_takes_the_last_permit() -> None:
    with mutant("under-reserve-takes-last-permit").patch():
        failures = failures_with("under-burst")
    assert any("never took the last permit" in f for f in failures)
    # The run stops at the first round that leaves the grants' last permit unoffered: the
    # literal model answers otherwise (exact_accounting), and reuse sees the idle permit.
    assert any(
        f.startswith(("invariant reuse violated", "invariant exact_accounting violated")) for f in failures
    )


def test_the_heartbeat_tolerance_rejects_heartbeats_half_a_second_late() -> None:
    # A ttl of 21 s makes the client report every 10.502 s: within the old tolerance
    # (ttl / 2 + 1 s), but 500 ms later than a 20 s lease needs.
    scenario = SCENARIOS["lease-heartbeat"]
    holder = scenario.config.holder
    assert holder.leases is not None
    late = attrs.evolve(holder, leases=attrs.evolve(holder.leases, ttl_ms=21_000))
    failures = failures_with(scenario.name, config=attrs.evolve(scenario.config, holder=late))
    assert any("at least every (ttl + latency) / 2 = 10002 ms" in f for f in failures)
    assert any("came exactly 10002 ms apart" in f for f in failures)


def test_the_orphaned_grant_must_come_back_at_its_deadline_by_the_early_timer() -> None:
    # Evict the holder too: its early timer dies, and the grant comes back only at the next
    # round or stored alarm, later than its deadline (still within the contract's bound).
    scenario = SCENARIOS["client-evicted-mid-request"]
    faults = FaultPlan(evictions=(*scenario.faults.evictions, Eviction(HOLDER, 5_000)))
    failures = failures_with(scenario.name, faults=faults)
    assert any("reclaimed once, at its claim deadline" in f for f in failures)
    assert any("early timer ran that reclaim" in f for f in failures)


def test_the_strict_ceiling_check_rejects_an_over_mode_burst() -> None:
    over = SCENARIOS["over-burst"]
    failures = failures_with("strict-burst", config=over.config)
    assert any("never passed, 10" in f for f in failures)


# --- run_scenario's own judgement --------------------------------------------------------------


def test_an_invariant_violation_fails_the_scenario_even_if_its_check_is_happy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def violated(*args: Any, **kwargs: Any) -> WorldRun:
        run = run_world(*args, **kwargs)
        broken = attrs.evolve(run.result, outcome="violation", invariant="ceiling", detail="ceiling at t=5")
        return attrs.evolve(run, result=broken)

    monkeypatch.setattr("semsim.scenarios.base.run_world", violated)
    result = run_scenario(SCENARIOS["evicted-before-round"])
    assert result.invariant_failure == "invariant ceiling violated: ceiling at t=5"
    assert result.failures == (result.invariant_failure,)
    assert not result.passed


def test_a_check_that_cannot_read_the_run_reports_it_as_unmet() -> None:
    def judge(run: WorldRun, expect: Expect) -> None:
        expect.that(True, "a first expectation held")
        raise IndexError("no such event")

    scenario = Scenario(
        name="broken",
        description="a check that crashes",
        seed=1,
        config=attrs.evolve(SCENARIOS["evicted-before-round"].config, duration_ms=2_000),
        faults=FaultPlan(),
        check=Check(judge),
    )
    result = run_scenario(scenario)
    assert [o.held for o in result.expectations] == [True, False]
    assert result.failures == ("the check could read the run (observed: IndexError: no such event)",)


def test_a_plain_callable_check_is_accepted() -> None:
    scenario = Scenario(
        name="plain",
        description="a plain callable check",
        seed=1,
        config=attrs.evolve(
            SCENARIOS["evicted-before-round"].config, workload=Workload(clients=1), duration_ms=1_000
        ),
        faults=FaultPlan(),
        check=lambda run: [] if run.trace.of_kind("round") == [] else ["a round ran"],
    )
    assert run_scenario(scenario).passed


# --- the command line ------------------------------------------------------------------------


def test_list_shows_every_scenario_one_line_each_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 15
    assert [line.split()[0] for line in lines] == list(SCENARIOS)
    starts = {line.index(SCENARIOS[line.split()[0]].description) for line in lines}
    assert len(starts) == 1  # names are padded: descriptions line up


def test_run_exits_0_prints_a_report_and_writes_a_readable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.jsonl"
    assert main(["run", "reply-lost-after-commit", "--trace", str(out)]) == 0
    report = capsys.readouterr().out
    assert "scenario reply-lost-after-commit, seed 1" in report
    assert "PASS  the retried request got a new grant of 2 after the deadline" in report
    assert "FAIL" not in report
    assert "every invariant held" in report
    header, events = read_trace(out)
    assert header["seed"] == 1
    assert any(e["kind"] == "grant_reclaimed" for e in events)


def test_run_with_full_checks_reads_every_database_and_writes_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_reads = full_checks_seen(monkeypatch)
    assert main(["run", "strict-burst", "--trace", str(tmp_path / "inc.jsonl")]) == 0
    assert not full_reads
    assert main(["run", "strict-burst", "--full-checks", "--trace", str(tmp_path / "full.jsonl")]) == 0
    assert full_reads
    assert (tmp_path / "inc.jsonl").read_bytes() == (tmp_path / "full.jsonl").read_bytes()


def test_run_with_a_seed_runs_that_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.jsonl"
    assert main(["run", "evicted-before-round", "--seed", "42", "--trace", str(out)]) == 0
    assert "seed 42" in capsys.readouterr().out
    assert read_trace(out)[0]["seed"] == 42


@pytest.mark.parametrize(
    ("name", "counted"),
    [("reply-lost-after-commit", None), ("lease-lost-in-reply", "lease_lost_in_reply x1")],
)
def test_run_counts_documented_behaviour_only_when_it_happened(
    capsys: pytest.CaptureFixture[str], name: str, counted: str | None
) -> None:
    assert main(["run", name]) == 0
    out = capsys.readouterr().out
    assert " x0" not in out
    if counted is None:
        assert "documented behaviour" not in out  # docs/CLI.md: "when there are any"
    else:
        assert f"  documented behaviour counted, not a violation: {counted}\n" in out


def test_the_monitor_counts_no_documented_behaviour_zero_times() -> None:
    result = run_scenario(SCENARIOS["reply-lost-after-commit"])
    assert result.world is not None
    assert all(count > 0 for count in result.world.monitor.leaks.values())
    assert all(count > 0 for count in result.world.monitor.documented.values())


def test_run_writes_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("semsim.report.plot")
    out = tmp_path / "run.png"
    assert main(["run", "lease-heartbeat", "--per-group"]) == 2  # no plot to add panels to: not ignored
    assert "--per-group adds panels to the plot: it goes with --plot F.png" in capsys.readouterr().err
    assert main(["run", "lease-heartbeat", "--plot", str(out), "--per-group"]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert f"plot written to {out}" in capsys.readouterr().out


def test_a_failing_scenario_exits_1_with_the_failure_the_seed_and_a_command_to_reproduce_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "reply-lost-after-commit"
    monkeypatch.setitem(SCENARIOS, name, attrs.evolve(SCENARIOS[name], faults=FaultPlan()))
    assert main(["run", name, "--seed", "7"]) == 1
    captured = capsys.readouterr()
    assert "FAIL  two grants" in captured.out
    assert "FAILED: two grants: the lost one and the retry's" in captured.err
    assert f"semsim run {name} --seed 7 --trace out.jsonl" in captured.err


def test_a_story_that_did_not_happen_under_another_seed_says_no_invariant_broke(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Under seed 7 no report overtakes another: the story is not told, the protocol held.
    assert main(["run", "reports-reordered", "--seed", "7"]) == 1
    err = capsys.readouterr().err
    assert "FAILED: a report sent earlier reached the holder after one sent later" in err
    own = SCENARIOS["reports-reordered"].seed
    assert (
        f"no invariant broke: the expectations tell this scenario's story under its own seed ({own})" in err
    )
    # Under its own seed a failed expectation gets no such excuse.
    name = "reply-lost-after-commit"
    monkeypatch.setitem(SCENARIOS, name, attrs.evolve(SCENARIOS[name], faults=FaultPlan()))
    assert main(["run", name]) == 1
    assert "no invariant broke" not in capsys.readouterr().err


@pytest.mark.parametrize("seed", [7, 20, 22])
def test_duplicated_reports_promise_permits_held_at_once_under_any_seed(seed: int) -> None:
    # Under seed 7 a copy of a late request is granted a permit client 1 had given back, and
    # reclaimed; under 20 and 22 client 0's long item starts late. Both failed when the
    # promise summed every grant between client 0's releases.
    result = run_scenario(SCENARIOS["reports-duplicated"], seed)
    assert result.passed, result.failures


def test_duplicated_reports_promise_fails_when_capacity_is_freed_wrongly() -> None:
    # A holder allowed a third permit frees what client 0's running item holds, as a report
    # counted twice would: client 1 then holds two at once while client 0's item runs.
    scenario = SCENARIOS["reports-duplicated"]
    loose = attrs.evolve(scenario.config.holder, limit=3)
    result = run_scenario(attrs.evolve(scenario, config=attrs.evolve(scenario.config, holder=loose)))
    assert any(f.startswith("while an item of client 0 ran, client 1 held at most") for f in result.failures)


@pytest.mark.parametrize(
    ("name", "hint"), [("no-such-story", ""), ("reply-lost", " (did you mean 'reply-lost-after-commit'?)")]
)
def test_an_unknown_scenario_exits_2_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str], name: str, hint: str
) -> None:
    assert main(["run", name]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"semsim run: error: unknown scenario {name!r}; `semsim list` shows them,"
        f" and module:function names your own{hint}\n"
    )


@pytest.mark.parametrize("seed", ["-1", "x", "1.5"])
def test_a_bad_seed_is_a_usage_error(seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["run", "evicted-before-round", "--seed", seed])
    assert caught.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_trace_and_a_plot_on_one_path_are_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    same = ["--trace", "out.png", "--plot", str(tmp_path / "sub" / ".." / "out.png")]
    (tmp_path / "sub").mkdir()
    assert main(["run", "evicted-before-round", *same]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran, nothing was written
    assert captured.err.strip() == (
        "semsim run: error: --trace and --plot both name "
        f"{tmp_path / 'sub' / '..' / 'out.png'}: one would overwrite the other; choose two paths"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


@pytest.mark.parametrize("option", ["--trace", "--plot"])
def test_an_unwritable_output_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    assert main(["run", "evicted-before-round", option, str(tmp_path / "missing" / "out.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran
    assert captured.err.startswith(f"semsim run: error: {option} ")
    assert "no directory" in captured.err
    assert len(captured.err.splitlines()) == 1
