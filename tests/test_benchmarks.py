"""The benchmark scripts end like semsim's commands: a closed pipe is exit 141, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from semsim.explore.strategies import QUIET_MS
from semsim.inputs.commands import EXIT_BROKEN_PIPE, UsageError
from tests.helpers import fault_times

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("script", "args", "first"),
    [
        ("bench_scale.py", ["--clients", "16", "--keys", "1,4", "--minutes", "1"], b"clients"),
        ("bench_fuzz.py", ["--runs", "2"], b"variant"),
        ("sweep.py", ["--seeds", "2", "--runs", "2", "--workers", "1", "--json"], b"sweep:"),
        ("bench_kill_rates.py", ["--seeds", "1", "--cases", "1", "--only", "limit-off-by-one"], b"1 runs"),
    ],
)
def test_a_benchmark_whose_reader_goes_away_stops_quietly(
    script: str, args: list[str], first: bytes, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,  # sweep writes failing cases under its working directory
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline().startswith(first)
    process.stdout.close()  # the reader (``| head -1``) goes away
    error = process.stderr.read()
    assert process.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert b"Traceback" not in error


def test_the_standard_benchmark_runs_with_and_without_the_literal_model_and_with_operations() -> None:
    # Every way, the run must complete, the known findings tolerated as the documented figures are.
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
        assert f"literal model in lockstep: {'off' if '--without-model' in extra else 'on'})" in done.stdout
        assert "simulated seconds of workload per CPU second" in done.stdout
        assert "(the run went on to settle until " in done.stdout
        assert "known findings tolerated: F4" in done.stdout, done.stdout
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


@pytest.mark.parametrize(
    ("script", "args", "says"),
    [
        ("bench_sim.py", ["--hours", "0"], "--hours: must be more than 0 and at most 168, got 0"),
        ("bench_sim.py", ["--hours", "nan"], "--hours: must be more than 0 and at most 168, got nan"),
        ("bench_sim.py", ["--hours", "1e-9"], "--hours: must be at least a simulated millisecond"),
        ("bench_sim.py", ["--hours", "x"], "--hours: must be a number of hours, got 'x'"),
        ("bench_sim.py", ["--hours", "1_0"], "--hours: must be a number of hours, got '1_0'"),
        ("bench_sim.py", ["--seed", "-3"], "--seed: must be between 0 and"),
        ("bench_flat.py", ["--seed", "-1"], "--seed: must be between 0 and"),
        ("bench_scale.py", ["--seed", "x"], "--seed:"),
        ("probe_sql.py", ["--seed", "-1"], "--seed: must be between 0 and"),
        ("bench_fuzz.py", ["--runs", "0"], "--runs: must be between 1 and"),
        ("sweep.py", ["--first-seed", "-1"], "--first-seed: must be between 0 and"),
        ("sweep.py", ["--fixes", "bogus"], "--fixes: unknown fix 'bogus'"),
        ("sweep.py", ["--workers", "100000"], "--workers: must be between 1 and"),
        ("sweep.py", ["--runs", "0"], "--runs: must be between 1 and"),
        ("sweep.py", ["--seeds", "0"], "--seeds: must be between 1 and"),
        ("sweep.py", ["--first-seed", str(2**63 - 1), "--seeds", "2"], "go past the last seed"),
        ("bench_time_to_bug.py", ["--seeds", "1,x"], "--seeds: integers separated by commas"),
        ("bench_time_to_bug.py", ["--mode", "shrunk"], "--mode: drawn, scenarios"),
        ("bench_time_to_bug.py", ["--only", "no-such-mutant"], "--only:"),
        ("bench_time_to_bug.py", ["--variants", "no_such_module:X"], "--variants: cannot import"),
        ("bench_time_to_bug.py", ["--variants", "a:B", "--only", "c"], "--variants replaces the catalog"),
        ("bench_time_to_bug.py", ["--json", "/proc/no-such-dir/x.json"], "--json"),
        ("bench_time_to_bug.py", ["--runs", "0"], "--runs: must be between 1 and"),
        ("bench_kill_rates.py", ["--seeds", "1,x"], "--seeds: integers separated by commas"),
        ("bench_kill_rates.py", ["--cases", "0"], "--cases: must be between 1 and"),
        ("bench_kill_rates.py", ["--arm", "nope"], "--arm: invalid choice"),
        ("bench_kill_rates.py", ["--only", "no-such-mutant"], "--only:"),
        ("bench_kill_rates.py", ["--variants", "a:B", "--only", "c"], "--variants replaces the catalog"),
        ("bench_kill_rates.py", ["--baseline", "/no/such.json"], "--baseline: /no/such.json"),
        ("bench_kill_rates.py", ["--compare", "/no/a.json", "/no/b.json"], "--compare: /no/a.json"),
        ("bench_kill_rates.py", ["--json", "/proc/no-such-dir/x.json"], "--json"),
        (
            "bench_kill_rates.py",
            ["--baseline", "tests/fixtures/kill_rates_short_record.json"],
            "not a record of",
        ),
        ("bench_parallel.py", ["--reps", "0"], "--reps: must be 1..20"),
        ("bench_parallel.py", ["--workers", "x"], "--workers: must be a whole number"),
        ("bench_parallel.py", ["--project", "0,16"], "--project: expected numbers from 1"),
        ("bench_parallel.py", ["--runs", "0"], "--runs: must be between 1 and"),
        ("bench_floors.py", ["--only", "standard,speed"], "--only: unknown figure speed"),
        ("bench_floors.py", ["--only", ","], "--only: unknown figure (none)"),
    ],
)
def test_a_benchmarks_bad_arguments_are_one_line_before_it_runs_anything(
    script: str, args: list[str], says: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2, (args, done.stderr)
    assert says in done.stderr, (args, done.stderr)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    assert done.stdout == "", args


def test_time_to_bug_counts_the_runs_and_cpu_to_the_first_violation_and_summarises() -> None:
    from benchmarks import bench_time_to_bug as ttb

    killed = ttb.time_to_bug("limit-off-by-one", 1, "drawn", 5)
    assert (killed.killed, killed.runs, killed.caught_by, killed.campaign) == (
        True,
        1,
        "exact_accounting",
        "reference",
    )
    assert killed.cpu_s > 0
    # A team's variant, by the reference `semsim fuzz --variant` takes, is measured alike (this
    # one is the faithful reference itself, so it survives both campaigns, one run each).
    team = ttb.time_to_bug("semsim.world.variant:REFERENCE", 1, "drawn", 1)
    assert (team.mutant, team.killed, team.runs, team.caught_by) == (
        "semsim.world.variant:REFERENCE",
        False,
        2,
        None,
    )
    cells = [
        ttb.Cell("a", 1, "drawn", True, 3, 0.5, "ceiling", "reference"),
        ttb.Cell("b", 1, "drawn", True, 9, 2.0, "progress", "every fix"),
        ttb.Cell("c", 1, "drawn", False, 300, 40.0, None, None),
    ]
    lines = ttb.summary(cells, 150)
    assert lines[1].split() == ["drawn", "1", "2/3", "67%", "1.25", "2.00"]
    assert lines[-2:] == ["survived 150 runs per campaign (1 mutant):", "  c: drawn seed 1"]


def test_kill_rates_run_every_variant_on_the_same_drawn_runs_and_predict_a_campaign() -> None:
    from benchmarks import bench_kill_rates as kr

    cases = kr.drawn_cases(1, 3)
    # The reference campaign's own first runs, as `semsim fuzz` draws them.
    assert [kr.digest(case) for case in cases] == [kr.digest(case) for case in kr.drawn_cases(1, 3)]
    assert len({kr.digest(case) for case in cases}) == 3
    killed = kr.run_chunk("limit-off-by-one", cases[:2])
    assert [failure for failure, _ in killed] == ["exact_accounting", "exact_accounting"]
    assert [failure for failure, _ in kr.run_chunk(kr.REFERENCE, cases[:2])] == [None, None]
    rate = kr.Rate("x", kills=1, runs=4, hit_cpu_s=0.1, miss_cpu_s=0.2)
    assert rate.rate == 0.25
    assert rate.killed_within_campaign == pytest.approx(1 - 0.75**150)
    assert rate.cpu_s_to_kill == pytest.approx(3 * 0.2 + 0.1)  # three misses on average, then the kill
    assert kr.Rate("y", 0, 4, 0.0, 0.2).cpu_s_to_kill == float("inf")


def test_a_kill_rate_arm_keeps_every_drawn_choice_but_its_own() -> None:
    from benchmarks import bench_kill_rates as kr

    cases = kr.drawn_cases(2, 40)
    # The draws have flapped as this arm does since it was kept: from their steady form (the
    # draws before it), the arm gives back each case as drawn today, and changes some.
    steady = [
        attrs.evolve(
            case,
            faults=attrs.evolve(
                case.faults,
                input_faults=tuple(attrs.evolve(fault, flapping=False) for fault in case.faults.input_faults),
            ),
        )
        for case in cases
    ]
    assert [kr.ARMS["flapping-odd"](case) for case in steady] == cases
    assert 0 < sum(a != b for a, b in zip(steady, cases, strict=True)) < len(cases)
    aimed = [kr.ARMS["aimed-odd"](case) for case in cases]
    for case, arm in zip(cases, aimed, strict=True):
        if case.config.operations is None:
            assert arm == case
        plain = tuple(attrs.evolve(eviction, in_attempt=False) for eviction in arm.faults.evictions)
        assert attrs.evolve(arm, faults=attrs.evolve(arm.faults, evictions=plain)) == case
    # Fewer items: only the arrivals' end moves, and only sooner.
    fewer = [kr.ARMS["items-24"](case) for case in cases]
    for case, arm in zip(cases, fewer, strict=True):
        assert arm.config.workload.until_ms <= case.config.workload.until_ms
        drawn = attrs.evolve(arm.config.workload, until_ms=case.config.workload.until_ms)
        assert attrs.evolve(arm, config=attrs.evolve(arm.config, workload=drawn)) == case
    assert 0 < sum(a != b for a, b in zip(fewer, cases, strict=True)) < len(cases)
    # The start as an edge: only the faults' times move, and only to the run's first seconds.
    for case in cases:
        arm = kr.ARMS["start-edge-4"](case)
        assert arm.config == case.config
        assert arm.seed == case.seed
        before, after = sorted(fault_times(case)), sorted(fault_times(arm))
        assert len(before) == len(after)
        assert all(at_ms < (case.config.duration_ms - QUIET_MS) / 4 for at_ms in set(after) - set(before))
    assert any(kr.ARMS["start-edge-4"](case) != case for case in cases)
    # The limit counted in leases: only a lease world's limit moves, and only up, by its
    # permits per lease; the odd arm only where the drawn limit is odd.
    for name in ("limit-per-lease", "limit-per-lease-odd"):
        changed = 0
        for case in cases:
            arm = kr.ARMS[name](case)
            holder, leases = case.config.holder, case.config.holder.leases
            if arm == case:
                continue
            changed += 1
            assert leases is not None
            assert name == "limit-per-lease" or holder.limit % 2 == 1
            assert arm.config.holder.limit == holder.limit * leases.permits_per_lease
            as_drawn = attrs.evolve(arm.config.holder, limit=holder.limit)
            assert attrs.evolve(arm, config=attrs.evolve(arm.config, holder=as_drawn)) == case
        assert 0 < changed < len(cases), name
    # Two keys where the seed is odd: only the workload's keys grow, by one.
    two_keys = [kr.ARMS["two-keys-odd"](case) for case in cases]
    for case, arm in zip(cases, two_keys, strict=True):
        if case.seed % 2 == 0:
            assert arm == case
            continue
        assert arm.config.workload.keys == (*case.config.workload.keys, "acct-2")
        one_key = attrs.evolve(arm.config.workload, keys=case.config.workload.keys)
        assert attrs.evolve(arm, config=attrs.evolve(arm.config, workload=one_key)) == case
    assert 0 < sum(a != b for a, b in zip(two_keys, cases, strict=True)) < len(cases)
    # The load bound, kept: the draws are bounded already, so the arm changes none of them.
    assert [kr.ARMS["load-32"](case) for case in cases] == cases


def test_kill_rates_take_what_a_baseline_already_ran_from_it(tmp_path: Path) -> None:
    base = ("--seeds", "1", "--cases", "2", "--workers", "1")

    def rates(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "bench_kill_rates.py"), *base, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert "2 runs (1 seeds x 2) x 2 variants, 4 to run" in rates(
        "--only", "limit-off-by-one", "--json", str(first)
    )
    # The reference's and limit-off-by-one's runs are in the baseline: only the new variant runs.
    out = rates(
        "--only", "limit-off-by-one,contended-never-set", "--baseline", str(first), "--json", str(second)
    )
    assert "2 runs (1 seeds x 2) x 3 variants, 2 to run" in out
    a, b = (json.loads(path.read_text(encoding="utf-8")) for path in (first, second))
    assert b["cases"] == a["cases"]
    assert b["results"]["reference"] == a["results"]["reference"]
    assert b["results"]["limit-off-by-one"] == a["results"]["limit-off-by-one"]
    assert len(b["results"]["contended-never-set"]) == 2


def test_kill_rates_on_a_full_disk_say_so_in_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from benchmarks import bench_kill_rates as kr

    def full(path: object, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kr, "write_text_whole", full)
    out = tmp_path / "r.json"
    argv = [
        "bench_kill_rates.py",
        "--seeds",
        "1",
        "--cases",
        "1",
        "--only",
        "limit-off-by-one",
        "--workers",
        "1",
    ]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(out)])
    with pytest.raises(SystemExit) as exited:
        kr.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("No space left on device")
    assert not out.exists()


def test_time_to_bug_exits_2_in_one_line_on_a_full_disk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from benchmarks import bench_time_to_bug as ttb

    def full(path: object, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ttb, "write_text_whole", full)
    out = tmp_path / "t.json"
    argv = ["bench_time_to_bug.py", "--seeds", "1", "--runs", "1", "--only", "limit-off-by-one"]
    monkeypatch.setattr(sys, "argv", [*argv, "--workers", "1", "--json", str(out)])
    with pytest.raises(SystemExit) as exited:
        ttb.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("No space left on device")
    assert not out.exists()


def test_kill_rates_compare_pairs_the_runs_and_tests_the_split() -> None:
    from benchmarks import bench_kill_rates as kr

    assert kr.mcnemar_p(0, 0) == 1.0
    assert kr.mcnemar_p(0, 5) == pytest.approx(2 / 32)  # five of five one way: 2 x (1/2)**5
    assert kr.mcnemar_p(3, 3) == 1.0
    cases = [{"seed": 1, "index": i, "digest": d} for i, d in enumerate("abcd")]
    a = {"cases": cases, "results": {"m": [["x", 1.0], [None, 1.0], [None, 1.0], ["x", 1.0]]}}
    b = {
        "cases": [*cases[:3], {**cases[3], "digest": "e"}],
        "results": {"m": [["x", 1.0], ["y", 2.0], ["y", 2.0], [None, 2.0]]},
    }
    lines = kr.compare(a, b)
    assert lines[0] == "1 of 4 runs differ between the two records"
    assert lines[2].split() == ["m", "2", "3", "1", "2", "1.000"]
    assert lines[-1].startswith("all variants: 1 kills only in A, 2 only in B")
    with pytest.raises(UsageError, match="same sample"):
        kr.compare(a, {**b, "cases": cases[:3]})


def test_the_time_to_bug_section_renders_every_cell_and_replaces_itself() -> None:
    from benchmarks import bench_time_to_bug as ttb

    record = {
        "runs": 150,
        "seeds": [1, 2],
        "modes": ["drawn"],
        "cells": [
            attrs.asdict(
                ttb.Cell("limit-off-by-one", 1, "drawn", True, 1, 0.02, "exact_accounting", "reference")
            ),
            attrs.asdict(ttb.Cell("limit-off-by-one", 2, "drawn", False, 300, 61.5, None, None)),
        ],
    }
    section = ttb.render(record)
    assert section.startswith(ttb.START + "\n## Time to bug\n")
    assert section.endswith(ttb.END + "\n")
    assert "| mutant | drawn, seed 1 | drawn, seed 2 |" in section
    assert "| `limit-off-by-one` | 1, 0.0 s, `exact_accounting` | **survived** |" in section
    page = ttb.with_section("# Mutants\n\nthe table\n", section)
    assert page == "# Mutants\n\nthe table\n\n" + section
    assert ttb.with_section(page, section) == page  # rendered again, in place


def test_mutants_md_says_what_docs_time_to_bug_json_holds() -> None:
    from benchmarks import bench_time_to_bug as ttb

    record = json.loads((ROOT / "docs" / "time_to_bug.json").read_text(encoding="utf-8"))
    page = (ROOT / "docs" / "MUTANTS.md").read_text(encoding="utf-8")
    assert ttb.render(record).rstrip("\n") in page, (
        "rerun: python benchmarks/bench_time_to_bug.py --render ..."
    )


def test_the_parallel_projection_is_bounded_by_the_draw_the_tail_and_the_start() -> None:
    from benchmarks.bench_parallel import Parts, project

    parts = Parts(draw_s_per_run=0.005, replay_s_per_run=0.005, run_s_per_run=0.5, longest_run_s=5.0)
    # Without a tail and start-up, workers share the runs evenly: the speed-up is their number.
    assert project(parts, 10_000, 64, 0.0, tail=False) == pytest.approx(64)
    # The slowest run starting last costs its length, once.
    assert project(parts, 10_000, 64, 0.0, tail=True) == pytest.approx(5000 / (5000 / 64 + 5))
    # Past run / draw workers (100 here), the coordinator's draw bounds the campaign.
    assert project(parts, 10_000, 1000, 0.0, tail=False) == pytest.approx(100)
    assert project(parts, 10, 2, 1.0, tail=False) == pytest.approx(5 / (1 + 2.5))


def test_a_floor_holds_on_its_better_side_only() -> None:
    from benchmarks.bench_floors import FLOORS

    assert FLOORS["standard"].holds(FLOORS["standard"].floor)
    assert not FLOORS["standard"].holds(FLOORS["standard"].floor - 1)
    assert FLOORS["flat"].holds(1.0)
    assert not FLOORS["flat"].holds(1.2)


def test_every_survivor_in_the_time_to_bug_record_is_explained() -> None:
    # Issue 27: every survivor explained in MUTANTS.md; the section says why for each one.
    from benchmarks import bench_time_to_bug as ttb

    record = json.loads((ROOT / "docs" / "time_to_bug.json").read_text(encoding="utf-8"))
    survivors = {cell["mutant"] for cell in record["cells"] if not cell["killed"]}
    section = ttb.render(record)
    assert ("Why each survivor survives the draws:" in section) == bool(survivors)
    assert "not explained yet" not in section
    for name in survivors:
        assert f"- `{name}`: " in section, name
