"""``caps_live``: a group cap the operator sets is the cap the holder reads from then on.

Seed 000's ``AccountLimit.limitWorkflow`` (lines 68-71) sets the workflow's
cap in the holder's map ("Takes effect at the next round"), and its
``groupLimit`` callback reads that map (line 55); the docs say limits are
live (seed 001, line 90). A port whose admin method keeps the first cap it
was given (``setdefault`` for ``Map.set``), or writes it elsewhere, leaves
the holder judging a group by a cap the operator has replaced: a lowered
cap not enforced, a raised one not given. The checks of a round read the
holder's own map (``group_ceiling`` among them), so they agree with it.

Judged as the operator acts (the world's ``group_limit`` fault, which calls
the holder object's ``limit_workflow``): afterwards the holder's map must
hold the operator's cap for the group (or none, for a cap lifted: semsim's
own action, which the reference does not have) (docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from semsim.check.checker import Checker, Fail


class CapsLive(Checker):
    name = "caps_live"
    description = "a group cap the operator sets is the cap the holder reads from then on"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_cap(self, t_ms: int, key: str, group: str, limit: int | None, caps: Mapping[str, int]) -> None:
        """The operator set ``group``'s cap on ``key`` to ``limit`` (None: lifted); ``caps`` is the
        holder's map as it stands after the call."""
        if caps.get(group) != limit:
            self.fail(
                self.name,
                f"{key}: the operator set {group}'s cap to {limit} at {t_ms}, and the holder reads"
                f" {caps.get(group)}",
            )
