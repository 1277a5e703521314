"""The external API (ground truth): calls in flight per account, effects per key, idempotency, failures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from semsim.runtime.kernel import Sim, run
from semsim.runtime.network import Network, RemoteError, RpcTimeout
from semsim.runtime.trace import Trace
from semsim.world.external_api import ApiCall, ApiFaultRates, ApiSpec, Change, ExternalApi
from semsim.world.faults import FaultPlan

IDEMPOTENT = ApiSpec()
NO_FAULTS = ApiFaultRates()


def world(
    body: Callable[[Sim, Network, ExternalApi], Awaitable[None]],
    *,
    spec: ApiSpec = IDEMPOTENT,
    faults: ApiFaultRates = NO_FAULTS,
    seed: int = 1,
) -> tuple[ExternalApi, list[tuple[int, Change, ApiCall]], Trace]:
    """Run ``body`` against an API on a fault-free network (1 ms each way): the API and what it saw."""
    seen: list[tuple[int, Change, ApiCall]] = []
    apis: list[ExternalApi] = []
    trace = Trace(seed=seed, config={}, faults={})

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            network = Network(sim, FaultPlan(), nursery, latency_ms=1)
            api = ExternalApi(sim, network, spec, faults)
            api.watch(lambda change, call: seen.append((sim.now(), change, call)))
            apis.append(api)
            await body(sim, network, api)

    result = run(seed, main, trace)
    assert result.outcome == "completed", result
    return apis[0], seen, trace


def run_call(account: str, key: str, work_ms: int) -> dict[str, Any]:
    return {"account": account, "key": key, "workMs": work_ms}


def test_a_call_is_in_flight_from_its_arrival_until_its_work_is_done() -> None:
    answers: list[Any] = []
    during: list[dict[str, int]] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        async with trio.open_nursery() as nursery:

            async def call(key: str, work_ms: int) -> None:
                answers.append(await network.call("c", "api", "run", run_call("acct", key, work_ms)))

            nursery.start_soon(call, "a", 1_000)
            nursery.start_soon(call, "b", 3_000)
            await sim.sleep(500)
            during.append(dict(api.in_flight))
            await sim.sleep(1_000)
            during.append(dict(api.in_flight))

    api, seen, _ = world(body)
    assert during == [{"acct": 2}, {"acct": 1}]
    assert api.in_flight == {}
    assert api.running == {}
    assert answers == [{"status": 200, "replayed": False}] * 2
    assert [(t, change, call.key) for t, change, call in seen] == [
        (1, "start", "a"),
        (1, "start", "b"),
        (1_001, "end", "a"),
        (3_001, "end", "b"),
    ]
    assert api.effects == {"a": 1, "b": 1}


def test_a_caller_that_gives_up_leaves_its_call_running() -> None:
    """The zombie: the caller's timeout ends its wait, not the call at the service."""
    outcome: list[str] = []
    during: list[dict[str, int]] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "run", run_call("acct", "k", 10_000), timeout_ms=2_000)
        except RpcTimeout:
            outcome.append("timeout")
        during.append(dict(api.in_flight))
        await sim.sleep(10_000)

    api, seen, _ = world(body)
    assert outcome == ["timeout"]
    assert during == [{"acct": 1}]
    assert [(t, change) for t, change, _ in seen] == [(1, "start"), (10_001, "end")]
    assert api.effects == {"k": 1}


def test_an_idempotent_api_replays_a_key_that_took_effect_and_refuses_one_still_running() -> None:
    answers: list[Any] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        async def call(work_ms: int) -> None:
            try:
                answers.append(await network.call("c", "api", "run", run_call("acct", "k", work_ms)))
            except RemoteError as error:
                answers.append(error.kind)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, 1_000)
            await sim.sleep(100)
            nursery.start_soon(call, 1_000)  # while the first runs: refused at once
        await call(1_000)  # after it took effect: its stored answer, at once

    api, seen, trace = world(body)
    assert answers == ["conflict", {"status": 200, "replayed": False}, {"status": 200, "replayed": True}]
    assert len(seen) == 2  # one call ran
    assert api.effects == {"k": 1}
    kinds = [event["kind"] for event in trace.events()]
    assert kinds.count("api_conflict") == 1
    assert kinds.count("api_replay") == 1


