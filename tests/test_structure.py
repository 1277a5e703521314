"""Case and config files into their attrs classes (semsim.inputs.structure): cattrs walks the JSON
by the classes' annotations, the fields' own checks judge the values, and the first problem is one
line naming its path."""

from __future__ import annotations

from typing import Any

import pytest

from semsim.harness.run import WorldConfig
from semsim.inputs.structure import structure
from semsim.scenarios import SCENARIOS
from semsim.world.faults import FaultPlan


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenarios_world_and_plan_read_back_as_they_were(name: str) -> None:
    scenario = SCENARIOS[name]
    assert structure(scenario.config.to_dict(), WorldConfig, "config") == scenario.config
    assert structure(scenario.faults.to_dict(), FaultPlan, "faults") == scenario.faults


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "config must be a JSON object, got list"),
        ({"holder": {"limit": "ten"}}, "config.holder.limit must be a non-negative safe integer, got 'ten'"),
        ({"holder": {"limt": 3}}, "config.holder: unknown field 'limt'"),
        ({"holder": "big"}, "config.holder must be a JSON object, got str"),
        ({"workload": {"keys": "acct"}}, "config.workload.keys must be a JSON array, got str"),  # not letters
        ({"workload": {"script": [{"at_ms": 1, "client": 0, "count": 1}, {"zz": 1}]}},
         "config.workload.script[1]: unknown field 'zz'"),
        ({"workload": {"script": [{"client": 0}]}}, "config.workload.script[0]: missing field 'at_ms'"),
        ({"holder": {"leases": {"permits_per_lease": 0}}},
         "config.holder.leases.permits_per_lease must be a positive integer, got 0"),
        ({"duration_ms": 3.5}, "config.duration_ms must be a positive integer, got 3.5"),
        ({"duration_ms": True}, "config.duration_ms must be a positive integer, got True"),
    ],
)  # fmt: skip
def test_a_bad_config_names_its_first_problem_by_path(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=r".") as caught:
        structure(data, WorldConfig, "config")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"drops": [{"leg": "reply", "start_ms": 0, "end_ms": 5, "x": 1}]},
         "faults.drops[0]: unknown field 'x'"),
        ({"evictions": [{"target": "a", "at_ms": 1}, {"target": "a", "at_ms": -1}]},
         "faults.evictions[1].at_ms must be a non-negative integer, got -1"),
        ({"drops": {"leg": "reply"}}, "faults.drops must be a JSON array, got dict"),
        ({"drops": [3]}, "faults.drops[0] must be a JSON object, got int"),
        ({"reply_loss": 2}, "faults.reply_loss must be a probability in [0, 1], got 2"),
    ],
)  # fmt: skip
def test_a_bad_plan_names_its_first_problem_by_path(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=r".") as caught:
        structure(data, FaultPlan, "faults")
    assert str(caught.value) == message


def test_whole_number_floats_are_integers_as_the_holder_has_them() -> None:
    assert structure({"holder": {"limit": 3.0}}, WorldConfig, "config").holder.limit == 3
