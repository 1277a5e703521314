"""Hypothesis strategies for whole simulated runs: a configuration, a fault plan, a seed.

Swarm testing: each run enables a random subset of fault kinds, then draws
their rates and times, so a campaign covers runs with only reply loss, only
evictions, everything at once, and so on; shrinking then removes whatever
a failure does not need. Runs are short (a couple of simulated minutes of
faults, then a quiet period for liveness) so a campaign can afford many.
"""

from typing import Any, Final, Literal

import attrs
from hypothesis import strategies as st

from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig
from semsim.world.client_object import ClientSettings
from semsim.world.faults import Cancel, Eviction, FaultPlan, GroupLimitChange, InputFault, LimitChange, Window
from semsim.world.operations import DEFAULT_ALARM_HANDOFF_MS, OperationsSpec
from semsim.world.workload import Workload

FAULT_KINDS: Final = (
    "request_loss",
    "reply_loss",
    "duplicate",
    "delay",
    "reorder",
    "partitions",
    "evictions",
    "alarm_failure",
    "release_loss",
    "limit_changes",
    "group_limit_changes",
    "forged_reports",
    "denials",
    "group_limit_failures",
    "limit_failures",
    "cancels",
)
#: The swarm's kind that turns on each holder callback's misbehaviour.
INPUT_KINDS: Final = {
    "can_grant": "denials",
    "group_limit": "group_limit_failures",
    "limit": "limit_failures",
}
#: Faults of the external API, drawn (as a swarm of their own) only in account-concurrency worlds.
API_FAULT_KINDS: Final = ("api_error", "api_error_after_effect", "api_slow")
KEYS: Final = ("acct",)
GROUPS: Final = ("wf-1", "wf-2")
#: Faults stop at the end of the fault phase; the quiet period after it is for
#: liveness. Some runs have a long phase: the platform's retries of a failing
#: alarm span about two minutes before it drops the alarm.
FAULT_PHASE_MS: Final = 90_000
LONG_FAULT_PHASE_MS: Final = 180_000
QUIET_MS: Final = 90_000


@attrs.frozen
class Case:
    """One run to try: what the trace header records, and how to replay it."""

    config: WorldConfig
    faults: FaultPlan
    seed: int
    #: The holder variant it runs, by the name it is found by (semsim.harness.variants).
    variant: str = "reference"
    #: The user's own invariants judged beside semsim's, by the references they are found by
    #: (semsim.harness.invariants).
    invariants: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seed": self.seed}
        if self.variant != "reference":  # a case of the reference reads as it always has
            data["variant"] = self.variant
        if self.invariants:
            data["invariants"] = list(self.invariants)
        return {**data, "config": self.config.to_dict(), "faults": self.faults.to_dict()}


