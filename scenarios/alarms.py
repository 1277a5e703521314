"""The holder's one alarm: what brings unclaimed capacity back when nobody calls.

Every story starts the same way: one plain client's items (limit 2) are
granted in the round at 2.010 s, the reply is lost, and from 3 s on the
client's requests never reach the holder, so no round can reclaim the
grant: only the alarm can. Its claim deadline is 12.010 s; the stored
alarm is armed no sooner than ``alarm_min_delay_ms`` (15 s) after the
commit, 17.010 s, and the instance's in-memory early timer covers the
deadline before that.
"""

from __future__ import annotations

from itertools import pairwise

from semaphore_core.store import HolderStore
from semsim.harness.run import HolderSpec, WorldConfig, WorldRun
from semsim.scenarios.base import HOLDER, Check, Expect, Scenario, events, first_t
from semsim.world.faults import Drop, Eviction, FaultPlan
from semsim.world.workload import Arrival, Workload

COMMIT_MS = 2_010
DEADLINE_MS = 12_010
ALARM_MIN_DELAY_MS = 15_000
STORED_ALARM_MS = COMMIT_MS + ALARM_MIN_DELAY_MS
#: Alarm failures stop here in the failing-alarm stories.
FAULTS_UNTIL_MS = 150_000


def _silenced_grant(duration_ms: int, engine_fallback: bool = True) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(
            limit=2, leases=None, alarm_min_delay_ms=ALARM_MIN_DELAY_MS, engine_fallback=engine_fallback
        ),
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=2, duration_ms=30_000),)
        ),
        duration_ms=duration_ms,
    )


def _silencing_drops(end_ms: int) -> tuple[Drop, ...]:
    lost = Drop(leg="reply", start_ms=0, end_ms=3_000, src="client-0", dst=HOLDER, method="permits")
    silent = Drop(leg="request", start_ms=3_000, end_ms=end_ms, src="client-0", dst=HOLDER)
    return (lost, silent)


def _unclaimed_at_end(run: WorldRun) -> int:
    """Permits of grants still unclaimed in the holder's storage when the run ended."""
    store = HolderStore(run.world.holders["acct"].storage)
    return sum(g.permits - g.claimed for g in store.list_grants())


def alarm_reclaims_after_eviction() -> Scenario:
    """Seed 001, "How it uses your Durable Object": "The object's one alarm follows the earliest
    claim deadline of a grant with unclaimed permits, so unclaimed capacity comes back
    without another request." Seed 002: the alarm "brings the object back after eviction",
    and is armed no sooner than `alarmMinDelayMs` out.

    The holder is evicted at 5 s: its early timer dies with it. Nobody calls it again; the
    stored alarm at 17.010 s builds a new instance and reclaims the grant's 2 permits.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        reclaimed = [(e["t"], e["permits"]) for e in run.trace.of_kind("grant_reclaimed")]
        expect.that(
            reclaimed == [(STORED_ALARM_MS, 2)],
            "the 2 unclaimed permits came back at the stored alarm, 15 s after the commit",
            reclaimed,
        )
        alarms = [e["scheduled"] for e in events(run, "alarm", object=HOLDER)]
        expect.that(alarms[:1] == [STORED_ALARM_MS], "the platform ran the stored alarm", alarms)
        early = events(run, "early_alarm", object=HOLDER)
        expect.that(not early, "the early timer did not fire (it died with the instance)", early)
        instances = [(e["t"], e["generation"]) for e in events(run, "instance", object=HOLDER)]
        expect.that(
            instances == [(1_010, 0), (STORED_ALARM_MS, 1)],
            "the alarm alone brought the holder back",
            instances,
        )
        left = _unclaimed_at_end(run)
        expect.that(left == 0, "no unclaimed permits were left", left)

    return Scenario(
        name="alarm-reclaims-after-eviction",
        description="an evicted holder nobody calls is brought back by its alarm, which reclaims",
        seed=1,
        config=_silenced_grant(40_000),
        faults=FaultPlan(drops=_silencing_drops(40_000), evictions=(Eviction(HOLDER, 5_000),)),
        check=Check(judge),
    )


def _failing_alarms(duration_ms: int) -> FaultPlan:
    return FaultPlan(drops=_silencing_drops(duration_ms), alarm_failure=1.0, faults_until_ms=FAULTS_UNTIL_MS)


def alarm_dropped_by_platform() -> Scenario:
    """Seed 002, the scheduler's `alarm()`: a failed run is caught and the engine arms its own
    fallback alarm (`armFallbackAlarm`, a `setAlarm` `alarmMinDelayMs` out); it rethrows the
    error, handing it to the platform, only when that returns false, that is when setting the
    fallback alarm threw too. Seed 002, "Work
    within alarm limits": "The runtime retries a failing alarm() only a few times and then
    drops it, which would strand pending rows."

    ``engine_fallback: false`` is that case: every alarm run throws until 150 s and so does
    the engine's `setAlarm` for its fallback, so the engine arms nothing of its own and
    rethrows. The early timer's run fails at the deadline (reported, as the reference's
    `onError` does; the stored alarm stays). The stored alarm at 17.010 s fails, the platform
    retries it a few times and drops it, before the failures stop. How many times and how
    far apart is not in the seeds: semsim's platform retries 6 times, 2 s apart and doubling
    (``sim/runtime/durable.py``), and this check asserts neither number. Then nothing is left to
    run: while nobody calls, the grant's 2 permits are never reclaimed. Only after the story
    (200 s), when the client is heard again, does the holder's next commit re-arm the alarm
    (its engine arms one for every grant with unclaimed permits) and reclaim them.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        early = [
            (e["t"], e.get("early")) for e in events(run, "alarm_failed", object=HOLDER) if e.get("early")
        ]
        expect.that(early == [(DEADLINE_MS, True)], "the early timer's run failed at the deadline", early)
        retries = events(run, "alarm_retry", object=HOLDER)
        expect.that(
            not retries,
            "the engine armed no fallback of its own (setting it threw), so it rethrew",
            len(retries),
        )
        attempts = events(run, "alarm", object=HOLDER)
        failed = [e["attempt"] for e in events(run, "alarm_failed", object=HOLDER) if not e.get("early")]
        expect.that(
            len(attempts) >= 2
            and all(e["scheduled"] == STORED_ALARM_MS for e in attempts)
            and failed == [e["attempt"] for e in attempts],
            "the failure went to the platform, which ran the stored alarm and retried it",
            [(e["t"], e["attempt"]) for e in attempts],
        )
        dropped = [e["t"] for e in events(run, "alarm_dropped", object=HOLDER)]
        expect.that(
            len(dropped) == 1 and bool(attempts) and attempts[-1]["t"] <= dropped[0] < FAULTS_UNTIL_MS,
            "then the platform dropped the alarm after its last retry, before the failures stopped",
            dropped,
        )
        reclaimed = [(e["t"], e["permits"]) for e in run.trace.of_kind("grant_reclaimed")]
        story_ms = run.trace.header["config"]["duration_ms"]
        expect.that(
            all(t >= story_ms for t, _ in reclaimed),
            "while nobody called, the grant was never reclaimed, even after the failures stopped",
            reclaimed,
        )
        heard = first_t(e for e in run.trace.of_kind("round") if e["t"] >= story_ms)
        expect.that(
            len(reclaimed) == 1 and reclaimed[0][1] == 2 and heard is not None and reclaimed[0][0] >= heard,
            "its 2 permits came back only once the client was heard again and a round committed",
            f"first round after the story at {heard}, reclaimed {reclaimed}",
        )

    return Scenario(
        name="alarm-dropped-by-platform",
        description="when even the engine's fallback cannot be set, the platform retries, drops: no reclaim",
        seed=9,
        config=_silenced_grant(200_000, engine_fallback=False),
        faults=_failing_alarms(200_000),
        check=Check(judge),
    )


