"""The Python API refuses bad arguments early: a TypeError or ValueError naming the argument and
what it may be, raised before anything runs (a new user's trial of ``run_world`` and friends)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import semsim.harness.run as harness
from semsim.explore.fuzz import KNOWN_FINDINGS, campaign, load_case, run_case, save_case
from semsim.explore.strategies import Case
from semsim.harness.run import WorldConfig, run_world
from semsim.inputs.validation import MAX_SEED
from semsim.report.replay import read_traffic, record_traffic, write_traffic
from semsim.runtime.kernel import Sim, run
from semsim.runtime.trace import Trace, read_trace
from semsim.scenarios import SCENARIOS, run_scenario
from semsim.world.faults import FaultPlan
from semsim.world.workload import Workload

CONFIG = WorldConfig(workload=Workload(clients=1, items_per_minute=6, until_ms=20_000), duration_ms=30_000)
SEED_RULE = f"seed must be an integer in [0, {MAX_SEED}]"


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that gets as far as its trace fails the test: the check must come first."""

    def started(*_: Any, **__: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(harness, "Trace", started)


@pytest.mark.parametrize(
    ("seed", "error"),
    [
        ("1", TypeError),
        (1.0, TypeError),
        (True, TypeError),
        (None, TypeError),
        (-1, ValueError),
        (MAX_SEED + 1, ValueError),
        (2**64, ValueError),
    ],
)
@pytest.mark.usefixtures("nothing_runs")
def test_run_world_takes_only_an_integer_seed_in_range(seed: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"^{re.escape(SEED_RULE)}, got {re.escape(repr(seed))}$"):
        run_world(CONFIG, FaultPlan(), seed)


def test_the_largest_seed_runs() -> None:
    assert run_world(CONFIG, FaultPlan(), MAX_SEED).trace.header["seed"] == MAX_SEED


@pytest.mark.parametrize(
    ("tolerated", "error", "message"),
    [
        (
            "F4",
            TypeError,
            "tolerated must be a set or frozenset of known finding names (F1, F2, F3, F4, F5, F6, F7, F8)",
        ),
        (["F4"], TypeError, "tolerated must be a set or frozenset"),
        (None, TypeError, "tolerated must be a set or frozenset"),
        ({"F9"}, ValueError, "tolerated names 'F9', not a known finding (F1, F2, F3, F4, F5, F6, F7, F8)"),
        (frozenset({"F4", 4}), ValueError, "tolerated names 4, not a known finding"),
    ],
)
@pytest.mark.usefixtures("nothing_runs")
def test_run_world_takes_a_set_of_known_findings(
    tolerated: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        run_world(CONFIG, FaultPlan(), 1, tolerated=tolerated)
    assert str(caught.value).startswith(message), caught.value


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((CONFIG, None, 1), {}, "faults must be a semsim.world.faults.FaultPlan (FaultPlan() for none)"),
        ((CONFIG, {}, 1), {}, "faults must be a semsim.world.faults.FaultPlan"),
        ((CONFIG.to_dict(), FaultPlan(), 1), {}, "config must be a semsim.harness.run.WorldConfig"),
        ((CONFIG, FaultPlan(), 1), {"limits": 10}, "limits must be a semsim.runtime.kernel.Limits or None"),
        ((CONFIG, FaultPlan(), 1), {"full_checks": "yes"}, "full_checks must be True or False"),
    ],
)
@pytest.mark.usefixtures("nothing_runs")
def test_run_world_names_an_argument_of_the_wrong_type(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        run_world(*args, **kwargs)
    assert str(caught.value).startswith(message), caught.value


@pytest.mark.usefixtures("nothing_runs")
def test_run_scenario_checks_the_seed_it_is_given() -> None:
    bad: tuple[Any, ...] = ("1", 1.0, True)
    for seed in bad:
        with pytest.raises(TypeError, match="seed must be an integer"):
            run_scenario(SCENARIOS["evicted-before-round"], seed)
    with pytest.raises(ValueError, match="seed must be an integer"):
        run_scenario(SCENARIOS["evicted-before-round"], -1)


@pytest.mark.usefixtures("nothing_runs")
def test_run_case_refuses_what_no_run_takes_instead_of_reporting_a_crash() -> None:
    with pytest.raises(TypeError, match="tolerated must be a set"):
        run_case(Case(CONFIG, FaultPlan(), 1), tolerated="F4")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^case\.seed must be an integer"):
        run_case(Case(CONFIG, FaultPlan(), "1"), tolerated=KNOWN_FINDINGS)  # type: ignore[arg-type]


@pytest.mark.usefixtures("nothing_runs")
def test_campaign_checks_its_seed_and_tolerated() -> None:
    with pytest.raises(TypeError, match="seed must be an integer"):
        campaign(1, "7")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be an integer"):
        campaign(1, -7)
    with pytest.raises(ValueError, match="tolerated names 'F9'"):
        campaign(1, 7, tolerated=frozenset({"F9"}))


def test_the_runtime_takes_only_an_integer_seed() -> None:
    async def main(_: Sim) -> None:
        raise AssertionError("the run started")

    for seed in ("1", 1.0, True, -1, 2**63):
        with pytest.raises((TypeError, ValueError), match="seed must be an integer"):
            run(seed, main, Trace(1, {}, {}))  # type: ignore[arg-type]


# --- files: a str path works wherever a Path does (README: ``run.trace.write(path)``) -------------


def test_traces_traffic_and_cases_take_str_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = run_world(CONFIG, FaultPlan(), 1)
    run.trace.write("t.jsonl")
    assert (tmp_path / "t.jsonl").read_bytes() == run.trace.to_bytes()
    header, events = read_trace("t.jsonl")
    assert (header["seed"], len(events)) == (1, len(run.trace))
    write_traffic(record_traffic(run), "traffic.jsonl")
    assert read_traffic("traffic.jsonl").config.key == CONFIG.workload.keys[0]
    save_case(Case(CONFIG, FaultPlan(), 1), frozenset({"F4"}), "case.json")
    assert load_case("case.json") == (Case(CONFIG, FaultPlan(), 1), frozenset({"F4"}))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: WorldConfig(holder=None),  # type: ignore[arg-type]
            "holder must be a HolderSpec, got None",
        ),
        (
            lambda: WorldConfig(workload={"clients": 2}),  # type: ignore[arg-type]
            "workload must be a Workload, got {'clients': 2}",
        ),
        (
            lambda: WorldConfig(client=3),  # type: ignore[arg-type]
            "client must be a ClientSettings, got 3",
        ),
        (
            lambda: WorldConfig(operations="yes"),  # type: ignore[arg-type]
            "operations must be an OperationsSpec, got 'yes'",
        ),
        (
            lambda: harness.HolderSpec(fixes={"a"}),
            "fixes must be a list or tuple of fix names (a set has no order to keep), got {'a'}",
        ),
    ],
)
def test_a_world_config_of_the_wrong_parts_is_one_readable_line(build: Any, message: str) -> None:
    # attrs' own instance_of check put its whole Attribute(...) in the message.
    with pytest.raises(TypeError) as caught:
        build()
    assert str(caught.value) == message


def test_a_holder_spec_takes_its_fixes_as_a_list_too() -> None:
    # As Workload's keys and the fault plan's lists do; the order given is kept.
    spec = harness.HolderSpec(fixes=["under-shares-the-limit", "group-ceiling-counts-leases"])
    assert spec.fixes == ("under-shares-the-limit", "group-ceiling-counts-leases")
