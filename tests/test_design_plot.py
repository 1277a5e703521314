"""The gate's and the leased worker's plot (``semsim.report.design_plot``): its numbers, and that
``semsim run --plot`` and ``semsim plot`` draw it for those designs' traces, not the holder's."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from semsim.cli.main import main
from semsim.report.design_plot import DesignPlotData, design_of, design_series
from semsim.report.plot import PlotError, build_figure, value_at
from semsim.scenarios import SCENARIOS, run_scenario


def _trace(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    trace = run_scenario(SCENARIOS[name]).run.trace
    return trace.header, list(trace.events())


def _header(design: str, cap: int = 2) -> dict[str, Any]:
    return {
        "kind": "header",
        "seed": 7,
        "config": {
            "holder": {"limit": cap},
            "workload": {"keys": ["acct"]},
            "duration_ms": 100_000,
            "design": {"name": design},
        },
        "faults": {"partitions": []},
    }


def _submit(t: int, *ids: str) -> dict[str, Any]:
    body = [{"id": id, "key": "acct", "group": "wf", "body": "{}"} for id in ids]
    return {
        "t": t,
        "kind": "send",
        "msg": f"m{t}",
        "src": "workload",
        "dst": "client-0",
        "method": "submit",
        "body": body,
    }


def test_the_gates_count_falls_to_zero_at_its_eviction_and_the_api_goes_over_the_cap() -> None:
    data = design_series(*_trace("gate-evicted-over-admits"))
    (acct,) = data.accounts
    assert (data.design, data.cap, acct.account) == ("gate", 2, "acct")
    assert value_at(acct.held, 9_999) == 2
    assert value_at(acct.held, 10_000) == 0  # the successor's ledger starts empty
    assert max(v for _, v in acct.api_calls) == 4  # the story's over-admission, at the API
    assert [m.t_ms for m in data.marks if m.kind == "gate evicted"] == [10_000]
    assert data.trade_offs is not None
    assert data.trade_offs["peak_over_admission"] == 2


def test_a_lease_nobody_renews_ends_at_its_until_and_a_write_ends_it_at_once() -> None:
    events = [
        _submit(0, "a", "b"),
        {"t": 5, "kind": "lease_claim", "owner": "w1", "token": "t1", "until": 20_000, "ids": ["a", "b"]},
        {"t": 10_000, "kind": "lease_renew", "id": "a", "token": "t1", "until": 40_000, "ok": True},
        {"t": 15_000, "kind": "lease_renew", "id": "b", "token": "t1", "until": 60_000, "ok": False},
        {"t": 30_000, "kind": "lease_write", "id": "a", "token": "t1", "status": "completed", "ok": True},
        {"t": 50_000, "kind": "lease_write", "id": "b", "token": "t1", "status": "completed", "ok": False},
    ]
    (acct,) = design_series(_header("leased-worker"), events).accounts
    assert acct.held == ((0, 0), (5, 2), (20_000, 1), (30_000, 0))


def test_a_lease_claimed_again_at_its_expiry_is_one_lease_and_ends_at_its_new_until() -> None:
    events = [
        _submit(0, "a"),
        {"t": 5, "kind": "lease_claim", "owner": "w1", "token": "t1", "until": 20_000, "ids": ["a"]},
        # The store's rule: a lease is live while until > now, so at 20 s it may be claimed again.
        {"t": 20_000, "kind": "lease_claim", "owner": "w2", "token": "t2", "until": 40_000, "ids": ["a"]},
        {"t": 50_000, "kind": "drop", "msg": "m", "leg": "request", "reason": "dropped"},
    ]
    (acct,) = design_series(_header("leased-worker"), events).accounts
    assert acct.held == ((0, 0), (5, 1), (40_000, 0))


def test_a_call_of_an_item_running_or_done_is_marked_a_duplicate_run() -> None:
    start = {"kind": "api_start", "account": "acct", "until": 9_000}
    events = [
        {"t": 1, **start, "call": "c1", "key": "a", "in_flight": 1},
        {"t": 2, **start, "call": "c2", "key": "a", "in_flight": 2},  # while c1 runs
        {"t": 3, "kind": "api_end", "call": "c1", "account": "acct", "outcome": "ok", "in_flight": 1},
        {"t": 4, "kind": "api_end", "call": "c2", "account": "acct", "outcome": "conflict", "in_flight": 0},
        {"t": 5, **start, "call": "c3", "key": "b", "in_flight": 1},
        {"t": 6, "kind": "api_end", "call": "c3", "account": "acct", "outcome": "error", "in_flight": 0},
        {"t": 7, **start, "call": "c4", "key": "b", "in_flight": 1},  # a retry after a failure
        {"t": 8, **start, "call": "c5", "key": "a", "in_flight": 2},  # after a took effect
    ]
    data = design_series(_header("gate"), events)
    assert [(m.t_ms, m.detail) for m in data.marks if m.kind == "duplicate run"] == [(2, "a"), (8, "a")]
    assert data.accounts[0].api_calls == (
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 1),
        (4, 0),
        (5, 1),
        (6, 0),
        (7, 1),
        (8, 2),
    )


def test_violations_before_the_end_were_tolerated_and_the_last_of_a_stopped_run_broke_it() -> None:
    violation: dict[str, Any] = {"kind": "violation", "invariant": "gate_exact", "detail": "acct: over"}
    tolerated: list[dict[str, Any]] = [{"t": 5, **violation, "finding": "F6"}]
    stopped = [*tolerated, {"t": 9, **violation, "finding": None}]
    measured = [*tolerated, {"t": 100_000, "kind": "trade_offs", "design": "gate"}]
    kinds = {
        name: [(m.t_ms, m.kind, m.label) for m in design_series(_header("gate"), events).marks]
        for name, events in (("stopped", stopped), ("measured", measured))
    }
    assert kinds["stopped"] == [(5, "tolerated", "gate_exact (F6)"), (9, "violation", "gate_exact")]
    assert kinds["measured"] == [(5, "tolerated", "gate_exact (F6)")]


@pytest.mark.parametrize(
    "name",
    [
        "gate-fails-open",
        "gate-leaked-slot-heals",
        "leased-lost-lease-runs-twice",
        "leased-dead-worker-holds-lease",
    ],
)
def test_each_story_shows_what_it_tells(name: str) -> None:
    data = design_series(*_trace(name))
    kinds = {m.kind for m in data.marks}
    (acct,) = data.accounts
    leaked = [t for t, h in acct.held if h > (value_at(acct.api_calls, t) or 0)]
    if name == "gate-fails-open":
        assert "failed open" in kinds
        assert value_at(acct.api_calls, data.end_ms) == 0
    elif name == "gate-leaked-slot-heals":
        assert {"caller evicted", "slot healed"} <= kinds
        assert leaked  # the slot the evicted caller never released, counted with no call running
    elif name == "leased-lost-lease-runs-twice":
        assert {"lease lost", "write fenced", "duplicate run"} <= kinds
    else:
        assert leaked  # the dead worker's lease, until it runs out
        assert value_at(acct.held, data.end_ms) == 0


def _leak_area_cap_s(data: DesignPlotData) -> float:
    """The hatched area of every panel: capacity counted, up to the cap, above the calls running."""
    area_ms = 0
    for account in data.accounts:
        times = sorted({t for t, _ in account.held} | {t for t, _ in account.api_calls} | {data.end_ms})
        for start, end in itertools.pairwise(times):
            held = min(value_at(account.held, start) or 0, data.cap)
            area_ms += max(0, held - (value_at(account.api_calls, start) or 0)) * (end - start)
    return area_ms / 1000


@pytest.mark.parametrize(
    "name",
    [
        "gate-leaked-slot-heals",
        "gate-evicted-over-admits",
        "leased-dead-worker-holds-lease",
        "leased-lost-lease-runs-twice",
    ],
)
def test_the_hatched_leak_is_the_leak_the_header_reports(name: str) -> None:
    """The plot counts what the meter counts: once it counted a gate's stale slot until the next
    acquire healed it, and gate-leaked-slot-heals hatched 95 cap-s under a header of 90."""
    data = design_series(*_trace(name))
    assert data.trade_offs is not None
    # The meter samples each second; the plot draws each change to the millisecond.
    assert _leak_area_cap_s(data) == pytest.approx(data.trade_offs["leaked_cap_s"], abs=0.1)


def test_a_gates_slot_counts_until_its_release_or_until_it_goes_stale() -> None:
    def acquire(t: int, token: str | None, *healed: str) -> dict[str, Any]:
        fields = {"gate": "gate:acct", "token": token, "in_flight": 0, "healed": list(healed)}
        return {"t": t, "kind": "gate_acquire", **fields}

    header = _header("gate")
    header["config"]["design"]["gate"] = {"stale_ms": 10_000}
    events = [
        acquire(100, "s1"),
        acquire(200, "s2"),
        {"t": 5_000, "kind": "gate_release", "gate": "gate:acct", "token": "s2", "released": True},
        # s1 is stale from 10_101 (now - acquired_at > stale_ms), though the ledger keeps it until:
        acquire(20_000, "s3", "s1"),
        acquire(25_000, None),
        {"t": 26_000, "kind": "evict", "object": "gate:acct"},
    ]
    (acct,) = design_series(header, events).accounts
    assert acct.held == ((0, 0), (100, 1), (200, 2), (5_000, 1), (10_101, 0), (20_000, 1), (26_000, 0))
    header["config"]["design"]["gate"] = {"stale_ms": "soon"}
    with pytest.raises(PlotError, match="stale_ms must be a positive integer"):
        design_series(header, events)


def test_a_design_trace_draws_the_designs_figure_not_the_holders() -> None:
    header, events = _trace("leased-lost-lease-runs-twice")
    fig = build_figure(header, events, title="story")
    texts = [t.get_text() for t in fig.texts]
    assert any("design: leased-worker" in t for t in texts)
    assert any("duplicate runs" in t for t in texts)  # the trade-off figures under the title
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert any("instances under a live lease vs calls at the API" in t for t in titles)
    assert not any("holder accounting" in t for t in titles)
    with pytest.raises(PlotError, match="per-group"):
        build_figure(header, events, per_group=True)


def test_semsim_run_and_plot_draw_a_design_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, png, again = tmp_path / "t.jsonl", tmp_path / "run.png", tmp_path / "plot.png"
    assert main(["run", "gate-evicted-over-admits", "--trace", str(trace), "--plot", str(png)]) == 0
    assert png.stat().st_size > 20_000
    assert main(["plot", str(trace), "-o", str(again)]) == 0
    assert again.stat().st_size > 20_000
    capsys.readouterr()
    grouped = tmp_path / "grouped.png"
    assert main(["plot", str(trace), "-o", str(grouped), "--per-group"]) == 2
    err = capsys.readouterr().err
    assert "per-group panels show the semaphore's groups; a gate run has none" in err
    assert len(err.strip().splitlines()) == 1
    assert not grouped.exists()


def test_a_malformed_design_event_is_a_plot_error_naming_it() -> None:
    events = [{"t": 5, "kind": "lease_claim", "owner": "w1", "token": "t1", "ids": ["a"]}]
    with pytest.raises(
        PlotError, match=r"event 1 \('lease_claim' at t=5\) is malformed: missing field 'until'"
    ):
        design_series(_header("leased-worker"), events)
    with pytest.raises(PlotError, match="no cap"):
        design_series({"config": {"design": {"name": "gate"}}}, [])


def test_a_trace_names_its_design_and_an_older_one_is_the_semaphores() -> None:
    assert design_of(_header("gate")) == "gate"
    assert design_of({"config": {"holder": {"limit": 1}}}) == "semaphore"
    assert json.loads(json.dumps(_header("gate")))["config"]["design"]["name"] == "gate"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h["config"]["workload"].update(keys=5), "config.workload.keys must be a list"),
        (lambda h: h["config"]["workload"].update(keys="abc"), "config.workload.keys must be a list"),
        (lambda h: h["faults"].update(partitions=[{"start_ms": "x", "end_ms": 2}]), "integer start_ms"),
        (lambda h: h["faults"].update(partitions=[{"end_ms": 2}]), "integer start_ms"),
    ],
)
def test_a_malformed_design_header_is_a_plot_error(change: Any, message: str) -> None:
    header = _header("gate")
    change(header)
    with pytest.raises(PlotError, match=message):
        design_series(header, [])


def test_a_recovery_that_is_not_a_number_reads_as_not_recovered() -> None:
    events = [{"t": 10, "kind": "trade_offs", "design": "gate", "recovery_ms": "soon"}]
    fig = build_figure(_header("gate"), events)
    assert any("recovered not by the end" in text.get_text() for text in fig.texts)
