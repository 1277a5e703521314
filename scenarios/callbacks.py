"""The holder's callbacks misbehaving: ``can_grant`` denies, ``group_limit`` or ``limit`` fails.

``limit``, ``groupLimit`` and ``canGrant`` are the application's code,
resolved once per round (semaphore-server.ts, ``#runRound`` and
``#groupPolicy``). A group's failure fails that group closed; the limit's
fails the whole round. Each story makes one callback misbehave for a window
(a fault plan's ``input_faults``) while two plain clients queue work in two
groups, then checks what the reference answers and that everything runs
once the callback behaves again.

Timings: a message takes 5 ms; client 0 queues in ``wf-1`` and client 1 in
``wf-2`` at 1 s; the round runs at 2.010 s; the window lasts until 10 s.
"""

from __future__ import annotations

import attrs

from semsim.harness.run import HolderSpec, WorldConfig, WorldRun
from semsim.scenarios.base import Check, Expect, Scenario, answers, rounds
from semsim.world.faults import FaultPlan, InputFault
from semsim.world.workload import Arrival, Workload

WINDOW_END_MS = 10_000


def _two_groups() -> WorldConfig:
    return WorldConfig(
        holder=HolderSpec(limit=4, leases=None),
        workload=Workload(
            clients=2,
            plain_clients=2,
            groups=("wf-1", "wf-2"),
            script=(
                Arrival(at_ms=1_000, client=0, count=2, group="wf-1", duration_ms=5_000),
                Arrival(at_ms=1_000, client=1, count=2, group="wf-2", duration_ms=5_000),
            ),
        ),
        duration_ms=40_000,
    )


def _blocked_in_window(run: WorldRun, client: str) -> list[str]:
    return [
        b["reason"]
        for reply in answers(run, client)
        if reply["t"] < WINDOW_END_MS
        for b in (reply.get("body") or {}).get("blocked", [])
    ]


def _granted(run: WorldRun, client: str) -> list[tuple[int, int]]:
    return [(g["t"], g["permits"]) for g in run.trace.of_kind("grant") if g["client"] == client]


def _group_story(reason: str) -> Check:
    """``wf-2`` is blocked with ``reason`` until the window ends, then served; ``wf-1`` never waits."""

    def judge(run: WorldRun, expect: Expect) -> None:
        blocked = _blocked_in_window(run, "client-1")
        expect.that(
            bool(blocked) and set(blocked) == {reason},
            f"client 1's group was answered `{reason}` during the window",
            blocked,
        )
        expect.that(not _blocked_in_window(run, "client-0"), "the other group was not blocked")
        first = _granted(run, "client-0")
        expect.that(
            bool(first) and first[0] == (2_010, 2), "the other group was granted in the first round", first
        )
        late = _granted(run, "client-1")
        expect.that(
            bool(late) and late[0][0] >= WINDOW_END_MS and sum(p for _, p in late) == 2,
            "client 1 was granted both permits once the window ended",
            late,
        )
        admitted = len(run.trace.of_kind("admit"))
        expect.that(admitted == 4, "all four items ran", admitted)

    return Check(judge)


def can_grant_denied() -> Scenario:
    """Seed 001, "Blocked attribution": "Demand that stays queued is explained per group:
    `group_limit`, `limit`, `not_permitted` (`canGrant` returned false), or
    `limit_resolution_error`".

    ``can_grant`` returns false for ``wf-2`` until 10 s. Client 1's demand is answered
    ``not_permitted`` round after round while client 0's group is served at once; after
    the window client 1 is granted.
    """
    return Scenario(
        name="can-grant-denied",
        description="can_grant denies a group for a while: its demand is answered `not_permitted`",
        seed=21,
        config=_two_groups(),
        faults=FaultPlan(input_faults=(InputFault("can_grant", 0, WINDOW_END_MS, group="wf-2"),)),
        check=_group_story("not_permitted"),
    )


def group_limit_fails_closed() -> Scenario:
    """Seed 001, "Blocked attribution": "`limit_resolution_error` (`groupLimit` threw; the
    group fails closed)"; semaphore-server.ts ``#groupPolicy`` treats a value that is not a
    non-negative safe integer the same way.

    ``group_limit`` raises for ``wf-2`` until 10 s. Client 1's demand is answered
    ``limit_resolution_error`` and granted nothing (closed, not unlimited); ``wf-1`` is
    served as usual. (``group-limit-returns-bad`` is the same story with -1 returned.)
    """
    return Scenario(
        name="group-limit-fails-closed",
        description="group_limit raises for a group: it fails closed, `limit_resolution_error`",
        seed=22,
        config=_two_groups(),
        faults=FaultPlan(input_faults=(InputFault("group_limit", 0, WINDOW_END_MS, group="wf-2"),)),
        check=_group_story("limit_resolution_error"),
    )


