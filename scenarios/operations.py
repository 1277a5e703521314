"""The account-concurrency world: admitted items as durable operations calling the external API.

Seed 000's example runs every admitted job as a durable operation (seed
002) on its client object, whose handler POSTs to the job API with the
operation id as its idempotency key; the permit comes back through the
lifecycle hook, or the queue's ``finished`` check. These stories follow
what seed 002's docs say a user meets: a retry under the same id, an
attempt that times out while its call still runs, an eviction
mid-attempt, a failed last attempt. One plain client, one job, so every
time below is exact.
"""

from __future__ import annotations

from typing import Final

import attrs

from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, WorldRun
from semsim.scenarios.base import Check, Expect, Scenario, events
from semsim.world.external_api import ExternalApi
from semsim.world.faults import Drop, Eviction, FaultPlan
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload

CLIENT: Final = "client-0"


def one_job(
    work_ms: int = 30_000,
    *,
    idempotent: bool = False,
    attempt_timeout_ms: int = 60_000,
    limit: int = 1,
    count: int = 1,
) -> WorldConfig:
    """One plain client submits ``count`` jobs of ``work_ms`` at 1 s; the account's limit is ``limit``."""
    return WorldConfig(
        holder=HolderSpec(limit=limit, leases=None),
        workload=Workload(
            clients=1,
            plain_clients=1,
            script=(Arrival(at_ms=1_000, client=0, count=count, duration_ms=work_ms),),
        ),
        duration_ms=180_000,
        operations=OperationsSpec(idempotent_api=idempotent, attempt_timeout_ms=attempt_timeout_ms),
    )


def lifecycle(run: WorldRun) -> list[tuple[int, str, int, str]]:
    """``(t, type, attempt, outcome)`` of every lifecycle event of the run's operations."""
    return [
        (e["t"], e["type"], e.get("attempt", 0), e.get("outcome", "")) for e in run.trace.of_kind("operation")
    ]


def api_of(run: WorldRun) -> ExternalApi:
    api = run.world.api
    assert api is not None, "a world without operations"
    return api


def zombie_call_over_the_limit() -> Scenario:
    """Seed 002, `startExecution`: an attempt races its handler against `attemptTimeoutMs`; the
    timeout aborts the signal and the attempt is settled, retried after its backoff; "A remote
    effect may already have committed ... Abort is cooperative". Seed 000: a permit "is an
    admission/accounting contract, not a mechanism that can forcibly stop an external task".

    A 30 s call, a 10 s attempt timeout, an API that does not deduplicate, a limit of 1. The
    job is admitted at 2.025 s and calls at 2.03 s; at 12.025 s attempt 1 times out, its call
    running on at the API until 32.03 s. At 13.03 s attempt 2 calls again: two calls in flight
    on one permit. That breaks `external_ceiling`, finding F5.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        broken = [(v.name, v.finding) for v in run.monitor.violations]
        expect.that(broken[:1] == [("external_ceiling", "F5")], "external_ceiling broke, as F5", broken)
        settled = [
            (t, attempt, outcome) for t, kind, attempt, outcome in lifecycle(run) if kind == "attempt_settled"
        ]
        expect.that(
            settled[:1] == [(12_025, 1, "retry_scheduled")],
            "attempt 1 timed out at 10 s and was retried",
            settled,
        )
        starts = [e["t"] for e in run.trace.of_kind("api_start")]
        ends = [e["t"] for e in run.trace.of_kind("api_end")]
        expect.that(
            starts[:2] == [2_030, 13_030] and ends[:1] == [32_030],
            "attempt 2's call began while attempt 1's was still running",
            (starts, ends),
        )
        peak = max((e["in_flight"] for e in run.trace.of_kind("api_start")), default=0)
        expect.that(peak >= 2, "two calls in flight for the account at once", peak)

    return Scenario(
        name="zombie-call-over-the-limit",
        description="a timed-out attempt's call runs on at the API while its retry calls again (F5)",
        seed=1,
        config=one_job(30_000, idempotent=False, attempt_timeout_ms=10_000),
        faults=FaultPlan(),
        check=Check(judge),
        tolerated=frozenset({"F5"}),
    )


def eviction_mid_attempt() -> Scenario:
    """Seed 002, "After eviction": "the row survives, but locks and running promises do not. A
    pending handler can run again with the same ID. A remote effect may already have committed;
    receiver-side idempotency is still necessary."

    The job is admitted at 2.025 s; the client is evicted 3 s into attempt 1's 10 s call. The
    call finishes at the API at 12.03 s; nobody hears it. The stored alarm brings the client
    back at 16.005 s and attempt 2 runs under the same id: the idempotent API answers with the
    outcome it stored, so the job took effect once.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        started = [(attempt, t) for t, kind, attempt, _ in lifecycle(run) if kind == "attempt_started"]
        expect.that(
            [attempt for attempt, _ in started] == [1, 2] and started[1][1] > 5_000,
            "attempt 2 ran after the eviction",
            started,
        )
        ids = {e["id"] for e in run.trace.of_kind("operation")}
        expect.that(len(ids) == 1, "under the same operation id", sorted(ids))
        alarms = [e["t"] for e in events(run, "alarm", object=CLIENT)]
        expect.that(bool(alarms) and alarms[0] <= started[1][1], "the stored alarm brought it back", alarms)
        replays = [e["t"] for e in run.trace.of_kind("api_replay")]
        expect.that(len(replays) == 1, "the API answered attempt 2 from what it stored", replays)
        effects = dict(api_of(run).effects)
        expect.that(list(effects.values()) == [1], "the job took effect once", effects)
        settled = [outcome for _, kind, _, outcome in lifecycle(run) if kind == "attempt_settled"]
        expect.that(settled == ["completed"], "the operation completed", settled)

    return Scenario(
        name="eviction-mid-attempt",
        description="an evicted client runs the job again under the same id; idempotency keeps one effect",
        seed=1,
        config=one_job(10_000, idempotent=True),
        faults=FaultPlan(evictions=(Eviction(CLIENT, 5_000),)),
        check=Check(judge),
    )


