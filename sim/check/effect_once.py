"""``effect_once``: at an idempotent external API, each operation takes effect at most once.

Judged as each call ends at the API, from the API's own count of effects
per idempotency key, and per operation as the requests named it (a tracing
header apart from the key): an operation that took effect under two keys
breaks it too (docs/INVARIANTS.md).
"""

from __future__ import annotations

from semsim.check.checker import Checker, Fail
from semsim.check.events import ApiCallChange


class EffectOnce(Checker):
    name = "effect_once"
    description = "at an idempotent API, each operation takes effect at most once"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_api(self, call: ApiCallChange) -> None:
        if call.change != "end" or not call.idempotent:
            return
        if call.effects > 1:
            self.fail(
                self.name,
                f"operation {call.operation} took effect {call.effects} times at an idempotent API",
            )
        if call.operation_effects > 1:
            self.fail(
                self.name,
                f"the operation of call key {call.operation} took effect {call.operation_effects} times"
                " at an idempotent API, under more than one idempotency key",
            )
