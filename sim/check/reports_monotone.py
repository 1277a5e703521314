"""``reports_monotone``: a grant's claimed and released, and a lease's released and retired, only
move forward, within the permits issued; and, for ``reclaimed``, no claim after the deadline.

Judged on the rows each holder commit changed (:class:`~semsim.check.events.RowChanges`):
reports arrive late, twice or forged, and the holder must clamp them, never rewind a row
(docs/INVARIANTS.md). The same row change shows a claim accepted after its grant's claim
deadline, which keeps unclaimed permits from coming back: that is ``reclaimed``'s, judged
here in the same pass so the first broken promise of a commit is reported first, whichever
of the two it is.
"""

from __future__ import annotations

from typing import Any

import attrs

from semsim.check.checker import Checker, Fail
from semsim.check.events import Commit

#: A row's stored columns (a lease row's ``seq`` is its rowid, not a column): what a detail shows.
_COLUMNS = 8


def _stored(row: Any) -> tuple[Any, ...]:
    return attrs.astuple(row, recurse=False)[:_COLUMNS]


class ReportsMonotone(Checker):
    name = "reports_monotone"
    description = "claimed, drawn and released only move forward"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_commit(self, commit: Commit) -> None:
        key = commit.key
        for change in commit.changes.grants():
            grant, before = change.after, change.before
            if grant is None:
                continue
            if not grant.released <= grant.claimed <= grant.permits:
                self.fail(
                    self.name,
                    f"{key}: grant {change.row_id} has released <= claimed <= permits broken: "
                    f"{_stored(grant)}",
                )
            if before is None:
                continue
            if (
                grant.claimed < before.claimed
                or grant.released < before.released
                or grant.permits > before.permits
            ):
                self.fail(
                    self.name,
                    f"{key}: grant {change.row_id} moved back: {_stored(before)} -> {_stored(grant)}",
                )
            if grant.claimed > before.claimed and commit.t_ms >= grant.expires_at:
                # Permits unclaimed at the deadline are the alarm's to take back: a claim
                # accepted after it keeps them from coming back.
                self.fail(
                    "reclaimed",
                    f"{key}: grant {change.row_id} claimed {before.claimed} -> {grant.claimed} "
                    f"after its deadline {grant.expires_at}",
                )
        for lease_change in commit.changes.leases():
            lease, old = lease_change.after, lease_change.before
            if lease is None:
                continue
            if lease.released > lease.permits:
                self.fail(
                    self.name,
                    f"{key}: lease {lease_change.row_id} released {lease.released} > permits {lease.permits}",
                )
            if old is not None and (
                lease.released < old.released or lease.permits > old.permits or lease.retired < old.retired
            ):
                self.fail(
                    self.name,
                    f"{key}: lease {lease_change.row_id} moved back: {_stored(old)} -> {_stored(lease)}",
                )
