"""``released_when_done``: a client gives an item's permit back only once its job is done.

Seed 000's ``JobShard`` returns a permit "when the operation reaches a
terminal state" (the class comment, lines 88-92): through the lifecycle
hook, or, if that is lost, the queue's ``finished`` check, which returns the
ids whose job is no longer pending (lines 131-137). A permit is an
accounting contract, not a way to stop work: a permit given back while the
job still runs lets the holder hand the same capacity out again while the
work it counted goes on, so the account's real concurrency passes what the
holder accounts, and no check that counts permits (``conservative``,
``real_ceiling``: both count admissions and releases) can see it.

Judged as each release is heard, against the job service's own record of
the jobs running (:class:`semsim.world.jobs.Jobs`, the ground truth of the
worlds whose items run as jobs). In the account-concurrency world items run
as durable operations calling the external API instead, and the job
service runs nothing: there the API's own checks judge the calls
(``external_ceiling``; a call that outlives its attempt is F5's, documented)
(docs/INVARIANTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from semsim.check.checker import Checker, Fail
from semsim.check.events import Release
from semsim.world.jobs import Job


class ReleasedWhenDone(Checker):
    name = "released_when_done"
    description = "a client gives an item's permit back only once its job is done"

    def __init__(self, fail: Fail, running: Mapping[str, Job]) -> None:
        self.fail = fail
        #: The jobs running at the job service now, by item (the service's own).
        self._running = running

    def on_release(self, release: Release) -> None:
        job = self._running.get(release.item)
        if job is not None:
            self.fail(
                self.name,
                f"{release.client}: released {release.item}'s permit of {release.key} at"
                f" {release.t_ms} while its job runs at the job service until {job.ends_at}",
            )
