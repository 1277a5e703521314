"""Differential runner for durable operations: seeded random sequences run step by step against the
reference (seed 002's TypeScript under Node, ``node/``) and the port, their normalised observations
compared after every step.

    python -m tests.durability_oracle.differential --seqs N --steps N --seed S [--self-test]
                                                   [--port MODULE:CLASS] [--messages] [-v]

--self-test   the "port" is a second reference (a second node process): N/N
              identical shows the harness is deterministic.
--port M:C    the port's adapter, class C of module M (default: this project's,
              tests.durability_oracle.port_adapter:SemsimAdapter).
--messages    also compare error message texts (default: error class only;
              the reference's library messages come from guessed stand-ins).
-v            print the steps of each diverged sequence.

The last line is always
    diff vs reference: K/N sequences identical (M steps compared)
and the exit status is 0 only when K == N.

Each sequence: a random config (alarmConcurrency 1-4, retries.maxAttempts
1-4, pinned retries.delaysMs or the defaults, attemptTimeoutMs,
alarmMinDelayMs, alarmHandoffMs, liveTimers, includeResults, per-operation
``methods`` overrides), then random steps: register (a
new id, the same id with the same payload (keys reordered), the same id with
another payload, the same id under the other operation name) with scripted
outcomes (succeed after N ms, fail retryably, NonRetryable, hang), advance
time, platform alarm (due or not), evict, settle a running handler, getResult,
purgeBefore, injected platform failures (the next storage transactions or
alarm writes fail), lifecycle() hooks added and detached (logging, throwing
or rejecting), jobs of a second participant on the scheduler (config
``extra``: due, sleeping, failing its pass); a settle may end a timed handler
early, a delivery may be a platform retry (retryCount), a handler may
memoize steps, an ``onAlarmRetry`` hook may throw or reject. Choices depend only on
the reference's observations, so both sides see the same commands.
node/README.md, "Differential runner", has the details; the normalisation and
comparison are :mod:`tests.durability_oracle.observation`'s.

From the workplace's durability oracle (``diff.py``), typed and sharing the
observation module with the corpus test.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import random
import sys
from typing import Any, Protocol

from tests.durability_oracle.observation import Adapter, Normaliser, apply, first_diff, observe, parsed
from tests.durability_oracle.oracle_client import Oracle, fail, hang, non_retryable, succeed

DEFAULT_PORT = "tests.durability_oracle.port_adapter:SemsimAdapter"
OPERATIONS = ["op", "other"]


class Diverged(Exception):
    pass


# ------------------------------------------------------------- adapters
class DurableAdapter(Adapter, Protocol):
    """What the runner drives. Replies use the oracle's JSON shapes
    (node/README.md, "Protocol"); the runner normalises them itself."""

    def init(self, config: dict[str, Any]) -> dict[str, Any]:
        """Fresh world at virtual time 0: empty database, no stored alarm,
        instance 1, invocation handles and tokens restart. -> {"ok": True, "now": 0}"""
        ...

    def close(self) -> None: ...


class OracleAdapter:
    """DurableAdapter backed by the Node driver (one node process each)."""

    def __init__(self) -> None:
        self.o = Oracle()

    def _call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return self.o.call(cmd, check=False)

    def init(self, config: dict[str, Any]) -> dict[str, Any]:
        return self._call({"op": "init", "config": config, "now": 0})

    def register(self, id: str, payload: Any, operation: str, outcomes: list[Any] | None) -> dict[str, Any]:
        cmd = {"op": "register", "id": id, "payload": payload, "operation": operation}
        if outcomes is not None:
            cmd["outcomes"] = outcomes
        return self._call(cmd)

    def get_result(self, id: str, operation: str) -> dict[str, Any]:
        return self._call({"op": "getResult", "id": id, "operation": operation})

    def settle(self, handle: int, outcome: dict[str, Any]) -> dict[str, Any]:
        return self._call({"op": "settle", "handle": handle, "outcome": outcome})

    def advance(self, ms: int) -> dict[str, Any]:
        return self._call({"op": "advance", "ms": ms})

    def settled(self) -> dict[str, Any]:
        return self._call({"op": "settled"})

    def alarm(self, due: bool, retry_count: int = 0) -> dict[str, Any]:
        return self._call({"op": "alarm", "due": due, "retryCount": retry_count})

    def fault(self, transactions: int, alarms: int) -> dict[str, Any]:
        return self._call({"op": "fault", "transactions": transactions, "alarms": alarms})

    def failures(self) -> dict[str, Any]:
        return self._call({"op": "failures"})

    def evict(self) -> dict[str, Any]:
        return self._call({"op": "evict"})

    def purge(self, before: int) -> dict[str, Any]:
        return self._call({"op": "purge", "before": before})

    def calls(self) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = self._call({"op": "dump"})["calls"]
        return calls

    def events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self._call({"op": "events"})["events"]
        return events

    def next_alarm(self) -> dict[str, Any]:
        return self._call({"op": "nextAlarm"})

    def invocations(self) -> dict[str, Any]:
        return self._call({"op": "invocations"})

    def hook(self, throws: bool, rejects: bool) -> dict[str, Any]:
        return self._call({"op": "hook", "throws": throws, "rejects": rejects})

    def unhook(self, hook: int) -> dict[str, Any]:
        return self._call({"op": "unhook", "hook": hook})

    def extra(self, key: str, due_at: int, fails: int, ms: int) -> dict[str, Any]:
        return self._call({"op": "extra", "key": key, "dueAt": due_at, "fails": fails, "ms": ms})

    def tables(self) -> dict[str, Any]:
        dump = self._call({"op": "dump"})
        return {"memos": dump.get("memos", []), "extra": dump.get("extra", [])}

    def close(self) -> None:
        self.o.close()


# ------------------------------------------------------------ generator
#: Every key :func:`random_config` may set.
CONFIG_FIELDS = (
    "operations",
    "alarmConcurrency",
    "retries",
    "attemptTimeoutMs",
    "alarmMinDelayMs",
    "alarmHandoffMs",
    "liveTimers",
    "includeResults",
    "methods",
    "extra",
    "alarmRetryHook",
)


def random_config(rng: random.Random) -> dict[str, Any]:
    cfg: dict[str, Any] = {"operations": OPERATIONS, "alarmConcurrency": rng.randint(1, 4)}
    retries: dict[str, Any] = {"maxAttempts": rng.randint(1, 4)}
    if rng.random() < 0.75:
        retries["delaysMs"] = [rng.choice([10, 100, 1_000, 3_000, 20_000]) for _ in range(rng.randint(1, 3))]
    cfg["retries"] = retries
    if rng.random() < 0.6:
        cfg["attemptTimeoutMs"] = rng.choice([200, 1_000, 5_000, 30_000])
    if rng.random() < 0.7:
        cfg["alarmMinDelayMs"] = rng.choice([1_000, 2_000, 5_000, 15_000])
    if rng.random() < 0.15:
        cfg["alarmHandoffMs"] = rng.choice([3_000, 20_000])
    if rng.random() < 0.8:
        cfg["liveTimers"] = rng.random() < 0.5
    if rng.random() < 0.3:
        cfg["includeResults"] = rng.random() < 0.7
    if rng.random() < 0.3:
        names = rng.sample(OPERATIONS, rng.randint(1, len(OPERATIONS)))
        cfg["methods"] = {name: random_method(rng) for name in names}
    if rng.random() < 0.3:
        # A second participant on the scheduler (the driver's own), holding its passes or not.
        cfg["extra"] = {"holding": rng.random() < 0.5}
    if rng.random() < 0.2:
        cfg["alarmRetryHook"] = rng.choice(["throws", "rejects"])
    return cfg


def random_method(rng: random.Random) -> dict[str, Any]:
    """One operation's ``methods`` overrides: each field its own, or the instance's."""
    method: dict[str, Any] = {}
    if rng.random() < 0.5:
        method["attemptTimeoutMs"] = rng.choice([200, 1_000, 5_000, 30_000])
    retries: dict[str, Any] = {}
    if rng.random() < 0.5:
        retries["maxAttempts"] = rng.randint(1, 4)
    if rng.random() < 0.5:
        retries["delaysMs"] = [rng.choice([10, 100, 1_000, 3_000, 20_000]) for _ in range(rng.randint(1, 3))]
    if retries or rng.random() < 0.3:
        method["retries"] = retries
    return method


def random_payload(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.25:
        return rng.randint(0, 3)
    if r < 0.4:
        return rng.choice(["p", "q"])
    if r < 0.55:
        return [rng.randint(0, 2) for _ in range(rng.randint(0, 2))]
    return {"x": rng.randint(0, 2), "y": [rng.randint(0, 1)], "z": {"b": 1, "a": rng.choice([None, "s"])}}


def reordered(v: Any) -> Any:
    """Same JSON value, object keys inserted in reverse order (canonical match)."""
    if isinstance(v, dict):
        return {k: reordered(v[k]) for k in reversed(list(v))}
    if isinstance(v, list):
        return [reordered(x) for x in v]
    return v


def random_value(rng: random.Random) -> Any:
    return rng.choice([None, 0, 7, "ok", [1, 2], {"url": "u", "n": rng.randint(0, 9)}])


def random_outcome(rng: random.Random, settle: bool = False) -> dict[str, Any]:
    outcome = _random_outcome(rng, settle)
    if rng.random() < 0.3:
        # The handler memoizes steps as it starts (or, settled by hand, just before it settles:
        # a zombie's write after a purge); a retry finds what an earlier attempt stored.
        outcome["settleMemos" if settle else "memos"] = rng.sample(["m1", "m2", "m3"], rng.randint(1, 2))
    return outcome


def _random_outcome(rng: random.Random, settle: bool) -> dict[str, Any]:
    ms = 0 if settle else rng.choice([0, 0, 10, 150, 1_500, 8_000])
    r = rng.random()
    if r < (0.55 if settle else 0.45):
        return succeed(random_value(rng), ms=ms)
    if r < (0.85 if settle else 0.7):
        return fail(
            rng.choice(["boom", "flaky"]),
            ms=ms,
            name=rng.choices([None, "TypeError", "NonRetryableError"], [85, 10, 5])[0],
        )
    if settle or r < 0.8:
        return non_retryable("bad input", ms=ms)
    return hang(ignore_abort=rng.random() < 0.5)


def random_outcomes(rng: random.Random) -> list[dict[str, Any]]:
    return [random_outcome(rng) for _ in range(rng.choices([1, 2, 3], [50, 35, 15])[0])]


class View:
    """What the generator knows, read from the reference's observations only."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.new_ids = 0
        self.known: dict[str, tuple[str, Any]] = {}  # id -> (operation, payload) as persisted
        self.seen: list[str] = []  # every id ever registered (purged ones stay)
        self.alarm_at: int | None = None
        self.alarm_token: Any = None
        #: The live instance's running invocations: hanging, timed (settled early), or aborted
        #: but ignoring it.
        self.running: list[int] = []
        self.now = 0
        #: Lifecycle hooks added so far (any instance), and the participant's jobs.
        self.hooks = 0
        self.extra_jobs = 0
        self.has_extra = bool(config.get("extra"))

    def update(self, action: dict[str, Any], raw: dict[str, Any]) -> None:
        if action["op"] == "hook":
            self.hooks += 1
        self.known = {r["id"]: (r["operation"], parsed(r["payload"])) for r in raw["rows"]}
        self.alarm_at = raw["alarmAt"]
        self.now = raw["now"]
        reply = raw["reply"] if isinstance(raw["reply"], dict) else {}
        if action["op"] == "evict":
            self.alarm_token = None
        elif action["op"] == "alarm" and "pending" in reply:
            self.alarm_token = reply["pending"]
        done = {e.get("token") for e in raw["settled"]} | {e.get("token") for e in reply.get("settled", [])}
        if self.alarm_token in done:
            self.alarm_token = None
        inst = raw["inv"].get("instance")
        self.running = [
            i["handle"] for i in raw["inv"]["invocations"] if i["result"] is None and i["instance"] == inst
        ]


