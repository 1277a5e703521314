"""``--json``: a command's result as one JSON object on standard output, the report on standard error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from semsim.cli.main import main


def _json(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err  # the whole of standard output is the object


def test_run_json_is_the_verdict_and_the_report_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "late-claim-not-found", "--json"]) == 0
    result, err = _json(capsys)
    assert result["scenario"] == "late-claim-not-found"
    assert result["passed"] is True
    assert result["outcome"] == "completed"
    assert result["judges"] == [
        "exact_accounting against the literal model",
        "exact_queue against the literal queue model",
        "safety",
        "liveness",
    ]
    assert all(expectation["held"] for expectation in result["expectations"])
    assert "every expectation and invariant held" in err


def test_run_json_of_a_violation_names_it_and_how_to_reproduce(capsys: pytest.CaptureFixture[str]) -> None:
    invariant = "tests.test_user_invariants:MaxGrant"
    assert main(["run", "strict-burst", "--invariant", invariant, "--json"]) == 1
    result, err = _json(capsys)
    assert (result["passed"], result["outcome"], result["invariant"]) == (False, "violation", "max_grant")
    assert f"--invariant {invariant}" in str(result["reproduce"])
    assert "reproduce with:" in err


def test_fuzz_json_of_a_campaign_and_of_its_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    invariant = "tests.test_user_invariants:MaxGrant"
    argv = [
        "fuzz",
        "--runs",
        "2",
        "--workers",
        "1",
        "--no-db",
        "--out",
        str(tmp_path),
        "--invariant",
        invariant,
    ]
    assert main([*argv, "--json"]) == 1
    result, err = _json(capsys)
    assert result["invariants"] == [invariant]
    failure = result["failure"]
    assert isinstance(failure, dict)
    assert (failure["name"], failure["invariant"]) == ("max_grant", "max_grant")
    assert Path(failure["case"]).is_file()
    assert str(failure["replay"]).startswith("semsim fuzz --replay ")
    assert "VIOLATED max_grant" in err
    assert main(["fuzz", "--replay", failure["case"], "--json"]) == 1
    replayed, _ = _json(capsys)
    assert replayed["held"] is False
    assert replayed["invariants"] == [invariant]
    assert isinstance(replayed["failure"], dict)
    assert replayed["failure"]["name"] == "max_grant"


def test_bad_input_with_json_is_one_line_on_stderr_and_no_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "no-such-scenario", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "listing", "first"),
    [
        ([], "scenarios", None),
        (["--variants"], "variants", "reference"),
        (["--invariants"], "invariants", "ceiling"),
    ],
)
def test_list_json_is_every_item_with_its_fields(
    flag: list[str], listing: str, first: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", *flag, "--json"]) == 0
    result, err = _json(capsys)
    assert result["listing"] == listing
    names = [item["name"] for item in result["items"]]
    assert len(names) == len(set(names)) > 0
    assert first is None or names[0] == first
    assert all(item["name"] in err for item in result["items"])  # the table went to standard error
    if listing == "variants":
        assert result["items"][0]["judges"] == [
            "exact_accounting against the literal model",
            "exact_queue against the literal queue model",
            "safety",
            "liveness",
        ]
    if listing == "invariants":
        assert {item["kind"] for item in result["items"]} >= {"safety", "liveness"}


def test_replay_json_is_the_summary_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--example", "--json"]) == 0
    result, err = _json(capsys)
    assert result["held"] is True
    assert result["violations"] == []
    assert result["checked"]["every_round"] == ["reuse", "lease_fairness"]
    summary = result["summary"]
    assert (summary["key"], summary["lines"], summary["rounds"]) == ("acct", 101, 23)
    assert summary["report_results"] == {"not_found": 1, "ok": 79}
    assert "all held" in err


def test_plot_and_demo_json_name_what_they_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    assert main(["run", "late-claim-not-found", "--trace", str(trace)]) == 0
    capsys.readouterr()
    assert main(["plot", str(trace), "-o", str(tmp_path / "p.png"), "--json"]) == 0
    result, err = _json(capsys)
    assert result == {"trace": str(trace), "plot": str(tmp_path / "p.png"), "per_group": False}
    assert "plot written to" in err
    assert main(["demo", "--json"]) == 0
    result, err = _json(capsys)
    assert result == {"passed": True, "failures": [], "plot": None}
    assert "every expectation held" in err
