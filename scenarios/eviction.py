"""Eviction: what dies with a live instance, and how clients recover.

Timings every story here relies on: a message takes 5 ms, a client asks as
soon as items are queued, a round runs ``round_wait_ms`` (1 s) after the
first waiting request, a failed call is retried ``retry_ms`` (1 s) later.
"""

from __future__ import annotations

from semaphore_core import migrations
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, WorldRun
from semsim.scenarios.base import HOLDER, Check, Expect, Scenario, events, first_t, rounds, sends
from semsim.world.faults import Eviction, FaultPlan, Rollback
from semsim.world.workload import Arrival, Workload

GRANT_TIMEOUT_MS = 10_000
ALARM_MIN_DELAY_MS = 15_000


def evicted_before_round() -> Scenario:
    """Seed 001, "After failure": "eviction before allocation loses the waiting RPC; clients
    must request again". "The request array awaiting a round is in memory, not a persisted
    work queue", and "Eviction fails the waiting RPC calls; clients ask again."

    One plain client submits two items at 1 s; its request reaches the holder at 1.010 s
    and waits for the round due at 2.010 s. The holder is evicted at 1.5 s.
    """
    config = WorldConfig(
        holder=HolderSpec(limit=2, leases=None),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=30_000),)
        ),
        duration_ms=40_000,
    )
    evict_ms = 1_500

    def judge(run: WorldRun, expect: Expect) -> None:
        requests = sends(run, "client-0", "request")
        if not expect.that(len(requests) >= 2, "the client sent a request, then another", len(requests)):
            return
        first, second = requests[0], requests[1]
        failed = [e for e in run.trace.of_kind("reply") if e["msg"] == first["msg"]]
        expect.that(
            [e.get("error") for e in failed] == ["evicted"],
            "the waiting request failed with `evicted`",
            [e.get("error") for e in failed],
        )
        first_round = first_t(rounds(run))
        expect.that(
            first_round is not None and first_round > evict_ms,
            f"nothing was allocated before the eviction at {evict_ms} ms (no round ran)",
            f"first round at {first_round}",
        )
        failed_at = failed[0]["t"] if failed else None
        expect.that(
            failed_at is not None and second["t"] >= failed_at + config.client.retry_ms,
            "the client asked again after its retry delay",
            f"failed at {failed_at}, asked again at {second['t']}",
        )
        grants = [(g["client"], g["permits"]) for g in run.trace.of_kind("grant")]
        expect.that(grants == [("client-0", 2)], "the request asked again got both permits", grants)
        instances = [e["generation"] for e in events(run, "instance", object=HOLDER)]
        expect.that(instances == [0, 1], "the next call built a fresh holder instance", instances)
        expect.that(len(run.trace.of_kind("admit")) == 2, "both items were admitted")

    return Scenario(
        name="evicted-before-round",
        description="holder evicted while a request waits for its round: the call fails, the client retries",
        seed=1,
        config=config,
        faults=FaultPlan(evictions=(Eviction(HOLDER, evict_ms),)),
        check=Check(judge),
    )


def client_evicted_mid_request() -> Scenario:
    """Seed 001, "How it uses your Durable Object": client objects "keep their own copy of
    grants and leases"; their queue is durable. Seed 002: "The object's one alarm brings the
    object back after eviction."

    Seed 001, "Grants and reports": "Permits a client never claims within `grantTimeoutMs`
    (default 10 seconds) are reclaimed"; "The object's one alarm follows the earliest claim
    deadline of a grant with unclaimed permits, so unclaimed capacity comes back without
    another request."

    The client's request waits at the holder for the round at 2.010 s; the client is evicted
    at 1.5 s. The holder still answers (the reply finds no one): its grant of 3 is orphaned,
    known only to the holder. The holder is alive, so its in-memory early timer runs the
    reclaim at the claim deadline, commit + ``grant_timeout_ms`` = 12.010 s, well within the
    contract's bound (the deadline, or commit + ``alarm_min_delay_ms`` if later). The
    client's items stay queued in its storage, the alarm it left rebuilds it, it asks again
    and gets the 3 permits back (limit 4), and every item runs.
    """
    config = WorldConfig(
        holder=HolderSpec(
            limit=4, leases=None, grant_timeout_ms=GRANT_TIMEOUT_MS, alarm_min_delay_ms=ALARM_MIN_DELAY_MS
        ),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=3, duration_ms=2_000),)
        ),
        duration_ms=60_000,
    )
    evict_ms = 1_500

    def judge(run: WorldRun, expect: Expect) -> None:
        evictions = [e["t"] for e in events(run, "evict", object="client-0")]
        expect.that(evictions == [evict_ms], f"the client was evicted at {evict_ms} ms", evictions)
        first_grant = first_t(run.trace.of_kind("grant"))
        expect.that(
            first_grant == 2_010,
            "the holder still ran the round and granted at 2.010 s (the reply found no one)",
            first_grant,
        )
        orphan = next(iter(run.trace.of_kind("grant")), None)
        if not expect.that(orphan is not None, "the round committed a grant for the evicted client"):
            return
        assert orphan is not None
        commit_ms, orphan_id = orphan["t"], orphan["grant"]
        claims = [e for e in run.trace.of_kind("claim") if e["grant"] == orphan_id]
        reported = [s["t"] for s in sends(run, "client-0") if orphan_id in str(s["body"])]
        expect.that(
            not claims and not reported,
            "nobody ever claimed or reported the orphaned grant",
            (claims, reported),
        )
        deadline_ms = commit_ms + GRANT_TIMEOUT_MS
        bound_ms = max(deadline_ms, commit_ms + ALARM_MIN_DELAY_MS)
        reclaimed = [(e["t"], e["permits"]) for e in events(run, "grant_reclaimed", grantId=orphan_id)]
        expect.that(
            reclaimed == [(deadline_ms, orphan["permits"])] and deadline_ms <= bound_ms,
            f"its {orphan['permits']} permits were reclaimed once, at its claim deadline "
            f"(commit + grant_timeout_ms = {deadline_ms} ms, within the bound of {bound_ms} ms)",
            reclaimed,
        )
        early = [e["t"] for e in events(run, "early_alarm", object=HOLDER)]
        expect.that(
            early[:1] == [deadline_ms],
            "the live holder's early timer ran that reclaim, with no request to prompt it",
            early,
        )
        regrant = [(g["t"], g["permits"]) for g in run.trace.of_kind("grant")[1:2]]
        expect.that(
            bool(regrant) and regrant[0][0] > deadline_ms and regrant[0][1] == orphan["permits"],
            f"the client's retry got the {orphan['permits']} reclaimed permits back (limit 4)",
            regrant,
        )
        admits = run.trace.of_kind("admit")
        expect.that(all(e["t"] > evict_ms for e in admits), "nothing was admitted by the evicted instance")
        items = sorted(e["item"] for e in admits)
        expect.that(
            items == [f"client-0/item-{n}" for n in (1, 2, 3)],
            "every queued item survived the eviction and was admitted once",
            items,
        )
        generations = [e["generation"] for e in events(run, "instance", object="client-0")]
        expect.that(generations == [0, 1], "the client's alarm rebuilt it once", generations)
        leftover = run.world.monitor.in_use["acct"]
        expect.that(leftover == 0, "every admitted item was released in the end", leftover)

    return Scenario(
        name="client-evicted-mid-request",
        description="client evicted while its request waits: its queue survives, its alarm brings it back",
        seed=2,
        config=config,
        faults=FaultPlan(evictions=(Eviction("client-0", evict_ms),)),
        check=Check(judge),
    )


