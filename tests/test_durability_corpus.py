"""The durability port against the reference's own answers, recorded, with no Node in CI.

``tests/fixtures/durability/corpus.jsonl.gz`` holds sequences the differential draws
(``tests/durability_oracle/``, seed 002's code under Node): a config, random steps, and the real
TypeScript's normalised observation after each (replies, settled tokens,
every ``durability_calls`` row, lifecycle events, the stored alarm and the
engine's early timer, the invocation log). Each sequence is replayed here
through the port (``tests/durability_oracle/port_adapter.py``, the
differential's adapter) and compared step by step.

A sequence the port matched when it was recorded must still match (since
the port moved onto microtasks, issue 25, every one does). One it did not
would record the step it first differed at: an expected failure there, a
failure if the port differed earlier, and a failure if the port matched,
so the corpus is re-recorded and the fix counted. Regenerate it
with ``python -m tests.durability_oracle.record`` (docs/DURABILITY.md).
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from tests.durability_oracle.differential import CONFIG_FIELDS, STEP_WEIGHTS, random_config
from tests.durability_oracle.observation import Normaliser, apply, first_diff, observe
from tests.durability_oracle.port_adapter import SemsimAdapter
from tests.durability_oracle.record import DEFAULT_OUT, REPROS_OUT, compact, expand, read
from tests.durability_oracle.repros import OPEN, REPROS

HEADER, SEQUENCES = read(DEFAULT_OUT)
#: The known divergences' short scripts (tests/durability_oracle/repros.py), with the reference's answers.
_, REPRODUCED = read(REPROS_OUT)
#: The adapter's knobs (its docstring): the corpus was recorded with each at its default.
KNOBS = ("ALIGN_TICK", "ALIGN_NONRETRYABLE_NAME")


@pytest.fixture(autouse=True)
def _adapter_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in KNOBS:
        monkeypatch.delenv(knob, raising=False)


def _first_difference(sequence: dict[str, Any]) -> tuple[int, str] | None:
    """Where the port first differs from the recorded reference: (step, what), or None."""
    port = SemsimAdapter()
    try:
        norm = Normaliser(False)
        init = norm.reply(port.init(copy.deepcopy(sequence["config"])))
        if init != sequence["init"]:
            return -1, f"init: {first_diff(sequence['init'], init)}"
        before: dict[str, Any] | None = None
        for step, (action, kept) in enumerate(
            zip(sequence["actions"], sequence["observations"], strict=True)
        ):
            expected = expand(before, kept)
            try:
                observed, _ = observe(port, apply(port, copy.deepcopy(action)), norm)
            except Exception as error:
                return step, f"{action}: the port raised {type(error).__name__}: {error}"
            where = first_diff(expected, observed)
            if where is not None:
                return step, f"{action}: {where}"
            before = expected
        return None
    finally:
        port.close()


def _drawn_kind(action: dict[str, Any]) -> str:
    """The differential's step kind an action was drawn as (``STEP_WEIGHTS``' keys)."""
    op = action["op"]
    if op == "register":
        return str(action["kind"])
    return str({"getResult": "read", "settled": "alarm"}.get(op, op))


def test_the_corpus_covers_what_it_should() -> None:
    assert [s["name"] for s in REPRODUCED] == list(REPROS), "re-record the scripts (record --repros)"
    assert HEADER["sequences"] == len(SEQUENCES) >= 300
    assert sum(1 for s in SEQUENCES if s["steps"] >= 120) >= 20
    # Every step kind and config field the differential draws: one added to its generator is in
    # CI's corpus only once the corpus is re-recorded with it, and this fails until then.
    drawn = {_drawn_kind(action) for sequence in SEQUENCES for action in sequence["actions"]}
    assert drawn == set(STEP_WEIGHTS)
    fields = {field for sequence in SEQUENCES for field in sequence["config"]}
    assert fields == set(CONFIG_FIELDS)
    # ... and CONFIG_FIELDS is what the generator sets.
    assert {field for seed in range(300) for field in random_config(random.Random(seed))} == fields


def test_only_the_open_divergences_are_recorded() -> None:
    """The port answers as the reference does: a divergence found later is a bug to fix, recorded
    only while it is being fixed, as a short script named in ``OPEN`` (repros.py), never as a
    corpus sequence (this test says so)."""
    assert [s["seed"] for s in SEQUENCES if s["diverges"] is not None] == []
    assert [s["name"] for s in REPRODUCED if s["diverges"] is not None] == sorted(OPEN)


def test_compact_observations_expand_to_what_was_observed() -> None:
    """The corpus keeps each step's changes only: expanding them gives back the observation."""
    previous = {"now": 1, "rows": {"a": {"x": 1}, "b": {"x": 2}}, "invocations": [{"h": 1}], "reply": 1}
    current = {
        "now": 1,
        "rows": {"a": {"x": 3}, "c": {"x": 4}},
        "invocations": [{"h": 1}, {"h": 2}],
        "reply": 2,
    }
    kept = compact(previous, current)
    assert "now" not in kept  # unchanged
    assert expand(previous, kept) == current
    assert expand(current, compact(current, previous)) == previous  # and rows removed, logs cut


@pytest.mark.parametrize("sequence", SEQUENCES, ids=lambda s: f"seed{s['seed']}x{s['steps']}")
def test_the_port_answers_as_the_reference_did(sequence: dict[str, Any]) -> None:
    _judge(sequence)


@pytest.mark.parametrize("sequence", REPRODUCED, ids=lambda s: str(s["name"]))
def test_the_issue_25_scripts(sequence: dict[str, Any]) -> None:
    """Each of issue 25's mechanisms on its own short script: M1-M3 differed before the port moved
    onto microtasks and match now; an open one (``OPEN``) is an expected failure at its step."""
    _, config, script = REPROS[sequence["name"]]
    assert (sequence["config"], sequence["actions"]) == (config, script), "re-record: the script changed"
    _judge(sequence)


def _judge(sequence: dict[str, Any]) -> None:
    found = _first_difference(sequence)
    known = sequence["diverges"]
    if known is None:
        assert found is None, f"the port now differs from the reference at step {found[0]}: {found[1]}"
        return
    if found is None:
        pytest.fail(
            f"{sequence.get('name', sequence['seed'])} now matches the reference (it differed at step "
            f"{known['step']}): re-record (python -m tests.durability_oracle.record)"
        )
    step, what = found
    assert step >= known["step"], f"the port now differs earlier, at step {step}: {what}"
    pytest.xfail(f"known divergence (issue 25) at step {known['step']}: {known['at']}")


def test_the_corpus_file_is_the_one_the_recorder_writes() -> None:
    assert Path(__file__).resolve().parent / "fixtures" / "durability" / "corpus.jsonl.gz" == DEFAULT_OUT
