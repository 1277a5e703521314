"""Liveness is judged only once nothing more can happen, whenever the sampler looks.

``capacity_returns``, ``reclaimed`` and ``operation_progress`` are judged
once, when the run has settled (docs/INVARIANTS.md, "When liveness is
judged"); ``progress`` is sampled. A snapshot taken while a message is on
the wire, or while a grant can still be claimed, once called a reply in
flight a leak (issue 23). Each test here failed before the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

import semsim.check.lockstep
import semsim.harness.run
import semsim.runtime.kernel
from semaphore_core.store import HolderStore
from semsim.explore.fuzz import load_case, run_case
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
from semsim.world.external_api import ExternalApi
from semsim.world.faults import Cancel, FaultPlan, GroupLimitChange
from semsim.world.operations import OperationsSpec
from semsim.world.workload import Arrival, Workload
from tests.helpers import NoLockstep

REGRESSIONS = Path(__file__).resolve().parent / "fixtures" / "regressions"
#: Cases whose verdict once hung on when the 5 s progress sample fell (issue 23).
TIMING_CASES = (
    "settled-while-a-grant-reply-was-on-the-wire",
    "settled-while-a-grant-reply-was-on-the-wire-minimal",
    "capped-backlog-and-fresh-arrivals-in-one-window",
)
#: Sample periods prime to the round period and to each other, and the default.
SAMPLE_PERIODS_MS = (997, 1_237, 1_777, semsim.harness.run.PROGRESS_SAMPLE_MS)


@pytest.mark.parametrize("name", TIMING_CASES)
def test_the_verdict_does_not_depend_on_the_sample_period(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case, tolerated = load_case(REGRESSIONS / f"{name}.json")
    verdicts = []
    for period_ms in SAMPLE_PERIODS_MS:
        monkeypatch.setattr(semsim.harness.run, "PROGRESS_SAMPLE_MS", period_ms)
        report, _ = run_case(case, tolerated)
        verdicts.append((period_ms, report.outcome, report.detail))
    assert verdicts == [(period_ms, "completed", "") for period_ms in SAMPLE_PERIODS_MS]


@pytest.mark.parametrize("seed", [3, 6, 9, 10])
def test_a_capped_backlog_is_not_starved_by_another_groups_fresh_arrivals(seed: int) -> None:
    """wf-1 capped at 0, then at 1, with no other fault: every round grants wf-1 its one
    permit and wf-2 what it asked for. wf-2's items that arrived after their client's
    request wait for the next round, so at a round's commit wf-2 had items waiting, and the
    key's one window stayed open while wf-1's backlog (arrived long ago) was sampled between
    rounds: "153 items have waited 30000 ms". Windows are per group now; wf-1's closes at
    every round that fills its cap."""
    case, tolerated = load_case(REGRESSIONS / "capped-backlog-and-fresh-arrivals-in-one-window.json")
    report, run = run_case(attrs.evolve(case, seed=seed), tolerated)
    assert report.outcome == "completed", report.detail
    assert run is not None
    rounds = [e for e in run.trace.of_kind("round") if e["t"] > 144_618]
    assert len(rounds) > 20
    # Every round of the first 20 after the cap rose left wf-1 at its cap: no room for it.
    assert all(e["usage"]["groups"]["wf-1"] == {"granted": 1, "limit": 1} for e in rounds[:20])


# One client, a group capped at 2, a grant and a lease of 1 each; F1's fix counts the lease
# against the cap. Latency 100 ms: the round commits at 39,950 and its reply lands at 40,050,
# while the run is first judged at 40,000 (its duration).
ON_THE_WIRE = WorldConfig(
    holder=HolderSpec(
        limit=4,
        leases=LeaseSpec(permits_per_lease=1, limited_groups="within_group_limit"),
        fixes=("group-ceiling-counts-leases", "return-idle-leases"),
    ),
    workload=Workload(
        clients=1, script=(Arrival(at_ms=38_750, client=0, count=1, group="wf-1", duration_ms=1_000),)
    ),
    duration_ms=40_000,
    latency_ms=100,
)


def test_a_grant_and_a_lease_on_the_wire_are_neither_a_leak_nor_settled() -> None:
    """The holder has committed the round; its client has not heard of it. Judged then, the
    group looked shut by its cap, the grant looked leaked and the lease lost in its reply
    (``capacity_returns``, and a ``lease_lost_in_reply`` that never happened)."""
    plan = FaultPlan(group_limit_changes=(GroupLimitChange(500, "acct", "wf-1", 2),))
    run = run_world(ON_THE_WIRE, plan, seed=1)
    assert run.result.outcome == "completed", run.result
    [round_] = run.trace.of_kind("round")
    assert round_["t"] < ON_THE_WIRE.duration_ms < round_["t"] + 2 * ON_THE_WIRE.latency_ms
    assert not run.monitor.leaks
    [settled] = run.trace.of_kind("settled")
    assert settled["waiting"] == 0
    assert [e["item"] for e in run.trace.of_kind("admit")] == ["client-0/item-1"]


def test_work_still_on_its_way_to_a_client_is_judged_too() -> None:
    """An item submitted 10 ms before the story ends reaches its client 90 ms after: judged at
    the end, the run had nothing waiting and settled without it, and no liveness check ever
    saw the item (a holder that never served it would have been green)."""
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=None),
        workload=Workload(clients=1, plain_clients=1, script=(Arrival(at_ms=39_990, client=0, count=1),)),
        duration_ms=40_000,
        latency_ms=100,
    )
    run = run_world(config, FaultPlan(), seed=1)
    assert run.result.outcome == "completed", run.result
    [settled] = run.trace.of_kind("settled")
    [enqueue] = run.trace.of_kind("enqueue")
    [release] = run.trace.of_kind("release")
    assert enqueue["t"] > config.duration_ms
    assert release["t"] < settled["t"]


def test_the_network_says_what_is_on_the_wire_at_the_moment_of_judgement() -> None:
    """Stopped at 40,000 ms, the run above has the round's reply on the wire: not settled."""
    plan = FaultPlan(group_limit_changes=(GroupLimitChange(500, "acct", "wf-1", 2),))
    run = run_world(ON_THE_WIRE, plan, seed=1, limits=semsim.runtime.kernel.Limits(time_limit_ms=40_000))
    world = run.world
    assert world.network.on_wire == 1
    assert world.network.lands_by_ms == 40_050
    assert not world.monitor.settled(world.clients)