def lost_completion_replayed() -> Scenario:
    """Seed 002, the image-jobs example: "The handler runs at least once; passing the stable call
    id as the resize idempotency key lets the image service collapse duplicate attempts into
    one effect."

    The API's reply to attempt 1 is lost after the job took effect (7.03 s). The handler waits
    until its attempt times out (62.025 s), the retry calls with the same key a second later,
    and the API answers with the stored outcome: completed, one effect.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        settled = [
            (attempt, outcome) for _, kind, attempt, outcome in lifecycle(run) if kind == "attempt_settled"
        ]
        expect.that(
            settled == [(1, "retry_scheduled"), (2, "completed")],
            "attempt 1 timed out waiting; attempt 2 completed",
            settled,
        )
        lost = [e for e in run.trace.of_kind("drop") if e.get("leg") == "reply"]
        expect.that(len(lost) == 1, "the API's first reply was lost", len(lost))
        effects = dict(api_of(run).effects)
        expect.that(list(effects.values()) == [1], "one effect", effects)
        expect.that(
            len(run.trace.of_kind("api_replay")) == 1, "the retry was answered from the stored outcome"
        )

    return Scenario(
        name="lost-completion-replayed",
        description="the API's reply is lost after the effect: the retry is answered from the stored outcome",
        seed=1,
        config=one_job(5_000, idempotent=True),
        faults=FaultPlan(drops=(Drop(leg="reply", start_ms=0, end_ms=10_000, dst="api"),)),
        check=Check(judge),
    )


def failed_last_attempt_returns_by_finished() -> Scenario:
    """Seed 000's `JobShard` returns a permit from `onLifecycleEvent` on `terminal` or on
    `attempt_settled` with `outcome: 'completed'`; its `finished` callback "returns any permit it
    missed". Seed 002, `settleFailure`: a failed last attempt emits `attempt_settled` with
    `outcome: 'failed'`, not `terminal`.

    Every call fails. After 3 attempts (the last at 12.194 s) the operation has failed, the
    hook ignores it, and the permit stays held until the queue's `finished` check, which looks
    at items running 60 s or more once a minute, sees the operation is no longer pending
    (121.005 s).
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        settled = [(t, outcome) for t, kind, _, outcome in lifecycle(run) if kind == "attempt_settled"]
        outcomes = [outcome for _, outcome in settled]
        expect.that(
            outcomes == ["retry_scheduled", "retry_scheduled", "failed"],
            "three attempts, the last failed",
            outcomes,
        )
        kinds = [kind for _, kind, _, _ in lifecycle(run)]
        expect.that("terminal" not in kinds, "no terminal event", kinds)
        releases = [e["t"] for e in run.trace.of_kind("release")]
        reconciled = [e["t"] for e in run.trace.of_kind("reconciled")]
        failed_at = settled[-1][0] if settled else None
        expect.that(
            len(releases) == 1
            and reconciled == releases
            and failed_at is not None
            and releases[0] > failed_at,
            "the permit came back later, through finished, not the hook",
            (failed_at, releases, reconciled),
        )

    return Scenario(
        name="failed-last-attempt-returns-by-finished",
        description="a failed last attempt emits no event the hook releases on; finished returns the permit",
        seed=1,
        config=one_job(5_000, idempotent=True),
        faults=FaultPlan(api_error=1.0, faults_until_ms=100_000),
        check=Check(judge),
    )