def deploy_rolled_back() -> Scenario:
    """Seed 000, ``DurabilitySemaphore.migrate(context, target)``: "Applies or reverts" the
    holder's schema (``migrateCapability(storage, 'semaphore', migrations, target)``); the
    constructor migrates to the latest (``migrateSchema('semaphore', ...)``) before it serves.

    A deploy rolled back and forward again while the key is busy: three clients, strict
    leases of 2 permits, limit 6. At 20 s and again at 50 s the holder is evicted, its storage
    migrated down one version and a new instance built at once, which migrates up again over
    the rows its grants and leases left. The rows stay; what only the newer schema keeps
    (semsim's ``0002``: indexes and per-group totals) is rebuilt from them, and every round
    after reads its usage from those totals, so the invariants (``exact_accounting``,
    ``ceiling``) judge the rebuild. Clients meet an evicted holder only as failed calls they
    ask again; every item still runs.
    """
    rollbacks_ms = (20_000, 50_000)
    config = WorldConfig(
        holder=HolderSpec(
            limit=6, leases=LeaseSpec(provisioning="strict", amount=2, permits_per_lease=2, ttl_ms=60_000)
        ),
        workload=Workload(clients=3, items_per_minute=30.0, until_ms=70_000),
        duration_ms=120_000,
    )
    previous = migrations.SEMAPHORE_MIGRATIONS[-2].name

    def judge(run: WorldRun, expect: Expect) -> None:
        struck = [(e["t"], e["to"]) for e in run.trace.of_kind("fault") if e["fault"] == "rollback"]
        expect.that(
            struck == [(at_ms, previous) for at_ms in rollbacks_ms],
            f"the schema was rolled back to {previous} at {rollbacks_ms[0]} and {rollbacks_ms[1]} ms",
            struck,
        )
        built = [e["t"] for e in events(run, "instance", object=HOLDER)][1:]
        expect.that(
            built == list(rollbacks_ms),
            "each time a new holder instance was built in the same millisecond",
            built,
        )
        granted = [e["t"] for e in run.trace.of_kind("grant")]
        expect.that(
            all(any(t < at_ms for t in granted) for at_ms in rollbacks_ms),
            "grants had been committed before each rollback struck",
            granted[:3],
        )
        leased = [e["t"] for e in run.trace.of_kind("lease_granted")]
        expect.that(
            any(t < rollbacks_ms[0] for t in leased), "leases had been granted before the first", leased
        )
        admitted = [e["t"] for e in run.trace.of_kind("admit")]
        expect.that(
            any(t > rollbacks_ms[-1] for t in admitted), "items were admitted after the last rollback"
        )
        storage = run.world.holders["acct"].storage
        expect.that(
            migrations.schema_version(storage) == migrations.LATEST,
            f"the schema ended at {migrations.LATEST}",
            migrations.schema_version(storage),
        )
        leftover = run.world.monitor.in_use["acct"]
        expect.that(leftover == 0, "every admitted item was released in the end", leftover)

    return Scenario(
        name="deploy-rolled-back",
        description="holder's schema rolled back a version and forward again, twice, over live rows",
        seed=3,
        config=config,
        faults=FaultPlan(rollbacks=tuple(Rollback("acct", at_ms) for at_ms in rollbacks_ms)),
        check=Check(judge),
    )


ALL = (evicted_before_round, client_evicted_mid_request, deploy_rolled_back)
