"""``external_ceiling``: calls in flight at the external API stay within the account's limit.

The ground truth of what the semaphore protects (docs/INVARIANTS.md),
judged as each call starts. Calls above the limit that the semaphore's own
accounting explains (as many permits in use, which ``real_ceiling`` judges,
documented exceptions and all) are left to it; calls beyond both are this
invariant's. Over provisioning may exceed the limit by design, so it is not
judged. F5 when a call still runs for an operation whose attempt is over: a
later attempt started, or its item no longer holds a permit (a zombie: seed
002's attempt timeout, or an eviction, ended the attempt, not the call).
Two calls of one running attempt (a handler that called twice) are not F5:
nothing ended an attempt.
"""

from __future__ import annotations

from semaphore_core.config import Over
from semaphore_core.durability import AttemptStarted
from semsim.check.checker import Checker, Fail
from semsim.check.events import ApiCallChange, Operation, RunningCall


class ExternalCeiling(Checker):
    """Remembers each operation's latest attempt, to tell a zombie's call from a live one."""

    name = "external_ceiling"
    description = "calls in flight at the external API stay within the account's limit"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail
        #: Per operation id: when its latest attempt started, and its number.
        self._attempt_started_at: dict[str, int] = {}
        self._latest_attempt: dict[str, int] = {}

    def on_operation(self, operation: Operation) -> None:
        event = operation.event
        if isinstance(event, AttemptStarted):
            self._attempt_started_at[event.entity.id] = event.timestamp
            self._latest_attempt[event.entity.id] = event.attempt

    def on_api(self, call: ApiCallChange) -> None:
        if call.change != "start" or call.limit is None:
            return
        if call.leases is not None and isinstance(call.leases.provisioning, Over):
            return
        if call.in_flight <= call.limit or call.in_flight <= call.in_use:
            return
        zombies = sorted(
            {running.operation for running in call.running if not running.holds_permit or self._over(running)}
        )
        self.fail(
            self.name,
            f"{call.account}: {call.in_flight} calls in flight at the external API > limit {call.limit} "
            f"({call.in_use} permits in use; calls of finished attempts: {', '.join(zombies) or 'none'})",
            "F5" if zombies else None,
            key=call.account,
        )

    def _over(self, call: RunningCall) -> bool:
        """Whether the attempt that made ``call`` is over: a later attempt of its operation started.

        The request names its attempt, so a request the network held back until after the
        next attempt started still counts as the earlier attempt's. Without that name, the
        call reached the API before the operation's latest attempt started."""
        if call.attempt is not None:
            return call.attempt < self._latest_attempt.get(call.operation, call.attempt)
        return call.started_at_ms < self._attempt_started_at.get(call.operation, call.started_at_ms)
