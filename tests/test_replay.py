"""``semsim replay``: recorded traffic through the holder model, invariants checked, errors named."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from semaphore_core import Holder, HolderConfig, LeaseGranted, LeaseOptions, Strict, Under
from semaphore_core.store import HolderStore
from semsim.cli.main import main
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.report import replay as replay_module
from semsim.report.replay import (
    example_traffic,
    read_traffic,
    record_traffic,
    replay,
    traffic_from_trace,
    write_traffic,
)
from semsim.world.faults import Eviction, FaultPlan, GroupLimitChange, LimitChange, Window
from semsim.world.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "traffic.jsonl"
SAFETY_CHECKED = ("ceiling", "group_ceiling", "reports_monotone", "durable")


def _write(tmp_path: Path, records: list[dict[str, Any]], name: str = "traffic.jsonl") -> Path:
    path = tmp_path / name
    write_traffic(records, path)
    return path


def _request(t: int, client: str, group: str, count: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "request",
        "v": 1,
        "clientId": client,
        "demand": [{"group": group, "count": count, "oldestAt": t}] if count else [],
        "grants": extra.pop("grants", []),
    }
    body.update(extra)
    return {"t": t, "kind": "request", "body": body}


def _sync(t: int, client: str, grants: list[dict[str, Any]]) -> dict[str, Any]:
    return {"t": t, "kind": "sync", "body": {"type": "sync", "v": 1, "clientId": client, "grants": grants}}


def _report(grant_id: str, claimed: int, released: int) -> dict[str, Any]:
    return {"grantId": grant_id, "claimed": claimed, "released": released}


# --- the shipped example ---------------------------------------------------------------------


def test_the_example_replays_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "all held" in out
    assert "VIOLATED" not in out


def test_the_example_is_what_its_generator_records() -> None:
    """examples/traffic.jsonl is reproducible: ``write_traffic(example_traffic(), path)``."""
    recorded = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert recorded == example_traffic()
    kinds = {record["kind"] for record in recorded}
    assert {"config", "request", "sync", "round", "limit"} <= kinds
    clients = {r["body"]["clientId"] for r in recorded if r["kind"] in ("request", "sync")}
    groups = {d["group"] for r in recorded if r["kind"] == "request" for d in r["body"]["demand"]}
    assert len(clients) == 3
    assert groups == {"wf-1", "wf-2"}
    assert any("leases" in r["body"] for r in recorded if r["kind"] == "request")  # a lease-capable client
    assert any(rep["released"] > 0 for r in recorded if r["kind"] == "sync" for rep in r["body"]["grants"])


def test_the_summary_matches_a_direct_holder_run() -> None:
    """Drive ``Holder`` by hand with the example's lines; replay's numbers must be the same."""
    records = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    config = records[0]
    limit = {"value": config["limit"]}
    ids = iter(range(1, 10_000))
    holder = Holder(
        sqlite3.connect(":memory:"),
        HolderConfig(
            limit=lambda: limit["value"],
            round_wait_ms=config["roundWaitMs"],
            round_period_ms=config["roundPeriodMs"],
            grant_timeout_ms=config["grantTimeoutMs"],
            leases=LeaseOptions(provisioning=Strict(), permits_per_lease=config["leases"]["permitsPerLease"]),
        ),
        new_id=lambda: f"{config['idPrefix']}{next(ids)}",
    )
    pending: list[dict[str, Any]] = []
    rounds = grants = granted_permits = leases = leased_permits = reclaimed = peak = 0
    for record in records[1:]:
        t, kind = record["t"], record["kind"]
        if kind == "request":
            pending.append(record["body"])
        elif kind == "round":
            outcome = holder.round(pending, t)
            pending = []
            rounds += 1
            for reply in outcome.replies:
                grants += len(reply.grants)
                granted_permits += sum(g.permits for g in reply.grants)
            for event in outcome.events:
                if isinstance(event, LeaseGranted):
                    leases += 1
                    leased_permits += event.permits
            reclaimed += sum(getattr(e, "permits", 0) for e in outcome.events if e.type == "grant_reclaimed")
        elif kind == "sync":
            holder.sync(record["body"], t)
        elif kind == "reclaim":
            reclaimed += sum(e.permits for e in holder.reclaim_expired(t))
        elif kind == "limit":
            limit["value"] = record["limit"]
        usage = holder.usage(t)
        peak = max(peak, usage.granted + usage.leased)
    summary = replay(read_traffic(EXAMPLE)).summary
    assert (summary.rounds, summary.grants, summary.granted_permits) == (rounds, grants, granted_permits)
    assert (summary.leases, summary.leased_permits) == (leases, leased_permits)
    assert summary.reclaimed_permits == reclaimed
    assert summary.peak_usage == peak
    final = holder.usage(records[-1]["t"])
    assert (summary.final_granted, summary.final_leased) == (final.granted, final.leased)


# --- recording a simulation ------------------------------------------------------------------


def test_a_recording_replays_to_the_simulated_holders_exact_state(tmp_path: Path) -> None:
    """Evictions, duplicates, reordering, lost replies, operator changes: the replayed holder
    issues the same ids and ends with the same rows, and finds the same holder-side violations
    (F2, tolerated in the run) that the simulation's monitor found."""
    config = WorldConfig(
        duration_ms=200_000,
        holder=HolderSpec(leases=LeaseSpec("under", 0.3, permits_per_lease=3)),
        workload=Workload(clients=3, plain_clients=1),
    )
    plan = FaultPlan(
        request_loss=0.03,
        reply_loss=0.05,
        duplicate=0.05,
        delay_ms=50,
        reorder=0.05,
        reorder_ms=100,
        partitions=(Window("client-0", 38_000, 48_000),),
        evictions=(Eviction("holder:acct", 76_000), Eviction("client-1", 90_000)),
        alarm_failure=0.3,
        limit_changes=(LimitChange(100_000, 5),),
        group_limit_changes=(GroupLimitChange(50_000, "acct", "wf-1", 2),),
    )
    run = run_world(config, plan, seed=3, tolerated=frozenset({"F1", "F2", "F3", "F4"}))
    assert run.result.outcome == "completed"
    records = record_traffic(run)
    assert {"evict", "groupLimit", "limit", "round", "sync", "request"} <= {r["kind"] for r in records}
    result = replay(read_traffic(_write(tmp_path, records)))

    store = HolderStore(run.world.holders["acct"].storage)
    assert result.grants == tuple(store.list_grants())
    assert result.leases == tuple(store.list_leases())
    events = list(run.trace.events())
    assert result.summary.rounds == sum(1 for e in events if e["kind"] == "round")
    assert result.summary.grants == sum(1 for e in events if e["kind"] == "grant")
    assert result.summary.leases == sum(1 for e in events if e["kind"] == "lease_granted")
    simulated = [
        (e["t"], e["invariant"], e["finding"])
        for e in events
        if e["kind"] == "violation" and e["invariant"] in SAFETY_CHECKED
    ]
    assert simulated  # the plan reaches F2
    assert [(v.t_ms, v.invariant, v.finding) for v in result.violations] == simulated


