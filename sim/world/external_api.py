"""The external API that admitted work calls: the ground truth of "permits in use".

Seed 000's account-concurrency example runs each admitted job as a durable
operation whose handler POSTs to ``JOB_API`` with ``Idempotency-Key: id``.
The semaphore exists to keep that API's concurrency per account under the
limit, so what the API sees is what the semaphore must be judged against:
a permit is an accounting contract (seed 000: "not a mechanism that can
forcibly stop an external task"), a call is the real thing.

What this module owns, and what it must not know:

- **A call runs at the service from its arrival until its work is done,**
  whatever the caller does meanwhile. A caller that gives up (its attempt
  timed out, its object was evicted, the reply was lost) leaves the call
  running: from the caller's side it is a zombie, and it still counts here.
- **Idempotency is a property of the API** (``ApiSpec.idempotent``). An
  idempotent API keys calls by their idempotency key: a key that already
  took effect is answered at once with the stored outcome, without a new
  effect or time at the service; a key whose call is still running is
  refused at once with a conflict (HTTP 409, as Stripe's API does). A
  non-idempotent API runs every call, and every call that gets as far as
  its write takes effect.
- **Failures are drawn per call at its arrival** from the fault plan's API
  part (:class:`ApiFaults`): ``api_error`` fails the call part-way through
  its work, before its write (no effect); ``api_error_after_effect`` does
  the work and the write and then answers with an error, which the caller
  cannot tell from the first kind (a lost completion); ``api_slow`` makes
  the work take ``api_slow_factor`` times longer.
- **A request may carry a deadline** (``deadlineAt``, as gRPC propagates
  one): a request arriving at or after it is refused at once (504, no call);
  a call still working at its deadline is cut there (504, no effect). The
  reference's handler sends none, and then a call runs to its end; F5's fix
  sends its attempt's deadline (docs/FINDINGS.md, F5).
- **A request reaches the API once or not at all**: the network never
  duplicates it (HTTP over TCP; a retry is the caller's, made as a new
  attempt). Loss, delay and reordering still apply.
- It knows nothing of permits, holders, operations or invariants. Checks
  subscribe with :meth:`ExternalApi.watch` and see every change as it
  happens.

The API is an endpoint on the simulated network, so requests and replies to
it suffer the plan's message faults like every other call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

import attrs

from semsim.runtime.kernel import Sim
from semsim.runtime.network import Later, Network, RemoteError

NAME: Final = "api"
#: Calls that may run at once across every account (TIGER_STYLE: a limit on everything).
MAX_CALLS_IN_FLIGHT: Final = 100_000
#: The work a call may ask for, at most (a day).
MAX_WORK_MS: Final = 86_400_000

#: ``deadline``: cut at the request's ``deadlineAt`` before its write (no effect).
Outcome = Literal["ok", "error", "error_after_effect", "deadline"]


class ApiFaults(Protocol):
    """The API's part of a fault plan: probabilities per call, drawn at its arrival."""

    @property
    def api_error(self) -> float: ...
    @property
    def api_error_after_effect(self) -> float: ...
    @property
    def api_slow(self) -> float: ...
    @property
    def api_slow_factor(self) -> int: ...

    def active(self, t_ms: int) -> bool: ...