@st.composite
def configs(draw: st.DrawFn, fixes: tuple[str, ...] = ()) -> WorldConfig:
    mode = draw(st.sampled_from(["none", "strict", "under", "over"]))
    leases = None
    if mode != "none":
        leases = LeaseSpec(
            provisioning=mode,  # type: ignore[arg-type]
            # A ratio of 1.0 asks for the whole limit: under mode must still keep one permit for grants.
            amount=draw(st.one_of(st.integers(0, 4), st.sampled_from([0.25, 0.5, 1.0]))),
            permits_per_lease=draw(st.integers(1, 4)),
            ttl_ms=draw(st.sampled_from([20_000, 60_000])),
            max_groups=draw(st.integers(1, 2)),
            max_clients_per_group=draw(st.integers(1, 3)),
            limited_groups=draw(st.sampled_from(["exclude", "within_group_limit"])),
        )
    clients = draw(st.integers(1, 4))
    arrival: Literal["steady", "bursts"] = draw(st.sampled_from(["steady", "bursts"]))
    fault_phase_ms = draw(st.sampled_from([FAULT_PHASE_MS, LONG_FAULT_PHASE_MS]))
    return WorldConfig(
        holder=HolderSpec(
            limit=draw(st.integers(1, 10)),
            grant_timeout_ms=draw(st.sampled_from([3_000, 10_000, 1_000])),
            leases=leases,
            fixes=fixes,
            alarm_min_delay_ms=draw(st.sampled_from([1_000, 15_000])),
            # Without the engine's fallback re-arm, the platform may drop a failing alarm.
            engine_fallback=draw(st.sampled_from([True, False])),
        ),
        workload=Workload(
            clients=clients,
            plain_clients=draw(st.integers(0, clients)),
            keys=KEYS,
            groups=GROUPS,
            arrival=arrival,
            items_per_minute=draw(st.sampled_from([10.0, 30.0, 90.0])),
            burst_size=draw(st.integers(1, 8)),
            burst_every_ms=draw(st.sampled_from([10_000, 30_000])),
            # Clients that burst together send equally old demand: the clientId tie-break decides.
            aligned=arrival == "bursts" and draw(st.booleans()),
            # Ids that differ only in case: localeCompare and code points order them apart.
            client_ids=draw(st.sampled_from(["numbered", "case_twins"])),
            # Some items outlive a lease's ttl, so leases expire with work running.
            duration_ms=(500, draw(st.sampled_from([2_000, 10_000, 45_000]))),
            # Arrivals may stop well before the faults do, leaving a quiet holder under faults.
            until_ms=draw(st.sampled_from([fault_phase_ms, 15_000])),
        ),
        client=ClientSettings(finished_check_ms=20_000),
        duration_ms=fault_phase_ms + QUIET_MS,
        # Half the runs are seed 000's account-concurrency world (shrinks to none). Every choice
        # draws a different world: a weighting such as "2 of 3 choices give none" would draw
        # the same case twice.
        operations=draw(st.one_of(st.none(), operations())),
    )


def operations() -> st.SearchStrategy[OperationsSpec]:
    """Admitted items as durable operations calling the external API: attempt timeouts shorter
    than the longest items (zombies), one attempt at a time (handoffs, passes that wait), an
    API that deduplicates or not."""
    return st.builds(
        OperationsSpec,
        idempotent_api=st.booleans(),
        max_attempts=st.integers(1, 4),
        attempt_timeout_ms=st.sampled_from([60_000, 10_000, 3_000]),
        alarm_concurrency=st.sampled_from([10, 1, 2]),
        # A pass that runs this long hands off: with one attempt at a time, often.
        alarm_handoff_ms=st.sampled_from([DEFAULT_ALARM_HANDOFF_MS, 5_000]),
    )


def _targets(config: WorldConfig) -> list[str]:
    return [f"holder:{key}" for key in config.workload.keys] + config.workload.client_names()