def test_a_trace_with_several_keys_needs_a_key() -> None:
    run = run_world(
        WorldConfig(duration_ms=10_000, workload=Workload(clients=1, keys=("a", "b"))), FaultPlan(), seed=1
    )
    with pytest.raises(ValueError, match="name one"):
        record_traffic(run)
    header, events = run.trace.header, list(run.trace.events())
    assert traffic_from_trace(header, events, "b")[0]["key"] == "b"
    with pytest.raises(ValueError, match="no holder key 'c'"):
        traffic_from_trace(header, events, "c")


# --- hand-written traffic --------------------------------------------------------------------


def test_replayed_reordered_and_forged_reports_free_capacity_once(tmp_path: Path) -> None:
    """c1 holds a grant of 2 and releases 1; the same report again, an older one, and another
    client's forged "released 2" must leave exactly 1 permit charged: c2 then gets 1, not 2."""
    grant = "acct/g-1"
    records = [
        {"kind": "config", "key": "acct", "limit": 2},
        _request(0, "c1", "g", 2),  # round at 1000: grant acct/g-1 of 2
        _sync(2_000, "c1", [_report(grant, 2, 1)]),
        _sync(3_000, "c1", [_report(grant, 2, 1)]),  # replayed
        _sync(3_500, "c1", [_report(grant, 2, 0)]),  # reordered: an older report
        _sync(4_000, "c2", [_report(grant, 2, 2)]),  # forged by another client
        _request(5_000, "c2", "g", 2, grants=[_report(grant, 2, 2)]),  # and again, in a request
    ]
    result = replay(read_traffic(_write(tmp_path, records)))
    assert result.violations == ()
    summary = result.summary
    assert summary.rounds == 2
    assert summary.granted_permits == 3  # 2 to c1, then only 1 to c2
    assert summary.peak_usage == 2
    assert dict(summary.report_results)["not_found"] == 2
    # c2 never claims its permit: the alarm reclaims it (after the last line, the holder's due
    # work runs out); c1's unreleased permit stays charged, exactly once.
    assert (summary.reclaimed_permits, summary.final_granted) == (1, 1)
    [g1] = result.grants
    assert (g1.grant_id, g1.client_id, g1.permits, g1.claimed, g1.released) == (grant, "c1", 2, 2, 1)


