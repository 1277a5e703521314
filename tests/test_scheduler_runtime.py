"""Durable operations in a simulated object (``semsim.runtime.scheduler``), calling the external API.

A worker object runs seed 000's job handler (POST to the API with the
operation id as its idempotency key) as durable operations: these tests
check that the shell does what the pure engine says, in simulated time,
under API failures, attempt timeouts and eviction, and that what the API
sees (its calls in flight, its effects) is what the reference's docs say a
user will meet.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import attrs
import pytest
import trio

from semaphore_core.durability import (
    Attempt,
    Completed,
    DuplicateDurablePayloadError,
    DurabilityOptions,
    Event,
    Failed,
    OperationResult,
    Participant,
    RetryOptions,
    SchedulerOptions,
)
from semaphore_core.durability.records import Step
from semaphore_core.durability.storage import DurableTable
from semsim.runtime.durable import DurableObject, HandlerFailure, ObjectContext
from semsim.runtime.kernel import Sim, run
from semsim.runtime.network import Network
from semsim.runtime.scheduler import DurabilityScheduler
from semsim.runtime.trace import Trace
from semsim.world.external_api import ApiCall, ApiFaultRates, ApiSpec, Change, ExternalApi
from semsim.world.faults import FaultPlan


@attrs.frozen
class FaultsUntil(ApiFaultRates):
    """API fault rates that hold only before ``until_ms`` (as a plan's faults stop at its quiet point)."""

    until_ms: int = 0

    def active(self, t_ms: int) -> bool:
        return t_ms < self.until_ms


#: The handler's own ceiling on one call: effectively none (the abort signal is what stops it).
CALL_TIMEOUT_MS = 3_600_000


class Worker:
    """A client-like object: ``submit`` registers a job; ``alarm()`` delegates to the engine."""

    def __init__(
        self, ctx: ObjectContext, network: Network, options: DurabilityOptions, scheduler: SchedulerOptions
    ) -> None:
        self.ctx = ctx
        self.network = network
        self.events: list[Event] = []
        self.scheduler = DurabilityScheduler(ctx, scheduler, on_event=self.events.append)
        self.jobs = self.scheduler.operations(options, self._job)

    async def _job(self, attempt: Attempt) -> Any:
        """Seed 000's handler: POST the job with ``Idempotency-Key: id``; not ok throws."""
        payload = attempt.payload
        body = {"account": payload["account"], "key": attempt.id, "workMs": payload["workMs"]}
        return await self.network.call(self.ctx.name, "api", "run", body, timeout_ms=CALL_TIMEOUT_MS)

    def handle(self, method: str, payload: Any) -> Any:
        assert method == "submit", method
        return self.scheduler.register("run", payload["id"], payload)

    async def alarm(self) -> None:
        await self.scheduler.alarm()


class World:
    def __init__(self, sim: Sim, network: Network, api: ExternalApi, worker: DurableObject) -> None:
        self.sim, self.network, self.api, self.worker = sim, network, api, worker
        #: The API's calls as it saw them: (time, change, call).
        self.seen: list[tuple[int, Change, ApiCall]] = []
        #: Calls in flight per account after every change.
        self.peak: dict[str, int] = {}

    def submit(self, id: str, work_ms: int, account: str = "acct") -> bool:
        inserted = self.worker.dispatch("submit", {"id": id, "account": account, "workMs": work_ms})
        assert isinstance(inserted, bool)
        return inserted

    def result(self, id: str) -> OperationResult:
        instance = self.worker.instance()
        assert isinstance(instance, Worker)
        return instance.jobs.get_result("run", id)

    def lifecycle(self) -> list[tuple[str, int, str]]:
        """(type, attempt, outcome) of every operation event in the trace."""
        return [(e["type"], e.get("attempt", 0), e.get("outcome", "")) for e in trace_of(self.sim)]


def trace_of(sim: Sim) -> list[dict[str, Any]]:
    return list(sim.trace.of_kind("operation"))


def world(
    body: Callable[[World], Awaitable[None]],
    *,
    spec: ApiSpec | None = None,
    faults: ApiFaultRates | None = None,
    max_attempts: int = 3,
    attempt_timeout_ms: int = 60_000,
    alarm_concurrency: int = 10,
    seed: int = 1,
    worker_class: type[Worker] | None = None,
) -> World:
    built: list[World] = []
    options = DurabilityOptions(
        handlers={"run": None},
        attempt_timeout_ms=attempt_timeout_ms,
        retries=RetryOptions(max_attempts=max_attempts),
    )

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            network = Network(sim, FaultPlan(), nursery, latency_ms=1)
            api = ExternalApi(sim, network, spec or ApiSpec(), faults or ApiFaultRates())
            scheduler = SchedulerOptions(alarm_concurrency=alarm_concurrency)
            worker = DurableObject(
                sim, "worker", lambda ctx: (worker_class or Worker)(ctx, network, options, scheduler), nursery
            )
            network.register("worker", worker)
            w = World(sim, network, api, worker)

            def saw(change: Change, call: ApiCall) -> None:
                w.seen.append((sim.now(), change, call))
                w.peak[call.account] = max(w.peak.get(call.account, 0), api.in_flight.get(call.account, 0))

            api.watch(saw)
            built.append(w)
            await body(w)
            nursery.cancel_scope.cancel()

    result = run(seed, main, Trace(seed, {}, {}))
    assert result.outcome == "completed", result
    return built[0]


def test_a_registered_operation_calls_the_api_once_and_completes() -> None:
    async def body(w: World) -> None:
        assert w.submit("job-1", 2_000) is True
        assert w.submit("job-1", 2_000) is False  # the same id and payload: a no-op
        await w.sim.sleep(5_000)
        assert isinstance(w.result("job-1"), Completed)

    w = world(body)
    assert w.lifecycle() == [
        ("registered", 0, ""),
        ("attempt_started", 1, ""),
        ("attempt_settled", 1, "completed"),
    ]
    assert w.api.effects == {"job-1": 1}
    assert [(change, call.key) for _, change, call in w.seen] == [("start", "job-1"), ("end", "job-1")]


def test_an_api_error_is_retried_after_the_backoff_under_the_same_id() -> None:
    async def body(w: World) -> None:
        w.submit("job-1", 1_000)
        await w.sim.sleep(60_000)
        assert isinstance(w.result("job-1"), Completed)

    # Every call fails until t=500 ms: attempt 1's call (at t=2) fails, attempt 2's succeeds.
    w = world(body, faults=FaultsUntil(api_error=1.0, until_ms=500))
    lifecycle = w.lifecycle()
    assert ("attempt_settled", 1, "retry_scheduled") in lifecycle
    assert lifecycle[-1][2] == "completed"
    assert {call.key for _, _, call in w.seen} == {"job-1"}
    assert w.api.effects == {"job-1": 1}


def test_a_refused_registration_raises_the_librarys_own_error() -> None:
    """``register`` gets ``CallRejected`` from the port (the step and the error): the shell applies
    the step, then raises the error itself, as the reference's method rejects with it."""
    raised: list[BaseException] = []

    async def body(w: World) -> None:
        assert w.submit("job-1", 1_000) is True
        instance = w.worker.instance()
        assert isinstance(instance, Worker)
        try:
            instance.scheduler.register("run", "job-1", {"id": "job-1", "account": "acct", "workMs": 5})
        except Exception as error:
            raised.append(error)
        await w.sim.sleep(5_000)

    w = world(body)
    assert [type(error) for error in raised] == [DuplicateDurablePayloadError]
    assert raised[0].__cause__ is None  # not the port's wrapper
    assert w.lifecycle() == [
        ("registered", 0, ""),
        ("attempt_started", 1, ""),
        ("attempt_settled", 1, "completed"),
    ]


class MemoizingWorker(Worker):
    """Reserves a slot (a memoized step) before it calls the API: a retry reuses the reservation."""

    reservations: ClassVar[list[tuple[str, int]]] = []

    async def _job(self, attempt: Attempt) -> Any:
        async def reserve() -> str:
            await self.ctx.sim.sleep(10)
            MemoizingWorker.reservations.append((attempt.id, attempt.attempt))
            return f"slot-of-attempt-{attempt.attempt}"

        slot = await self.scheduler.memoize(attempt, "reserve", reserve)
        assert slot == "slot-of-attempt-1"
        return await super()._job(attempt)


def test_a_retry_reuses_what_the_failed_attempt_memoized() -> None:
    """``memoize(key, fn)`` (lines 781-785): attempt 2 gets attempt 1's stored step and does not
    run it again; the completion deletes the call's memos (lines 1698-1704)."""
    MemoizingWorker.reservations = []
    memos_left: list[int] = []

    async def body(w: World) -> None:
        w.submit("job-1", 1_000)
        await w.sim.sleep(60_000)
        assert isinstance(w.result("job-1"), Completed)
        instance = w.worker.instance()
        assert isinstance(instance, Worker)
        memos_left.append(instance.ctx.storage.execute("SELECT COUNT(*) FROM durability_memos").fetchone()[0])

    w = world(body, faults=FaultsUntil(api_error=1.0, until_ms=500), worker_class=MemoizingWorker)
    assert ("attempt_settled", 1, "retry_scheduled") in w.lifecycle()
    assert w.lifecycle()[-1] == ("attempt_settled", 2, "completed")
    assert MemoizingWorker.reservations == [("job-1", 1)]
    assert memos_left == [0]


def test_retries_exhausted_end_in_a_failed_last_attempt() -> None:
    async def body(w: World) -> None:
        w.submit("job-1", 1_000)
        await w.sim.sleep(600_000)
        assert isinstance(w.result("job-1"), Failed)

    w = world(body, faults=ApiFaultRates(api_error=1.0), max_attempts=3)
    settled = [entry for entry in w.lifecycle() if entry[0] == "attempt_settled"]
    # The reference's hook sees a failed *last* attempt as attempt_settled/failed, not terminal.
    assert settled == [
        ("attempt_settled", 1, "retry_scheduled"),
        ("attempt_settled", 2, "retry_scheduled"),
        ("attempt_settled", 3, "failed"),
    ]
    assert "terminal" not in [entry[0] for entry in w.lifecycle()]
    assert w.api.effects == {}


def test_an_attempt_that_times_out_leaves_its_call_running_at_the_api() -> None:
    """The zombie: the abort ends the handler's wait, not the call; the retry makes a second call
    while the first still runs, so a non-idempotent API sees two calls in flight for one job."""

    async def body(w: World) -> None:
        w.submit("job-1", 30_000)
        await w.sim.sleep(120_000)

    w = world(body, spec=ApiSpec(idempotent=False), attempt_timeout_ms=10_000)
    assert w.lifecycle() == [
        ("registered", 0, ""),
        ("attempt_started", 1, ""),
        ("attempt_settled", 1, "retry_scheduled"),  # timed out at 10 s; retry after 1 s
        ("attempt_started", 2, ""),
        ("attempt_settled", 2, "retry_scheduled"),  # timed out at 21 s; retry after 2 s
        ("attempt_started", 3, ""),
        ("attempt_settled", 3, "failed"),  # the last attempt timed out too
    ]
    # Each attempt's 30 s call outlives its 10 s attempt: all three run at once at the API,
    # and all three take effect, for an operation recorded as failed.
    assert [(t, change) for t, change, _ in w.seen] == [
        (1, "start"),
        (11_001, "start"),
        (23_001, "start"),
        (30_001, "end"),
        (41_001, "end"),
        (53_001, "end"),
    ]
    assert w.peak == {"acct": 3}
    assert w.api.effects == {"job-1": 3}
    assert isinstance(w.result("job-1"), Failed)


def test_an_aborted_handler_gives_its_permit_back_though_its_call_runs_on() -> None:
    """With one permit, attempt 2 can start only because attempt 1's handler settled at its abort
    (``fetch`` rejects when its signal fires), not when its call at the API ended."""

    async def body(w: World) -> None:
        w.submit("job-1", 30_000)
        await w.sim.sleep(30_000)

    w = world(body, spec=ApiSpec(idempotent=False), attempt_timeout_ms=10_000, alarm_concurrency=1)
    assert [t for t, change, _ in w.seen if change == "start"] == [1, 11_001, 23_001]


def test_an_idempotent_api_refuses_retries_while_the_zombie_runs() -> None:
    """One call in flight and one effect, as idempotency promises; but every retry inside the
    zombie's 30 s meets a conflict, and with the default backoff (1, 2, 4, 8 s) the operation uses
    its five attempts and fails while the call it made first succeeds."""

    async def body(w: World) -> None:
        w.submit("job-1", 30_000)
        await w.sim.sleep(300_000)

    w = world(body, spec=ApiSpec(idempotent=True), attempt_timeout_ms=10_000, max_attempts=5)
    api_events = [(e["t"], e["kind"]) for e in w.sim.trace.events() if e["kind"].startswith("api_")]
    assert api_events == [
        (1, "api_start"),
        (11_001, "api_conflict"),
        (13_003, "api_conflict"),
        (17_005, "api_conflict"),
        (25_007, "api_conflict"),
        (30_001, "api_end"),
    ]
    assert w.peak == {"acct": 1}
    assert w.api.effects == {"job-1": 1}
    result = w.result("job-1")
    assert isinstance(result, Failed)
    assert result.attempt == 5


def test_eviction_mid_attempt_runs_the_next_attempt_under_the_same_id() -> None:
    async def body(w: World) -> None:
        w.submit("job-1", 30_000)
        await w.sim.sleep(1_000)
        w.worker.evict()  # attempt 1's handler dies with the instance; its call does not
        await w.sim.sleep(120_000)
        assert isinstance(w.result("job-1"), Completed)

    w = world(body, spec=ApiSpec(idempotent=False))
    # No event settles attempt 1: its instance died. The stored alarm (15 s, the engine's
    # minimum delay) brings the object back, and attempt 2 runs under the same id.
    assert w.lifecycle() == [
        ("registered", 0, ""),
        ("attempt_started", 1, ""),
        ("attempt_started", 2, ""),
        ("attempt_settled", 2, "completed"),
    ]
    assert [e["t"] for e in w.sim.trace.of_kind("alarm")] == [15_000]
    assert [(t, change, call.key) for t, change, call in w.seen] == [
        (1, "start", "job-1"),
        (15_001, "start", "job-1"),
        (30_001, "end", "job-1"),
        (45_001, "end", "job-1"),
    ]
    assert w.peak == {"acct": 2}  # both attempts' calls at once: one job, two calls in flight
    assert w.api.effects == {"job-1": 2}


# --- the shell's transaction, its fallback knob and its commit hook (the holder's use) ------------


class Ledger:
    """A toy participant: rows with a due time; ``fail`` makes its due work throw."""

    def __init__(
        self, ctx: ObjectContext, fallback: bool = True, fail: bool = False, write_first: bool = False
    ) -> None:
        self.ctx = ctx
        self.fail = fail
        #: With ``fail``: the due work commits a write (its reconcile with it) before it throws.
        self.write_first = write_first
        self.applied = 0
        #: ``(alarm, pending)`` after each step in which ``reconcile`` ran, as a checker hears it.
        self.reconciled: list[tuple[int | None, int | None]] = []
        ctx.storage.execute("CREATE TABLE IF NOT EXISTS due (id TEXT PRIMARY KEY, at INTEGER)")
        self.scheduler = DurabilityScheduler(
            ctx,
            SchedulerOptions(alarm_min_delay_ms=1_000),
            fallback=fallback,
            on_applied=self._applied,
            on_reconciled=lambda alarm, pending_at: self.reconciled.append((alarm, pending_at())),
        )
        self.scheduler.attach(
            Participant(table=DurableTable("due", "id"), run_due=self._due, next_pending_at=self._next)
        )

    def _applied(self) -> None:
        self.applied += 1

    def _next(self, conn: sqlite3.Connection) -> int | None:
        at = conn.execute("SELECT min(at) FROM due").fetchone()[0]
        return None if at is None else int(at)

    def _due(self, now_ms: int, info: object) -> None:
        if self.fail:
            if self.write_first:
                self.scheduler.transaction(lambda conn: conn.execute("UPDATE due SET at = at + 60000"))
            raise HandlerFailure("due work threw")

    def handle(self, method: str, payload: Any) -> Any:
        raise AssertionError(method)

    async def alarm(self) -> None:
        await self.scheduler.alarm()


def _ledger_world(body: Callable[[Sim, DurableObject], Awaitable[None]], **kw: Any) -> Trace:
    trace = Trace(seed=1, config={}, faults={})

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            obj = DurableObject(sim, "ledger", lambda ctx: Ledger(ctx, **kw), nursery)
            await body(sim, obj)
            nursery.cancel_scope.cancel()

    assert run(1, main, trace).outcome == "completed"
    return trace


def test_a_transaction_commits_its_writes_with_the_alarm_and_a_failed_one_neither() -> None:
    async def body(sim: Sim, obj: DurableObject) -> None:
        ledger = obj.instance()
        assert isinstance(ledger, Ledger)
        scheduler = ledger.scheduler
        scheduler.transaction(lambda conn: conn.execute("INSERT INTO due VALUES ('a', 60000)"))
        assert obj.get_alarm() == 60_000  # committed together: the row has its alarm
        assert ledger.applied == 1  # the commit was handed to the checker once its step was done

        def failing(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO due VALUES ('b', 2000)")
            raise ValueError("the write failed")

        with pytest.raises(ValueError, match="the write failed"):
            scheduler.transaction(failing)
        assert obj.storage.execute("SELECT id FROM due").fetchall() == [("a",)]
        assert obj.get_alarm() == 60_000
        assert ledger.applied == 1  # nothing committed, nothing to judge

    _ledger_world(body)


def test_without_the_fallback_a_throwing_pass_goes_to_the_platform_unjudged() -> None:
    """``fallback=False``: the engine cannot re-arm (``armFallbackAlarm`` fails), so ``alarm()``
    throws and the platform retries; the failed pass committed nothing, so no commit is judged."""

    async def body(sim: Sim, obj: DurableObject) -> None:
        ledger = obj.instance()
        assert isinstance(ledger, Ledger)
        ledger.scheduler.transaction(lambda conn: conn.execute("INSERT INTO due VALUES ('a', 20000)"))
        await sim.sleep(21_000)
        assert ledger.applied == 1

    trace = _ledger_world(body, fallback=False, fail=True)
    assert [e["attempt"] for e in trace.of_kind("alarm_failed")][:1] == [0]
    assert trace.of_kind("alarm_retry") == []


def test_with_the_fallback_a_throwing_pass_arms_its_own_alarm_and_says_so() -> None:
    async def body(sim: Sim, obj: DurableObject) -> None:
        ledger = obj.instance()
        assert isinstance(ledger, Ledger)
        ledger.scheduler.transaction(lambda conn: conn.execute("INSERT INTO due VALUES ('a', 20000)"))
        await sim.sleep(20_500)
        assert obj.get_alarm() == 21_000  # the engine's own fallback, alarm_min_delay_ms out

    trace = _ledger_world(body, fail=True)
    [retry] = trace.of_kind("alarm_retry")
    assert (retry["t"], retry["retry_at"]) == (20_000, 21_000)
    assert "due work threw" in retry["error"]
    assert trace.of_kind("alarm_failed") == []
    assert trace.of_kind("operation_failure") == []  # the report is the alarm_retry event


def test_a_failed_pass_is_not_judged_later_by_a_step_that_reconciles_nothing() -> None:
    """A pass that throws and cannot re-arm may reconcile before it fails; that step is skipped
    (the platform's retry comes next), and so is its reconcile: a later step that runs no
    reconcile of its own is not judged (it would be on whatever alarm the platform left)."""

    async def body(sim: Sim, obj: DurableObject) -> None:
        ledger = obj.instance()
        assert isinstance(ledger, Ledger)
        scheduler = ledger.scheduler
        scheduler.transaction(lambda conn: conn.execute("INSERT INTO due VALUES ('a', 20000)"))
        assert ledger.reconciled == [(20_000, 20_000)]
        before = scheduler.engine.reconciles
        await sim.sleep(20_500)  # the pass at 20 000 throws; no fallback
        assert scheduler.engine.reconciles > before, "the failed pass reconciled"
        scheduler.apply(Step(now_ms=sim.now()))  # a step that reconciles nothing
        assert ledger.reconciled == [(20_000, 20_000)]

    _ledger_world(body, fallback=False, fail=True, write_first=True)
