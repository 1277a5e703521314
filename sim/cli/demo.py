"""A scripted allocation story on the pure core, with a manual clock.

Until the simulator (``sim``'s runtime) lands, this is the quick start's main
job: one holder, two clients, a lost reply, the alarm's reclaim, and a
lowered limit, each step checked against what the reference promises. It
prints a timeline and can plot usage over time.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from semaphore_core import Holder, HolderConfig, LeaseOptions, Strict, Usage

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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


def plot(result: DemoResult, path: Path) -> Figure:
    """The story's usage in ``semsim run --plot``'s style: the holder's charged permits against
    the limit, and a strip of what happened (the lost reply, the alarm's reclaim, the lowered
    limit). The core alone has no clients, so there is no in-use line and no demand panel."""
    from semsim.report.plot import KeySeries, Mark, PlotData, figure, save_figure

    end_ms = result.moments[-1].t_ms + SECOND_MS  # the last state, held a second
    marks = []
    for moment in result.moments:
        if "reply lost" in moment.what:
            marks.append(Mark(moment.t_ms, "reply lost", moment.what))
        if "reclaims" in moment.what:
            marks.append(Mark(moment.t_ms, "permits reclaimed", moment.what))
        if "limit lowered" in moment.what:
            marks.append(Mark(moment.t_ms, "limit changed", moment.what))
    key = KeySeries(
        key="demo",
        limit=tuple(result.limits),
        ceiling=None,
        grant_pool=None,
        granted=_steps((m.t_ms, m.usage.granted) for m in result.moments),
        leased=_steps((m.t_ms, m.usage.leased) for m in result.moments),
        in_use=((0, 0),),
        waiting=((0, 0),),
        groups=(),
        marks=tuple(marks),
        clients_known=False,
    )
    data = PlotData(seed="demo", end_ms=end_ms, mode="strict", keys=(key,), bands=())
    fig = figure(
        data,
        heading="semsim demo: one holder, a lost reply, the alarm, a lowered limit   "
        "(strict leases: grants and leases share the limit)",
        explanation="Stacked areas: permits the holder has charged (committed rows), step by step "
        "through the story `semsim demo` prints. They stay under the limit; running work stays "
        "charged when the limit is lowered.",
    )
    save_figure(fig, path, dpi=fig.dpi)
    return fig


def _steps(points: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """A step series from the story's moments (a value noted twice at one time keeps the last)."""
    steps: dict[int, int] = {0: 0}
    for t_ms, value in points:
        steps[t_ms] = value
    return tuple(sorted(steps.items()))
