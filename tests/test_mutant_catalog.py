"""Every catalogued mutant is real, and leaves no trace once its block ends.

A mutant that changes nothing would score as "survived" and blame the
fuzzer for a bug that was never planted. So each mutant has a scripted
scenario on a ``Holder`` (no simulator) whose observable result (a reply, a
usage, a row) is pinned twice: the faithful value, and the value the planted
bug must produce. The scenario runs before, inside and after the ``with``
block, which also shows the original behaviour comes back.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from semaphore_core import Holder, HolderConfig, LeaseOptions, SemaphoreProtocolError, Strict, Under, migrate
from semaphore_core.durability import Participant, SchedulerOptions
from semaphore_core.durability.engine import Engine
from semaphore_core.durability.storage import DurableTable
from semaphore_core.protocol import (
    GrantedPermits,
    GrantResult,
    LeaseGrant,
    PermitGrant,
    PermitRequest,
    PermitSyncResult,
    parse_request,
)
from semaphore_core.queue import QueueClient, QueueItem
from semsim.harness.run import WorldRun
from semsim.world.mutant_catalog import MUTANTS, Mutant, mutant
from tests.helpers import bindings, changed_bindings, holder, ids, request, sync
from tests.operation_worlds import WORLDS as OPERATION_WORLDS

TTL = 60_000


def _leasing(limit: int = 10, provisioning: Any = None, **options: Any) -> Holder:
    options.setdefault("ttl_ms", TTL)
    return holder(limit=limit, leases=LeaseOptions(provisioning=provisioning or Strict(), **options))


def _grant_id(reply: dict[str, Any], index: int = 0) -> str:
    return str(reply["grants"][index]["grantId"])


def _lease_id(reply: dict[str, Any], index: int = 0) -> str:
    return str(reply["leases"][index]["leaseId"])


def _grants(reply: dict[str, Any]) -> list[tuple[str, int]]:
    return [(g["group"], g["permits"]) for g in reply["grants"]]


def _results(reply: dict[str, Any]) -> list[tuple[int, str]]:
    return [(r["claimed"], r["status"]) for r in reply["grantResults"]]


# --- one scenario per mutant ---------------------------------------------------------------


def report_lowers_high_water() -> object:
    """A replayed older report (released 0) after a newer one (released 2): what stays charged."""
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = _grant_id(reply)
    h.sync(sync("a", [(grant, 4, 2)]), now=10)
    h.sync(sync("a", [(grant, 4, 0)]), now=20)
    return h.usage(20).granted


def released_not_clamped_to_claimed() -> object:
    """A report releasing 3 of a grant with only 2 claimed."""
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    h.sync(sync("a", [(_grant_id(reply), 2, 3)]), now=10)
    return h.usage(10).granted


def reclaim_takes_claimed() -> object:
    """Two of four permits claimed in time; the alarm reclaims at the deadline."""
    h = holder(limit=4, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    h.sync(sync("a", [(_grant_id(reply), 2, 0)]), now=10)
    h.reclaim_expired(now=1_000)
    return h.usage(1_000).granted


def strict_forgets_lease_footprint() -> object:
    """A 6-permit lease and a 1-permit grant under limit 10: what a plain client gets next."""
    h = _leasing(limit=10, permits_per_lease=6)
    h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    [second] = h.run_round([request("b", [("g", 9, 1)])], now=100)
    return _grants(second)


def under_reserve_takes_last_permit() -> object:
    """Limit 1, reserve 5: a plain client's demand."""
    h = _leasing(limit=1, provisioning=Under(reserve=5))
    [reply] = h.run_round([request("p", [("g", 3, 0)])], now=0)
    return _grants(reply)


def unknown_lease_debt_dropped() -> object:
    """A ghost lease with 4 permits running is reported; the size of the fresh lease."""
    h = _leasing(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[("ghost", 7, 3)])], now=0)
    return [lease["permits"] for lease in reply["leases"][1:]]


