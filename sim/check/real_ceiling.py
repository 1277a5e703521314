"""``real_ceiling``: in strict and under modes, permits actually in use stay within the limit.

Judged at each admission, the only event that grows what is in use
(docs/INVARIANTS.md). Two behaviours of the reference are documented, not
failed: a lease keeps drawing until its client hears it was retired
(``lease_draw_after_limit_lowered``), and a permit whose claim the holder
accepted before the limit fell is admitted when the late acknowledgement
arrives (``claimed_before_limit_lowered``: claims are never revoked). An
admission on a grant claimed after the limit fell is F3 when the holder's
own accounting also shows the permits (it issued them under the old limit).
"""

from __future__ import annotations

from collections import Counter

from semaphore_core.config import Over
from semsim.check.checker import Checker, Fail, Note
from semsim.check.events import Admission, Commit


class RealCeiling(Checker):
    """Remembers, per grant, each claim the holder accepted and the limit it accepted it under."""

    name = "real_ceiling"
    description = "in strict and under modes, permits actually in use <= limit"

    def __init__(self, fail: Fail, note: Note) -> None:
        self.fail = fail
        self.note = note
        #: Per grant, each accepted claim as (claimed total after it, the limit when it committed).
        self._claims: dict[str, list[tuple[int, int]]] = {}
        #: Per grant, how many items clients admitted through it.
        self._admitted: Counter[str] = Counter()

    def on_commit(self, commit: Commit) -> None:
        for change in commit.changes.grants():
            grant = change.after
            if grant is not None and grant.claimed > (0 if change.before is None else change.before.claimed):
                self._claims.setdefault(change.row_id, []).append((grant.claimed, commit.usage.limit))

    def on_admit(self, admission: Admission) -> None:
        grant, lease = admission.grant, admission.lease
        if grant is not None:
            self._admitted[grant] += 1
        options = admission.leases
        if options is not None and isinstance(options.provisioning, Over):
            return  # over mode may exceed the limit by design
        in_use, limit, key = admission.in_use, admission.limit, admission.key
        if in_use <= limit:
            return
        if lease is not None:
            self.note(self.name, "lease_draw_after_limit_lowered")
            return
        claimed_under = None if grant is None else self._claim_limit(grant)
        if claimed_under is not None and claimed_under > limit:
            self.note(self.name, "claimed_before_limit_lowered")
            return
        finding = "F3" if admission.accounted >= in_use else None
        self.fail(self.name, f"{key}: {in_use} permits in use > limit {limit}", finding, key=key)

    def _claim_limit(self, grant: str) -> int | None:
        """The limit in force when the holder accepted the claim covering the latest admission
        through ``grant`` (None if no accepted claim covers it)."""
        admitted = self._admitted[grant]
        for claimed, limit in self._claims.get(grant, ()):
            if claimed >= admitted:
                return limit
        return None
