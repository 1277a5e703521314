"""DurableAdapter (``differential.py``) backed by semsim's pure Python port, ``semaphore_core.durability``.

The durability oracle's ``port_semsim.py``, typed, and importing the port as
installed; the differential's default port. From the project's root, with the
reference built (``node/README.md``)::

    python -m tests.durability_oracle.differential --seqs 100 --steps 40 --seed 1

The port is sans-I/O: every call takes ``now_ms`` and returns a ``Step``
(events, attempts to start, aborted attempts, alarm passes that ended). This
adapter is the shell around it, modelling the oracle's world:

- **World** (survives ``evict``): one sqlite3 connection with the
  ``durability_calls`` table and a ``SqliteAlarm`` (the stored platform
  alarm), the handler scripts, the invocation log, the lifecycle events.
- **Instance** (lost on ``evict``): an ``Engine`` + ``Durability`` on that
  connection, its in-memory timers (listed by ``Engine.timers()``) and the
  handler timers of its running invocations. ``evict`` drops both (the old
  engine is never called again: the oracle's old instance is frozen), marks
  its running invocations ``lost`` and drops pending tokens.
- **Handlers**: every attempt in ``Step.started`` takes the next scripted
  outcome of its id (head of the queue, the last repeats, default
  ``succeed("done")``). ``ms`` = 0: settled at once; ``ms`` > 0: a handler
  timer at start + ms; ``hang``: until ``settle``. An aborted attempt
  (``Step.aborted``: timeout or purge) rejects with the abort reason unless
  ``ignoreAbort``.
- **Virtual time**: ``advance`` fires engine timers and handler timers
  merged, in (time, creation order), each at its own time, in its own
  engine step (fake timers yield to the microtask queue between timers).
  Creation order: the engine's own timer ``seq``; a handler timer is
  created just after its attempt's timeout timer (the reference invokes the
  handler one microtask after arming the timeout), so it sorts as
  ``(timeout seq, 1)``.
- **Fake-timer quirk** (@sinonjs/fake-timers, the oracle's clock): a
  ``setTimeout(fn, 0)`` created *during* a tick (``advance``, or the
  advance part of ``alarm`` with ``due``) is called 1 ms later. The only
  zero-delay timer the reference creates is the early alarm
  (``Math.max(delay, 0)``), so an early timer the port arms with
  ``fires_at == now`` while the adapter is inside a tick fires at now + 1.
  (``ALIGN_TICK=0`` in the environment turns this off.)
- **Handlers settle where the reference's do**: the engine calls
  ``on_invoke`` at the microtask the reference calls the handler, and a
  handler whose outcome has no ``ms`` reports it right there (its promise is
  settled when it returns, as the driver's is); ``on_abort`` is called when
  the attempt's signal aborts, and a handler that honours it rejects at once
  with the signal's reason, as the driver's listener does.

Environment knobs (informational variants, default off unless stated):
``ALIGN_NONRETRYABLE_NAME`` (on by default; ``=0`` turns it off): a scripted
``fail`` named ``NonRetryableError`` is raised as the port's
``NonRetryableError``. The oracle's stand-in ``isErrorInstance`` matches by
name, the port by class; the seed does not show which the library does, so
the differential does not judge it.

A config's ``methods`` become the port's per-operation ``MethodOptions``
(each field its own or the instance's, as the stand-in's resolver merges
them). With no ``attemptTimeoutMs`` the port's default applies: the stand-in's
guess is the port's (60 s), so the default path is driven on both sides.
"""

from __future__ import annotations

import copy
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from semaphore_core.durability import (
    AlarmInfo,
    AlarmRetry,
    CallRejected,
    Completed,
    Durability,
    DurabilityOptions,
    Engine,
    Failed,
    MethodOptions,
    NonRetryableError,
    NotFound,
    Participant,
    Pending,
    Purged,
    RetryOptions,
    SchedulerOptions,
    SqliteAlarm,
    Step,
)
from semaphore_core.durability.engine import Join
from semaphore_core.durability.microtasks import JsPromise
from semaphore_core.durability.storage import DurableTable

