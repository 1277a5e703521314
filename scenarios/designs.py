"""What each design trades, told as stories: the gate, the leased worker, and the semaphore.

Seeds 003 and 004 are two other answers to the problem DurabilitySemaphore
solves, and each says what it gives up. These stories provoke each
trade-off on purpose and assert it from what the external API saw (the
figures :mod:`semsim.check.trade_offs` measures) and from the design's own
events (docs/WIRE.md), while every promise the design does make is judged
as the run goes (:mod:`semsim.check.design_promises`). Each runs through
``run_design``.

Timings every story here relies on: a message takes 5 ms; a gate caller
acquires as soon as its item is stored; a leased worker polls every second
and, in these stories, leases for 20 s and renews every 5 s.
"""

from __future__ import annotations

from semaphore_core.gate import STALE_MS
from semsim.harness.designs import DesignRun
from semsim.harness.run import HolderSpec, WorldConfig
from semsim.scenarios.base import HOLDER, Check, Expect, Scenario, events, rounds
from semsim.world.design import DesignName, DesignSpec, LeasedSpec
from semsim.world.faults import Drop, Eviction, FaultPlan
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload

GATE = "gate:acct"
#: The leased worker of these stories: one execution at a time, a 20 s lease renewed every 5 s.
ONE_AT_A_TIME = LeasedSpec(concurrency=1, lease_ms=20_000, heartbeat_interval_ms=5_000)


def _world(
    design: DesignName,
    *script: Arrival,
    limit: int = 2,
    clients: int = 1,
    idempotent: bool = True,
    duration_ms: int = 120_000,
    leased: LeasedSpec = ONE_AT_A_TIME,
) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=limit),
        operations=OperationsSpec(idempotent_api=idempotent),
        duration_ms=duration_ms,
        workload=Workload(clients=clients, script=script, paced_by_intake=False),
        design=DesignSpec(name=design, leased=leased)
        if design == "leased-worker"
        else DesignSpec(name=design),
    )


def _peak_in_flight(run: DesignRun, start_ms: int = 0, end_ms: int | None = None) -> int:
    """The most calls in flight at the API at once in ``[start_ms, end_ms)``, from its own count."""
    return max(
        (
            e["in_flight"]
            for e in events(run, "api_start")
            if start_ms <= e["t"] and (end_ms is None or e["t"] < end_ms)
        ),
        default=0,
    )


# --- the gate (seed 003) ----------------------------------------------------------------------


def gate_evicted_over_admits() -> Scenario:
    """Seed 003: "a DO is single-threaded so the count is exact while it lives, and an eviction
    resets to all-free, the harmless direction".

    Cap 2. Two items of 60 s take both slots at 10 ms. The gate is evicted at 10 s: its
    successor's ledger is all-free, though both calls still run. Two more items arrive at 20 s
    and are admitted at once: four calls at the API against a cap of 2. Before the eviction the
    count was exact, and the new instance's own count is exact too (``gate_exact`` holds).
    """
    evict_ms, second_ms = 10_000, 20_000
    config = _world(
        "gate", Arrival(0, 0, count=2, duration_ms=60_000), Arrival(second_ms, 0, count=2, duration_ms=10_000)
    )

    def judge(run: DesignRun, expect: Expect) -> None:
        expect.that(
            _peak_in_flight(run, 0, evict_ms) == 2, "before the eviction, no more calls than the cap (2)"
        )
        after = [e for e in events(run, "gate_acquire") if e["t"] > evict_ms and e["token"] is not None]
        expect.that(
            [e["in_flight"] for e in after[:2]] == [1, 2],
            "the evicted gate's successor counted from all-free: it handed out both slots again",
            [(e["t"], e["in_flight"]) for e in after],
        )
        expect.that(
            _peak_in_flight(run, second_ms) == 4,
            "after it, four calls ran at the API at once: two of the old instance's, two of the new's",
            _peak_in_flight(run, second_ms),
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.peak_over_admission == 2,
            "the API saw two calls over the cap",
            None if figures is None else figures.peak_over_admission,
        )

    return Scenario(
        name="gate-evicted-over-admits",
        description="the gate is evicted mid-work: its successor starts all-free and admits past the cap",
        seed=1,
        config=config,
        faults=FaultPlan(evictions=(Eviction(GATE, evict_ms),)),
        check=Check(judge),
    )


