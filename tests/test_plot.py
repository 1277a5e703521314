"""``semsim.report.plot``: the series a trace yields, the PNG it draws, and ``semsim plot``'s errors."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from typing import Any

import attrs
import pytest

from semsim.check import invariants
from semsim.cli.main import main
from semsim.explore.fuzz import KNOWN_FINDINGS
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.report.plot import PlotError, example_run, series, value_at
from semsim.runtime.trace import TRACE_VERSION
from semsim.world.faults import Eviction, FaultPlan, LimitChange

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def example() -> Any:
    return example_run()


def _header(**config: Any) -> dict[str, Any]:
    return {
        "kind": "header",
        "seed": 7,
        "config": {
            "holder": {"limit": 4, "grant_timeout_ms": 10_000, "leases": None},
            "workload": {"keys": ["k"]},
            "duration_ms": 30_000,
            **config,
        },
        "faults": {"partitions": [{"target": "client-1", "start_ms": 1_000, "end_ms": 2_000}]},
        "version": TRACE_VERSION,
    }


def _sync(msg: str, t: int, client: str, grants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = {"type": "sync", "v": 1, "clientId": client, "grants": grants}
    return [
        {
            "t": t,
            "kind": "send",
            "msg": msg,
            "src": client,
            "dst": "holder:k",
            "method": "permits",
            "body": body,
        },
        {"t": t + 5, "kind": "deliver", "msg": msg, "dst": "holder:k", "method": "permits"},
    ]


def _round(t: int, granted: int, groups: dict[str, Any], limit: int = 4) -> dict[str, Any]:
    usage = {"limit": limit, "granted": granted, "leased": 0, "available": 0, "groups": groups}
    return {"t": t, "kind": "round", "holder": "holder:k", "requested": 0, "granted": 0, "usage": usage}


def _enqueue(t: int, item: str) -> dict[str, Any]:
    return {"t": t, "kind": "enqueue", "client": "c1", "item": item, "key": "k", "group": "g"}


def _admit(t: int, item: str, grant: str) -> dict[str, Any]:
    return {
        "t": t,
        "kind": "admit",
        "client": "c1",
        "item": item,
        "key": "k",
        "group": "g",
        "grant": grant,
        "lease": None,
    }


HAND_EVENTS: list[dict[str, Any]] = [
    _enqueue(0, "i1"),
    _enqueue(0, "i2"),
    _enqueue(0, "i2"),  # a duplicated submit: enqueued once
    _enqueue(0, "i3"),
    _round(2_000, 2, {"g": {"granted": 2}}),
    {
        "t": 2_000,
        "kind": "grant",
        "holder": "holder:k",
        "client": "c1",
        "grant": "G1",
        "group": "g",
        "permits": 2,
    },
    _admit(2_010, "i1", "G1"),
    _admit(2_010, "i2", "G1"),
    # i3 was never claimed under G1; a requeue moves a claiming item back to queued: still waiting.
    {"t": 2_020, "kind": "requeue", "client": "c1", "item": "i3", "key": "k"},
    *_sync("m1", 3_000, "c1", [{"grantId": "G1", "claimed": 2, "released": 1}]),
    {"t": 3_005, "kind": "release", "client": "c1", "item": "i1"},
    # The same report again, and a forged one from another client: neither frees anything.
    *_sync("m2", 4_000, "c1", [{"grantId": "G1", "claimed": 2, "released": 1}]),
    *_sync("m3", 4_100, "c2", [{"grantId": "G1", "claimed": 2, "released": 2}]),
    {"t": 4_200, "kind": "drop", "msg": "m3", "leg": "reply", "reason": "lost"},
    {"t": 5_000, "kind": "operator", "action": "limit", "key": "k", "limit": 2},
    _round(6_000, 2, {"g": {"granted": 2, "limit": 3}}, limit=2),
    {
        "t": 6_000,
        "kind": "grant",
        "holder": "holder:k",
        "client": "c1",
        "grant": "G2",
        "group": "g",
        "permits": 1,
    },
    {
        "t": 16_000,
        "kind": "grant_reclaimed",
        "holder": "holder:k",
        "grantId": "G2",
        "clientId": "c1",
        "group": "g",
        "permits": 1,
    },
    {"t": 20_000, "kind": "evict", "object": "holder:k", "calls": 0, "live": True},
    *_sync("m4", 21_000, "c1", [{"grantId": "G1", "claimed": 2, "released": 2}]),
    {"t": 21_010, "kind": "release", "client": "c1", "item": "i2"},
]


def test_series_of_a_hand_written_trace() -> None:
    data = series(_header(), HAND_EVENTS)
    assert data.seed == 7
    assert data.end_ms == 30_000
    assert data.mode == "none"
    [key] = data.keys
    assert key.key == "k"
    # Three distinct items wait; two are admitted; the requeue changes nothing.
    assert key.waiting == ((0, 3), (2_010, 1))
    assert key.in_use == ((0, 0), (2_010, 2), (3_005, 1), (21_010, 0))
    # The round's snapshot, then the sync's release (the replayed and forged ones free nothing),
    # the next round, the alarm's reclaim of G2's unclaimed permit, and the last release.
    assert key.granted == ((0, 0), (2_000, 2), (3_005, 1), (6_000, 2), (16_000, 1), (21_005, 0))
    assert key.leased == ((0, 0),)
    assert key.limit == ((0, 4), (5_000, 2))
    assert key.ceiling is None
    assert key.grant_pool is None
    [group] = key.groups
    assert group.granted == key.granted
    # The round reported a group limit at 6 s; the eviction forgot it.
    assert group.limit == ((0, None), (6_000, 3), (20_000, None))
    kinds = [(m.t_ms, m.kind) for m in key.marks]
    assert (4_200, "reply lost") in kinds
    assert (5_000, "limit changed") in kinds
    assert (16_000, "permits reclaimed") in kinds
    assert (20_000, "holder evicted") in kinds
    [band] = data.bands
    assert (band.start_ms, band.end_ms, band.target) == (1_000, 2_000, "client-1")
    assert band.concerns("k")


def test_value_at_reads_the_last_change_at_an_instant() -> None:
    steps = ((0, 1), (5, 3), (9, 0))
    assert [value_at(steps, t) for t in (0, 4, 5, 8, 9, 100)] == [1, 1, 3, 3, 0, 0]


def test_over_mode_ceiling_and_under_mode_grant_pool() -> None:
    over = _header(holder={"limit": 10, "leases": {"provisioning": "over", "amount": 0.5}})
    under = _header(holder={"limit": 10, "leases": {"provisioning": "under", "amount": 3}})
    limit_change = [{"t": 1_000, "kind": "operator", "action": "limit", "key": "k", "limit": 4}]
    [over_key] = series(over, limit_change).keys
    [under_key] = series(under, limit_change).keys
    assert over_key.ceiling == ((0, 15), (1_000, 6))
    assert under_key.grant_pool == ((0, 7), (1_000, 1))  # the reserve never takes the last permit


def _committed_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(t, grant rows' permits - released, lease footprint) after every holder commit."""
    seen: list[tuple[int, int, int]] = []
    original = invariants.Monitor.committed

    def committed(self: invariants.Monitor, key: str, holder: Any) -> None:
        store = holder.holder.store
        granted = sum(total for _, total in store.grant_totals().values())
        seen.append((self.sim.now(), granted, store.leased_footprint()))
        original(self, key, holder)

    monkeypatch.setattr(invariants.Monitor, "committed", committed)
    return seen


