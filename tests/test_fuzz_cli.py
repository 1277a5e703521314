"""``semsim fuzz``: a campaign with its summary, replaying a saved case, and bad input.

Also the "sometimes" coverage counters, on a hand-written trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios import SCENARIOS
from sim.cli import EXIT_OK, EXIT_USAGE, EXIT_VIOLATION, main
from sim.coverage import EXPECTED, coverage, missing
from sim.fuzz import fixes_arg, load_case, tolerated_for
from sim.trace import read_trace

FINDINGS = Path(__file__).resolve().parent / "fixtures" / "findings"
F3 = FINDINGS / "F3-claim-after-the-limit-fell.json"


def test_a_small_campaign_prints_its_summary_with_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--runs", "3", "--seed", "5", "--quiet"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"runs: {3 + len(SCENARIOS)}" in out  # the named scenarios run first
    assert "violations by invariant: none" in out
    for name in EXPECTED:
        assert name in out  # every counter is listed, reached or not
    assert "never reached" in out  # so few runs cannot reach everything, and say so


def test_replaying_a_saved_finding_reproduces_it_and_writes_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "f3.jsonl"
    assert main(["fuzz", "--replay", str(F3), "--trace", str(trace)]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "VIOLATED real_ceiling" in out
    header, events = read_trace(trace)
    assert header["seed"] == load_case(F3)[0].seed
    assert [e["invariant"] for e in events if e["kind"] == "violation"] == ["real_ceiling"]


def test_the_same_case_with_its_fix_replays_clean(tmp_path: Path) -> None:
    data = json.loads(F3.read_text())
    data["config"]["holder"]["fixes"] = ["claims-respect-the-limit"]
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(data))
    assert main(["fuzz", "--replay", str(fixed)]) == EXIT_OK


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ("[]", "a case is a JSON object"),
        ('{"format": "other"}', "format 'other'"),
        ('{"format": "semsim-case/1", "seed": -1}', "seed must be an integer in [0, 9223372036854775807]"),
        ('{"format": "semsim-case/1", "seed": 1, "bogus": 1}', "unknown field 'bogus'"),
        ('{"format": "semsim-case/1", "seed": 1, "config": {"holder": {"nope": 1}}}', "unknown field 'nope'"),
        ('{"format": "semsim-case/1", "seed": 1, "faults": {"reply_loss": 2}}', "probability"),
        (
            '{"format": "semsim-case/1", "seed": 1, "config": {"holder": {"fixes": ["magic"]}}}',
            "unknown fix 'magic'",
        ),
    ],
)
def test_a_bad_case_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "case.json"
    path.write_text(content)
    assert main(["fuzz", "--replay", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_missing_case_file_and_bad_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fuzz", "--replay", str(tmp_path / "missing.json")]) == EXIT_USAGE
    assert main(["fuzz", "--fixes", "nope"]) == EXIT_USAGE
    assert main(["fuzz", "--trace", str(tmp_path / "t.jsonl")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "missing.json: no such file" in err
    assert "unknown fix 'nope'" in err
    assert "--trace goes with --replay" in err
    for argv in (["fuzz", "--runs", "0"], ["fuzz", "--seed", "x"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == EXIT_USAGE


def test_fixes_all_turns_on_every_fix_and_tolerates_nothing() -> None:
    fixes = fixes_arg("all")
    assert tolerated_for(fixes) == frozenset()
    assert tolerated_for(()) == frozenset({"F1", "F2", "F3", "F4"})
    assert tolerated_for(fixes_arg("claims-respect-the-limit")) == frozenset({"F1", "F2", "F4"})


def test_coverage_counts_each_sometimes_state_from_a_trace() -> None:
    events = [
        {"t": 0, "kind": "send", "msg": "m1", "src": "c", "dst": "h", "method": "permits"},
        {"t": 1, "kind": "send", "msg": "m2", "src": "c", "dst": "h", "method": "permits"},
        {"t": 5, "kind": "deliver", "msg": "m2", "dst": "h"},  # m2 overtook m1: reordered
        {"t": 900, "kind": "deliver", "msg": "m1", "dst": "h"},  # 900 ms > 5 ms latency: delayed
        {"t": 1, "kind": "send", "msg": "m3", "src": "c", "dst": "jobs", "method": "release"},
        {"t": 1, "kind": "drop", "msg": "m3", "leg": "request", "reason": "lost"},  # a lost release
        {"t": 2, "kind": "drop", "msg": "m1", "leg": "reply", "reason": "lost"},
        {"t": 3, "kind": "drop", "msg": "m2", "leg": "reply", "reason": "partitioned"},
        {"t": 4, "kind": "evict", "object": "holder:acct", "calls": 2, "live": True},
        {"t": 4, "kind": "evict", "object": "client-0", "calls": 1, "live": True},  # a client: not counted
        {"t": 6, "kind": "alarm_retry", "object": "holder:acct"},
        {"t": 7, "kind": "blocked", "reason": "group_limit"},
        {
            "t": 8,
            "kind": "reply",
            "msg": "m2",
            "body": {"contended": True, "grantResults": [{"status": "expired"}]},
        },
    ]
    counts = coverage(events, latency_ms=5)
    assert counts == {
        "fault:reorder": 1,
        "fault:delay": 1,
        "fault:release_loss": 1,
        "fault:reply_loss": 1,
        "fault:partition": 1,
        "eviction_with_requests_waiting": 1,
        "fault:alarm_failure": 1,
        "blocked:group_limit": 1,
        "contended_reply": 1,
        "late_claim_clamped": 1,
    }
    assert "alarm_dropped" in missing(counts)
    assert "fault:reorder" not in missing(counts)