def test_auto_schedule_batches_like_the_holder_object_and_runs_the_alarm(tmp_path: Path) -> None:
    records = [
        {"kind": "config", "key": "acct", "limit": 5, "roundWaitMs": 1_000, "roundPeriodMs": 2_000},
        _request(0, "c1", "g", 1),
        _request(500, "c2", "g", 1),  # joins the round at 1000 (round_wait after the first)
        _request(1_000, "c3", "g", 1),  # arrives as that round fires: the next, at 3000
        _sync(1_500, "c1", [_report("acct/g-1", 1, 0)]),  # c1 claims; c2 never does
        _sync(20_000, "c1", [_report("acct/g-1", 1, 1)]),
    ]
    result = replay(read_traffic(_write(tmp_path, records)))
    summary = result.summary
    assert summary.rounds == 2
    assert summary.grants == 3
    # c2's and c3's unclaimed permits come back at their claim deadlines (1000 + 10000, 3000 + 10000).
    assert summary.reclaim_passes == 2
    assert summary.reclaimed_permits == 2
    assert (summary.final_granted, summary.final_leased) == (0, 0)
    assert result.violations == ()


def test_an_eviction_loses_waiting_requests_and_keeps_every_row(tmp_path: Path) -> None:
    records = [
        {"kind": "config", "key": "acct", "limit": 3, "groupLimits": {"g": 2}},
        _request(0, "c1", "g", 3),  # round at 1000: 2 (the group limit)
        _request(1_500, "c2", "g", 1),
        {"t": 2_000, "kind": "evict"},  # before c2's round (due at 3000): c2's request is lost
        _request(4_000, "c2", "g", 1),
        {"t": 9_000, "kind": "groupLimit", "group": "g", "limit": None},
        {"t": 9_000, "kind": "limit", "limit": 2},
    ]
    result = replay(read_traffic(_write(tmp_path, records)))
    summary = result.summary
    assert (summary.evictions, summary.requests_lost, summary.limit_changes) == (1, 1, 2)
    assert summary.rounds == 2
    assert summary.granted_permits == 2  # the group limit survived the eviction: c2 got nothing
    assert result.violations == ()