@st.composite
def fault_plans(draw: st.DrawFn, config: WorldConfig) -> FaultPlan:
    enabled = draw(st.sets(st.sampled_from(FAULT_KINDS)))
    if "alarm_failure" in enabled:
        # The alarm only has work when grants go unclaimed: lost replies give it some.
        enabled = enabled | {"reply_loss"}
    rate = st.sampled_from([0.02, 0.1, 0.3])
    targets = _targets(config)
    phase_ms = config.duration_ms - QUIET_MS
    at = st.integers(0, phase_ms - 1)

    def on(kind: str, strategy: st.SearchStrategy[Any], off: Any) -> Any:
        return draw(strategy) if kind in enabled else off

    partitions = on(
        "partitions",
        st.lists(
            st.builds(
                lambda target, start, length: Window(target, start, min(phase_ms, start + length)),
                st.sampled_from(targets),
                at,
                st.integers(500, 45_000),
            ),
            min_size=1,
            max_size=2,
        ),
        [],
    )

    def input_faults(input: str) -> list[InputFault]:
        """Windows in which one holder callback misbehaves (for one group or all)."""
        group = st.none() if input == "limit" else st.one_of(st.none(), st.sampled_from(GROUPS))
        bad = st.just(False) if input == "can_grant" else st.booleans()
        window = st.builds(
            lambda start, length, group, bad: InputFault(
                input, start, min(phase_ms, start + length), group=group, bad=bad
            ),
            st.integers(0, phase_ms - 2),
            st.integers(1_000, 30_000),
            group,
            bad,
        )
        return list(on(INPUT_KINDS[input], st.lists(window, min_size=1, max_size=2), []))

    clients = config.workload.client_names()
    return FaultPlan(
        request_loss=on("request_loss", rate, 0.0),
        reply_loss=on("reply_loss", rate, 0.0),
        duplicate=on("duplicate", rate, 0.0),
        delay_ms=on("delay", st.sampled_from([50, 500, 3_000]), 0),
        reorder=on("reorder", rate, 0.0),
        reorder_ms=on("reorder", st.sampled_from([200, 2_000]), 0),
        partitions=tuple(partitions),
        evictions=tuple(
            on(
                "evictions",
                st.lists(st.builds(Eviction, st.sampled_from(targets), at), min_size=1, max_size=3),
                [],
            )
        ),
        # Holders evicted over and over: reclaim rests on the stored alarm alone.
        evict_holders_every_ms=on("evictions", st.sampled_from([None, 20_000, 5_000]), None),
        alarm_failure=on("alarm_failure", st.sampled_from([1.0, 0.3]), 0.0),
        # Without the engine's fallback, a platform that gives up at once: a failing
        # alarm is dropped (six retries span two minutes and are rarely left alone).
        alarm_retries=on(
            "alarm_failure", st.just(0) if not config.holder.engine_fallback else st.sampled_from([6, 0]), 6
        ),
        release_loss=on("release_loss", rate, 0.0),
        forged_reports=on("forged_reports", st.sampled_from([0.5, 0.2]), 0.0),
        limit_changes=tuple(
            on(
                "limit_changes",
                st.lists(st.builds(LimitChange, at, st.integers(0, 10)), min_size=1, max_size=2),
                [],
            )
        ),
        group_limit_changes=tuple(
            on(
                "group_limit_changes",
                st.lists(
                    st.builds(
                        GroupLimitChange,
                        at,
                        st.sampled_from(KEYS),
                        st.sampled_from(GROUPS),
                        # A cap of 0 (admit nothing) a third of the time: it must meet demand,
                        # and grants still running in its group, to show how 0 is read.
                        st.one_of(st.none(), st.just(0), st.integers(1, 4)),
                    ),
                    min_size=1,
                    max_size=3,
                ),
                [],
            )
        ),
        input_faults=tuple(input_faults("can_grant") + input_faults("group_limit") + input_faults("limit")),
        # The user withdraws queued items: one cancelled while its request waits for the
        # round leaves a grant claimed in part.
        cancels=tuple(
            on(
                "cancels",
                st.lists(
                    st.builds(Cancel, st.sampled_from(clients), at, st.sampled_from([1, 2, 5, 20])),
                    min_size=1,
                    max_size=6,
                ),
                [],
            )
        ),
        faults_until_ms=phase_ms,
        **(_api_faults(draw) if config.operations is not None else {}),
    )


def _api_faults(draw: st.DrawFn) -> dict[str, Any]:
    """The API's part of a plan: a swarm of its own kinds, drawn only where there is an API."""
    # One yes or no per kind, not a set: a set drawn in two orders would be the same plan twice.
    enabled = {kind for kind in API_FAULT_KINDS if draw(st.booleans())}
    rate = st.sampled_from([0.05, 0.2, 0.5])
    return {
        "api_error": draw(rate) if "api_error" in enabled else 0.0,
        "api_error_after_effect": draw(rate) if "api_error_after_effect" in enabled else 0.0,
        "api_slow": draw(rate) if "api_slow" in enabled else 0.0,
        "api_slow_factor": draw(st.sampled_from([4, 20])) if "api_slow" in enabled else 4,
    }


@st.composite
def cases(
    draw: st.DrawFn,
    fixes: tuple[str, ...] = (),
    variant: str = "reference",
    invariants: tuple[str, ...] = (),
) -> Case:
    config = draw(configs(fixes))
    faults = draw(fault_plans(config))  # the plan, then the seed: the order every campaign drew in
    seed = draw(st.integers(0, 2**16))
    return Case(config=config, faults=faults, seed=seed, variant=variant, invariants=invariants)