def gate_fails_open() -> Scenario:
    """Seed 003: a thrown ``get``/``fetch``, a missing binding, or "a non-ok non-429 answer proceeds
    uncapped" (fail open: the audit is worth more than the cap).

    Cap 2. The gate answers 500 to every acquire for the first minute; three items of 30 s
    arrive at once. Each caller proceeds uncapped: three calls run against a cap of 2, none
    holding a slot.
    """
    config = _world("gate", Arrival(0, 0, count=3, duration_ms=30_000))

    def judge(run: DesignRun, expect: Expect) -> None:
        opened = [e["reason"] for e in events(run, "fail_open")]
        expect.that(
            opened == ["answered 500"] * 3, "every acquire answered 500, and each caller went on", opened
        )
        done = [(e["outcome"], e["capped"]) for e in events(run, "item_done")]
        expect.that(done == [("ok", False)] * 3, "every item's work ran, uncapped", done)
        expect.that(
            _peak_in_flight(run) == 3,
            "three calls at the API at once, against a cap of 2",
            _peak_in_flight(run),
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and (figures.peak_over_admission, figures.over_cap_permit_s) == (1, 30.0),
            "one call over the cap for 30 s",
            None if figures is None else (figures.peak_over_admission, figures.over_cap_permit_s),
        )

    return Scenario(
        name="gate-fails-open",
        description="the gate answers errors: every caller proceeds uncapped, past the cap",
        seed=1,
        config=config,
        faults=FaultPlan(gate_error=1.0, faults_until_ms=60_000),
        check=Check(judge),
    )


def gate_leaked_slot_heals() -> Scenario:
    """Seed 003: "Leaked slots (a worker that died between acquire and release) self-heal after
    STALE_MS (120s, generously above the fetch layer's caps)".

    Cap 1. The caller dies a second into its item's 30 s call: its slot, acquired at 10 ms, is
    never released. Started again, it runs the item again and is shed (429, retry after 10 s)
    for as long as the slot is younger than ``STALE_MS``, then admitted by the acquire that
    heals it.
    """
    config = _world("gate", Arrival(0, 0, count=1, duration_ms=30_000), limit=1, idempotent=False)

    def judge(run: DesignRun, expect: Expect) -> None:
        given = [e for e in events(run, "gate_acquire") if e["token"] is not None]
        if not expect.that(len(given) == 2, "the gate handed out two slots for the one item", len(given)):
            return
        first, second = given
        expect.that(second["healed"] == [first["token"]], "the second acquire healed the leaked slot")
        expect.that(
            second["t"] - first["t"] > STALE_MS,
            f"the leaked slot came back only once it was older than STALE_MS ({STALE_MS} ms)",
            second["t"] - first["t"],
        )
        shed = [e["t"] - first["t"] for e in events(run, "gate_acquire", token=None)]
        expect.that(
            bool(shed) and all(age <= STALE_MS for age in shed),
            "until then every acquire was shed: the slot still counted",
            shed,
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.leaked_cap_s >= 80,
            "the slot was held by no work for more than 80 cap-seconds",
            None if figures is None else figures.leaked_cap_s,
        )

    return Scenario(
        name="gate-leaked-slot-heals",
        description="a caller dies holding a slot: it leaks until STALE_MS, then the next acquire heals it",
        seed=1,
        config=config,
        faults=FaultPlan(evictions=(Eviction("client-0", 1_000),)),
        check=Check(judge),
    )


def gate_call_outlives_its_fetch() -> Scenario:
    """Seed 003: "Leaked slots ... self-heal after STALE_MS (120s, generously above the fetch
    layer's caps); release is idempotent, finally on every path." The fetch layer caps how long a
    caller waits, not how long the API works: finding F6 (docs/FINDINGS.md).

    Cap 1. Item A's call takes 90 s; the caller's fetch gives up at 60 s and its ``finally``
    releases the slot while the call runs on. Item B, shed since 10 s, is admitted at its next
    try: two calls at the API against a cap of 1 while the gate lives, for the 10 s or so until
    A's call ends. ``gate_exact`` breaks, explained by F6, which this story tolerates.
    """
    config = _world(
        "gate", Arrival(0, 0, duration_ms=90_000), Arrival(10_000, 0, duration_ms=10_000), limit=1
    )

    def judge(run: DesignRun, expect: Expect) -> None:
        done = {e["item"]: e["outcome"] for e in events(run, "item_done")}
        expect.that(done.get("client-0/item-1") == "timeout", "item A's fetch gave up on its call", done)
        broke = [(e["invariant"], e["finding"]) for e in events(run, "violation")]
        expect.that(
            bool(broke) and set(broke) == {("gate_exact", "F6")},
            "the gate's count broke while it lived, explained by F6",
            broke,
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.peak_over_admission == 1,
            "one call over the cap at the API",
            None if figures is None else figures.peak_over_admission,
        )

    return Scenario(
        name="gate-call-outlives-its-fetch",
        description="a call outlives its fetch: the gate frees its slot and admits past the cap (F6)",
        seed=1,
        config=config,
        faults=FaultPlan(),
        check=Check(judge),
        tolerated=frozenset({"F6"}),
    )