#: The oracle stand-in's default maxAttempts (node/standins/policy.ts), the port's too.
STANDIN_MAX_ATTEMPTS = 3
DEFAULT_OUTCOME = {"kind": "succeed", "value": "done"}


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default) not in ("", "0", "false", "no")


class ScriptedError(Exception):
    """A scripted ``fail``: a plain JavaScript ``Error`` (``name`` may be set)."""

    def __init__(self, message: str, name: str | None) -> None:
        super().__init__(message)
        self.name = name or "Error"


class ScriptedNonRetryableByName(NonRetryableError):
    """ALIGN_NONRETRYABLE_NAME: a plain Error named NonRetryableError, as the stand-in sees it."""


class StorageFaultError(Exception):
    """The driver's injected platform failure (``fault``; node/standins/do-state.ts)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"injected {what} failure")


#: The stand-in's ``ctx.id``: ``onAlarmRetry``'s ``objectId``.
OBJECT_ID = "object-1"
#: The driver's own participant (``extraParticipant`` in node/harness/driver.ts).
EXTRA_TABLE = DurableTable(name="extra_jobs", key="k")
EXTRA_SCHEMA = (
    "CREATE TABLE extra_jobs (k TEXT PRIMARY KEY, due_at INTEGER NOT NULL,"
    " fails INTEGER NOT NULL, ms INTEGER NOT NULL)"
)


def _err(e: BaseException) -> dict[str, Any]:
    name = getattr(e, "name", None)
    if not isinstance(name, str):
        name = type(e).__name__
    return {"name": name, "message": str(e)}


def _pinned_delay(delays: list[Any]) -> Callable[[int], float]:
    def delay(attempt: int) -> float:
        pinned: float = delays[min(attempt, len(delays)) - 1]
        return pinned

    return delay


def _method_options(method: dict[str, Any] | None) -> MethodOptions | None:
    """A ``methods`` entry as the port's overrides (``None``: the instance's options throughout)."""
    if method is None:
        return None
    retries = method.get("retries")
    pinned = (retries or {}).get("delaysMs")
    return MethodOptions(
        attempt_timeout_ms=method.get("attemptTimeoutMs"),
        retries=None
        if retries is None
        else RetryOptions(
            max_attempts=retries.get("maxAttempts"), delay=_pinned_delay(list(pinned)) if pinned else None
        ),
    )


def _result_json(r: Any) -> dict[str, Any]:
    if isinstance(r, NotFound):
        return {"status": "not_found"}
    if isinstance(r, Pending):
        return {
            "status": "pending",
            "attempt": r.attempt,
            "nextAttemptAt": r.next_attempt_at,
            "lastError": r.last_error,
        }
    if isinstance(r, Failed):
        return {
            "status": "failed",
            "attempt": r.attempt,
            "error": {"name": r.error_name, "message": r.error_message},
        }
    if isinstance(r, Completed):
        return {"status": "completed", "result": r.result}
    raise TypeError(r)


class SemsimAdapter:
    def __init__(self) -> None:
        self.align_tick = _flag("ALIGN_TICK", "1")
        self.align_nonretryable = _flag("ALIGN_NONRETRYABLE_NAME", "1")
        self.conn: sqlite3.Connection | None = None

    # ------------------------------------------------------------------ world
    def init(self, config: dict[str, Any]) -> dict[str, Any]:
        self.close()
        self.config = copy.deepcopy(config)
        self.conn = sqlite3.connect(":memory:")
        self.alarm_store = SqliteAlarm(self.conn)
        self.now = 0
        self.gen = 0
        self.instances = 0
        self.scripts: dict[str, list[Any]] = {}
        self.log: list[dict[str, Any]] = []
        self.inv_attempt: dict[int, Any] = {}  # handle -> Attempt
        self.events_buf: list[dict[str, Any]] = []
        self.settled_buf: list[dict[str, Any]] = []
        self.next_token = 0
        self._immediate_entries: dict[int, Any] = {}
        self.in_tick = False
        self.faults = {"transactions": 0, "alarms": 0}  # the world's: they outlive an instance
        self.failures_buf: list[dict[str, Any]] = []
        self.alarm_retries_buf: list[dict[str, Any]] = []
        cfg = self.config
        sched: dict[str, Any] = {}
        if "alarmConcurrency" in cfg:
            sched["alarm_concurrency"] = cfg["alarmConcurrency"]
        if "alarmMinDelayMs" in cfg:
            sched["alarm_min_delay_ms"] = cfg["alarmMinDelayMs"]
        if "alarmHandoffMs" in cfg:
            sched["alarm_handoff_ms"] = cfg["alarmHandoffMs"]
        if "liveTimers" in cfg:
            sched["live_timers"] = bool(cfg["liveTimers"])
        if cfg.get("alarmRetryHook") in ("throws", "rejects"):
            sched["on_alarm_retry"] = self._alarm_retry_hook
        if cfg.get("extra"):
            self.conn.execute(EXTRA_SCHEMA)
        self.hooks = 0
        self.sched_options = SchedulerOptions(**sched)
        retries = cfg.get("retries") or {}
        pinned = retries.get("delaysMs")
        delay = (
            _pinned_delay(list(pinned)) if pinned else None
        )  # None: port's ExponentialBackoff(1000, 2, 60000)
        self.operations = list(cfg.get("operations") or ["op"])
        methods = cfg.get("methods") or {}
        self.dur_options = DurabilityOptions(
            handlers={name: _method_options(methods.get(name)) for name in self.operations},
            attempt_timeout_ms=cfg.get("attemptTimeoutMs"),
            retries=RetryOptions(max_attempts=retries.get("maxAttempts", STANDIN_MAX_ATTEMPTS), delay=delay),
            include_results=bool(cfg.get("includeResults", False)),
        )
        self.default_outcome = cfg.get("defaultOutcome") or DEFAULT_OUTCOME
        self._build_instance()
        return {"ok": True, "now": self.now}

    def _new_id(self) -> str:
        self.gen += 1
        return f"gen-{self.gen:06d}"

    def _build_instance(self) -> None:
        self.instances += 1
        self.instance = self.instances
        assert self.conn is not None
        self.engine = Engine(
            self.conn,
            self.alarm_store,
            self.sched_options,
            on_invoke=self._on_invoke,
            on_abort=self._on_abort,
        )
        self.durability = Durability(self.engine, self.dur_options, new_id=self._new_id)
        # ``onLifecycleEvent``: the first of the instance's emitters, so added hooks come after it.
        # What it sees must also be what the steps hand the shell (``_absorb`` checks).
        instance = self.instance
        self.hooked: list[dict[str, Any]] = []

        def on_lifecycle_event(event: Any) -> None:
            wire = event.to_wire()
            self.hooked.append(wire)
            self.events_buf.append({"instance": instance, **wire})

        self.durability.lifecycle(on_lifecycle_event)
        self.detach: dict[int, Callable[[], None]] = {}
        extra = self.config.get("extra")
        if extra:
            self.engine.register(self._extra_participant(bool(extra.get("holding"))))
        self._inject_faults()
        self.handler_timers: list[dict[str, Any]] = []  # {at, key, handle}
        self.early_fire: dict[int, int] = {}  # early timer seq -> effective fire time
        self.pass_tokens: dict[int, tuple[int, int]] = {}  # pass id -> (token, instance)
        self.pending_tokens: set[int] = set()

    def _inject_faults(self) -> None:
        """The platform's failures as the stand-in injects them: ``storage.transaction`` and a
        direct ``storage.setAlarm`` reject (an ``async`` function throwing before its first await)."""
        storage = self.engine.storage
        transaction, set_alarm = storage.transaction, storage.set_alarm

        def failing_transaction(closure: Any) -> JsPromise:
            if self.faults["transactions"] > 0:
                self.faults["transactions"] -= 1
                return JsPromise.rejected(storage.tasks, StorageFaultError("transaction"))
            return transaction(closure)

        def failing_set_alarm(at_ms: int) -> JsPromise:
            if self.faults["alarms"] > 0:
                self.faults["alarms"] -= 1
                return JsPromise.rejected(storage.tasks, StorageFaultError("setAlarm"))
            return set_alarm(at_ms)

        storage.transaction = failing_transaction  # type: ignore[method-assign]
        storage.set_alarm = failing_set_alarm  # type: ignore[method-assign]

    # ------------------------------------------------------------ step processing
    def _note_timers(self) -> None:
        """Record when each new early timer really fires (the fake-timer +1 ms inside a tick)."""
        for t in self.engine.timers():
            if t.kind == "early_alarm" and t.seq not in self.early_fire:
                at = t.at_ms
                if self.align_tick and self.in_tick and at <= self.now:
                    at = self.now + 1
                self.early_fire[t.seq] = at

    def _absorb(self, step: Step) -> None:
        """Take a step's results (its handlers were invoked and aborted through the hooks)."""
        # ``step.events`` came through the lifecycle hook already, in emission order (interleaved
        # with the added hooks' calls); the step must hand the shell the same events.
        stepped = [event.to_wire() for event in step.events]
        hooked, self.hooked = self.hooked, []
        if stepped != hooked:
            raise AssertionError(f"the step's events {stepped} are not what its hook saw {hooked}")
        for failure in step.failures:
            self.failures_buf.append(
                {"code": failure.label, "context": dict(failure.context), "error": _err(failure.error)}
            )
        for retry in step.alarm_retries:
            info: dict[str, Any] = {"error": retry.error.to_wire(), "retryInMs": retry.retry_in_ms}
            if retry.retry_count is not None:
                info["retryCount"] = retry.retry_count
                info["isRetry"] = retry.is_retry
            info["objectId"] = OBJECT_ID
            self.alarm_retries_buf.append({"instance": self.instance, "at": self.now, "info": info})
        for end in step.alarm_ends:
            tok = self.pass_tokens.pop(end.pass_id, None)
            if tok is not None:
                token, inst = tok
                if end.outcome == "failed":
                    assert end.error is not None
                    entry = {"token": token, "instance": inst, "error": _err(end.error)}
                else:
                    entry = {"token": token, "instance": inst, "ok": True, "result": None}
                self._settle_token(token, entry)
        self._note_timers()

    def _on_invoke(self, attempt: Any) -> None:
        """The driver's handler is called: log it, then settle it now, at a timer, or never."""
        outcome = self._next_outcome(attempt.id)
        handle = len(self.log) + 1
        self.log.append(
            {
                "handle": handle,
                "instance": self.instance,
                "id": attempt.id,
                "operation": attempt.operation,
                "attempt": attempt.attempt,
                "payload": copy.deepcopy(attempt.payload),
                "startedAt": self.now,
                "outcome": outcome,
                "settledAt": None,
                "result": None,
                "abortedAt": None,
                "abortReason": None,
            }
        )
        self.inv_attempt[handle] = attempt
        self._memoize(handle, outcome.get("memos"), "")
        if outcome.get("kind") == "hang":
            return
        ms = outcome.get("ms") or 0
        if ms > 0:
            # setTimeout in the handler: ordered with the engine's timers by creation.
            self.handler_timers.append(
                {"at": self.now + ms, "seq": self.engine.timer_seq(), "handle": handle}
            )
        else:
            self._report(handle, "outcome", outcome)

    def _memoize(self, handle: int, keys: list[str] | None, prefix: str) -> None:
        """The handler's ``await memoize(key, () => key@handle)``: looked up now, stored on a miss."""
        if not keys:
            return
        attempt = self.inv_attempt[handle]
        memoize = self.durability.memoize(attempt)
        memoized = self.log[handle - 1].setdefault("memoized", {})
        for key in keys:
            found = memoize.lookup(key)
            if found is None:
                value = f"{key}@{handle}"
                memoize.store(key, value)
            else:
                value = found.value
            memoized[f"{prefix}{key}"] = value

    def _on_abort(self, attempt: Any, reason: BaseException) -> None:
        """The signal's abort listener: note it; unless told to ignore it, reject with its reason."""
        handle = self._handle_of(attempt)
        if handle is None:
            return
        inv = self.log[handle - 1]
        if inv["abortedAt"] is None:
            inv["abortedAt"] = self.now
            inv["abortReason"] = _err(reason)
        if inv["result"] is None and not inv["outcome"].get("ignoreAbort"):
            self._report(handle, "aborted", reason)

    def _alarm_retry_hook(self, _retry: AlarmRetry) -> object:
        """``onAlarmRetry`` as the driver's: logged from the step, then it throws or rejects."""
        if self.config.get("alarmRetryHook") == "throws":
            raise ScriptedError("onAlarmRetry hook threw", None)
        return JsPromise.rejected(self.engine.tasks, ScriptedError("onAlarmRetry hook rejected", None))

    def _extra_participant(self, holding: bool) -> Participant:
        """The driver's ``extraParticipant``: due jobs in order; a job's ``ms`` is a sleep, its
        ``fails`` a throw (decremented first), else it is deleted; ``run``/``ran`` logged."""
        engine, instance = self.engine, self.instance
        running = [0]
        assert self.conn is not None
        conn = self.conn

        def finish() -> None:
            running[0] -= 1
            self.events_buf.append({"instance": instance, "extra": "ran", "at": self.now})

        def proceed(due: list[tuple[str, int, int]], i: int, join: Join | None, slept: bool) -> Join | None:
            try:
                while i < len(due):
                    key, fails, ms = due[i]
                    if ms > 0 and not slept:  # await new Promise((r) => setTimeout(r, ms))
                        join = join or Join(engine)
                        self.handler_timers.append(
                            {
                                "at": self.now + ms,
                                "seq": engine.timer_seq(),
                                "extra": lambda i=i, join=join: proceed(due, i, join, True),
                            }
                        )
                        return join
                    slept = False
                    if fails > 0:
                        conn.execute("UPDATE extra_jobs SET fails = fails - 1 WHERE k = ?", (key,))
                        raise ScriptedError(f"extra job {key} failed", None)
                    conn.execute("DELETE FROM extra_jobs WHERE k = ?", (key,))
                    i += 1
            except ScriptedError as error:
                finish()
                if join is None:
                    raise
                join.reject(error)
                return join
            finish()
            if join is not None:
                join.resolve()
            return join

        def run_due(now_ms: int, _info: AlarmInfo | None) -> Join | None:
            due = [
                (str(k), int(fails), int(ms))
                for k, fails, ms in conn.execute(
                    "SELECT k, fails, ms FROM extra_jobs WHERE due_at <= ? ORDER BY due_at, k", (now_ms,)
                )
            ]
            self.events_buf.append(
                {"instance": instance, "extra": "run", "at": self.now, "keys": [d[0] for d in due]}
            )
            running[0] += 1
            return proceed(due, 0, None, False)

        def next_pending_at(c: sqlite3.Connection) -> int | None:
            (at,) = c.execute("SELECT MIN(due_at) FROM extra_jobs").fetchone()
            return None if at is None else int(at)

        return Participant(
            table=EXTRA_TABLE,
            run_due=run_due,
            next_pending_at=next_pending_at,
            holding=(lambda: running[0] > 0) if holding else None,
        )

    def _handle_of(self, attempt: Any) -> int | None:
        for h in range(len(self.log), 0, -1):
            inv = self.log[h - 1]
            if inv["instance"] != self.instance:
                break
            a = self.inv_attempt.get(h)
            if a is not None and a.fence == attempt.fence:
                return h
        return None

    def _next_outcome(self, id: str) -> dict[str, Any]:
        q = self.scripts.get(id)
        if not q:
            return copy.deepcopy(self.default_outcome)
        return copy.deepcopy(q.pop(0) if len(q) > 1 else q[0])

    def _settle_token(self, token: int, entry: dict[str, Any]) -> None:
        if token in self.pending_tokens:
            self.pending_tokens.discard(token)
            self.settled_buf.append(entry)
        else:
            self._immediate_entries[token] = entry

    def _report(self, handle: int, kind: str, arg: Any) -> None:
        """The handler of invocation `handle` settles now (inside the caller's step)."""
        inv = self.log[handle - 1]
        if inv["result"] is not None:
            return
        attempt = self.inv_attempt[handle]
        if kind == "outcome":
            self._memoize(handle, arg.get("settleMemos"), "late:")
        inv["settledAt"] = self.now
        if kind == "aborted":
            inv["result"] = "aborted"
            self.engine.fail(attempt, arg, self.now)
            return
        o = arg
        k = o.get("kind")
        if k == "succeed":
            inv["result"] = "succeeded"
            self.engine.complete(attempt, copy.deepcopy(o.get("value")), self.now)
        elif k == "nonRetryable":
            inv["result"] = "failed"
            self.engine.fail(
                attempt, NonRetryableError(o.get("message") or "scripted non-retryable failure"), self.now
            )
        elif k == "fail":
            inv["result"] = "failed"
            name = o.get("name")
            msg = o.get("message") or "scripted failure"
            if self.align_nonretryable and name == "NonRetryableError":
                err: Exception = ScriptedNonRetryableByName(msg)
            else:
                err = ScriptedError(msg, name)
            self.engine.fail(attempt, err, self.now)
        else:
            raise ValueError(f"cannot settle with {o!r}")

    def _rejected_too(self, call: Callable[[], Step]) -> Step:
        """``call()``'s step; when the call rejected, its step is taken all the same, then the error
        raised (the reference's drain did that work beside the rejection)."""
        try:
            return call()
        except CallRejected as rejected:
            self._absorb(rejected.step)
            raise rejected.error from None

    def _run(self, body) -> None:
        """One engine step (``body`` makes the engine calls); handlers settled inside it."""
        self._absorb(body())

    def _call_async(self, start) -> dict[str, Any]:
        """An API call: its outcome when it settled within the drain, else a token."""
        self.next_token += 1
        token = self.next_token
        self._immediate_entries = {}
        try:
            result = start(token)
        except Exception as e:  # the API call rejected
            return {"error": _err(e)}
        if result is not _PENDING:
            return {"ok": True, "result": result}
        entry = self._immediate_entries.pop(token, None)
        if entry is not None:
            out = {k: v for k, v in entry.items() if k not in ("token", "instance")}
            return out
        self.pending_tokens.add(token)
        return {"pending": token}

    # --------------------------------------------------------------- protocol
    def register(self, id, payload, operation, outcomes):
        if outcomes is not None:
            self.scripts[id] = copy.deepcopy(list(outcomes))

        def start(token):
            self._run(
                lambda: self._rejected_too(
                    lambda: self.durability.register(operation, id, payload, self.now).step
                )
            )
            return None

        return self._call_async(start)

    def get_result(self, id, operation):
        return self._call_async(lambda token: _result_json(self.durability.get_result(operation, id)))

    def settle(self, handle, outcome):
        inv = self.log[handle - 1] if 0 < handle <= len(self.log) else None
        if inv is None:
            return {"error": {"name": "Error", "message": f"no invocation {handle}"}}
        if inv["instance"] != self.instance:
            return {"ok": False, "reason": "lost with an evicted instance"}
        if inv["result"] is not None:
            return {"ok": False, "reason": f"already {inv['result']}"}

        def body():
            with self.engine.step(self.now) as out:
                self._report(handle, "outcome", outcome)
            return out.freeze(self.now)

        self._run(body)
        return {"ok": True}

    def _advance_to(self, target: int) -> None:
        """tickAsync: fire every timer (engine's and handlers') due by target, in order."""
        self.in_tick = True
        try:
            for _ in range(200_000):
                best: tuple[tuple[int, int, int], str, Any] | None = None
                for t in self.engine.timers():
                    at = self.early_fire.get(t.seq, t.at_ms) if t.kind == "early_alarm" else t.at_ms
                    key = (at, t.seq, 0)
                    if best is None or key < best[0]:
                        best = (key, "engine", t)
                live = [
                    h
                    for h in self.handler_timers
                    if "extra" in h or self.log[h["handle"] - 1]["result"] is None
                ]
                self.handler_timers = live
                for h in live:
                    key = (h["at"], h["seq"], 0)
                    if best is None or key < best[0]:
                        best = (key, "handler", h)
                if best is None or best[0][0] > target:
                    self.now = max(self.now, target)
                    return
                self.now = max(self.now, best[0][0])
                if best[1] == "engine":
                    timer = best[2]
                    self._run(lambda timer=timer: self.engine.fire(timer, self.now))
                elif "extra" in best[2]:
                    h = best[2]
                    self.handler_timers.remove(h)

                    def resume(proceed=h["extra"]):
                        with self.engine.step(self.now) as out:
                            proceed()
                        return out.freeze(self.now)

                    self._run(resume)
                else:
                    h = best[2]
                    self.handler_timers.remove(h)
                    inv = self.log[h["handle"] - 1]

                    def body(handle=h["handle"], outcome=inv["outcome"]):
                        with self.engine.step(self.now) as out:
                            self._report(handle, "outcome", outcome)
                        return out.freeze(self.now)

                    self._run(body)
            raise RuntimeError("timer loop")
        finally:
            self.in_tick = False

    def advance(self, ms):
        self._advance_to(self.now + ms)
        return self.settled()

    def settled(self):
        out, self.settled_buf = self.settled_buf, []
        return {"settled": out, "now": self.now}

    def fault(self, transactions: int, alarms: int) -> dict[str, Any]:
        self.faults["transactions"] += transactions
        self.faults["alarms"] += alarms
        return {"ok": True, "faults": dict(self.faults)}

    def hook(self, throws: bool, rejects: bool) -> dict[str, Any]:
        """``lifecycle(hook)`` on the live instance: it logs each event, then throws or rejects."""
        self.hooks += 1
        number, instance = self.hooks, self.instance

        def hook(event: Any) -> object:
            wire = event.to_wire()
            self.events_buf.append(
                {"instance": instance, "hook": number, "type": wire["type"], "id": wire.get("id")}
            )
            if throws:
                raise ScriptedError(f"hook {number} threw", None)
            if rejects:
                return JsPromise.rejected(self.engine.tasks, ScriptedError(f"hook {number} rejected", None))
            return None

        self.detach[number] = self.durability.lifecycle(hook)
        return {"ok": True, "hook": number}

    def unhook(self, hook: int) -> dict[str, Any]:
        detach = self.detach.pop(hook, None)
        if detach is None:
            return {"ok": False, "reason": "no such hook on the live instance"}
        detach()
        return {"ok": True}

    def extra(self, key: str, due_at: int, fails: int, ms: int) -> dict[str, Any]:
        """A job of the driver's participant, written in ``engine.transaction`` (the alarm reconciled)."""
        if not self.config.get("extra"):
            return {"error": {"name": "Error", "message": "no extra participant: init with config.extra"}}
        inst = self.instance

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO extra_jobs (k, due_at, fails, ms) VALUES (?, ?, ?, ?)",
                (key, due_at, fails, ms),
            )

        def start(token: int) -> Any:
            box: list[JsPromise] = []
            self._run(
                lambda: self.engine.run_step(
                    self.now, lambda: box.append(self.engine.transaction_async(write))
                )
            )
            [promise] = box
            if promise.state == "rejected":
                raise promise.value
            if promise.state == "fulfilled":
                return None
            promise.then(
                lambda _: self._settle_token(
                    token, {"token": token, "instance": inst, "ok": True, "result": None}
                ),
                lambda e: self._settle_token(token, {"token": token, "instance": inst, "error": _err(e)}),
            )
            return _PENDING

        return self._call_async(start)

    def tables(self) -> dict[str, Any]:
        """The world's other tables: ``durability_memos`` and the participant's jobs."""
        assert self.conn is not None
        out: dict[str, Any] = {}
        for name, query in (
            ("memos", "SELECT * FROM durability_memos ORDER BY table_name, record_key, memo_key"),
            ("extra", "SELECT * FROM extra_jobs ORDER BY k" if self.config.get("extra") else None),
        ):
            if query is None:
                out[name] = []
                continue
            cur = self.conn.execute(query)
            cols = [d[0] for d in cur.description]
            out[name] = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
        return out

    def failures(self) -> dict[str, Any]:
        out = {"failures": self.failures_buf, "alarmRetries": self.alarm_retries_buf}
        self.failures_buf, self.alarm_retries_buf = [], []
        return out

    def alarm(self, due, retry_count: int = 0):
        if due:
            at = self.alarm_store.get_alarm()
            if at is None:
                return {"error": {"name": "Error", "message": "no alarm is stored"}}
            if at - self.now > 0:
                self._advance_to(at)
        fired = self.alarm_store.get_alarm()
        if fired is not None:
            self.alarm_store.delete_alarm()
        inst = self.instance

        def start(token):
            def body():
                step = self.engine.alarm(
                    self.now, AlarmInfo(retry_count=retry_count, is_retry=retry_count > 0)
                )
                self.pass_tokens[step.passes_started[0]] = (token, inst)
                return step

            self._run(body)
            return _PENDING

        reply = self._call_async(start)
        return {**reply, "firedAlarm": fired, "now": self.now}

    def evict(self):
        for inv in self.log:
            if inv["instance"] == self.instance and inv["result"] is None:
                inv["result"] = "lost"
                inv["settledAt"] = self.now
        self.settled_buf = []
        self._build_instance()
        return {"ok": True, "now": self.now, "instance": self.instance}

    def purge(self, before):
        def start(token):
            box: dict[str, Any] = {}

            def body():
                step = self._rejected_too(lambda: self.durability.purge_before(before, self.now))
                box["count"] = next(e.count for e in step.events if isinstance(e, Purged))
                return step

            self._run(body)
            return box["count"]

        return self._call_async(start)

    def calls(self) -> list[dict[str, Any]]:
        assert self.conn is not None
        cur = self.conn.execute("SELECT * FROM durability_calls ORDER BY created_at, id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def events(self):
        if self.hooked:
            raise AssertionError(f"events no step handed the shell: {self.hooked}")
        out, self.events_buf = self.events_buf, []
        return out

    def next_alarm(self):
        return {
            "alarmAt": self.alarm_store.get_alarm(),
            "timerAt": self.engine.early_due_at,
            "availablePermits": self.engine.available_permits,
            "now": self.now,
        }

    def invocations(self):
        return {
            "invocations": [dict(i) for i in self.log],
            "running": sum(1 for i in self.log if i["instance"] == self.instance and i["result"] is None),
            "instance": self.instance,
        }

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class _Pending:
    pass


_PENDING = _Pending()
