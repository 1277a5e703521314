"""``completed_took_effect``: an operation told completed took effect at the external API.

The other half of ``effect_once``'s promise. Seed 000's handler POSTs the
job and throws unless the response is ok (``JobShard``'s ``run``, lines
99-108), so an attempt that settles ``completed`` had an answer of 200 from
the API: the call it made took effect, or (at an idempotent API) an earlier
call of the same operation did and the API replayed that outcome. A job
told done whose work never happened is lost work no other check sees: the
permit comes back, the row is ``completed``, nothing retries it.

Judged as each ``attempt_settled`` with ``outcome: 'completed'`` is heard,
from the API's own count of effects per operation (the operation its
requests named, whatever their idempotency keys). The API counts an effect
when the call ends, before it answers, so the count is in place by the time
any caller could hear the answer (docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from semaphore_core.durability import AttemptSettled
from semsim.check.checker import Checker, Fail
from semsim.check.events import Operation


class CompletedTookEffect(Checker):
    name = "completed_took_effect"
    description = "an operation told completed took effect at the external API"

    def __init__(self, fail: Fail, effects: Mapping[str, int]) -> None:
        self.fail = fail
        #: How many times each operation (by id) took effect at the API so far (the API's own).
        self._effects = effects

    def on_operation(self, operation: Operation) -> None:
        event = operation.event
        if not isinstance(event, AttemptSettled) or event.outcome != "completed":
            return
        if self._effects.get(event.entity.id, 0) < 1:
            self.fail(
                self.name,
                f"{operation.client}: operation {event.entity.id} was told completed at attempt"
                f" {event.attempt}, but no call of it took effect at the API",
            )