def test_a_non_idempotent_api_runs_every_call_and_each_takes_effect() -> None:
    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(network.call, "c", "api", "run", run_call("acct", "k", 1_000))
            await sim.sleep(500)
            assert api.in_flight == {"acct": 3}

    api, _, _ = world(body, spec=ApiSpec(idempotent=False))
    assert api.effects == {"k": 3}


def test_calls_in_flight_are_counted_per_account() -> None:
    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        async with trio.open_nursery() as nursery:
            for i, account in enumerate(["a", "b", "a"]):
                nursery.start_soon(network.call, "c", "api", "run", run_call(account, f"k{i}", 1_000))
            await sim.sleep(500)
            assert api.in_flight == {"a": 2, "b": 1}

    world(body)


@pytest.mark.parametrize(
    ("faults", "error", "effect"),
    [
        (ApiFaultRates(api_error=1.0), True, False),
        (ApiFaultRates(api_error_after_effect=1.0), True, True),
    ],
    ids=["error-before-effect", "error-after-effect"],
)
def test_a_failed_call_answers_an_error_with_or_without_its_effect(
    faults: ApiFaultRates, error: bool, effect: bool
) -> None:
    kinds: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "run", run_call("acct", "k", 1_000))
        except RemoteError as failure:
            kinds.append(failure.kind)

    api, seen, _ = world(body, faults=faults)
    assert kinds == (["error"] if error else [])
    assert api.effects == ({"k": 1} if effect else {})
    assert [change for _, change, _ in seen] == ["start", "end"]


def test_an_idempotent_api_replays_a_stored_error_after_effect() -> None:
    """As Stripe does: once a call with a key has executed, its response is what the key answers."""
    kinds: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        for _ in range(2):
            try:
                await network.call("c", "api", "run", run_call("acct", "k", 1_000))
            except RemoteError as failure:
                kinds.append(failure.kind)

    api, seen, _ = world(body, faults=ApiFaultRates(api_error_after_effect=1.0))
    assert kinds == ["error", "error"]
    assert len(seen) == 2
    assert api.effects == {"k": 1}


def test_a_slow_call_takes_its_factor_times_longer() -> None:
    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        await network.call("c", "api", "run", run_call("acct", "k", 1_000))

    _, seen, _ = world(body, faults=ApiFaultRates(api_slow=1.0, api_slow_factor=3))
    assert [t for t, _, _ in seen] == [1, 3_001]


def test_failures_are_drawn_from_the_seed() -> None:
    def outcomes(seed: int) -> list[str]:
        async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(network.call, "c", "api", "run", run_call("acct", f"k{i}", 100))

        async def tolerant(sim: Sim, network: Network, api: ExternalApi) -> None:
            try:
                await body(sim, network, api)
            except* RemoteError:
                pass  # the failed calls: their outcomes are what the API saw

        rates = ApiFaultRates(api_error=0.3, api_error_after_effect=0.3)
        _, seen, _ = world(tolerant, faults=rates, seed=seed)
        return [call.outcome for _, change, call in seen if change == "end"]

    assert outcomes(3) == outcomes(3)
    assert len({tuple(outcomes(seed)) for seed in range(5)}) > 1
    assert {"ok", "error", "error_after_effect"} <= set(outcomes(3) + outcomes(4) + outcomes(5))


@pytest.mark.parametrize(
    "payload",
    [
        None,
        {"account": "a", "key": "k"},
        {"account": "a", "key": "k", "workMs": 1, "extra": 0},
        {"account": "", "key": "k", "workMs": 1},
        {"account": "a", "key": 3, "workMs": 1},
        {"account": "a", "key": "k", "workMs": -1},
        {"account": "a", "key": "k", "workMs": True},
        {"account": "a", "key": "k", "workMs": 1.5},
        {"account": "a", "key": "k", "workMs": 1, "deadlineAt": -1},
        {"account": "a", "key": "k", "workMs": 1, "deadlineAt": "soon"},
        {"account": "a", "key": "k", "workMs": 1, "deadlineAt": True},
        {"account": "a", "key": "k", "workMs": 1, "attempt": 0},
        {"account": "a", "key": "k", "workMs": 1, "attempt": "1"},
    ],
)
def test_a_malformed_call_is_a_protocol_error_and_changes_nothing(payload: Any) -> None:
    kinds: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "run", payload)
        except RemoteError as failure:
            kinds.append(failure.kind)

    api, seen, _ = world(body)
    assert kinds == ["protocol"]
    assert seen == []
    assert api.effects == {}
    assert api.in_flight == {}