STEP_WEIGHTS = {
    "register_new": 14,
    "register_same": 5,
    "register_other_payload": 4,
    "register_other_op": 4,
    "register_purged": 3,
    "advance": 24,
    "alarm": 10,
    "evict": 6,
    "settle": 10,
    "read": 11,
    "purge": 4,
    "fault": 3,
    "hook": 2,
    "unhook": 1,
    "extra": 5,
}


def choose_step(rng: random.Random, v: View) -> dict[str, Any]:
    kind = rng.choices(list(STEP_WEIGHTS), list(STEP_WEIGHTS.values()))[0]
    purged = [id for id in v.seen if id not in v.known]
    if kind == "register_purged" and purged:
        # An id whose row a purge deleted, registered again: a new generation, while the old
        # one's handlers may still run (zombies, fenced; their late memos of another generation).
        return {
            "op": "register",
            "id": rng.choice(purged),
            "operation": rng.choices(OPERATIONS, [80, 20])[0],
            "payload": random_payload(rng),
            "outcomes": random_outcomes(rng),
            "kind": kind,
        }
    if kind == "register_purged" or (kind.startswith("register_") and not v.known):
        kind = "register_new"
    if kind == "register_new":
        v.new_ids += 1
        id = f"k{v.new_ids}"
        v.seen.append(id)
        return {
            "op": "register",
            "id": id,
            "operation": rng.choices(OPERATIONS, [80, 20])[0],
            "payload": random_payload(rng),
            "outcomes": random_outcomes(rng),
            "kind": kind,
        }
    if kind.startswith("register_"):
        id = rng.choice(sorted(v.known))
        operation, payload = v.known[id]
        outcomes = random_outcomes(rng) if rng.random() < 0.5 else None
        if kind == "register_same":
            payload = reordered(payload)
        elif kind == "register_other_payload":
            other = random_payload(rng)
            payload = other if other != payload else [payload]
        else:
            operation = next(o for o in OPERATIONS if o != operation)
        return {
            "op": "register",
            "id": id,
            "operation": operation,
            "payload": payload,
            "outcomes": outcomes,
            "kind": kind,
        }
    if kind == "advance":
        return {"op": "advance", "ms": rng.choice([0, 1, 10, 100, 500, 1_000, 3_000, 15_000, 60_000])}
    if kind == "alarm":
        if v.alarm_token is not None:  # the previous delivery still runs: just read
            return {"op": "settled"}
        due = v.alarm_at is not None and rng.random() < 0.75
        # A delivery the platform retries (after a failed one) says so; the engine passes it on.
        return {"op": "alarm", "due": due, "retryCount": rng.choices([0, 1, 2], [70, 20, 10])[0]}
    if kind == "evict":
        return {"op": "evict"}
    if kind == "settle" and v.running:
        return {"op": "settle", "handle": rng.choice(v.running), "outcome": random_outcome(rng, settle=True)}
    if kind == "fault":
        # The platform's next storage calls fail: a transaction (a registration, a claim, a
        # reconcile: the alarm pass fails and the engine arms its fallback) or the fallback itself.
        transactions, alarms = rng.choice([(1, 0), (1, 0), (2, 0), (1, 1), (0, 1)])
        return {"op": "fault", "transactions": transactions, "alarms": alarms}
    if kind == "hook":
        throws, rejects = rng.choice([(False, False), (False, False), (True, False), (False, True)])
        return {"op": "hook", "throws": throws, "rejects": rejects}
    if kind == "unhook" and v.hooks:
        return {"op": "unhook", "hook": rng.randint(1, v.hooks)}
    if kind == "extra" and v.has_extra:
        v.extra_jobs += 1
        return {
            "op": "extra",
            "key": f"j{rng.randint(1, v.extra_jobs)}",  # a new job, or one again
            "dueAt": v.now + rng.choice([0, 0, 500, 2_000, 20_000]),
            "fails": rng.choice([0, 0, 0, 1, 2]),
            "ms": rng.choice([0, 0, 0, 100, 5_000]),
        }
    if kind == "purge":
        return {"op": "purge", "before": max(0, v.now + rng.choice([-5_000, 0, 1]))}
    # read (also settle with nothing running)
    r = rng.random()
    if v.seen and r < 0.85:
        id = rng.choice(v.seen)
        operation = v.known.get(id, ("op", None))[0]
        if r < 0.08:
            operation = next(o for o in OPERATIONS if o != operation)
    else:
        id, operation = "never-registered", "op"
    return {"op": "getResult", "id": id, "operation": operation}


