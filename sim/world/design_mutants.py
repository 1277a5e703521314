"""Planted bugs in the other two designs' cores: the gate's ledger and the leased workers' store.

semsim compares three designs under the same faults, so each design's
judges (:mod:`semsim.check.design_promises`) need the evidence the
semaphore's have: bugs a developer could plausibly write, planted for the
duration of a run, that the judges must catch. These follow the catalog's
rules (:mod:`semsim.world.mutant_catalog`): a wrapper around the real code
where one can reach the mistake, a small method replaced outright where the
mistake sits inside its body (``LeaseStore.write``, 20 lines), every target
checked to exist, every binding put back. Each names the design it runs on
(:attr:`Mutant.design`), so ``semsim fuzz --design gate --variant
mutant/NAME`` runs it and a semaphore campaign refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from semaphore_core.gate import ConcurrencySlots
from semaphore_core.leased.store import FINAL, Lease, LeaseStore, Status
from semsim.world.mutant_catalog import Mutant, patcher

Release = Callable[[ConcurrencySlots, str, int], bool]
Init = Callable[..., None]
Claim = Callable[..., list[Any]]
Write = Callable[..., bool]


def _release_frees_oldest(original: Release) -> Release:
    def release(self: ConcurrencySlots, token: str, now_ms: int) -> bool:
        if original(self, token, now_ms):
            return True
        # MUTATION: a release whose token is not held (its slot was healed as stale, or the
        # release came twice) frees the oldest held slot instead of nothing: "a release frees a
        # slot" read positionally, so a late release takes a running call's slot.
        slots = self.slots()
        return bool(slots) and original(self, slots[0].token, now_ms)

    return release


def _stale_ms_in_seconds(original: Init) -> Init:
    def __init__(self: ConcurrencySlots, new_token: Callable[[], str], **options: Any) -> None:
        if "stale_ms" in options:
            # MUTATION: the staleness setting read as seconds where it is milliseconds and
            # converted again (120_000 ms becomes 120 ms): slots of running calls heal at once.
            options["stale_ms"] = max(1, options["stale_ms"] // 1000)
        original(self, new_token, **options)

    return __init__


def _limit_off_by_one(original: Claim) -> Claim:
    def claim(
        self: LeaseStore,
        lease: Lease,
        limit: int,
        workflows: Sequence[str],
        limits: Mapping[str, int] | None = None,
        rate_limits: Sequence[Any] = (),
    ) -> list[Any]:
        # MUTATION: a workflow's limit read as the last index allowed (``live <= cap``): each
        # workflow may hold one lease more than its limit.
        widened = None if limits is None else {workflow: cap + 1 for workflow, cap in limits.items()}
        return original(self, lease, limit, workflows, widened, rate_limits)

    return claim


def _write_after_expiry(original: Write) -> Write:
    def write(
        self: LeaseStore,
        id: str,
        token: str,
        status: Status,
        now_ms: int,
        *,
        release: bool = False,
        wake_at_ms: int | None = None,
    ) -> bool:
        if status in FINAL and not release:
            raise ValueError(f"a write that ends the execution ({status}) must release its lease")
        # MUTATION: the fence checks the token only, not that the lease is still live: a worker
        # whose lease ran out (nobody has claimed the instance again yet) still writes, and its
        # late "completed" lands although another worker may be about to run it.
        fence = " WHERE id = ? AND lease_token = ?"
        if release:
            sql = (
                "UPDATE workflow_instances SET status = ?, wake_at = ?,"
                " lease_owner = NULL, lease_token = NULL, lease_until = NULL" + fence
            )
            due = None if status in FINAL else (now_ms if wake_at_ms is None else wake_at_ms)
            args: tuple[object, ...] = (status, due, id, token)
        else:
            sql = "UPDATE workflow_instances SET status = ?" + fence
            args = (status, id, token)
        return self.conn.execute(sql, args).rowcount == 1

    del original  # replaced outright: the mistake sits inside the body
    return write


#: The designs' planted bugs, the gate's first.
DESIGN_MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "gate-release-frees-oldest",
        "a gate release whose token is not held frees the oldest held slot instead of nothing",
        patcher((ConcurrencySlots, "release", _release_frees_oldest)),
        design="gate",
    ),
    Mutant(
        "gate-stale-ms-in-seconds",
        "the gate ledger reads stale_ms as seconds and converts again, so running calls' slots heal at once",
        patcher((ConcurrencySlots, "__init__", _stale_ms_in_seconds)),
        design="gate",
    ),
    Mutant(
        "leased-limit-off-by-one",
        "a claim lets each workflow hold one lease more than its limit",
        patcher((LeaseStore, "claim", _limit_off_by_one)),
        design="leased-worker",
    ),
    Mutant(
        "leased-write-after-expiry",
        "a fenced write checks the lease token but not that the lease is still live",
        patcher((LeaseStore, "write", _write_after_expiry)),
        design="leased-worker",
    ),
)
