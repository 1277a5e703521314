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
    assert result["judges"] == ["exact_accounting against the literal model", "safety", "liveness"]
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