F1_TRAFFIC: list[dict[str, Any]] = [
    {
        "kind": "config",
        "key": "acct",
        "limit": 5,
        "leases": {
            "provisioning": {"mode": "strict"},
            "permitsPerLease": 3,
            "limitedGroups": "withinGroupLimit",
        },
        "groupLimits": {"g1": 2},
    },
    _request(0, "L0", "g1", 1, leases=[]),  # round at 1000: grant 1, lease 1 (the group's room)
    _request(2_000, "L1", "g1", 1, leases=[]),  # round at 3000: another grant; g1 holds 2 + 1 > 2
]


def test_known_finding_f1_is_reported_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, F1_TRAFFIC)
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    [violation] = [line for line in out.splitlines() if line.startswith("VIOLATED")]
    assert violation.startswith(f"VIOLATED group_ceiling at {path}:3, t=3000 ms")
    assert "known finding F1" in violation
    assert "2 granted + 1 leased > group limit 2" in violation
    [found] = replay(read_traffic(path)).violations
    assert (found.invariant, found.finding, found.lines) == ("group_ceiling", "F1", (3,))


def test_json_of_a_violation_lists_it_with_its_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, F1_TRAFFIC)
    assert main(["replay", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["held"] is False
    [violation] = result["violations"]
    assert (violation["invariant"], violation["finding"], violation["lines"]) == ("group_ceiling", "F1", [3])
    assert "VIOLATED group_ceiling" in captured.err


def test_with_the_f1_fix_the_same_traffic_is_clean(tmp_path: Path) -> None:
    fixed = [{**F1_TRAFFIC[0], "fixes": ["group-ceiling-counts-leases"]}, *F1_TRAFFIC[1:]]
    assert main(["replay", str(_write(tmp_path, fixed))]) == 0


def test_an_explicit_schedule_runs_rounds_only_at_round_lines(tmp_path: Path) -> None:
    records = [
        {"kind": "config", "key": "acct", "limit": 2, "schedule": "explicit"},
        _request(0, "c1", "g", 2),
        _request(100, "c2", "g", 2),
        {"t": 50_000, "kind": "round"},
        {"t": 60_000, "kind": "reclaim"},
    ]
    summary = replay(read_traffic(_write(tmp_path, records))).summary
    assert (summary.rounds, summary.granted_permits, summary.reclaim_passes) == (1, 2, 1)
    assert summary.reclaimed_permits == 2  # no alarm ran on its own in between
    assert summary.peak_at_ms == 50_000


def test_the_summary_counts_in_good_english(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``1 line``, ``1 waiting request lost``, ``1 permit``: a count of one takes the singular."""
    assert main(["replay", str(_write(tmp_path, [{"kind": "config", "key": "acct", "limit": 3}]))]) == 0
    alone = capsys.readouterr().out
    assert ": 1 line for key 'acct'" in alone
    assert "(0 waiting requests lost)" in alone
    assert "peak usage 0 permits (" in alone
    records = [
        {"kind": "config", "key": "acct", "limit": 3},
        _request(0, "c1", "g", 1),  # granted by the round at 1 s
        _request(5_000, "c2", "g", 1),  # still waiting when the instance goes
        {"t": 5_001, "kind": "evict"},
    ]
    assert main(["replay", str(_write(tmp_path, records))]) == 0
    out = capsys.readouterr().out
    assert ": 4 lines for key 'acct'" in out
    assert "evictions 1 (1 waiting request lost)" in out
    assert "peak usage 1 permit (1 granted + 0 leased)" in out


def test_blank_lines_are_skipped_and_counted_as_in_a_trace(tmp_path: Path) -> None:
    """Blank lines (JSON whitespace only) are skipped, as a trace's are; line numbers count them."""
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n" + CONFIG + "\n \t\r\n" + REQUEST + "\n\n")
    traffic = read_traffic(path)
    assert [line.number for line in traffic.lines] == [4]
    assert replay(traffic).summary.lines == 2


# --- malformed files -------------------------------------------------------------------------

CONFIG = json.dumps({"kind": "config", "key": "acct", "limit": 3})
REQUEST = json.dumps(_request(0, "c1", "g", 1))

BAD_FILES: dict[str, tuple[str, str]] = {
    "not-json": (CONFIG + "\n{not json\n", ":2: not JSON"),
    "not-an-object": (CONFIG + "\n[1, 2]\n", ":2: each line must be a JSON object"),
    "no-config": (REQUEST + "\n", ":1: the first line must be the holder's config"),
    "second-config": (CONFIG + "\n" + CONFIG + "\n", ":2: only the first line is a config line"),
    "unknown-kind": (CONFIG + '\n{"t": 0, "kind": "lunch"}\n', ':2: unknown kind "lunch"'),
    "unknown-field": (
        CONFIG + '\n{"t": 0, "kind": "evict", "why": 1}\n',
        ":2: an evict line has no field 'why'",
    ),
    "time-backwards": (
        CONFIG + "\n" + json.dumps(_request(500, "c", "g", 1)) + "\n" + REQUEST + "\n",
        ":3: time goes backwards (0 ms after 500 ms)",
    ),
    "no-time": (
        CONFIG + '\n{"kind": "evict"}\n',
        ":2: an evict line needs 't': its time in virtual milliseconds",
    ),
    "null-time": (CONFIG + '\n{"t": null, "kind": "evict"}\n', ":2: t must be an integer >= 0"),
    "no-kind": (CONFIG + '\n{"t": 0}\n', ":2: a line needs 'kind': one of request, sync, round,"),
    "no-limit": (CONFIG + '\n{"t": 0, "kind": "limit"}\n', ":2: a limit line needs 'limit': an integer >= 0"),
    "no-key": (json.dumps({"kind": "config", "limit": 3}), ":1: config needs 'key': the holder's key"),
    # Blank lines are skipped, and counted: the error names the line an editor shows.
    "after-blank-lines": (CONFIG + "\n\n \t\n{not json\n", ":4: not JSON"),
    "float-time": (CONFIG + '\n{"t": 1.5, "kind": "evict"}\n', ":2: t must be an integer >= 0"),
    # A round's wait or a claim deadline later would be past 2^53: the holder could not take it.
    "time-near-2^53": (
        CONFIG + "\n" + json.dumps(_request(2**53 - 10, "c", "g", 1)) + "\n",
        f":2: t must be an integer >= 0 and at most {2**52}",
    ),
    "malformed-body": (
        CONFIG + '\n{"t": 0, "kind": "request", "body": {"type": "request", "v": 1, "clientId": "c"}}\n',
        ":2: Malformed semaphore message",
    ),
    "negative-count": (
        CONFIG + "\n" + json.dumps(_request(0, "c", "g", -1)) + "\n",
        ":2: Malformed semaphore message",
    ),
    "body-kind-mismatch": (
        CONFIG + "\n" + json.dumps({**_sync(0, "c", []), "kind": "request"}) + "\n",
        ":2: a request line's body must be a wire request",
    ),
    "round-in-auto": (
        CONFIG + '\n{"t": 0, "kind": "round"}\n',
        ':2: round lines need "schedule": "explicit"',
    ),
    "bad-limit-line": (CONFIG + '\n{"t": 0, "kind": "limit", "limit": -1}\n', ":2: limit must be an integer"),
    "unknown-config-field": (
        json.dumps({"kind": "config", "key": "acct", "limit": 3, "limt": 4}) + "\n",
        ":1: config: unknown field 'limt'",
    ),
    "bad-provisioning": (
        json.dumps({"kind": "config", "key": "a", "limit": 3, "leases": {"provisioning": {"mode": "x"}}}),
        ":1: leases.provisioning must be",
    ),
    "unknown-fix": (
        json.dumps({"kind": "config", "key": "a", "limit": 3, "fixes": ["make-it-fast"]}),
        ":1: fixes: unknown fix 'make-it-fast'",
    ),
    "zero-period": (
        json.dumps({"kind": "config", "key": "a", "limit": 3, "roundPeriodMs": 0}),
        ":1: round_period_ms must be a positive integer, got 0",
    ),
    "empty": ("\n\n", ": empty: a traffic file starts with a config line"),
    # JSON that names a key twice would mean its last value: refused, naming the key and line.
    "repeated-config-key": (
        '{"kind": "config", "key": "acct", "limit": 3, "limit": 30}\n',
        ":1: key 'limit' given twice at the top level; each key may appear once",
    ),
    "repeated-nested-key": (
        CONFIG + '\n{"t": 0, "kind": "request", "body": {"clientId": "a", "clientId": "b"}}\n',
        ":2: key 'clientId' given twice in body;",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_malformed_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, expected = BAD_FILES[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    assert main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing was replayed
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"semsim replay: error: {path}{expected}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["missing", "directory"])
def test_a_missing_or_directory_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path = tmp_path / "traffic.jsonl"
    if case == "directory":
        path.mkdir()
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"semsim replay: error: {path}: ")
    assert len(err.splitlines()) == 1


def test_oversized_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text(CONFIG + "\n" + "\n".join(json.dumps({"t": i, "kind": "reclaim"}) for i in range(10)))
    monkeypatch.setattr(replay_module, "MAX_TRAFFIC_LINES", 5)
    assert main(["replay", str(path)]) == 2
    assert "11 lines (blank ones not counted); replay reads at most 5" in capsys.readouterr().err
    monkeypatch.setattr(replay_module, "MAX_TRAFFIC_BYTES", 100)
    assert main(["replay", str(path)]) == 2
    assert "larger than the 100 bytes a traffic file may hold" in capsys.readouterr().err


# --- what replay reads ----------------------------------------------------------------------


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Replay ``path``: it must exit 2 with one line naming it on stderr, nothing replayed."""
    assert main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    assert len(captured.err.splitlines()) == 1, captured.err
    err = captured.err.strip()
    assert err.startswith(f"semsim replay: error: {path}"), err
    return err


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, if the body blocks (on a pipe with no writer, say)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_device_is_refused_before_a_byte_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    # /dev/zero says it holds 0 bytes and never ends: reading it once grew replay to 13 GB.
    err = _refused(Path("/dev/zero"), capsys)
    assert err == "semsim replay: error: /dev/zero: not a regular file; a traffic file must be one"


def test_a_fifo_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "traffic.jsonl"
    os.mkfifo(fifo)
    with _deadline(10):
        err = _refused(fifo, capsys)
    assert err == f"semsim replay: error: {fifo}: not a regular file; a traffic file must be one"


def test_the_byte_bound_holds_where_the_size_on_disk_says_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Path("/proc/self/status")  # a regular file whose size, to stat, is 0
    if not proc.is_file() or proc.stat().st_size != 0 or len(proc.read_bytes()) <= 64:
        pytest.skip("needs Linux /proc")
    monkeypatch.setattr(replay_module, "MAX_TRAFFIC_BYTES", 64)
    err = _refused(proc, capsys)
    assert err == f"semsim replay: error: {proc}: larger than the 64 bytes a traffic file may hold"


# --- the config line: HolderConfig's rules and messages ---------------------------------------

_SAFE = 2**53 - 1
_LEASING_REQUEST = {**_request(0, "c1", "g", 1), "body": {**_request(0, "c1", "g", 1)["body"], "leases": []}}

#: case -> (config fields over CONFIG's, what follows "FILE:1: " on the one line of stderr).
BAD_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "limit-string": ({"limit": "ten"}, "limit must be a non-negative safe integer, got 'ten'"),
    "limit-negative": ({"limit": -3}, "limit must be a non-negative safe integer, got -3"),
    "limit-fraction": ({"limit": 2.5}, "limit must be a non-negative safe integer, got 2.5"),
    "limit-unsafe-float": ({"limit": 1e23}, "limit must be a non-negative safe integer, got 1e+23"),
    "limit-unsafe-int": ({"limit": _SAFE + 1}, f"limit must be a non-negative safe integer, got {_SAFE + 1}"),
    "limit-bool": ({"limit": True}, "limit must be a non-negative safe integer, got True"),
    "limit-missing": (
        {"limit": None},
        "config needs 'limit': the deployment's limit, a non-negative safe integer",
    ),
    "wait-zero": ({"roundWaitMs": 0}, "round_wait_ms must be a positive integer, got 0"),
    "period-fraction": ({"roundPeriodMs": 2.5}, "round_period_ms must be a positive integer, got 2.5"),
    "lease-size-unsafe": (
        {"leases": {"permitsPerLease": 10**20}},
        "leases.permits_per_lease must be at most 9007199254740991, got 100000000000000000000",
    ),
    "mode-bogus": (
        {"leases": {"provisioning": {"mode": "bogus"}}},
        'leases.provisioning must be {"mode": "strict"}, {"mode": "under", "reserve": N} or '
        '{"mode": "over", "extra": N} (N an integer or {"ratio": x}); got mode "bogus"',
    ),
    "reserve-fraction": (
        {"leases": {"provisioning": {"mode": "under", "reserve": 2.5}}},
        "leases.provisioning.reserve must be a non-negative safe integer or a Ratio, got 2.5",
    ),
    "extra-unsafe": (
        {"leases": {"provisioning": {"mode": "over", "extra": 10**20}}},
        "leases.provisioning.extra must be a non-negative safe integer or a Ratio, got 100000000000000000000",
    ),
    "ratio-too-large-for-a-double": (
        {"leases": {"provisioning": {"mode": "over", "extra": {"ratio": 10**400}}}},
        f"leases.provisioning.extra.ratio must be at most 9007199254740991, got {10**400}",
    ),
    "ratio-overflowing-the-budget": (
        {"limit": 10**10, "leases": {"provisioning": {"mode": "over", "extra": {"ratio": 1e300}}}},
        "leases.provisioning.extra.ratio must be at most 9007199254740991, got 1e+300",
    ),
    "limited-groups-not-a-name": (
        {"leases": {"limitedGroups": []}},
        'leases.limitedGroups must be "exclude" or "withinGroupLimit", got []',
    ),
    "group-limits-not-an-object": (
        {"groupLimits": []},
        "config.groupLimits must be an object or null, got []",
    ),
    "group-limit-fraction": (
        {"groupLimits": {"g": 2.5}},
        f'config.groupLimits["g"] must be null or an integer >= 0 and at most {_SAFE}, got 2.5',
    ),
    "group-limit-bool": (
        {"groupLimits": {"g": True}},
        f'config.groupLimits["g"] must be null or an integer >= 0 and at most {_SAFE}, got true',
    ),
    "group-name-with-a-newline": (
        {"groupLimits": {"a\nb": -1}},
        f'config.groupLimits["a\\nb"] must be null or an integer >= 0 and at most {_SAFE}, got -1',
    ),
    "fixes-not-a-list": ({"fixes": False}, "config.fixes must be a list of fix names, got false"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_bad_config_is_refused_with_holder_configs_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    fields, message = BAD_CONFIGS[case]
    config = {k: v for k, v in {**json.loads(CONFIG), **fields}.items() if v is not None}
    # A request that leases: a value that slips through validation would break the replay.
    path = _write(tmp_path, [config, _LEASING_REQUEST])
    err = _refused(path, capsys)
    assert err == f"semsim replay: error: {path}:1: {message}"


def test_a_huge_value_is_shown_cut_short(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [{**json.loads(CONFIG), "limit": "x" * 100_000}])
    err = _refused(path, capsys)
    assert err.startswith(
        f"semsim replay: error: {path}:1: limit must be a non-negative safe integer, got 'xxx"
    )
    assert len(err) < 1_200


def test_config_numbers_are_judged_as_holder_config_judges_them(tmp_path: Path) -> None:
    # JSON numbers are JavaScript's: 3.0 is the integer 3 (HolderConfig and the wire agree);
    # a null group limit is "no limit", as the groupLimit callback's null.
    config = {
        **json.loads(CONFIG),
        "limit": 3.0,
        "roundWaitMs": 500.0,
        "groupLimits": {"g": None, "h": 2.0},
        "leases": {"permitsPerLease": 4.0, "provisioning": {"mode": "under", "reserve": 1.0}},
    }
    traffic = read_traffic(_write(tmp_path, [config]))
    assert (traffic.config.limit, traffic.config.round_wait_ms) == (3, 500)
    assert traffic.config.group_limits == (("h", 2),)
    assert traffic.config.leases == LeaseOptions(provisioning=Under(reserve=1), permits_per_lease=4)
    assert all(type(n) is int for n in (traffic.config.limit, traffic.config.group_limits[0][1]))


# --- the timed lines ---------------------------------------------------------------------------

#: case -> (the lines after CONFIG, what follows "FILE:" on the one line of stderr).
BAD_LINES: dict[str, tuple[str, str]] = {
    "time-backwards": (
        REQUEST.replace('"t": 0', '"t": 500') + "\n\n" + REQUEST,
        "4: time goes backwards (0 ms after 500 ms) since line 2: t must never decrease",
    ),
    "group-limit-without-limit": (
        '{"t": 0, "kind": "groupLimit", "group": "g"}',
        "2: a groupLimit line needs 'limit': an integer >= 0, or null to lift the group's limit",
    ),
    "too-many-digits": (
        '{"t": ' + "1" * 5_000 + ', "kind": "evict"}',
        "2: a number with more than 4300 digits",
    ),
    "not-a-number": ('{"t": 0, "kind": "limit", "limit": NaN}', "2: not JSON (NaN is not a JSON value)"),
    "infinity": ('{"t": Infinity, "kind": "evict"}', "2: not JSON (Infinity is not a JSON value)"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_timed_line_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    lines, message = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(CONFIG + "\n" + lines + "\n")
    err = _refused(path, capsys)
    assert err == f"semsim replay: error: {path}:{message}"


def test_lines_are_split_at_newlines_only(tmp_path: Path) -> None:
    # JSON strings may hold U+2028 and form feeds unescaped; only "\n" ends a line.
    request = _request(0, "c\u2028\x0c1", "g", 1)
    path = tmp_path / "traffic.jsonl"
    path.write_text(
        CONFIG + "\n" + json.dumps(request, ensure_ascii=False) + "\n" + '{"t": 5, "kind": "evict"}\n'
    )
    traffic = read_traffic(path)
    assert [line.number for line in traffic.lines] == [2, 3]


def test_timed_numbers_are_judged_as_the_wire_judges_them(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    path.write_text(CONFIG + '\n{"t": 1.0, "kind": "limit", "limit": 2.0}\n')
    [line] = read_traffic(path).lines
    assert (line.t_ms, line.limit) == (1, 2)
    assert type(line.t_ms) is int
    assert type(line.limit) is int


def test_the_example_ships_with_semsim_and_replays_by_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from semsim.cli.main import main
    from semsim.report.replay import shipped_example

    repository = Path(__file__).resolve().parent.parent / "examples" / "traffic.jsonl"
    assert shipped_example().read_bytes() == repository.read_bytes()  # one recording, two places
    monkeypatch.chdir(tmp_path)  # a plain install: no examples/ here
    assert main(["replay", "--example"]) == 0
    assert "all held" in capsys.readouterr().out
    assert main(["replay", "examples/traffic.jsonl"]) == 2
    assert "`semsim replay --example` replays the copy it ships" in capsys.readouterr().err
    for argv in (["replay"], ["replay", "--example", "x.jsonl"]):
        assert main(argv) == 2
        assert "give a TRAFFIC.jsonl file to replay, or --example" in capsys.readouterr().err
