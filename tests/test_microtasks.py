"""semaphore_core.durability.microtasks runs continuations in the order Node runs them.

Each program below is written twice: in JavaScript, in
``tests/fixtures/durability/microtask_programs.mjs``, and here with the
module. ``tests/fixtures/durability/microtask_orders.jsonl`` is what Node 20
printed for the JavaScript (``node tests/fixtures/durability/microtask_programs.mjs``),
so CI needs no Node. Each program logs from its continuations, and
``ticks(n)`` adds a chain of n reactions, one per microtask turn, as a ruler.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from semaphore_core.durability.microtasks import Awaiting, JsPromise, Microtasks, run_async

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "durability"
NODE_ORDERS = {
    name: log
    for name, log in (
        json.loads(line) for line in (FIXTURES / "microtask_orders.jsonl").read_text().splitlines()
    )
}

Program = Callable[[Microtasks, list[str], Callable[[int], None]], None]
PROGRAMS: dict[str, Program] = {}


def program(function: Program) -> Program:
    PROGRAMS[function.__name__] = function
    return function


def _push(log: list[str], entry: str) -> Callable[..., int]:
    def push(_: Any = None) -> int:
        log.append(entry)
        return len(log)

    return push


@program
def then_chains(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    p = JsPromise.resolve(q)
    p.then(_push(log, "a1")).then(_push(log, "a2"))
    p.then(_push(log, "b1")).then(_push(log, "b2"))


@program
def async_awaits(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    async def f() -> None:
        log.append("f0")
        await Awaiting(None)
        log.append("f1")
        await Awaiting(None)
        log.append("f2")

    run_async(q, f())
    ticks(4)


@program
def resolve_with_a_promise(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    inner = JsPromise.resolve(q, "x")
    JsPromise(q, lambda resolve, reject: resolve(inner)).then(_push(log, "outer"))
    ticks(5)


@program
def async_returns_a_promise(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    async def g() -> JsPromise:
        return JsPromise.resolve(q, 1)

    run_async(q, g()).then(_push(log, "g"))
    ticks(6)


@program
def finally_passes_the_value(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    JsPromise.resolve(q, 1).finally_(_push(log, "fin")).then(lambda v: log.append(f"after-fin {v}"))
    ticks(6)


@program
def finally_after_rejection(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    rejected = JsPromise.rejected(q, RuntimeError("e"))
    rejected.then(_push(log, "no")).catch(_push(log, "c")).finally_(_push(log, "f"))
    ticks(6)


@program
def all_and_race(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    JsPromise.all(q, [JsPromise.resolve(q, 1), 2]).then(lambda v: log.append("all " + ",".join(map(str, v))))
    JsPromise.race(q, [JsPromise(q), JsPromise.resolve(q, 3)]).then(lambda v: log.append(f"race {v}"))
    JsPromise.all(q, []).then(_push(log, "all-empty"))
    ticks(5)


@program
def await_a_pending_promise(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    p = JsPromise(q)
    resolve, _ = p.resolving_functions()

    async def waits() -> None:
        try:
            await p
            log.append("ok")
        except Exception:
            log.append("caught")

    async def resolves() -> None:
        await Awaiting(None)
        log.append("x1")
        resolve(None)
        log.append("x2")
        await Awaiting(None)
        log.append("x3")

    run_async(q, waits())
    run_async(q, resolves())
    ticks(5)


@program
def await_a_rejection(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    async def catches() -> None:
        try:
            await JsPromise.rejected(q, RuntimeError("no"))
        except RuntimeError:
            log.append("caught")
        log.append("after")

    run_async(q, catches())
    ticks(3)


@program
def run_concurrent_awaits_its_worker(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    async def worker(i: int) -> None:
        log.append(f"w{i}")
        await Awaiting(None)
        log.append(f"w{i} done")

    async def run_concurrent(items: list[int]) -> None:
        for i in items:
            await run_async(q, worker(i))
            log.append("next")
        log.append("end")

    settled = JsPromise.resolve(q).then(_push(log, "s1"))
    settled.finally_(_push(log, "finally"))
    run_async(q, run_concurrent([1, 2]))
    ticks(8)


@program
def async_throws(q: Microtasks, log: list[str], ticks: Callable[[int], None]) -> None:
    async def h() -> None:
        log.append("h0")
        raise RuntimeError("boom")

    run_async(q, h()).catch(_push(log, "h caught"))
    ticks(3)


def _run(name: str) -> list[str]:
    q = Microtasks()
    log: list[str] = []

    def ticks(n: int) -> None:
        p = JsPromise.resolve(q)
        for k in range(1, n + 1):
            p = p.then(_push(log, f"t{k}"))

    PROGRAMS[name](q, log, ticks)
    q.drain()
    return log


def test_every_program_node_ran_is_here_and_the_other_way_round() -> None:
    assert set(PROGRAMS) == set(NODE_ORDERS)


@pytest.mark.parametrize("name", sorted(NODE_ORDERS))
def test_continuations_run_in_nodes_order(name: str) -> None:
    assert _run(name) == NODE_ORDERS[name]


def test_a_drain_that_never_ends_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from semaphore_core.durability import microtasks

    monkeypatch.setattr(microtasks, "MAX_JOBS_PER_DRAIN", 100)
    q = Microtasks()

    def again() -> None:
        q.enqueue(again)

    q.enqueue(again)
    with pytest.raises(RuntimeError, match="more than 100 microtasks"):
        q.drain()


def test_a_promise_resolved_with_itself_is_rejected() -> None:
    q = Microtasks()
    p = JsPromise(q)
    resolve, _ = p.resolving_functions()
    resolve(p)
    q.drain()
    assert p.state == "rejected"
    assert isinstance(p.value, TypeError)
