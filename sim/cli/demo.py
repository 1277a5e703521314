"""A scripted allocation story on the pure core, with a manual clock.

Until the simulator (``sim``'s runtime) lands, this is the quick start's main
job: one holder, two clients, a lost reply, the alarm's reclaim, and a
lowered limit, each step checked against what the reference promises. It
prints a timeline and can plot usage over time.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from semaphore_core import Holder, HolderConfig, LeaseOptions, Strict, Usage

SECOND_MS = 1_000


@attrs.frozen
class Moment:
    t_ms: int
    what: str
    usage: Usage


@attrs.define
class DemoResult:
    moments: list[Moment]
    failures: list[str]
    limits: list[tuple[int, int]]


def run_demo() -> DemoResult:
    """Run the story; ``failures`` lists every expectation that did not hold."""
    limit = {"value": 8}
    counter = itertools.count(1)
    holder = Holder(
        sqlite3.connect(":memory:"),
        HolderConfig(
            limit=lambda: limit["value"],
            grant_timeout_ms=5 * SECOND_MS,
            leases=LeaseOptions(provisioning=Strict(), permits_per_lease=3, ttl_ms=60 * SECOND_MS),
        ),
        new_id=lambda: f"id-{next(counter)}",
    )
    moments: list[Moment] = []
    failures: list[str] = []
    limits: list[tuple[int, int]] = [(0, limit["value"])]

    def note(t_ms: int, what: str) -> None:
        moments.append(Moment(t_ms, what, holder.usage(t_ms)))

    def expect(ok: bool, claim: str) -> None:
        if not ok:
            failures.append(claim)

    def ask(
        t_ms: int, client: str, count: int, reports: list[dict[str, int | str]], leases: Any = None
    ) -> Any:
        message: dict[str, Any] = {
            "type": "request",
            "v": 1,
            "clientId": client,
            "demand": [{"group": "jobs", "count": count, "oldestAt": 0}],
            "grants": reports,
        }
        if leases is not None:
            message["leases"] = leases
        return holder.run_round([message], t_ms)[0]

    def report(t_ms: int, client: str, grant_id: str, claimed: int, released: int) -> None:
        holder.sync(
            {
                "type": "sync",
                "v": 1,
                "clientId": client,
                "grants": [{"grantId": grant_id, "claimed": claimed, "released": released}],
            },
            t_ms,
        )

    # 0 s: the api client asks for 4; the round commits, but the reply is lost.
    lost = ask(0, "api", 4, [])
    note(0, "api asks for 4: granted, reply lost (permits reserved, unclaimed)")
    expect(holder.usage(0).granted == 4, "a lost reply still reserves its permits")

    # 1 s: api asks again and gets a new grant; it claims it at once.
    again = ask(1 * SECOND_MS, "api", 4, [])
    grant = again["grants"][0]["grantId"]
    report(1 * SECOND_MS, "api", grant, 4, 0)
    note(1 * SECOND_MS, "api asks again: a new grant of 4, claimed")
    expect(
        again["grants"][0]["grantId"] != lost["grants"][0]["grantId"], "a retried request gets a new grant"
    )

    # 2 s: batch (lease-capable) is blocked: the lost grant still holds 4.
    blocked = ask(2 * SECOND_MS, "batch", 3, [], leases=[])
    note(2 * SECOND_MS, "batch asks for 3: blocked by the limit (lost grant still counted)")
    expect(
        blocked["grants"] == [] and blocked.get("contended") is True, "batch waits while the lost grant holds"
    )

    # 5 s: the claim deadline passes; the alarm reclaims the 4 unclaimed permits.
    at = holder.next_alarm_at()
    expect(at == 5 * SECOND_MS, "the alarm follows the lost grant's claim deadline")
    reclaimed = holder.reclaim_expired(at or 0)
    note(5 * SECOND_MS, "the alarm reclaims the lost grant's 4 permits")
    expect([e.permits for e in reclaimed] == [4], "the alarm returns exactly the unclaimed permits")

    # 6 s: batch asks again: a grant of 3 and a lease of the last permit.
    served = ask(6 * SECOND_MS, "batch", 3, [], leases=[])
    batch_grant = served["grants"][0]["grantId"]
    report(6 * SECOND_MS, "batch", batch_grant, 3, 0)
    note(6 * SECOND_MS, "batch asks again: granted 3 (claimed), leased the remaining 1")
    expect([g["permits"] for g in served["grants"]] == [3], "reclaimed permits serve the next round")
    expect([lease["permits"] for lease in served["leases"]] == [1], "leases take what grants left")

    # 8 s: the operator lowers the limit to 4: nothing running is evicted.
    limit["value"] = 4
    limits.append((8 * SECOND_MS, 4))
    refused = ask(8 * SECOND_MS, "api", 2, [{"grantId": grant, "claimed": 4, "released": 0}])
    note(8 * SECOND_MS, "limit lowered to 4: running work stays, api's new demand waits")
    expect(
        holder.usage(8 * SECOND_MS).granted == 7 and refused["grants"] == [], "a lowered limit never evicts"
    )

    # 10 s: api finishes its 4; usage is exactly the new limit, so api still waits.
    waiting = ask(10 * SECOND_MS, "api", 2, [{"grantId": grant, "claimed": 4, "released": 4}])
    note(10 * SECOND_MS, "api releases its 4: usage 3 + 1 is exactly the new limit, api waits")
    expect(waiting["grants"] == [], "at the lowered limit nothing more is admitted")

    # 12 s: batch finishes 2 of its 3; usage falls below the limit and api is admitted.
    batch_grant = served["grants"][0]["grantId"]
    report(12 * SECOND_MS, "batch", batch_grant, 3, 2)
    resumed = ask(12 * SECOND_MS, "api", 2, [])
    note(12 * SECOND_MS, "batch releases 2: below the limit again, api is admitted 2")
    expect([g["permits"] for g in resumed["grants"]] == [2], "admissions resume below the lowered limit")
    return DemoResult(moments=moments, failures=failures, limits=limits)


def print_timeline(result: DemoResult, write: Callable[[str], None] = print) -> None:
    write(f"{'time':>6}  {'granted':>7}  {'leased':>6}  {'limit':>5}  what happened")
    for moment in result.moments:
        u = moment.usage
        write(f"{moment.t_ms / 1000:>5.0f}s  {u.granted:>7}  {u.leased:>6}  {u.limit:>5}  {moment.what}")


def plot(result: DemoResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from semsim.report.plot import save_figure

    # Hold the last state for a second so the final step has width.
    times = [m.t_ms / 1000 for m in result.moments] + [result.moments[-1].t_ms / 1000 + 1]
    granted = [m.usage.granted for m in result.moments] + [result.moments[-1].usage.granted]
    leased = [m.usage.leased for m in result.moments] + [result.moments[-1].usage.leased]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.stackplot(
        times, granted, leased, labels=["granted permits", "lease footprint"], step="post", alpha=0.7
    )
    limit_t = [t / 1000 for t, _ in result.limits] + [times[-1]]
    limit_v = [v for _, v in result.limits] + [result.limits[-1][1]]
    ax.step(limit_t, limit_v, where="post", color="black", linewidth=2, label="limit")
    for moment in result.moments:
        ax.axvline(moment.t_ms / 1000, color="grey", linewidth=0.5, linestyle=":")
    ax.annotate("reply lost", (0, 4), xytext=(0.3, 9), arrowprops={"arrowstyle": "->"})
    ax.annotate("alarm reclaims", (5, 4), xytext=(3.2, 10), arrowprops={"arrowstyle": "->"})
    ax.annotate("limit lowered", (8, 4), xytext=(8.6, 9.5), arrowprops={"arrowstyle": "->"})
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("permits")
    ax.set_ylim(0, 11)
    ax.set_title("semsim demo: one holder, a lost reply, the alarm, a lowered limit")
    ax.legend(loc="lower left", framealpha=0.95)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