def test_an_unknown_method_is_a_protocol_error() -> None:
    kinds: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "finished", [])
        except RemoteError as failure:
            kinds.append(failure.kind)

    world(body)
    assert kinds == ["protocol"]


@pytest.mark.parametrize(
    "rates",
    [
        {"api_error": 1.5},
        {"api_error": -0.1},
        {"api_error": 0.6, "api_error_after_effect": 0.6},
        {"api_slow_factor": 0},
    ],
)
def test_bad_fault_rates_are_a_value_error_naming_the_field(rates: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="api_"):
        ApiFaultRates(**rates)


# --- deadlines (F5's fix sends its attempt's) and delivery at most once ---------------------------


def test_a_call_is_cut_at_its_deadline_without_its_effect() -> None:
    errors: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "run", {**run_call("acct", "k", 5_000), "deadlineAt": 2_001})
        except RemoteError as failure:
            errors.append(str(failure))

    api, seen, _ = world(body, spec=ApiSpec(idempotent=False))
    [(started, _, call), (ended, change, _)] = seen
    assert (started, ended, change, call.outcome) == (1, 2_001, "end", "deadline")
    assert errors == ["error: api: 504 (deadline)"]
    assert api.effects == {}


def test_a_call_done_before_its_deadline_is_not_touched_by_it() -> None:
    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        await network.call("c", "api", "run", {**run_call("acct", "k", 1_000), "deadlineAt": 1_001})

    api, seen, _ = world(body)
    assert [(t, change, call.outcome) for t, change, call in seen] == [
        (1, "start", "ok"),
        (1_001, "end", "ok"),
    ]
    assert api.effects == {"k": 1}


def test_a_request_arriving_at_its_deadline_is_refused_and_starts_no_call() -> None:
    errors: list[str] = []

    async def body(sim: Sim, network: Network, api: ExternalApi) -> None:
        try:
            await network.call("c", "api", "run", {**run_call("acct", "k", 10), "deadlineAt": 1})
        except RemoteError as failure:
            errors.append(str(failure))

    api, seen, trace = world(body)
    assert errors == ["error: api: 504 (the request arrived after its deadline)"]
    assert seen == []
    assert api.effects == {}
    assert [e["deadline"] for e in trace.of_kind("api_deadline")] == [1]


def test_the_network_never_duplicates_a_request_to_the_api() -> None:
    """HTTP over TCP: a request arrives once or not at all; only the caller repeats it."""
    trace = Trace(seed=1, config={}, faults={})

    async def main(sim: Sim) -> None:
        async with trio.open_nursery() as nursery:
            network = Network(sim, FaultPlan(duplicate=1.0), nursery, latency_ms=1)
            api = ExternalApi(sim, network, ApiSpec(idempotent=False), NO_FAULTS)
            network.register("echo", _Echo())
            for key in ("a", "b", "c"):
                await network.call("c", "api", "run", run_call("acct", key, 10))
            await network.call("c", "echo", "ping", None)
            await sim.sleep(10_000)
            assert api.effects == {"a": 1, "b": 1, "c": 1}

    assert run(1, main, trace).outcome == "completed"
    duplicated = {e["msg"] for e in trace.of_kind("duplicate")}
    sent_to = {e["msg"]: e["dst"] for e in trace.of_kind("send")}
    assert {sent_to[msg] for msg in duplicated} == {"echo"}  # the other endpoint still gets them


class _Echo:
    def dispatch(self, method: str, payload: Any) -> Any:
        return payload