# --- the leased worker (seed 004) -------------------------------------------------------------


def leased_lost_lease_runs_twice() -> Scenario:
    """Seed 004: a worker whose renewals fail loses its lease when it expires; the instance is
    claimed again, and the first execution's ``write`` is fenced by its token: "Nothing from
    this execution after that point was recorded". What it already did outside the store is
    not undone.

    Two workers, one item of 40 s, an API that does not deduplicate. Every renewal is lost for
    42 s: the first lease runs out at about 20 s and the other worker claims the item while the
    first call still runs (and, renewals still lost, the second lease runs out too). The work
    runs again and takes effect again; the stale worker's write is refused.
    """
    config = _world("leased-worker", Arrival(0, 0, duration_ms=40_000), clients=2, idempotent=False)

    def judge(run: DesignRun, expect: Expect) -> None:
        claims = [e for e in events(run, "lease_claim") if e["ids"]]
        if not expect.that(len(claims) >= 2, "the item was claimed twice", len(claims)):
            return
        first, second = claims[:2]
        expect.that(
            second["owner"] != first["owner"] and second["t"] >= first["until"],
            "the other worker claimed it once the first lease had run out",
            (first["owner"], first["until"], second["owner"], second["t"]),
        )
        starts = [e["t"] for e in events(run, "api_start")]
        expect.that(
            len(starts) >= 2 and starts[0] < second["t"] <= starts[1],
            "its work ran at the API under each lease",
            starts,
        )
        fenced = [e["token"] for e in events(run, "write_fenced")]
        expect.that(fenced[:1] == [first["token"]], "the stale execution's write was fenced", fenced)
        refused = [e["ok"] for e in events(run, "lease_write", token=first["token"])]
        expect.that(refused == [False], "the store refused the write under the stale token", refused)
        figures = run.trade_offs
        expect.that(
            figures is not None
            and figures.duplicate_executions >= 1
            and figures.double_effects >= 1
            and figures.peak_over_admission == 0,
            "the work ran again and took effect again, and never over the cap",
            None
            if figures is None
            else (figures.duplicate_executions, figures.double_effects, figures.peak_over_admission),
        )

    return Scenario(
        name="leased-lost-lease-runs-twice",
        description="renewals are lost: the lease runs out, another worker runs the item again, "
        "the stale write is fenced",
        seed=1,
        config=config,
        faults=FaultPlan(drops=(Drop("request", 0, 42_000, method="renew"),)),
        check=Check(judge),
    )


def leased_dead_worker_holds_lease() -> Scenario:
    """Seed 004: "executions that stopped are handed back at once, and the rest keep their lease
    until it expires"; a worker that dies hands nothing back.

    Cap 1, one worker, one item of 5 s. The worker dies at 1.5 s, a second into its lease; it
    comes back and polls, but the instance is under a live lease (its dead execution's) and is
    not claimed again until that lease runs out at about 20 s. Meanwhile the cap's one slot is
    held by no work.
    """
    config = _world("leased-worker", Arrival(0, 0, duration_ms=5_000), limit=1)

    def judge(run: DesignRun, expect: Expect) -> None:
        claims = [e for e in events(run, "lease_claim") if e["ids"]]
        if not expect.that(len(claims) == 2, "the item was claimed twice", len(claims)):
            return
        first, second = claims
        expect.that(
            first["until"] <= second["t"] <= first["until"] + ONE_AT_A_TIME.poll_interval_ms,
            "the dead worker's lease held the item until it ran out, and not a poll longer",
            (first["until"], second["t"]),
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.leaked_cap_s >= 10 and figures.completed == 1,
            "the cap's slot was held by no work for more than 10 s, and the item took effect",
            None if figures is None else (figures.leaked_cap_s, figures.completed),
        )

    return Scenario(
        name="leased-dead-worker-holds-lease",
        description="a worker dies holding a lease: the instance waits until the lease runs out",
        seed=1,
        config=config,
        faults=FaultPlan(evictions=(Eviction("client-0", 1_500),)),
        check=Check(judge),
    )


