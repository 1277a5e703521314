"""What the team promises its API: no permit stays claimable for more than 3 seconds."""

from __future__ import annotations

from semsim.check.checker import Checker, Violated
from semsim.check.events import Commit

#: The API cancels a reservation unused for this long.
CLAIM_WINDOW_MS = 3_000


class ClaimWindow(Checker):
    """Every grant's claim deadline is at most ``CLAIM_WINDOW_MS`` after it was issued."""

    name = "claim_window"
    description = f"every grant must be claimed within {CLAIM_WINDOW_MS} ms of being issued"

    def on_commit(self, commit: Commit) -> None:
        for grant in commit.holder.grants():
            window_ms = grant.expires_at - grant.created_at
            if window_ms > CLAIM_WINDOW_MS:
                raise Violated(f"{grant.grant_id} may be claimed for {window_ms} ms")