def expired_lease_footprint_dropped() -> object:
    """A 4-permit lease expires unreported; the footprint still charged after the next round."""
    h = _leasing(limit=10, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.run_round([request("a", leases=[])], now=TTL)
    return h.usage(TTL).leased


def oldest_first_reversed() -> object:
    """Two clients want the whole limit; which one gets it."""
    h = holder(limit=3)
    late, early = h.run_round([request("late", [("g", 3, 50)]), request("early", [("g", 3, 10)])], now=100)
    return {"late": _grants(late), "early": _grants(early)}


def group_ceiling_ignored() -> object:
    """A group capped at 2 asks for 5."""
    h = holder(limit=10, group_limit=lambda g: 2 if g == "small" else None)
    [reply] = h.run_round([request("a", [("small", 5, 0)])], now=0)
    return _grants(reply)


def claim_window_not_enforced() -> object:
    """One permit claimed in time, then a claim of all four at the deadline (before any reclaim)."""
    h = holder(limit=5, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = _grant_id(reply)
    h.sync(sync("a", [(grant, 1, 0)]), now=500)
    return _results(h.sync(sync("a", [(grant, 4, 0)]), now=1_000))


def alarm_armed_before_round_writes() -> object:
    """The alarm the engine arms in the transaction of a round that grants 2 permits (claim by 1 s)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    h = Holder(conn, HolderConfig(limit=5, grant_timeout_ms=1_000), new_id=ids())
    alarm = _Alarm()
    engine = Engine(conn, alarm, SchedulerOptions(alarm_min_delay_ms=1_000))
    engine.register(
        Participant(
            table=DurableTable("grants", "id"),
            run_due=lambda *_: None,
            next_pending_at=lambda _c: h.next_alarm_at(),
        )
    )
    engine.transaction(lambda _conn: h.round([request("a", [("g", 2, 0)])], 0), now_ms=0)
    return [alarm.at]


def reports_after_allocation() -> object:
    """A client releases its 3 permits and asks for 3 more in the same round."""
    h = holder(limit=3)
    [first] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    grant = _grant_id(first)
    [second] = h.run_round([request("a", [("g", 3, 1)], grants=[(grant, 3, 3)])], now=100)
    return {"grants": _grants(second), "results": _results(second)}


def limit_off_by_one() -> object:
    h = holder(limit=3)
    [reply] = h.run_round([request("a", [("g", 5, 0)])], now=0)
    return _grants(reply)


def contended_never_set() -> object:
    """Three lease-capable clients, two permits: the youngest gets nothing, so every reply is contended."""
    h = _leasing(limit=2)
    replies = h.run_round(
        [request(c, [("g", 0, t)], leases=[]) for c, t in (("young", 9), ("old", 1), ("mid", 5))], now=0
    )
    return [r.get("contended", False) for r in replies]


def alarm_latest_deadline() -> object:
    """Grants with deadlines 1000 and 1500, both unclaimed: when the alarm is due."""
    h = holder(limit=5, grant_timeout_ms=1_000)
    h.run_round([request("a", [("g", 1, 0)])], now=0)
    h.run_round([request("b", [("g", 1, 0)])], now=500)
    return h.next_alarm_at()


def retired_report_shrinks_to_released() -> object:
    """A client retires its lease having drawn 3 and released 1: the footprint left."""
    h = _leasing(limit=10)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.sync(sync("a", leases=[(_lease_id(reply), 3, 1, True)]), now=10)
    return h.usage(10).leased


# --- the mutants written from the reference's code paths ----------------------------------------


def claim_deadline_off_by_one() -> object:
    """Nothing claimed in time; a claim of all four arrives exactly at the deadline."""
    h = holder(limit=5, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    return _results(h.sync(sync("a", [(_grant_id(reply), 4, 0)]), now=1_000))


def reclaim_deadline_off_by_one() -> object:
    """The alarm runs exactly at the claim deadline of an unclaimed grant: what it reclaims."""
    h = holder(limit=4, grant_timeout_ms=1_000)
    h.run_round([request("a", [("g", 4, 0)])], now=0)
    return [event.permits for event in h.reclaim_expired(now=1_000)]


def lease_expiry_off_by_one() -> object:
    """An unreported lease, and a round exactly at its expiry: is it retired?"""
    h = _leasing(limit=10, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.run_round([request("b", leases=[])], now=TTL)
    lease = h.store.get_lease(_lease_id(reply))
    return None if lease is None else lease.retired


def group_policy_per_demand() -> object:
    """A group limit that reads 5, then 1 on any later call; two clients want 3 each."""
    answers = iter([5])
    h = holder(limit=10, group_limit=lambda g: next(answers, 1))
    first, second = h.run_round([request("a", [("g", 3, 0)]), request("b", [("g", 3, 1)])], now=0)
    return [_grants(first), _grants(second)]


def group_limit_zero_unlimited() -> object:
    """A group capped at 0 asks for 3."""
    h = holder(limit=10, group_limit=lambda g: 0)
    [reply] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    return {"grants": _grants(reply), "blocked": reply["blocked"]}


def limit_zero_rejected() -> object:
    """A limit of 0: the round admits nothing, or fails."""
    h = holder(limit=0)
    try:
        [reply] = h.run_round([request("a", [("g", 3, 0)])], now=0)
    except ValueError as error:
        return type(error).__name__
    return reply["blocked"]


def usage_available_ignores_footprint() -> object:
    """Strict, limit 10: a 1-permit grant and a 6-permit lease; the room left for grants."""
    h = _leasing(limit=10, permits_per_lease=6)
    h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    usage = h.usage(0)
    return (usage.granted, usage.leased, usage.available)


def usage_available_ignores_reserve() -> object:
    """Under, limit 10, reserve 4: a plain client holds 2; the room left for grants."""
    h = _leasing(limit=10, provisioning=Under(reserve=4))
    h.run_round([request("p", [("g", 2, 0)])], now=0)
    return h.usage(0).available


def usage_wire_drops_zero_group_limit() -> object:
    """A group holding 2 permits whose cap was then set to 0: usage on the wire."""
    caps = {"g": 3}
    h = holder(limit=10, group_limit=caps.get)
    h.run_round([request("a", [("g", 2, 0)])], now=0)
    caps["g"] = 0
    return h.usage(0).to_wire()["groups"]


def _equally_old_a_and_upper_a() -> object:
    """Limit 1; "A" and "a" are equally old and "A" arrived first: who is served."""
    h = holder(limit=1)
    upper, lower = h.run_round([request("A", [("g", 1, 5)]), request("a", [("g", 1, 5)])], now=10)
    return {"A": _grants(upper), "a": _grants(lower)}


def strict_lease_budget_net() -> object:
    """Strict, limit 10: a holds a 4-permit lease; the lease b gets next round."""
    h = _leasing(limit=10, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    [reply] = h.run_round([request("b", [("g", 0, 1)], leases=[])], now=100)
    return [lease["permits"] for lease in reply["leases"]]


def release_only_report_not_persisted() -> object:
    """All four permits claimed, then a report releasing two: what stays charged."""
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    grant = _grant_id(reply)
    h.sync(sync("a", [(grant, 4, 0)]), now=10)
    h.sync(sync("a", [(grant, 4, 2)]), now=20)
    return h.usage(20).granted


def sync_ignores_lease_reports() -> object:
    """A client retires its 4-permit lease by sync, having drawn and released 3: the footprint left."""
    h = _leasing(limit=10, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.sync(sync("a", leases=[(_lease_id(reply), 3, 3, True)]), now=10)
    return h.usage(10).leased


def alarm_ignores_partly_claimed() -> object:
    """Two of four permits claimed in time: when the alarm is due."""
    h = holder(limit=5, grant_timeout_ms=1_000)
    [reply] = h.run_round([request("a", [("g", 4, 0)])], now=0)
    h.sync(sync("a", [(_grant_id(reply), 2, 0)]), now=10)
    return h.next_alarm_at()


def rebuilt_holder_drops_retired_leases() -> object:
    """A lease retired at its expiry, then the instance is evicted and rebuilt: the footprint charged."""
    h = _leasing(limit=10, permits_per_lease=4)
    h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    h.run_round([request("b", leases=[])], now=TTL)
    rebuilt = Holder(h.store._conn, h.config, new_id=ids("rebuilt"))
    return rebuilt.usage(TTL).leased


def migration_down_keeps_claim_index() -> object:
    """Migrate up, down to 0001, and up again."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    migrate(conn, "0001_grants_and_leases")
    try:
        return migrate(conn).applied
    except sqlite3.OperationalError as error:
        return type(error).__name__


def reply_omits_empty_leases() -> object:
    """A lease-capable request to a holder without leases: the reply's keys."""
    h = holder(limit=5)
    [reply] = h.run_round([request("a", [("g", 1, 0)], leases=[])], now=0)
    return sorted(reply)


def parse_empty_leases_as_plain() -> object:
    """A lease-capable client holding no lease asks: the leases it gets."""
    h = _leasing(limit=10, permits_per_lease=4)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    return [lease["permits"] for lease in reply.get("leases", [])]


def parse_accepts_negative_counts() -> object:
    """A request whose demand count is -1."""
    try:
        parsed = parse_request(request("a", [("g", -1, 0)]))
    except SemaphoreProtocolError as error:
        return type(error).__name__
    assert isinstance(parsed, PermitRequest)
    return parsed.demand[0].count


def _queue_holding_a_grant() -> QueueClient:
    """A queue client with two items in (k, g); one was granted, claimed and confirmed."""
    queue = QueueClient(sqlite3.connect(":memory:"), "c")
    queue.enqueue([QueueItem("i1", "k", "g"), QueueItem("i2", "k", "g")], now=0)
    queue.sent("k", 0)
    queue.on_grant("k", PermitGrant((GrantedPermits("g1", "g", 1),), (), (), next_request_at=2_000), now=10)
    return queue


def queue_reports_assumed_delivered() -> object:
    """The sync reporting a claim is sent and no reply has come: is the key still unacknowledged?"""
    queue = _queue_holding_a_grant()
    queue.sent("k", 20)
    return queue.dirty_keys()


def queue_demand_counts_running() -> object:
    """One item runs under a confirmed grant, one is queued: the demand asked for."""
    queue = _queue_holding_a_grant()
    queue.on_synced("k", PermitSyncResult((GrantResult("g1", 1, "ok"),)), now=20)
    return [(d.group, d.count) for d in queue.build_request("k", now=2_000).demand]


def queue_released_permit_drawn_again() -> object:
    """A 2-permit lease, 3 items: two drawn, one released; how many the lease admits next."""
    queue = QueueClient(sqlite3.connect(":memory:"), "c")
    queue.enqueue([QueueItem(f"i{n}", "k", "g") for n in (1, 2, 3)], now=0)
    lease = LeaseGrant("L1", "g", permits=2, expires_at=TTL)
    queue.on_grant("k", PermitGrant((), (), (), next_request_at=2_000, leases=(lease,)), now=10)
    first = queue.draw_leases(now=20)
    queue.release(first[0].item_id)
    return len(queue.draw_leases(now=30))


class _Alarm:
    """The engine's ``StorageAlarm``, in memory."""

    def __init__(self) -> None:
        self.at: int | None = None

    def get_alarm(self) -> int | None:
        return self.at

    def set_alarm(self, at_ms: int) -> None:
        self.at = at_ms

    def delete_alarm(self) -> None:
        self.at = None


def _engine(pending_at: int | None, fails: bool = False) -> tuple[Engine, _Alarm]:
    """The pure engine with one participant: its pending time, and due work that may throw."""

    def run_due(now_ms: int, info: object) -> None:
        if fails:
            raise RuntimeError("due work threw")

    alarm = _Alarm()
    engine = Engine(sqlite3.connect(":memory:", isolation_level=None), alarm, SchedulerOptions())
    engine.register(
        Participant(
            table=DurableTable("due", "id"), run_due=run_due, next_pending_at=lambda _conn: pending_at
        )
    )
    return engine, alarm


def engine_without_fallback() -> object:
    """Due work throws in a pass: the engine re-arms itself (15 s out), or the platform sees the error."""
    engine, alarm = _engine(None, fails=True)
    [end] = engine.alarm(0).alarm_ends
    return str(end.error) if end.outcome == "failed" else alarm.at


def engine_pushes_alarm_later() -> object:
    """Reclaim due at 20 s: the alarm after commits at 0 s and 10 s (floor 15 s)."""
    engine, alarm = _engine(20_000)
    engine.refresh(0)
    engine.refresh(10_000)
    return alarm.at


def lease_share_not_capped() -> object:
    """One lease-capable candidate, 10 permits free, permits_per_lease 2: the lease's size."""
    h = _leasing(limit=10, permits_per_lease=2)
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    return [lease["permits"] for lease in reply["leases"]]


def lease_candidates_newest_first() -> object:
    """Three lease-capable clients, two permits: which ones get a lease."""
    h = _leasing(limit=2, permits_per_lease=1)
    clients = (("young", 9), ("old", 1), ("mid", 5))
    replies = h.run_round([request(c, [("g", 0, t)], leases=[]) for c, t in clients], now=0)
    return sorted(c for (c, _), reply in zip(clients, replies, strict=True) if reply["leases"])


def lease_ignores_group_room() -> object:
    """A within_group_limit group capped at 2, permits_per_lease 4: the lease's size."""
    h = holder(
        limit=10,
        group_limit=lambda g: 2,
        leases=LeaseOptions(permits_per_lease=4, ttl_ms=TTL, limited_groups="within_group_limit"),
    )
    [reply] = h.run_round([request("a", [("g", 0, 0)], leases=[])], now=0)
    return [lease["permits"] for lease in reply["leases"]]


def client_asks_for_held_capacity() -> object:
    """Three items queued, a grant of 2 claimed: the demand of the client's next request."""
    queue = QueueClient(sqlite3.connect(":memory:"), "a")
    queue.enqueue([QueueItem(f"item-{n}", "acct", "g") for n in range(3)], now=0)
    grant = GrantedPermits(grant_id="g-1", group="g", permits=2)
    queue.on_grant(
        "acct", PermitGrant(grants=(grant,), blocked=(), grant_results=(), next_request_at=0), now=1
    )
    return [(d.group, d.count) for d in queue.build_request("acct", now=2).demand]


@attrs.frozen
class Scenario:
    run: Callable[[], object]
    faithful: object
    mutated: object


def _stopped_by(world: Callable[[], WorldRun]) -> object:
    """The invariant that stopped the world's run (None: it completed)."""
    return world().result.invariant


SCENARIOS: dict[str, Scenario] = {
    "report-lowers-high-water": Scenario(report_lowers_high_water, 2, 4),
    "released-not-clamped-to-claimed": Scenario(released_not_clamped_to_claimed, 2, 1),
    "reclaim-takes-claimed": Scenario(reclaim_takes_claimed, 2, 0),
    "strict-forgets-lease-footprint": Scenario(strict_forgets_lease_footprint, [("g", 3)], [("g", 9)]),
    "under-reserve-takes-last-permit": Scenario(under_reserve_takes_last_permit, [("g", 1)], []),
    "unknown-lease-debt-dropped": Scenario(unknown_lease_debt_dropped, [6], [10]),
    "expired-lease-footprint-dropped": Scenario(expired_lease_footprint_dropped, 4, 0),
    "oldest-first-reversed": Scenario(
        oldest_first_reversed,
        {"late": [], "early": [("g", 3)]},
        {"late": [("g", 3)], "early": []},
    ),
    "group-ceiling-ignored": Scenario(group_ceiling_ignored, [("small", 2)], [("small", 5)]),
    "claim-window-not-enforced": Scenario(claim_window_not_enforced, [(1, "expired")], [(4, "ok")]),
    "alarm-armed-before-round-writes": Scenario(alarm_armed_before_round_writes, [1_000], [None]),
    "reports-after-allocation": Scenario(
        reports_after_allocation,
        {"grants": [("g", 3)], "results": [(3, "ok")]},
        {"grants": [], "results": [(3, "ok")]},
    ),
    "limit-off-by-one": Scenario(limit_off_by_one, [("g", 3)], [("g", 4)]),
    "contended-never-set": Scenario(contended_never_set, [True] * 3, [False] * 3),
    "alarm-latest-deadline": Scenario(alarm_latest_deadline, 1_000, 1_500),
    "retired-report-shrinks-to-released": Scenario(retired_report_shrinks_to_released, 2, 0),
    # Written from the reference's code paths.
    "claim-deadline-off-by-one": Scenario(claim_deadline_off_by_one, [(0, "expired")], [(4, "ok")]),
    "reclaim-deadline-off-by-one": Scenario(reclaim_deadline_off_by_one, [4], []),
    "lease-expiry-off-by-one": Scenario(lease_expiry_off_by_one, 1, 0),
    "group-policy-per-demand": Scenario(group_policy_per_demand, [[("g", 3)], [("g", 2)]], [[("g", 1)], []]),
    "group-limit-zero-unlimited": Scenario(
        group_limit_zero_unlimited,
        {"grants": [], "blocked": [{"group": "g", "reason": "group_limit"}]},
        {"grants": [("g", 3)], "blocked": []},
    ),
    "limit-zero-rejected": Scenario(limit_zero_rejected, [{"group": "g", "reason": "limit"}], "ValueError"),
    "usage-available-ignores-footprint": Scenario(usage_available_ignores_footprint, (1, 6, 3), (1, 6, 9)),
    "usage-available-ignores-reserve": Scenario(usage_available_ignores_reserve, 4, 8),
    "usage-wire-drops-zero-group-limit": Scenario(
        usage_wire_drops_zero_group_limit, {"g": {"granted": 2, "limit": 0}}, {"g": {"granted": 2}}
    ),
    "ties-by-code-point": Scenario(
        _equally_old_a_and_upper_a, {"A": [], "a": [("g", 1)]}, {"A": [("g", 1)], "a": []}
    ),
    "ties-case-blind": Scenario(
        _equally_old_a_and_upper_a, {"A": [], "a": [("g", 1)]}, {"A": [("g", 1)], "a": []}
    ),
    "strict-lease-budget-net": Scenario(strict_lease_budget_net, [4], [2]),
    "release-only-report-not-persisted": Scenario(release_only_report_not_persisted, 2, 4),
    "sync-ignores-lease-reports": Scenario(sync_ignores_lease_reports, 0, 4),
    "alarm-ignores-partly-claimed": Scenario(alarm_ignores_partly_claimed, 1_000, None),
    "rebuilt-holder-drops-retired-leases": Scenario(rebuilt_holder_drops_retired_leases, 4, 0),
    "migration-down-keeps-claim-index": Scenario(
        migration_down_keeps_claim_index, ("0002_indexes_and_totals",), "OperationalError"
    ),
    "reply-omits-empty-leases": Scenario(
        reply_omits_empty_leases,
        ["blocked", "grantResults", "grants", "leases", "nextRequestAt", "type", "v"],
        ["blocked", "grantResults", "grants", "nextRequestAt", "type", "v"],
    ),
    "parse-empty-leases-as-plain": Scenario(parse_empty_leases_as_plain, [4], []),
    "parse-accepts-negative-counts": Scenario(parse_accepts_negative_counts, "SemaphoreProtocolError", -1),
    "queue-reports-assumed-delivered": Scenario(queue_reports_assumed_delivered, ["k"], []),
    "queue-demand-counts-running": Scenario(queue_demand_counts_running, [("g", 1)], [("g", 2)]),
    "queue-released-permit-drawn-again": Scenario(queue_released_permit_drawn_again, 0, 1),
    "engine-without-fallback": Scenario(engine_without_fallback, 15_000, "due work threw"),
    "engine-pushes-alarm-later": Scenario(engine_pushes_alarm_later, 20_000, 25_000),
    "lease-share-not-capped": Scenario(lease_share_not_capped, [2], [10]),
    "lease-candidates-newest-first": Scenario(
        lease_candidates_newest_first, ["mid", "old"], ["mid", "young"]
    ),
    "lease-ignores-group-room": Scenario(lease_ignores_group_room, [2], [4]),
    "client-asks-for-held-capacity": Scenario(client_asks_for_held_capacity, [("g", 1)], [("g", 3)]),
    # The operations' lifecycle: the world that reaches each promise, and what stops its run.
    **{
        name: Scenario(functools.partial(_stopped_by, world), None, invariant)
        for name, (world, invariant) in OPERATION_WORLDS.items()
    },
}


# --- the catalog's shape -----------------------------------------------------------------------


def test_the_catalog_has_at_least_thirty_two_uniquely_named_mutants() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) >= 32
    assert len(set(names)) == len(names)


def test_every_mutant_has_a_scenario_and_every_scenario_a_mutant() -> None:
    assert sorted(SCENARIOS) == sorted(m.name for m in MUTANTS)


def test_mutant_finds_by_name() -> None:
    assert mutant("limit-off-by-one") is next(m for m in MUTANTS if m.name == "limit-off-by-one")


def test_an_unknown_name_is_a_value_error_listing_the_names() -> None:
    with pytest.raises(ValueError, match="unknown mutant 'nope'") as caught:
        mutant("nope")
    assert all(m.name in str(caught.value) for m in MUTANTS)


@pytest.mark.parametrize(("name", "description"), [("Not Kebab", "x"), ("ok-name", ""), ("ok", "a\nb")])
def test_names_are_kebab_case_and_descriptions_one_line(name: str, description: str) -> None:
    with pytest.raises(ValueError, match="mutant's"):
        Mutant(name, description, MUTANTS[0].patch)


# --- each mutant is real, and is undone ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_mutant_changes_what_it_claims_and_the_original_comes_back(name: str) -> None:
    scenario = SCENARIOS[name]
    assert scenario.faithful != scenario.mutated
    assert scenario.run() == scenario.faithful
    with mutant(name).patch():
        assert scenario.run() == scenario.mutated
    assert scenario.run() == scenario.faithful


@pytest.mark.parametrize("mutant_", MUTANTS, ids=lambda m: m.name)
def test_the_patch_rebinds_only_the_holders_code_and_restores_every_binding(mutant_: Mutant) -> None:
    before = bindings()
    assert any(module.startswith("semsim.check.") for module, _ in before)  # the checkers are watched
    with mutant_.patch():
        changed = changed_bindings(before)
    assert changed, "the patch rebound nothing"
    # The checkers read their own modules' names, HolderStore and Holder.usage: never mutated.
    assert not any(module.startswith("semsim.check.") for module, _ in changed)
    assert not any(module == "semaphore_core.store.HolderStore" for module, _ in changed)
    assert ("semaphore_core.holder.Holder", "usage") not in changed
    assert changed_bindings(before) == set()


def test_a_block_that_raises_is_restored_too() -> None:
    before = bindings()
    with pytest.raises(RuntimeError, match="boom"), mutant("limit-off-by-one").patch():
        raise RuntimeError("boom")
    assert changed_bindings(before) == set()
    assert limit_off_by_one() == [("g", 3)]


def test_mutants_nest_and_unwind_in_order() -> None:
    before = bindings()
    with mutant("limit-off-by-one").patch(), mutant("group-ceiling-ignored").patch():
        h = holder(limit=3, group_limit=lambda g: 1)
        [reply] = h.run_round([request("a", [("g", 9, 0)])], now=0)
        assert _grants(reply) == [("g", 4)]  # both bugs at once: no group cap, one extra permit
        assert limit_off_by_one() == [("g", 4)]
    assert changed_bindings(before) == set()
    assert group_ceiling_ignored() == [("small", 2)]


@pytest.fixture
def _missing_target() -> Iterator[None]:
    import semaphore_core.holder as holder_module

    original = vars(holder_module)["allocate"]
    delattr(holder_module, "allocate")  # the second target: the first is patched, then must be undone
    try:
        yield
    finally:
        setattr(holder_module, "allocate", original)  # noqa: B010


@pytest.mark.usefixtures("_missing_target")
def test_a_missing_target_fails_loudly_and_undoes_what_it_did() -> None:
    before = bindings()
    missing = r"semaphore_core\.holder\.allocate does not exist"
    with pytest.raises(AttributeError, match=missing), mutant("limit-off-by-one").patch():
        pass  # pragma: no cover
    assert changed_bindings(before) == set()