@pytest.mark.parametrize(
    ("config", "plan"),
    [
        (
            WorldConfig(duration_ms=120_000),
            FaultPlan(
                reply_loss=0.08,
                duplicate=0.1,
                evictions=(Eviction("holder:acct", 40_000),),
                limit_changes=(LimitChange(60_000, 5),),
            ),
        ),
        (
            WorldConfig(
                duration_ms=120_000,
                holder=HolderSpec(leases=LeaseSpec("over", 0.5, permits_per_lease=3)),
            ),
            FaultPlan(request_loss=0.05, reply_loss=0.1, reorder=0.2, reorder_ms=1_000),
        ),
    ],
    ids=["strict-evicted", "over-reordered"],
)
def test_derived_usage_equals_the_holders_rows_after_every_commit(
    monkeypatch: pytest.MonkeyPatch, config: WorldConfig, plan: FaultPlan
) -> None:
    """Syncs and reclaims emit no usage: the derived series must still match the committed rows."""
    truth = _committed_rows(monkeypatch)
    # The reordered run meets the known idle-lease finding (F4) on its way: tolerated, it goes on.
    run = run_world(config, plan, seed=11, tolerated=KNOWN_FINDINGS)
    assert run.result.outcome == "completed", run.result
    [key] = series(run.trace.header, list(run.trace.events())).keys
    last_at: dict[int, tuple[int, int]] = {}
    for t, granted, leased in truth:
        last_at[t] = (granted, leased)
    assert len(last_at) > 50
    for t, (granted, leased) in sorted(last_at.items()):
        assert (value_at(key.granted, t), value_at(key.leased, t)) == (granted, leased), t