def group_limit_returns_bad() -> Scenario:
    """Seed 001, "Blocked attribution": "`limit_resolution_error` (`groupLimit` threw; the
    group fails closed)"; semaphore-server.ts ``#groupPolicy`` rejects a limit that is not a
    non-negative safe integer the same way.

    ``group_limit`` returns -1 for ``wf-2`` until 10 s: the same answer as a raise.
    """
    return Scenario(
        name="group-limit-returns-bad",
        description="group_limit returns -1 for a group: it fails closed like a raise",
        seed=23,
        config=_two_groups(),
        faults=FaultPlan(input_faults=(InputFault("group_limit", 0, WINDOW_END_MS, group="wf-2", bad=True),)),
        check=_group_story("limit_resolution_error"),
    )


def limit_fails_round() -> Scenario:
    """Seed 001, "Limits are live": "`limit` and `groupLimit` are resolved once per round";
    semaphore-server.ts ``#runRound`` resolves the limit before the round's transaction and,
    if it throws, rejects every waiting request (``entry.reject(error)``) and writes nothing.

    ``limit`` raises until 10 s. Every round in the window fails: both clients' calls are
    rejected, nothing is granted or written, and each client asks again after its retry
    delay. The first round after the window serves both.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        failed = [e["t"] for e in run.trace.of_kind("round_failed")]
        expect.that(
            bool(failed) and all(t < WINDOW_END_MS for t in failed), "rounds in the window failed", failed
        )
        served = rounds(run, 0, WINDOW_END_MS)
        expect.that(not served, "no round in the window completed", [r["t"] for r in served])
        errors = {
            client: [r["t"] for r in answers(run, client) if r.get("error")]
            for client in ("client-0", "client-1")
        }
        expect.that(
            all(len(ts) >= 2 for ts in errors.values()),
            "every waiting call was rejected, again on each retry",
            errors,
        )
        early = [g for g in run.trace.of_kind("grant") if g["t"] < WINDOW_END_MS]
        expect.that(not early, "nothing was granted in the window", early)
        late = {c: _granted(run, c) for c in ("client-0", "client-1")}
        expect.that(
            all(sum(p for _, p in g) == 2 and g[0][0] >= WINDOW_END_MS for g in late.values()),
            "both clients were granted after the window",
            late,
        )

    return Scenario(
        name="limit-fails-round",
        description="the limit callback raises: each round fails whole and every waiting call is rejected",
        seed=24,
        config=_two_groups(),
        faults=FaultPlan(input_faults=(InputFault("limit", 0, WINDOW_END_MS),)),
        check=Check(judge),
    )


def group_limit_flapping() -> Scenario:
    """Seed 001, "Limits are live": "`limit` and `groupLimit` are resolved once per round";
    semaphore-server.ts ``#runRound`` builds the round's group policies once (``#groupPolicy``
    per group) and judges every demand of a group by that one answer.

    ``group_limit`` for ``wf-2`` raises on every other call until 10 s (a setting changed
    while the round reads it): ``InputFault(flapping=True)``. Clients 1 and 2 both queue in
    ``wf-2``. The first round reads ``wf-2``'s limit once, fails it closed for both
    (``limit_resolution_error``), and the next round's read behaves and serves both, inside
    the window. Code that reads a group's policy per demand would answer one client
    ``limit_resolution_error`` and grant the other in the same round.
    """

    def judge(run: WorldRun, expect: Expect) -> None:
        failed = sorted(
            e["t"]
            for e in run.trace.of_kind("blocked")
            if e["group"] == "wf-2" and e["reason"] == "limit_resolution_error"
        )
        granted = sorted({g["t"] for g in run.trace.of_kind("grant") if g["group"] == "wf-2"})
        expect.that(
            bool(failed) and failed[0] < WINDOW_END_MS,
            "a round in the window failed wf-2 closed (limit_resolution_error)",
            failed,
        )
        expect.that(
            bool(granted) and granted[0] < WINDOW_END_MS,
            "wf-2 was granted inside the window too: the next read behaved",
            granted,
        )
        both = sorted(set(failed) & set(granted))
        expect.that(not both, "no round both failed wf-2 closed and granted it", both)
        clients = {g["client"] for g in run.trace.of_kind("grant") if g["group"] == "wf-2"}
        expect.that(clients == {"client-1", "client-2"}, "both wf-2 clients were granted", sorted(clients))
        admitted = len(run.trace.of_kind("admit"))
        expect.that(admitted == 6, "all six items ran", admitted)

    config = _two_groups()
    workload = config.workload
    return Scenario(
        name="group-limit-flapping",
        description="group_limit's answer flips on every read: each round judges a group by one answer",
        seed=25,
        config=attrs.evolve(
            config,
            workload=attrs.evolve(
                workload,
                clients=3,
                plain_clients=3,
                script=(
                    *workload.script,
                    Arrival(at_ms=1_000, client=2, count=2, group="wf-2", duration_ms=5_000),
                ),
            ),
        ),
        faults=FaultPlan(
            input_faults=(InputFault("group_limit", 0, WINDOW_END_MS, group="wf-2", flapping=True),)
        ),
        check=Check(judge),
    )


ALL = (
    can_grant_denied,
    group_limit_fails_closed,
    group_limit_returns_bad,
    limit_fails_round,
    group_limit_flapping,
)