def last_attempt_evicted_terminal() -> Scenario:
    """Seed 002, `failExhausted`: an attempt that cannot be claimed because every attempt was used
    fails the operation with `terminal` (`attempts_exhausted`); seed 000's hook returns the permit
    on `terminal`. Seed 002, "After eviction": "A remote effect may already have committed".

    One attempt allowed, two 30 s jobs, limit 1, an API that does not deduplicate. The client is
    evicted 3 s into job 1's only attempt. The stored alarm (16.005 s) finds no attempt left:
    `terminal`, and the hook returns the permit while job 1's call still runs at the API (until
    32.03 s). Job 2 is admitted at 17.025 s and calls: two calls in flight, limit 1: F5 again,
    by eviction rather than timeout.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        terminal = [t for t, kind, _, _ in lifecycle(run) if kind == "terminal"]
        expect.that(terminal == [16_005], "job 1 ended terminal at the stored alarm", terminal)
        releases = [(e["t"], e["item"].rsplit("/", 1)[-1]) for e in run.trace.of_kind("release")]
        expect.that(
            releases[:1] == [(16_005, "item-1")], "the hook returned job 1's permit at once", releases
        )
        calls = [
            (e["t"], e["kind"], e["in_flight"])
            for e in run.trace.events()
            if e["kind"] in ("api_start", "api_end")
        ]
        expect.that(
            calls[:3] == [(2_030, "api_start", 1), (17_030, "api_start", 2), (32_030, "api_end", 1)],
            "job 2's call began while job 1's still ran",
            calls,
        )
        broken = [(v.name, v.finding) for v in run.monitor.violations]
        expect.that(broken[:1] == [("external_ceiling", "F5")], "external_ceiling broke, as F5", broken)

    config = one_job(30_000, idempotent=False, count=2)
    assert config.operations is not None
    return Scenario(
        name="last-attempt-evicted-terminal",
        description="a job evicted in its last attempt ends terminal, its call still running (F5)",
        seed=1,
        config=attrs.evolve(config, operations=attrs.evolve(config.operations, max_attempts=1)),
        faults=FaultPlan(evictions=(Eviction(CLIENT, 5_000),)),
        check=Check(judge),
        tolerated=frozenset({"F5"}),
    )


def api_error_retried_under_one_permit() -> Scenario:
    """Seed 002: a failed attempt is retried after its backoff under the same id ("Failure
    either records the next retry time or a terminal failed state"); seed 000's hook returns the
    permit only when the operation has finished.

    The API fails every call until 5 s, part-way through its work (how far is the seed's draw:
    with seed 1, attempt 1 fails at 6.007 s). Attempt 2 runs a second later and completes. The
    item holds its one permit throughout: one admission, one release, at the completion.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        settled = [(t, outcome) for t, kind, _, outcome in lifecycle(run) if kind == "attempt_settled"]
        expect.that(
            [outcome for _, outcome in settled] == ["retry_scheduled", "completed"],
            "attempt 1 failed and was retried; attempt 2 completed",
            settled,
        )
        admits = [e["t"] for e in run.trace.of_kind("admit")]
        releases = [e["t"] for e in run.trace.of_kind("release")]
        expect.that(
            len(admits) == 1 and releases == [t for t, outcome in settled if outcome == "completed"],
            "one permit, held until completion",
            (admits, releases),
        )
        effects = dict(api_of(run).effects)
        expect.that(list(effects.values()) == [1], "the failed call took no effect; the retry's did", effects)

    return Scenario(
        name="api-error-retried-under-one-permit",
        description="an API error is retried under the same id; the item keeps one permit until it completes",
        seed=1,
        config=one_job(5_000, idempotent=True),
        faults=FaultPlan(api_error=1.0, faults_until_ms=5_000),
        check=Check(judge),
    )


def lease_drawn_operations() -> Scenario:
    """Seed 000, the account-concurrency example: "Leases let shards admit bursts without a round
    trip", and admitted items run as durable operations whatever admitted them.

    A lease-capable client, strict leases of 2 permits. Two jobs at 1 s go through a round
    (a grant, and a lease alongside it); two more at 20 s are drawn from the lease at 20.005 s
    without asking the holder. All four run as operations, call the API and give their permits
    back through the hook.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        drawn = [e["item"].rsplit("/", 1)[-1] for e in run.trace.of_kind("admit") if e.get("lease")]
        expect.that(drawn == ["item-3", "item-4"], "the later two were drawn from the lease", drawn)
        registered = [
            e["id"].rsplit("/", 1)[-1] for e in run.trace.of_kind("operation") if e["type"] == "registered"
        ]
        expect.that(
            registered == ["item-1", "item-2", "item-3", "item-4"], "each became an operation", registered
        )
        completed = [kind for _, kind, _, outcome in lifecycle(run) if outcome == "completed"]
        expect.that(len(completed) == 4, "all four completed", len(completed))
        releases = len(run.trace.of_kind("release"))
        expect.that(releases == 4, "all four permits came back through the hook", releases)

    return Scenario(
        name="lease-drawn-operations",
        description="items drawn from a lease run as durable operations too, returning permits the same way",
        seed=1,
        config=WorldConfig(
            holder=HolderSpec(limit=4, leases=LeaseSpec(provisioning="strict", permits_per_lease=2)),
            workload=Workload(
                clients=1,
                script=(
                    Arrival(at_ms=1_000, client=0, count=2, duration_ms=5_000),
                    Arrival(at_ms=20_000, client=0, count=2, duration_ms=5_000),
                ),
            ),
            duration_ms=120_000,
            operations=OperationsSpec(),
        ),
        faults=FaultPlan(),
        check=Check(judge),
    )


def conflicts_exhaust_while_the_call_runs() -> Scenario:
    """Seed 002: "receiver-side idempotency is still necessary"; an idempotent API refuses a key
    whose call still runs. Seed 000's `finished` counts an item done once its operation is no
    longer pending.

    A 200 s job and a 5 s one, limit 1, an idempotent API, a 5 s attempt timeout. Job 1's
    attempt 1 times out at 7.025 s; attempts 2 and 3 are refused (409) while its call runs: the
    operation fails at 10.045 s. At 121.005 s the `finished` check returns its permit, and job 2
    is admitted and calls at 122.23 s while job 1's call still runs (until 202.03 s): two calls
    in flight, limit 1, F5 with an idempotent API.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        conflicts = [e["t"] for e in run.trace.of_kind("api_conflict")]
        expect.that(
            conflicts[:2] == [8_030, 10_040], "the retries were refused while the call ran", conflicts
        )
        failed = [t for t, kind, attempt, outcome in lifecycle(run) if outcome == "failed"]
        expect.that(failed == [10_045], "job 1 failed on its third attempt", failed)
        reconciled = [e["t"] for e in run.trace.of_kind("reconciled")]
        expect.that(reconciled == [121_005], "finished returned its permit", reconciled)
        broken = [(v.name, v.finding, v.t_ms) for v in run.monitor.violations]
        expect.that(
            broken[:1] == [("external_ceiling", "F5", 122_230)],
            "job 2's call broke external_ceiling, as F5",
            broken,
        )

    return Scenario(
        name="conflicts-exhaust-while-the-call-runs",
        description="an idempotent API refuses a slow call's retries; its permit returns while it runs (F5)",
        seed=1,
        config=attrs.evolve(
            one_job(30_000, idempotent=True, attempt_timeout_ms=5_000),
            workload=Workload(
                clients=1,
                plain_clients=1,
                script=(
                    Arrival(at_ms=1_000, client=0, duration_ms=200_000),
                    Arrival(at_ms=1_000, client=0, duration_ms=5_000),
                ),
            ),
        ),
        faults=FaultPlan(),
        check=Check(judge),
        tolerated=frozenset({"F5"}),
    )


ALL: Final = (
    zombie_call_over_the_limit,
    eviction_mid_attempt,
    last_attempt_evicted_terminal,
    api_error_retried_under_one_permit,
    lost_completion_replayed,
    failed_last_attempt_returns_by_finished,
    conflicts_exhaust_while_the_call_runs,
    lease_drawn_operations,
)