# A cancel aimed at a request waiting for its round: the round grants 2, the client claims 1,
# and the other permit is the alarm's to take back at the claim deadline (10 s later).
CLAIMED_IN_PART = FaultPlan(cancels=(Cancel("client-0", 1_000),))


def claimed_in_part(arrival_ms: int) -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=4, leases=None),
        workload=Workload(
            clients=1,
            plain_clients=1,
            script=(Arrival(at_ms=arrival_ms, client=0, count=2, group="wf-1", duration_ms=1_000),),
        ),
        duration_ms=30_000,
    )


def test_a_grant_claimed_in_part_is_busy_until_its_deadline_not_leaked() -> None:
    """The round comes at 30,010; the run is first judged at 33,000, before the deadline,
    when the unclaimed permit still counts: judged then, it was a leak."""
    run = run_world(claimed_in_part(29_000), CLAIMED_IN_PART, seed=1)
    assert run.result.outcome == "completed", run.result
    [reclaimed] = run.trace.of_kind("grant_reclaimed")
    [settled] = run.trace.of_kind("settled")
    assert reclaimed["permits"] == 1
    assert settled["t"] > reclaimed["t"]


def test_a_reclaim_a_minute_late_is_judged_even_when_the_run_is_quiet_sooner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted bug: the holder tells its scheduler that unclaimed permits are due a minute
    after their claim deadline, so the alarm takes them back a minute late. The deadline
    (31,010) passes before the run is first judged (33,000), and the alarm may take up to
    ``alarm_min_delay_ms`` (15 s) more: judged at once, ``reclaimed`` had nothing stale to see
    and the run was green. It must wait until that bound, and fail."""
    on_time = HolderStore.next_pending_at

    def late(self: HolderStore) -> int | None:
        due = on_time(self)
        return None if due is None else due + 60_000

    monkeypatch.setattr(HolderStore, "next_pending_at", late)
    monkeypatch.setattr(semsim.check.lockstep, "Lockstep", NoLockstep)
    run = run_world(claimed_in_part(20_000), CLAIMED_IN_PART, seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", "reclaimed"), run.result
    assert 31_010 + 15_000 < run.result.end_ms < 31_010 + 60_000


# Attempt 1's call is slowed 100-fold (the API's faults stop at 3 s): it times out, attempt 2's
# call (1.5 s) completes the operation and the item is released at 6,535, while call 1, a
# zombie, works at the API until 152,030.
ZOMBIE = WorldConfig(
    holder=HolderSpec(limit=4, leases=None),
    workload=Workload(
        clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=1, duration_ms=1_500),)
    ),
    duration_ms=40_000,
    operations=OperationsSpec(idempotent_api=False, max_attempts=2, attempt_timeout_ms=2_000),
)
ZOMBIE_PLAN = FaultPlan(api_slow=1.0, api_slow_factor=100, faults_until_ms=3_000)


def test_a_call_still_working_at_the_api_is_waited_for() -> None:
    """Judged at 40,000 the run looked quiet and ended with the zombie still working: what
    its end does (an effect, ``effect_once``) was never seen."""
    run = run_world(ZOMBIE, ZOMBIE_PLAN, seed=1)
    assert run.result.outcome == "completed", run.result
    ends = [e["t"] for e in run.trace.of_kind("api_end")]
    [settled] = run.trace.of_kind("settled")
    assert ends == [6_530, 152_030]
    assert settled["t"] > ends[-1]


def test_a_zombies_second_effect_at_an_idempotent_api_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: an API that claims idempotency but lets a second call of a key that is
    still running in. The zombie's effect comes at its end, long after the run looked quiet."""

    class NothingRunning(dict[str, str]):
        def __contains__(self, key: object) -> bool:
            return False

        def __delitem__(self, key: str) -> None:
            self.pop(key, None)

    real_init = ExternalApi.__init__

    def leaky_init(self: ExternalApi, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self._running_key = NothingRunning()

    monkeypatch.setattr(ExternalApi, "__init__", leaky_init)
    idempotent = OperationsSpec(idempotent_api=True, max_attempts=2, attempt_timeout_ms=2_000)
    config = attrs.evolve(ZOMBIE, operations=idempotent)
    run = run_world(config, ZOMBIE_PLAN, seed=1)
    assert (run.result.outcome, run.result.invariant) == ("violation", "effect_once"), run.result
    assert run.result.end_ms == 152_030


@pytest.mark.parametrize("seed", range(8))
def test_a_zombie_that_outlasts_the_stall_window_is_waited_for_not_called_stuck(seed: int) -> None:
    """Waiting on an end already known is not being stuck. The sweep of the reference that
    first waited for zombies found runs failing "the run did not settle" with nothing queued:
    a call slowed past the stall window kept them unsettled while nothing else moved. And
    then at its end, when its reply to the caller that gave up was on the wire for 5 ms
    (on about half the seeds, by the order tasks run in): the end is work moving too."""
    config = attrs.evolve(
        ZOMBIE,
        workload=Workload(
            clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=1, duration_ms=50_000),)
        ),
        operations=OperationsSpec(idempotent_api=False, max_attempts=2, attempt_timeout_ms=60_000),
    )
    assert semsim.harness.run.stall_ms(config) < 50_000 * 100
    run = run_world(config, ZOMBIE_PLAN, seed=seed)
    assert run.result.outcome == "completed", run.result
    zombie_end = max(e["t"] for e in run.trace.of_kind("api_end"))
    [settled] = run.trace.of_kind("settled")
    assert zombie_end == 2_030 + 50_000 * 100 <= settled["t"]
    assert len(run.trace.of_kind("api_end")) == len(run.trace.of_kind("api_start"))


def test_a_client_asking_in_vain_every_round_does_not_keep_the_run_from_settling() -> None:
    """A group capped at 0: its client asks every round and hears nothing. With a latency of
    2 s its request or its empty reply is on the wire four fifths of the time, and a sample
    every 5 s saw one every time. The judge looks again when they have landed (while the
    request waits for its round), so the run settles with the item still waiting."""
    config = WorldConfig(
        holder=HolderSpec(limit=4, leases=None),
        workload=Workload(clients=1, plain_clients=1, script=(Arrival(at_ms=1_000, client=0, count=1),)),
        duration_ms=30_000,
        latency_ms=2_000,
    )
    plan = FaultPlan(group_limit_changes=(GroupLimitChange(0, "acct", "wf-1", 0),))
    run = run_world(config, plan, seed=1)
    assert run.result.outcome == "completed", run.result
    [settled] = run.trace.of_kind("settled")
    assert settled["waiting"] == 1
    assert settled["t"] < 60_000
