"""What each design trades, measured against one ground truth: the external API (issue 26).

Every design's runs are measured the same way, from what the external API
saw (:mod:`semsim.world.external_api`), what the workload submitted, and
how much capacity the design counts as taken (``held``, read from its own
state: the semaphore's holder rows, the gate's ledger, the store's live
leases). The figures, per run (:class:`TradeOffs`):

- ``peak_over_admission``: the most calls in flight at once above the cap,
  for any account; ``over_cap_permit_s``: the integral, over time and
  accounts, of the calls in flight above the cap (permit-seconds);
- ``duplicate_executions``: requests to run an item's work that reached the
  API while a call of the same item was running or after one had taken
  effect: the design ran the work again (an idempotent API refuses or
  replays such a request, and it still counts; a retry after a clean
  failure does not); ``double_effects``: effects beyond the first per item
  (only an API that does not deduplicate has any);
- ``leaked_cap_s``: cap-seconds counted as taken by no running work, the
  integral of ``min(held, cap) - in_flight`` where positive, per account,
  sampled every ``SAMPLE_MS``;
- ``recovery_ms``: from the moment the faults stopped until their damage
  was last seen: a call over the cap (exactly, from the API's changes), or,
  at a sample, capacity held for work that no longer exists (``orphaned``,
  the design's own count of such units: a gate slot whose caller died or
  lost its release, a live lease no live execution holds, a lease the
  semaphore granted that no client knows), seen at two samples running.
  A design's steady costs (a permit counted until the next round's report,
  a lease between a call's end and its write) are not orphans. 0 if no
  damage was seen after the faults stopped; None if it was still there at
  the run's end;
- ``completed`` (items that took effect), ``throughput_per_min`` (those, per
  simulated minute until the last of them took effect) and the queue wait from an item's first
  submission to its first call at the API, ``p50`` and ``p99``
  (nearest-rank), over the items that reached the API.

The meter only watches: it reads, writes nothing, records no event while
the run goes and starts no task (its samples are timer entries without side
effects), so a metered run is the same run as an unmetered one, event for
event, up to the one ``trade_offs`` event it adds at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from semsim.runtime.kernel import Sim
from semsim.world.external_api import ApiCall, Change, ExternalApi

#: How often leaked capacity and recovery are sampled (virtual time).
SAMPLE_MS: Final = 1_000


@attrs.frozen
class TradeOffs:
    """One run's figures (see the module docstring)."""

    design: str
    cap: int
    items: int
    completed: int
    peak_over_admission: int
    over_cap_permit_s: float
    duplicate_executions: int
    double_effects: int
    leaked_cap_s: float
    recovery_ms: int | None
    throughput_per_min: float
    queue_wait_p50_ms: int | None
    queue_wait_p99_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def nearest_rank(values: Sequence[int], fraction: float) -> int | None:
    """The nearest-rank percentile of ``values`` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class TradeOffMeter:
    """Watches one run's API, submissions and held capacity; :meth:`finish` gives the figures."""

    def __init__(
        self,
        sim: Sim,
        api: ExternalApi,
        design: str,
        cap: int,
        held: Callable[[int], Mapping[str, int]],
        quiet_from_ms: int,
        orphaned: Callable[[int], int] = lambda now_ms: 0,
    ) -> None:
        self._sim = sim
        self._api = api
        self._design = design
        self._cap = cap
        self._held = held
        self._orphaned = orphaned
        #: When each item was first submitted.
        self._submitted_at: dict[str, int] = {}
        #: When each item's first call reached the API.
        self._first_call_at: dict[str, int] = {}
        self._running_by_key: dict[str, int] = {}
        self._effect_taken: set[str] = set()
        self._duplicates = 0
        self._peak_over = 0
        self._over_permit_ms = 0
        self._last_change_ms = 0
        self._leaked_cap_ms = 0
        #: When the faults stop, and the last moment from then on their damage was seen.
        self._quiet_from_ms = quiet_from_ms
        self._damaged_at: int | None = None
        self._orphans_before = False
        self._last_effect_ms = 0
        self._last_sample_ms = 0
        api.watch(self._api_changed)
        api.watch_requests(self._requested)
        sim.call_at(SAMPLE_MS, self._sample)

    def submitted(self, items: Sequence[Mapping[str, Any]]) -> None:
        """The workload is about to send ``items`` (a retried submission keeps the first time)."""
        now = self._sim.now()
        for item in items:
            self._submitted_at.setdefault(item["id"], now)

    @property
    def submitted_count(self) -> int:
        """How many distinct items the workload has sent so far."""
        return len(self._submitted_at)

    def _requested(self, account: str, key: str) -> None:
        if self._running_by_key.get(key, 0) or key in self._effect_taken:
            self._duplicates += 1

    def _over_now(self) -> int:
        return sum(max(0, count - self._cap) for count in self._api.in_flight.values())

    def _api_changed(self, change: Change, call: ApiCall) -> None:
        now = self._sim.now()
        # The calls above the cap until now: as they were before this change (the API counts it).
        after = self._api.in_flight.get(call.account, 0)
        before = after - 1 if change == "start" else after + 1
        over_before = self._over_now() - max(0, after - self._cap) + max(0, before - self._cap)
        self._over_permit_ms += over_before * (now - self._last_change_ms)
        self._last_change_ms = now
        if (over_before or self._over_now()) and now >= self._quiet_from_ms:
            self._damaged_at = now
        key = call.key
        if change == "start":
            self._first_call_at.setdefault(key, now)
            self._running_by_key[key] = self._running_by_key.get(key, 0) + 1
            self._peak_over = max(self._peak_over, self._api.in_flight.get(call.account, 0) - self._cap)
        else:
            left = self._running_by_key[key] - 1
            if left:
                self._running_by_key[key] = left
            else:
                del self._running_by_key[key]
            if call.outcome not in ("error", "deadline"):
                self._effect_taken.add(key)
                self._last_effect_ms = now

    def _sample(self) -> None:
        now = self._sim.now()
        in_flight = self._api.in_flight
        leaked = 0
        for account, held in self._held(now).items():
            leaked += max(0, min(held, self._cap) - in_flight.get(account, 0))
        self._leaked_cap_ms += leaked * (now - self._last_sample_ms)
        self._last_sample_ms = now
        # Orphans matter from the quiet point (and the sample before it, which the first sample
        # after it is paired with): reading them earlier, every second, is work for nothing.
        if now + SAMPLE_MS >= self._quiet_from_ms:
            orphans = self._orphaned(now) > 0
            if orphans and self._orphans_before and now >= self._quiet_from_ms:
                self._damaged_at = now
            self._orphans_before = orphans
        self._sim.call_at(now + SAMPLE_MS, self._sample)

    def finish(self) -> TradeOffs:
        """The figures at the run's end, recorded in the trace as a ``trade_offs`` event."""
        now = self._sim.now()
        self._over_permit_ms += self._over_now() * (now - self._last_change_ms)
        self._last_change_ms = now
        recovery: int | None = 0
        if self._over_now() or (self._orphans_before and self._orphaned(now) > 0):
            recovery = None  # still there as the run ends
        elif self._damaged_at is not None:
            recovery = self._damaged_at - self._quiet_from_ms
        waits = [
            at - self._submitted_at[key]
            for key, at in self._first_call_at.items()
            if key in self._submitted_at
        ]
        completed = sum(1 for key in self._submitted_at if self._api.effects.get(key, 0))
        figures = TradeOffs(
            design=self._design,
            cap=self._cap,
            items=len(self._submitted_at),
            completed=completed,
            peak_over_admission=max(0, self._peak_over),
            over_cap_permit_s=self._over_permit_ms / 1_000,
            duplicate_executions=self._duplicates,
            double_effects=sum(max(0, count - 1) for count in self._api.effects.values()),
            leaked_cap_s=self._leaked_cap_ms / 1_000,
            recovery_ms=recovery,
            throughput_per_min=(
                round(completed * 60_000 / self._last_effect_ms, 3) if self._last_effect_ms else 0.0
            ),
            queue_wait_p50_ms=nearest_rank(waits, 0.5),
            queue_wait_p99_ms=nearest_rank(waits, 0.99),
        )
        self._sim.event("trade_offs", **figures.to_dict())
        return figures
