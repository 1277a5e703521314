"""Each finding of docs/FINDINGS.md, replayed: it breaks its invariant on the faithful
reference holder and holds once its fix is enabled.

The steps are the machine's own rules (tests/stateful_holder.py), so the
invariant checks are exactly the ones the fuzzer runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from semaphore_core import LeaseOptions, Over, Ratio, Strict, Under
from semaphore_core.fixes import CLAIMS_RESPECT_THE_LIMIT, GROUP_CEILING_COUNTS_LEASES, UNDER_SHARES_THE_LIMIT
from semaphore_core.queue import QueueClient, QueueItem
from semaphore_core.store import HolderStore
from semsim.explore.fuzz import load_case
from semsim.harness.run import run_world
from semsim.scenarios.base import delivered_at, events, sends
from semsim.world.faults import Eviction
from semsim.world.workload import Arrival
from tests.helpers import holder, request, sync, without_queue_model
from tests.stateful_holder import HolderMachine, InvariantViolation

CASES = Path(__file__).resolve().parent / "fixtures" / "findings"


def machine(fixes: frozenset[str]) -> HolderMachine:
    m = HolderMachine()
    m.fixes = fixes
    return m


def step(m: HolderMachine, action: Callable[[], object]) -> None:
    action()
    m.holds()


def f1_within_group_limit_grants_ignore_lease_footprint(m: HolderMachine) -> None:
    # Group g1 is limited to 2. Round 1: L0 queues one item: a grant of 1, and a
    # lease of the 1 permit of room left in the group. Round 2: L1 queues one
    # item: the grant pass sees only grants (1 of 2) and grants another.
    m.configure(
        provisioning=Strict(),
        limited_groups="within_group_limit",
        limit=5,
        permits_per_lease=3,
        capable=2,
        group_limits={"g1": 2},
    )
    m.holds()
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g1", 1)]))
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g1", 1)]))


def f2_under_leases_grow_above_a_lowered_limit(m: HolderMachine) -> None:
    # Under(reserve=1), limit 3: a plain client takes the 2 grant permits. The
    # limit falls to 2 (grants now over their pool of 1); a lease-capable client
    # still gets the reserve's permit: usage 2 + 1 grows above the limit 2.
    m.configure(provisioning=Under(reserve=1), limit=3, plain=1, capable=1)
    m.holds()
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 2)]))  # clients sort L0, p0
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g0", 1)]))


def f2_under_grants_grow_above_a_lowered_limit(m: HolderMachine) -> None:
    # Under(reserve=50%), limit 6: a lease of 3 (the reserve) and 2 granted. The
    # limit falls to 5: the reserve shrinks to 2 but the lease keeps its 3, and
    # grants may grow to their pool of 3: usage 3 + 3 grows above the limit 5.
    m.configure(provisioning=Under(reserve=Ratio(0.5)), limit=6, plain=1, capable=1)
    m.holds()
    step(
        m,
        lambda: m.run_round(
            who=[0], lose=[False] * 4, style="honest", forge_index=0, zero_demand=True, arrivals=[]
        ),
    )
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 2)]))
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 1)]))


FINDINGS = [
    ("F1", "group_ceiling", f1_within_group_limit_grants_ignore_lease_footprint, GROUP_CEILING_COUNTS_LEASES),
    ("F2", "ceiling", f2_under_leases_grow_above_a_lowered_limit, UNDER_SHARES_THE_LIMIT),
    ("F2", "ceiling", f2_under_grants_grow_above_a_lowered_limit, UNDER_SHARES_THE_LIMIT),
]


@pytest.mark.parametrize(
    ("finding", "invariant", "replay", "fix"), FINDINGS, ids=lambda v: getattr(v, "__name__", v)
)
def test_the_reference_breaks_the_invariant(finding: str, invariant: str, replay, fix: str) -> None:
    with pytest.raises(InvariantViolation) as caught:
        replay(machine(frozenset()))
    assert caught.value.name == invariant
    assert caught.value.finding == finding  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("finding", "invariant", "replay", "fix"), FINDINGS, ids=lambda v: getattr(v, "__name__", v)
)
def test_the_fix_holds_the_invariant(finding: str, invariant: str, replay, fix: str) -> None:
    replay(machine(frozenset({fix})))


def test_over_mode_is_not_affected_by_f2() -> None:
    # Over keeps two separate ceilings by design; lowering the limit there is fine.
    m = machine(frozenset())
    m.configure(provisioning=Over(extra=2), limit=3, plain=1, capable=1)
    m.holds()
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 3)]))
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g0", 1)]))


# --- F3 and F4: whole-system findings, their fixes at the level they act ------------------


def _f3_claim_after_the_limit_fell(fixes: frozenset[str]) -> tuple[list[tuple[str, int, str]], int]:
    """Limit 4: client a is granted 4; the operator lowers the limit to 1; a claims all 4.

    Returns the claim's grant results and the permits then claimed and unreleased.
    """
    limit = {"value": 4}
    h = holder(limit=lambda: limit["value"], fixes=fixes)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    limit["value"] = 1
    synced = h.sync(sync("a", grants=[(grant, 4, 0)]), now=100)
    results = [(r["grantId"], r["claimed"], r["status"]) for r in synced["grantResults"]]
    return results, h.store.claimed_in_use()


def test_f3_reference_lets_a_grant_from_the_old_limit_be_claimed_above_the_new_one() -> None:
    results, in_use = _f3_claim_after_the_limit_fell(frozenset())
    assert results == [("id-1", 4, "ok")]
    assert in_use == 4  # four items admitted under a limit of 1: real_ceiling broken


def test_f3_fix_clamps_the_claim_to_the_room_under_the_current_limit() -> None:
    results, in_use = _f3_claim_after_the_limit_fell(frozenset({CLAIMS_RESPECT_THE_LIMIT}))
    assert results == [("id-1", 1, "expired")]  # the client admits 1 and requeues 3
    assert in_use == 1


def test_f3_fix_counts_strict_lease_footprint_against_the_limit() -> None:
    limit = {"value": 4}
    h = holder(
        limit=lambda: limit["value"],
        fixes=frozenset({CLAIMS_RESPECT_THE_LIMIT}),
        leases=LeaseOptions(Strict(), permits_per_lease=4),
    )
    [reply] = h.run_round([request("a", [("g", 2, 0)])], now=0)
    grant = reply["grants"][0]["grantId"]
    [leased] = h.run_round([request("b", [("g", 1, 1)], leases=[])], now=10)
    assert [lease["permits"] for lease in leased["leases"]] == [1]  # grants 3 + footprint 1: full
    limit["value"] = 2
    [claim] = h.run_round([request("a", grants=[(grant, 2, 0)])], now=20)
    # Room under the new limit: 2 - 0 claimed - 1 of lease footprint.
    assert [(r["claimed"], r["status"]) for r in claim["grantResults"]] == [(1, "expired")]


def _f4_idle_lease_footprint(fix: bool) -> int:
    """A client's item runs on a grant; its lease's 2 permits sit undrawn with nothing queued.

    Returns the holder's lease footprint after the client's next report.
    """
    queue = QueueClient(sqlite3.connect(":memory:"), "c1", return_idle_leases=fix)
    h = holder(limit=4, leases=LeaseOptions(Strict(), permits_per_lease=2, ttl_ms=20_000))
    queue.enqueue([QueueItem(id="item-1", key="k", group="g")], now=0)
    message = queue.build_request("k", 0)
    changes = queue.sent("k", 0)
    [reply] = h.round([message], 0).replies
    assert [lease.permits for lease in reply.leases or ()] == [2]
    queue.on_grant("k", reply, 0)
    queue.acked("k", changes)
    for _ in range(2):  # confirm the claim, then report what changed
        confirm = queue.build_sync("k", 0)
        changes = queue.sent("k", 0)
        queue.on_synced("k", h.sync_message(confirm, 0), 0)
        queue.acked("k", changes)
    assert queue.status("item-1") == "running"
    return h.usage(0).leased


def test_f4_reference_keeps_idle_lease_headroom_until_told_contended() -> None:
    assert _f4_idle_lease_footprint(fix=False) == 2


def test_f4_fix_returns_idle_lease_headroom_at_once() -> None:
    assert _f4_idle_lease_footprint(fix=True) == 0


@pytest.mark.parametrize("evict_client", [False, True], ids=["live", "evicted-while-idle"])
def test_f4_lease_is_settled_once_its_ttl_runs_out(evict_client: bool) -> None:
    """F4's case, run past the lease's ttl: the idle client retires its lease at the expiry and
    reports it, and the holder forgets it. Blocked "until ttlMs", not for good.

    Evicted while idle, the client comes back on its durable alarm, which it
    keeps at the expiry (further out than the engine's alarm floor), at the
    same instant.
    """
    case, _ = load_case(CASES / "F4-idle-lease-blocks-others.json")
    leases, client = case.config.holder.leases, case.config.client
    assert leases is not None
    ttl_ms, latency_ms = leases.ttl_ms, case.config.latency_ms
    config = attrs.evolve(case.config, duration_ms=ttl_ms + 100_000)
    faults = attrs.evolve(case.faults, evictions=(Eviction("client-0", 100_000),) if evict_client else ())
    run = run_world(config, faults, case.seed)
    assert (run.result.outcome, run.monitor.violations) == ("completed", [])  # capacity_returns held

    [lease] = events(run, "lease_granted", clientId="client-0")
    lease_id = lease["leaseId"]
    reports = [
        (delivered_at(run, send["msg"]), report)
        for send in sends(run, "client-0")
        for report in send["body"].get("leases") or ()
        if report["leaseId"] == lease_id
    ]
    last_heard = max(t for t, report in reports if t is not None and not report.get("retired"))
    assert last_heard < 100_000  # client-0 went idle early; nothing heartbeats the lease after that
    expired_at = last_heard + ttl_ms
    assert [e["t"] for e in events(run, "lease_expired", lease=lease_id)] == [expired_at]
    # Retired, with what it drew (nothing), a report delay later; the holder settles it on arrival.
    [(reached_holder, retired)] = [(t, r) for t, r in reports if r.get("retired")]
    assert retired == {"leaseId": lease_id, "drawn": 0, "released": 0, "retired": True}
    assert reached_holder == expired_at + client.report_delay_ms + latency_ms
    settled = [e["t"] for e in events(run, "lease_settled", lease=lease_id)]
    assert settled == [reached_holder + latency_ms]
    store = HolderStore(run.world.holders["acct"].storage)
    assert store.list_leases() == []
    assert store.leased_footprint() == 0
    assert store.grant_totals() == {}


def test_f4_explains_an_idle_lease_only_until_its_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never retires its expired lease (semsim's own bug before the fix) is not F4.

    F4 is an idle client's live lease holding others up until its ``ttlMs``.
    Here client 1 queues 12 items after the ttl, and they run one at a time
    behind client 0's expired, unretired lease: starvation no finding excuses
    (and a run that cannot settle, as the lease's expiry is never acted on).
    """
    monkeypatch.setattr(QueueClient, "retire_expired", lambda self, now: [])
    without_queue_model(monkeypatch)  # which names the queue's bug first (exact_queue)
    case, _ = load_case(CASES / "F4-idle-lease-blocks-others.json")
    leases = case.config.holder.leases
    assert leases is not None
    late = Arrival(at_ms=leases.ttl_ms + 10_000, client=1, count=12, group="wf-1", duration_ms=5_000)
    workload = attrs.evolve(case.config.workload, script=(*case.config.workload.script, late))
    config = attrs.evolve(case.config, workload=workload, duration_ms=leases.ttl_ms + 100_000)
    run = run_world(config, case.faults, case.seed, tolerated=frozenset({"F4"}))
    assert run.monitor.violations == []  # nothing was put down to F4
    assert (run.result.outcome, run.result.invariant, run.result.finding) == ("violation", "progress", None)
    assert "0 idle lease headroom" in run.result.detail


@pytest.mark.parametrize("after_ms", [0, 1, 400])
def test_a_story_ending_as_an_idle_lease_expires_waits_for_its_report(after_ms: int) -> None:
    """Judged at, or just after, the instant the F4 lease expires: the client is about to retire
    it, or its report is on the way. Neither is a stuck run, nor a lease charged for good."""
    case, _ = load_case(CASES / "F4-idle-lease-blocks-others.json")
    leases = case.config.holder.leases
    assert leases is not None
    whole = run_world(attrs.evolve(case.config, duration_ms=leases.ttl_ms + 100_000), case.faults, case.seed)
    [expired_at] = [e["t"] for e in whole.trace.of_kind("lease_expired")]
    run = run_world(attrs.evolve(case.config, duration_ms=expired_at + after_ms), case.faults, case.seed)
    assert (run.result.outcome, run.result.detail) == ("completed", "")
    assert run.trace.of_kind("lease_settled")