@attrs.frozen
class ApiFaultRates:
    """Fixed API fault rates, active for the whole run (tests and worlds without a plan's API part)."""

    api_error: float = 0.0
    api_error_after_effect: float = 0.0
    api_slow: float = 0.0
    api_slow_factor: int = 4

    def __attrs_post_init__(self) -> None:
        for name in ("api_error", "api_error_after_effect", "api_slow"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        if self.api_error + self.api_error_after_effect > 1.0:
            raise ValueError("api_error + api_error_after_effect must be at most 1")
        if not 1 <= self.api_slow_factor <= 100:
            raise ValueError(f"api_slow_factor must be between 1 and 100, got {self.api_slow_factor!r}")

    def active(self, t_ms: int) -> bool:
        return True


@attrs.frozen
class ApiSpec:
    """What kind of API it is."""

    #: Deduplicates by idempotency key (seed 000's example sends ``Idempotency-Key: id``).
    idempotent: bool = True


@attrs.frozen
class ApiCall:
    """One call as the service saw it."""

    call: str
    account: str
    key: str
    started_at: int
    ends_at: int
    outcome: Outcome
    #: The attempt that sent it, as its request said (a caller's tracing header; None if it did not say).
    attempt: int | None = None
    #: The operation that sent it, as its request said (a tracing header like ``attempt``, apart
    #: from the idempotency key, so a caller keying one operation two ways is still seen).
    operation: str | None = None


Change = Literal["start", "end"]


class ExternalApi:
    """The service: calls in flight per account, effects per idempotency key."""

    def __init__(self, sim: Sim, network: Network, spec: ApiSpec, faults: ApiFaults) -> None:
        self._sim = sim
        self._spec = spec
        self._faults = faults
        self._rng = sim.rng("api")
        #: Calls running now, by call id, in arrival order.
        self.running: dict[str, ApiCall] = {}
        #: Calls running now per account (accounts with none are absent).
        self.in_flight: dict[str, int] = {}
        #: How many times each idempotency key took effect.
        self.effects: dict[str, int] = {}
        #: How many times each operation took effect, by the operation its requests named, whatever
        #: their keys (``effect_once`` judges both counts).
        self.operation_effects: dict[str, int] = {}
        #: An idempotent API's stored outcome per key that took effect.
        self._stored: dict[str, Outcome] = {}
        #: An idempotent API's running call per key.
        self._running_key: dict[str, str] = {}
        self._watchers: list[Callable[[Change, ApiCall], None]] = []
        self._request_watchers: list[Callable[[str, str], None]] = []
        network.register(NAME, self, duplicates=False)

    @property
    def idempotent(self) -> bool:
        return self._spec.idempotent

    def watch(self, watcher: Callable[[Change, ApiCall], None]) -> None:
        """Call ``watcher(change, call)`` after every call starts and ends (``self`` already updated)."""
        self._watchers.append(watcher)

    def watch_requests(self, watcher: Callable[[str, str], None]) -> None:
        """Call ``watcher(account, key)`` as each well-formed request arrives, before it is answered:
        every attempt to run an item's work, the ones an idempotent API refuses or replays too."""
        self._request_watchers.append(watcher)

    # --- the endpoint --------------------------------------------------------------

    def dispatch(self, method: str, payload: Any) -> Any:
        if method != "run":
            raise RemoteError("protocol", f"{NAME}: unknown method {method!r}")
        account, key, work_ms, deadline_at, attempt, operation = _parse_run(payload)
        for watcher in self._request_watchers:
            watcher(account, key)
        sim = self._sim
        if deadline_at is not None and sim.now() >= deadline_at:
            sim.event("api_deadline", account=account, key=key, deadline=deadline_at)
            raise RemoteError("error", f"{NAME}: 504 (the request arrived after its deadline)")
        if self._spec.idempotent:
            stored = self._stored.get(key)
            if stored is not None:
                sim.event("api_replay", account=account, key=key, outcome=stored)
                return _answer(stored, replayed=True)
            if key in self._running_key:
                sim.event("api_conflict", account=account, key=key, call=self._running_key[key])
                raise RemoteError("conflict", f"{NAME}: a call with idempotency key {key!r} is running")
        call = self._start(account, key, work_ms, deadline_at, attempt, operation)
        done = sim.signal()

        def end() -> None:
            self._end(call)
            done.set()

        sim.call_at(call.ends_at, end)

        async def wait() -> Any:
            await done.wait()
            return _answer(call.outcome, replayed=False)

        return Later(wait)

    # --- calls -----------------------------------------------------------------------

    def _start(
        self,
        account: str,
        key: str,
        work_ms: int,
        deadline_at: int | None,
        attempt: int | None,
        operation: str | None,
    ) -> ApiCall:
        sim, faults, rng = self._sim, self._faults, self._rng
        now = sim.now()
        outcome: Outcome = "ok"
        slow = False
        if faults.active(now):
            draw = rng.random()
            if draw < faults.api_error:
                outcome = "error"
                work_ms = rng.randint(0, work_ms)
            elif draw < faults.api_error + faults.api_error_after_effect:
                outcome = "error_after_effect"
            if faults.api_slow and rng.random() < faults.api_slow:
                work_ms *= faults.api_slow_factor
                slow = True
        if deadline_at is not None and now + work_ms > deadline_at:
            outcome, work_ms = "deadline", deadline_at - now
        if len(self.running) >= MAX_CALLS_IN_FLIGHT:
            raise AssertionError(f"more than {MAX_CALLS_IN_FLIGHT} calls in flight at the external API")
        call = ApiCall(sim.next_id("call"), account, key, now, now + work_ms, outcome, attempt, operation)
        self.running[call.call] = call
        self.in_flight[account] = self.in_flight.get(account, 0) + 1
        if self._spec.idempotent:
            self._running_key[key] = call.call
        sim.event(
            "api_start",
            call=call.call,
            account=account,
            key=key,
            until=call.ends_at,
            in_flight=self.in_flight[account],
            **_SLOW if slow else {},
        )
        for watcher in self._watchers:
            watcher("start", call)
        return call

    def _end(self, call: ApiCall) -> None:
        del self.running[call.call]
        left = self.in_flight[call.account] - 1
        assert left >= 0, call
        if left:
            self.in_flight[call.account] = left
        else:
            del self.in_flight[call.account]
        if self._spec.idempotent:
            del self._running_key[call.key]
        if call.outcome not in ("error", "deadline"):
            self.effects[call.key] = self.effects.get(call.key, 0) + 1
            if call.operation is not None:
                self.operation_effects[call.operation] = self.operation_effects.get(call.operation, 0) + 1
            if self._spec.idempotent:
                self._stored[call.key] = call.outcome
        self._sim.event("api_end", call=call.call, account=call.account, outcome=call.outcome, in_flight=left)
        for watcher in self._watchers:
            watcher("end", call)


def _answer(outcome: Outcome, *, replayed: bool) -> dict[str, Any]:
    if outcome == "ok":
        return {"status": 200, "replayed": replayed}
    status = 504 if outcome == "deadline" else 500
    raise RemoteError("error", f"{NAME}: {status} ({outcome}{', replayed' if replayed else ''})")


def _parse_run(payload: Any) -> tuple[str, str, int, int | None, int | None, str | None]:
    """``{"account": str, "key": str, "workMs": int, "deadlineAt"?: int, "attempt"?: int,
    "operation"?: str}``, or ``RemoteError("protocol")``."""
    if not isinstance(payload, dict) or not {"account", "key", "workMs"} <= set(payload) <= _RUN_FIELDS:
        raise RemoteError(
            "protocol",
            f"{NAME}: run takes {{account, key, workMs, deadlineAt?, attempt?, operation?}}, got {payload!r}",
        )
    account, key, work_ms = payload["account"], payload["key"], payload["workMs"]
    if not isinstance(account, str) or not account or not isinstance(key, str) or not key:
        raise RemoteError("protocol", f"{NAME}: account and key must be non-empty strings")
    if type(work_ms) is not int or not 0 <= work_ms <= MAX_WORK_MS:
        raise RemoteError("protocol", f"{NAME}: workMs must be an integer in [0, {MAX_WORK_MS}]")
    deadline_at = payload.get("deadlineAt")
    if deadline_at is not None and (type(deadline_at) is not int or deadline_at < 0):
        raise RemoteError("protocol", f"{NAME}: deadlineAt must be a non-negative integer (ms)")
    attempt = payload.get("attempt")
    if attempt is not None and (type(attempt) is not int or attempt < 1):
        raise RemoteError("protocol", f"{NAME}: attempt must be a positive integer")
    operation = payload.get("operation")
    if operation is not None and (not isinstance(operation, str) or not operation):
        raise RemoteError("protocol", f"{NAME}: operation must be a non-empty string")
    return account, key, work_ms, deadline_at, attempt, operation


#: ``api_start``'s mark of a call the plan slowed (absent otherwise, so older traces keep their bytes).
_SLOW: Final = {"slow": True}
_RUN_FIELDS: Final = frozenset({"account", "key", "workMs", "deadlineAt", "attempt", "operation"})