def leased_call_outlives_its_fetch() -> Scenario:
    """Seed 004: the per-workflow concurrency ``limits`` are applied at claim time, to instances
    under live leases; an execution's ``write`` records its end and gives its lease back. A
    failed fetch ends the execution, not its call: finding F7 (docs/FINDINGS.md).

    Cap 1, one worker. Item A's call takes 90 s; the execution's fetch gives up at 60 s, it
    writes ``failed`` and the lease goes back while the call runs on. Item B is claimed at the
    next poll: two calls at the API against a limit of 1. ``lease_ceiling`` breaks, explained by
    F7, which this story tolerates.
    """
    config = _world(
        "leased-worker", Arrival(0, 0, duration_ms=90_000), Arrival(10_000, 0, duration_ms=10_000), limit=1
    )

    def judge(run: DesignRun, expect: Expect) -> None:
        writes = [(e["id"], e["status"]) for e in events(run, "lease_write", ok=True)]
        expect.that(
            ("client-0/item-1", "failed") in writes,
            "item A's execution gave up on its call and gave its lease back",
            writes,
        )
        broke = [(e["invariant"], e["finding"]) for e in events(run, "violation")]
        expect.that(
            bool(broke) and set(broke) == {("lease_ceiling", "F7")},
            "the workflow's limit broke at the API, explained by F7",
            broke,
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.peak_over_admission == 1,
            "one call over the cap at the API",
            None if figures is None else figures.peak_over_admission,
        )

    return Scenario(
        name="leased-call-outlives-its-fetch",
        description="a call outlives its fetch: its lease goes back and another runs past the cap (F7)",
        seed=1,
        config=config,
        faults=FaultPlan(),
        check=Check(judge),
        tolerated=frozenset({"F7"}),
    )


# --- the semaphore (seed 001), measured the same way ---------------------------------------------

GRANT_TIMEOUT_MS = 10_000


def semaphore_holds_lost_capacity() -> Scenario:
    """Seed 001, "After failure": "A response lost after allocation does not free capacity.
    Unclaimed grant permits expire". The semaphore never admits past its limit; what it gives
    up is capacity, held for work that will not run until a deadline or a TTL frees it.

    Limit 2, one plain client submits two items of 30 s at 1 s. The first round's grant reply
    is lost: the holder keeps both permits reserved until the grant's claim deadline (10 s
    later), and the API runs nothing meanwhile. Then the client's retry gets them.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS),
        operations=OperationsSpec(),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=30_000),)
        ),
        duration_ms=60_000,
    )
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")

    def judge(run: DesignRun, expect: Expect) -> None:
        grants = run.trace.of_kind("grant")
        if not expect.that(len(grants) == 2, "two grants: the lost one and the retry's", len(grants)):
            return
        deadline = grants[0]["t"] + GRANT_TIMEOUT_MS
        reclaimed = [(e["permits"], e["t"]) for e in run.trace.of_kind("grant_reclaimed")]
        expect.that(reclaimed[:1] == [(2, deadline)], "the lost grant's permits came back at its deadline")
        held = rounds(run, grants[0]["t"] + 1, deadline)
        expect.that(
            bool(held) and all(r["usage"]["granted"] == 2 for r in held),
            "until then the holder counted both permits as taken",
            [(r["t"], r["usage"]["granted"]) for r in held],
        )
        first_call = min((e["t"] for e in events(run, "api_start")), default=None)
        expect.that(
            first_call is not None and first_call >= deadline,
            "and the API ran nothing: the capacity was lost until the deadline",
            first_call,
        )
        figures = run.trade_offs
        expect.that(
            figures is not None and figures.peak_over_admission == 0 and figures.leaked_cap_s >= 15,
            "never over the limit, and more than 15 cap-seconds held by no work",
            None if figures is None else (figures.peak_over_admission, figures.leaked_cap_s),
        )

    return Scenario(
        name="semaphore-holds-lost-capacity",
        description="a grant's reply is lost: the semaphore stays under its limit but holds the "
        "capacity until the claim deadline",
        seed=1,
        config=config,
        faults=FaultPlan(drops=(lost,)),
        check=Check(judge),
        measured=True,
    )


ALL = (
    gate_evicted_over_admits,
    gate_fails_open,
    gate_leaked_slot_heals,
    gate_call_outlives_its_fetch,
    leased_lost_lease_runs_twice,
    leased_dead_worker_holds_lease,
    leased_call_outlives_its_fetch,
    semaphore_holds_lost_capacity,
)