def test_in_use_matches_the_monitors_oracle(example: Any) -> None:
    [key] = series(example.trace.header, list(example.trace.events())).keys
    assert key.in_use[-1][1] == example.monitor.in_use["acct"]
    assert max(v for _, v in key.in_use) <= 8


def test_plot_trace_writes_a_png(tmp_path: Path, example: Any) -> None:
    from semsim.report.plot import plot_trace

    events = list(example.trace.events())
    plain, grouped = tmp_path / "plain.png", tmp_path / "grouped.png"
    plot_trace(example.trace.header, events, plain, title="example")
    plot_trace(example.trace.header, events, grouped, per_group=True)
    assert plain.stat().st_size > 20_000
    width, height = _png_size(plain)
    grouped_width, grouped_height = _png_size(grouped)
    assert width == grouped_width
    assert grouped_height > height  # one more panel per group


def test_semsim_plot_writes_the_file(
    tmp_path: Path, example: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, out = tmp_path / "t.jsonl", tmp_path / "t.png"
    example.trace.write(trace)
    assert main(["plot", str(trace), "-o", str(out)]) == 0
    assert _png_size(out)[0] > 0
    assert str(out) in capsys.readouterr().out
    assert main(["plot", str(trace), "-o", str(tmp_path / "g.png"), "--per-group"]) == 0


def test_semsim_plot_titles_the_plot_with_the_trace_file(
    tmp_path: Path, example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trace names no scenario; its file's name is what the user chose to call the run.
    import semsim.report.plot

    figures: list[Any] = []
    real = semsim.report.plot.plot_trace

    def keep(*args: Any, **kwargs: Any) -> Any:
        figures.append(real(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(semsim.report.plot, "plot_trace", keep)
    trace = tmp_path / "evicted-at-45s.jsonl"
    example.trace.write(trace)
    assert main(["plot", str(trace), "-o", str(tmp_path / "t.png")]) == 0
    [fig] = figures
    assert any(text.get_text().startswith("semsim: evicted-at-45s.jsonl — seed ") for text in fig.texts)


def test_a_trace_of_a_quiet_run_is_a_valid_plot(tmp_path: Path) -> None:
    """Nothing happened: the plot shows the limit and says there were no faults."""
    trace, out = tmp_path / "quiet.jsonl", tmp_path / "quiet.png"
    trace.write_text(json.dumps(_header()) + "\n")
    assert main(["plot", str(trace), "-o", str(out)]) == 0
    assert _png_size(out)[0] > 0
    # The demand panel counts whole items, none here: 0 to 1, not 0.000 to 0.045.
    from semsim.report.plot import plot_trace

    fig = plot_trace(_header(), [], tmp_path / "again.png")
    [demand] = [ax for ax in fig.axes if "demand" in ax.get_title(loc="left")]
    assert demand.get_ylim() == (0.0, 1.0)
    assert all(float(tick).is_integer() for tick in demand.get_yticks())


def test_a_run_stopped_by_a_violation_ends_at_it() -> None:
    events = [
        _enqueue(100, "i1"),
        {"t": 2_500, "kind": "violation", "invariant": "ceiling", "finding": None, "detail": "k: usage"},
    ]
    data = series(_header(), events)
    assert data.end_ms == 2_500
    [mark] = data.keys[0].marks
    assert (mark.kind, mark.label, mark.detail) == ("violation", "ceiling", "k: usage")


def _header_line(**changes: Any) -> str:
    header = _header()
    header.update(changes)
    return json.dumps(header)


BAD_TRACES = {
    "not-json": "this is not json\n",
    "empty": "",
    "no-header": json.dumps({"t": 0, "kind": "round"}) + "\n",
    "wrong-version": _header_line(version=99) + "\n",
    "no-config": _header_line(config=None) + "\n",
    "no-limit": _header_line(config={"holder": {}}) + "\n",
    "no-key": _header_line(config={"holder": {"limit": 3}, "workload": {"keys": []}}) + "\n",
    "bad-event-time": _header_line() + "\n" + json.dumps({"t": -1, "kind": "round"}) + "\n",
    "malformed-round": _header_line() + "\n" + json.dumps({"t": 5, "kind": "round", "holder": "holder:k"}),
    "numeric-holder": _header_line()
    + "\n"
    + json.dumps({"t": 5, "kind": "group_limit", "holder": 7, "group": "g", "limit": 1}),
    "huge-number": _header_line() + "\n" + '{"t": ' + "9" * 5_000 + ', "kind": "round"}',
    "repeated-key": _header_line() + "\n" + '{"t": 5, "t": 6, "kind": "round"}',
    "bad-provisioning": _header_line(
        config={"holder": {"limit": 3, "leases": {"provisioning": "sideways"}}, "workload": {"keys": ["k"]}}
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_a_bad_trace_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    trace, out = tmp_path / "bad.jsonl", tmp_path / "bad.png"
    trace.write_text(BAD_TRACES[case])
    assert main(["plot", str(trace), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semsim plot: error: ")
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert str(trace) in err
    assert not out.exists()


@pytest.mark.parametrize("case", ["missing", "directory"])
def test_a_missing_or_directory_trace_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    trace = tmp_path / "nowhere.jsonl"
    if case == "directory":
        trace.mkdir()
    assert main(["plot", str(trace), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semsim plot: error: ")
    assert len(err.strip().splitlines()) == 1
    assert str(trace) in err


def test_an_unwritable_output_exits_2_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(_header()) + "\n")
    assert main(["plot", str(trace), "-o", str(tmp_path / "no" / "such" / "dir.png")]) == 2
    assert "no directory" in capsys.readouterr().err


def test_a_plot_over_its_own_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.png"  # a trace may have any name
    trace.write_text(json.dumps(_header()) + "\n")
    before = trace.read_bytes()
    assert main(["plot", str(trace), "-o", str(tmp_path / "." / "t.png")]) == 2
    err = capsys.readouterr().err
    assert "is the trace being plotted (TRACE.jsonl), which it would overwrite" in err
    assert trace.read_bytes() == before


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("abc def ghi", 8, "abc def…"),  # the space just past "def" ends the word
        ("abc def ghi", 7, "abc…"),
        ("abc def ghi", 11, "abc def ghi"),
        ("abcdefghijk", 5, "abcd…"),  # one word longer than the room: cut inside it
        ("limit 3, got 12345678", 15, "limit 3, got…"),  # never half a number
    ],
)
def test_a_shortened_detail_ends_at_a_word_within_its_limit(text: str, limit: int, shown: str) -> None:
    from semsim.report.plot import _shorten

    assert _shorten(text, limit) == shown
    assert len(_shorten(text, limit)) <= limit


def test_plot_error_is_a_value_error() -> None:
    with pytest.raises(PlotError, match=r"config\.holder\.limit"):
        series({"config": {"holder": {"limit": "ten"}}}, [])


# --- a run that stops at a violation ------------------------------------------------------

F3_CASE = Path(__file__).parent / "fixtures" / "findings" / "F3-claim-after-the-limit-fell.json"


def _shown_texts(fig: Any) -> list[Any]:
    """The text artists a reader sees: visible, non-empty, in a visible axes (if any)."""
    from matplotlib.text import Text

    return [
        text
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text().strip() and (text.axes is None or text.axes.get_visible())
    ]


def _inside(inner: Any, outer: Any) -> bool:
    return bool(
        outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1
    )


def _by_gid(fig: Any, gid: str) -> list[Any]:
    return list(fig.findobj(lambda artist: artist.get_gid() == gid))


def test_a_violation_is_drawn_inside_the_axes_and_named(tmp_path: Path) -> None:
    """F3 stops the run at its real_ceiling violation: the plot must still show and name it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from semsim.explore.fuzz import load_case, run_case
    from semsim.report.plot import plot_trace

    case, _ = load_case(F3_CASE)
    report, run = run_case(case, tolerated=frozenset())
    assert (report.outcome, report.invariant, report.finding) == ("violation", "real_ceiling", "F3")
    assert run is not None
    events = list(run.trace.events())
    [violation] = [e for e in events if e["kind"] == "violation"]
    assert violation["t"] == events[-1]["t"]  # the run ended at it

    out = tmp_path / "f3.png"
    fig = plot_trace(run.trace.header, events, out)
    assert _png_size(out) == (int(fig.bbox.width), int(fig.bbox.height))  # the figure saved
    assert isinstance(fig.canvas, FigureCanvasAgg)
    renderer = fig.canvas.get_renderer()

    [marker] = _by_gid(fig, "violation-marker")
    ax = marker.axes
    [(x, y)] = marker.get_offsets()
    assert x == violation["t"] / 1000
    left, right = ax.get_xlim()
    assert left < x < right
    # Drawn whole: the star (its size is an area in points²) lies inside the axes, so no clip cuts it.
    cx, cy = ax.transData.transform((x, y))
    radius = (marker.get_sizes()[0] ** 0.5) / 2 * fig.dpi / 72
    box = ax.get_window_extent(renderer)
    assert box.x0 < cx - radius
    assert cx + radius < box.x1
    assert box.y0 < cy - radius
    assert cy + radius < box.y1

    labels = _by_gid(fig, "violation-label")
    assert labels
    for label in labels:
        assert "real_ceiling (F3)" in label.get_text()
        assert _inside(label.get_window_extent(renderer), label.axes.get_window_extent(renderer))
    [limit] = _by_gid(fig, "limit-label")
    assert limit.get_text() == "limit 4 → 1"
    assert _inside(limit.get_window_extent(renderer), limit.axes.get_window_extent(renderer))

    outside = [
        (text.get_text(), text.get_window_extent(renderer))
        for text in _shown_texts(fig)
        if not _inside(text.get_window_extent(renderer), fig.bbox)
    ]
    assert not outside


def _violation(t: int, invariant: str, finding: str | None, detail: str) -> dict[str, Any]:
    return {"t": t, "kind": "violation", "invariant": invariant, "finding": finding, "detail": detail}


#: Tolerated findings are recorded and the run goes on; the last violation stops it.
SEVERAL_VIOLATIONS: list[dict[str, Any]] = [
    *HAND_EVENTS[:6],
    _violation(3_000, "ceiling", "F1", "k: granted 5 > limit 4"),
    _violation(9_000, "reports_monotone", "F2", "k: grant G1 moved back: claimed 2 -> 1"),
    _violation(12_000, "ceiling", "F1", "k: granted 6 > limit 4"),
    _violation(12_000, "ceiling", "F1", "k: granted 6 > limit 4"),
    {"t": 14_000, "kind": "operator", "action": "limit", "key": "k", "limit": 2},
    _violation(14_500, "real_ceiling", None, "k: 3 permits in use > limit 2 " + "and a long tail " * 8),
]


def test_several_violations_are_labelled_once_per_kind(tmp_path: Path) -> None:
    from semsim.report.plot import plot_trace, x_limits

    assert x_limits(series(_header(), HAND_EVENTS)) == (0.0, 30.0)  # no violation: just the run
    data = series(_header(), SEVERAL_VIOLATIONS)
    assert data.end_ms == 14_500
    [key] = data.keys
    assert [m.label for m in key.marks if m.kind == "violation"] == [
        "ceiling (F1)",
        "reports_monotone (F2)",
        "ceiling (F1)",
        "ceiling (F1)",
        "real_ceiling",
    ]
    left, right = x_limits(data)
    assert left < 3.0
    assert right > 14.5

    fig = plot_trace(_header(), SEVERAL_VIOLATIONS, tmp_path / "several.png")
    labels = sorted(_by_gid(fig, "violation-label"), key=lambda label: -label.get_window_extent().y1)
    assert [label.get_text().splitlines()[0] for label in labels] == [
        "violated: ceiling (F1) ×3, first at 3 s",
        "violated: reports_monotone (F2) at 9 s",
        "violated: real_ceiling at 14.5 s",
    ]
    assert labels[-1].get_text().endswith("…")  # a long detail is shortened
    # ... at a word: what is shown of the detail is whole words of it, no number cut in half.
    shown = labels[-1].get_text().splitlines()[1].removesuffix("…")
    detail = next(e["detail"] for e in SEVERAL_VIOLATIONS if e.get("invariant") == "real_ceiling")
    assert detail.startswith(shown)
    assert detail[len(shown)] in " ,;:"
    extents = [label.get_window_extent() for label in labels]
    for label, extent in zip(labels, extents, strict=True):
        assert _inside(extent, label.axes.get_window_extent())
    for upper, lower in itertools.pairwise(extents):
        assert not upper.overlaps(lower)
    markers = _by_gid(fig, "violation-marker")
    assert [len(marker.get_offsets()) for marker in markers] == [3, 1, 1]  # rows of the strip, per kind
    # One line per instant with a violation, on each of the key's three panels.
    assert len(_by_gid(fig, "violation-line")) == 3 * 4
    assert not [t.get_text() for t in _shown_texts(fig) if not _inside(t.get_window_extent(), fig.bbox)]


def test_the_apis_calls_in_flight_are_the_apis_own_count_and_retries_are_marked(tmp_path: Path) -> None:
    """In the account-concurrency world the plot draws the external API's calls in flight (the
    ground truth, zombies included) and marks retried attempts; other worlds have no such line."""
    from semsim.report.plot import plot_trace
    from semsim.scenarios.operations import one_job
    from semsim.world.external_api import ExternalApi

    run = run_world(one_job(30_000, attempt_timeout_ms=10_000, limit=4), FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    api = run.world.api
    assert isinstance(api, ExternalApi)
    [key] = series(run.trace.header, list(run.trace.events())).keys
    assert key.api_calls is not None
    peak = max(v for _, v in key.api_calls)
    assert peak == 3  # three attempts' calls at once for one job ...
    assert max(v for _, v in key.in_use) == 1  # ... on one permit
    assert key.api_calls[-1][1] == 0 == sum(api.in_flight.values())
    retried = [m for m in key.marks if m.kind == "attempt retried"]
    assert [m.detail.split()[-1] for m in retried] == ["1", "2"]
    assert [m.kind for m in key.marks if m.kind == "attempt failed"] == ["attempt failed"]
    # All three attempts timed out with their 30 s calls running on: three zombies, where the
    # attempts were retried (1, 2) and where the last one failed (3).
    zombies = [(m.t_ms, m.detail.split()[-1]) for m in key.marks if m.kind == "call outlived its attempt"]
    settled = [m for m in key.marks if m.kind in ("attempt retried", "attempt failed")]
    assert zombies == [(m.t_ms, m.detail.split()[-1]) for m in settled]
    assert [attempt for _, attempt in zombies] == ["1", "2", "3"]
    png = tmp_path / "ops.png"
    fig = plot_trace(run.trace.header, list(run.trace.events()), png)
    assert png.stat().st_size > 20_000
    # The header's legend for the dashed line is read whole, not cut at the figure's edge.
    fig.canvas.draw()
    assert not [t.get_text() for t in _shown_texts(fig) if not _inside(t.get_window_extent(), fig.bbox)]
    [legend] = [t for t in _shown_texts(fig) if t.get_text().startswith("Stacked areas")]
    assert not [
        ax
        for ax in fig.axes
        if ax.title.get_text() and legend.get_window_extent().overlaps(ax.title.get_window_extent())
    ]
    # A world without operations has no API line.
    plain = run_world(WorldConfig(duration_ms=60_000), FaultPlan(), seed=1)
    [plain_key] = series(plain.trace.header, list(plain.trace.events())).keys
    assert plain_key.api_calls is None


def test_with_f5s_fix_no_call_outlives_its_attempt_on_the_plot() -> None:
    """The fix cuts each call at its attempt's deadline, in the millisecond the attempt times out:
    the same story as above, with no zombie marked."""
    from semaphore_core.fixes import CALLS_END_WITHIN_THEIR_PERMIT
    from semsim.scenarios.operations import one_job

    config = one_job(30_000, attempt_timeout_ms=10_000, limit=4)
    config = attrs.evolve(config, holder=attrs.evolve(config.holder, fixes=(CALLS_END_WITHIN_THEIR_PERMIT,)))
    run = run_world(config, FaultPlan(), seed=1)
    [key] = series(run.trace.header, list(run.trace.events())).keys
    assert len([m for m in key.marks if m.kind == "attempt retried"]) == 2
    assert not [m for m in key.marks if m.kind == "call outlived its attempt"]


def test_an_operation_out_of_attempts_while_its_evicted_attempts_call_runs_marks_a_zombie() -> None:
    from semsim.scenarios import SCENARIOS

    scenario = SCENARIOS["last-attempt-evicted-terminal"]
    run = run_world(scenario.config, scenario.faults, scenario.seed, tolerated=scenario.tolerated)
    [key] = series(run.trace.header, list(run.trace.events())).keys
    [terminal] = [m for m in key.marks if m.kind == "attempts exhausted"]
    zombies = [m.t_ms for m in key.marks if m.kind == "call outlived its attempt"]
    assert terminal.t_ms in zombies


def test_an_evicted_attempts_call_running_when_the_next_attempt_starts_marks_a_zombie() -> None:
    """Seed 000's walkthrough: an eviction mid-attempt starts attempt 2 while attempt 1 still calls
    the API. Attempt 1 never settles and attempt 2 completes, so no settle or terminal marks it."""
    from semsim.scenarios.operations import CLIENT, one_job

    config = one_job(30_000, idempotent=False)
    run = run_world(
        config, FaultPlan(evictions=(Eviction(CLIENT, 5_000),)), seed=1, tolerated=frozenset({"F5"})
    )
    assert [(v.name, v.finding) for v in run.monitor.violations][:1] == [("external_ceiling", "F5")]
    [started] = [
        e["t"] for e in run.trace.of_kind("operation") if e["type"] == "attempt_started" and e["attempt"] == 2
    ]
    [key] = series(run.trace.header, list(run.trace.events())).keys
    zombies = [m for m in key.marks if m.kind == "call outlived its attempt"]
    assert [(m.t_ms, m.detail) for m in zombies] == [(started, "client-0/item-1 before attempt 2")]


def test_the_documented_leak_is_hatched_and_named_and_leases_are_marked(tmp_path: Path) -> None:
    """The quick start's plot: the 3 permits of the lease in a lost reply are labelled as the
    documented leak, not left as a band nobody explains, and the strip marks lease grants."""
    from matplotlib.collections import PolyCollection

    from semsim.report.plot import plot_trace
    from semsim.scenarios import SCENARIOS, run_scenario

    run = run_scenario(SCENARIOS["lease-lost-in-reply"]).world
    assert run is not None
    events = list(run.trace.events())
    data = series(run.trace.header, events)
    (key,) = data.keys
    [granted] = [e for e in events if e["kind"] == "lease_granted"]
    assert key.leaked == ((0, 0), (granted["t"], granted["permits"]))
    assert run.monitor.leaks["lease_lost_in_reply"] == 1  # the checker's count agrees
    assert "lease granted" in {mark.kind for mark in key.marks}
    fig = plot_trace(run.trace.header, events, tmp_path / "leak.png")
    texts = [text.get_text() for ax in fig.axes for text in ax.texts]
    assert any(text.startswith("3 leased permits never come back") for text in texts), texts
    hatched = [
        c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection) and c.get_hatch()
    ]
    assert hatched


def test_a_lease_every_client_knows_is_not_called_leaked() -> None:
    from semsim.scenarios import SCENARIOS, run_scenario

    run = run_scenario(SCENARIOS["contended-returns-idle-headroom"]).run
    (key,) = series(run.trace.header, list(run.trace.events())).keys
    assert "lease granted" in {mark.kind for mark in key.marks}
    assert all(permits == 0 for _, permits in key.leaked)