def alarm_engine_fallback() -> Scenario:
    """Seed 002: the scheduler's `alarm()` "Processes due operations and re-arms the physical
    alarm"; when a run fails, "the scheduler re-arms its own fallback alarm instead of letting
    the platform retry" (`onAlarmRetry`), `alarmMinDelayMs` out.

    The same failing alarms as ``alarm-dropped-by-platform``, with the engine's fallback:
    the early timer's run at the deadline fails and re-arms the stored alarm 15 s later (it
    runs the same `alarm()`), every later failure does the same, the platform never has to
    retry or drop it, and the first run after the failures stop (at 150 s) reclaims the
    grant's 2 permits.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        retries = [e["t"] for e in events(run, "alarm_retry", object=HOLDER)]
        expect.that(
            retries[:1] == [DEADLINE_MS],
            "the early timer's failed run at the deadline re-armed a fallback",
            retries[:1],
        )
        gaps = {b - a for a, b in pairwise(retries)}
        expect.that(gaps == {ALARM_MIN_DELAY_MS}, "each fallback ran alarmMinDelayMs after the last", gaps)
        expect.that(
            bool(retries) and retries[-1] < FAULTS_UNTIL_MS <= retries[-1] + ALARM_MIN_DELAY_MS,
            "the fallbacks kept coming until the failures stopped",
            retries[-1:],
        )
        platform_retries = [e["attempt"] for e in events(run, "alarm", object=HOLDER) if e["attempt"]]
        expect.that(not platform_retries, "the platform never had to retry", platform_retries)
        dropped = events(run, "alarm_dropped", object=HOLDER)
        expect.that(not dropped, "the alarm was never dropped", dropped)
        reclaimed = [(e["t"], e["permits"]) for e in run.trace.of_kind("grant_reclaimed")]
        due = retries[-1] + ALARM_MIN_DELAY_MS if retries else None
        expect.that(
            reclaimed == [(due, 2)],
            "the first alarm after the failures stopped reclaimed the 2 permits",
            f"reclaimed {reclaimed}, next fallback due at {due}",
        )
        left = _unclaimed_at_end(run)
        expect.that(left == 0, "no unclaimed permits were left", left)

    return Scenario(
        name="alarm-engine-fallback",
        description="with the engine's fallback, a throwing alarm re-arms itself until reclaim succeeds",
        seed=10,
        config=_silenced_grant(200_000),
        faults=_failing_alarms(200_000),
        check=Check(judge),
    )


ALL = (alarm_reclaims_after_eviction, alarm_dropped_by_platform, alarm_engine_fallback)