# ------------------------------------------------------------ one sequence
def run_sequence(
    ref: DurableAdapter,
    port: DurableAdapter,
    seed: int,
    steps: int,
    messages: bool,
    trace: list[dict[str, Any]] | None = None,
) -> int:
    rng = random.Random(seed)
    cfg = random_config(rng)
    nr, np_ = Normaliser(messages), Normaliser(messages)
    ri, pi = nr.reply(ref.init(copy.deepcopy(cfg))), np_.reply(port.init(copy.deepcopy(cfg)))
    if ri != pi:
        raise Diverged(f"seed {seed} init cfg {cfg}: {first_diff(ri, pi)}")
    view = View(cfg)
    done = 0
    for step in range(steps):
        action = choose_step(rng, view)
        if trace is not None:
            trace.append(action)
        ro, raw = observe(ref, apply(ref, action), nr)
        po, _ = observe(port, apply(port, action), np_)
        if ro != po:
            raise Diverged(f"seed {seed} step {step} {action} cfg {cfg}: {first_diff(ro, po)}")
        view.update(action, raw)
        done += 1
    return done


def load_port(spec: str) -> DurableAdapter:
    """``MODULE:CLASS``'s instance (modules importable from the current directory too)."""
    module, _, cls = spec.partition(":")
    if not cls:
        raise ValueError(f"--port {spec!r}: give MODULE:CLASS")
    sys.path.insert(0, ".")
    try:
        adapter: DurableAdapter = getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as error:
        raise ValueError(f"--port {spec!r}: {error}") from None
    return adapter


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seqs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-test", action="store_true", help="port = a second OracleAdapter")
    ap.add_argument(
        "--port", default=DEFAULT_PORT, help=f"MODULE:CLASS of the port's adapter (default {DEFAULT_PORT})"
    )
    ap.add_argument("--messages", action="store_true", help="also compare error messages")
    ap.add_argument("-v", action="store_true", help="print the trace of diverged sequences")
    a = ap.parse_args(argv)
    diverged: list[str] = []
    total = 0
    try:
        port: DurableAdapter = OracleAdapter() if a.self_test else load_port(a.port)
        ref = OracleAdapter()
    except (ValueError, FileNotFoundError) as error:  # a bad --port, or no reference built
        print(f"differential: error: {error}", file=sys.stderr)
        return 2
    try:
        for s in range(a.seed, a.seed + a.seqs):
            trace: list[dict[str, Any]] = []
            try:
                total += run_sequence(ref, port, s, a.steps, a.messages, trace)
            except Diverged as error:
                diverged.append(str(error))
            except Exception as e:
                diverged.append(f"seed {s} step {len(trace) - 1}: {type(e).__name__}: {e}")
            else:
                continue
            if a.v:
                print(f"-- seed {s} trace")
                for n, act in enumerate(trace):
                    print(f"   {n}: {act}")
    finally:
        ref.close()
        port.close()
    for line in diverged[:3]:
        print("DIVERGED", line[:900])
    if len(diverged) > 3:
        print(f"... and {len(diverged) - 3} more")
    print(
        f"diff vs reference: {a.seqs - len(diverged)}/{a.seqs} sequences identical ({total} steps compared)"
    )
    return 0 if not diverged else 1


if __name__ == "__main__":
    sys.exit(main())
