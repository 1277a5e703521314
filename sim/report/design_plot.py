"""Plots of a gate or leased-worker run: the capacity the design counts as taken, against the API.

The semaphore's plot (:mod:`semsim.report.plot`) draws a holder's accounting;
the other two designs have none, so a trace of theirs is drawn here instead
(``semsim run --plot`` and ``semsim plot`` pick this module from the
header's ``config.design.name``). What a reader wants from such a run is
its trade-offs (docs/DESIGNS.md): calls over the cap, capacity counted as
taken while no call runs, work run twice, so each account's panel puts the
design's own count beside the external API's calls in flight, the ground
truth every design is judged by, and shades the two gaps between them.

``design_series(header, events)`` is pure, so tests can check the numbers,
and ``design_figure`` draws them. The series, per account:

- **counted as taken** (``held``): what the trade-off meter counts
  (:mod:`semsim.check.trade_offs`), so that the hatched leak reads as the
  header's ``leaked_cap_s``. For the gate, the slots of ``gate:ACCOUNT``
  that hold capacity back: each from the ``gate_acquire`` that issued its
  token until its ``gate_release``, or until it goes stale
  (``now - acquired_at > stale_ms``, the header's
  ``config.design.gate.stale_ms``), whichever comes first; none once that
  object is evicted (its successor's ledger starts empty, seed 003). A
  stale slot stays in the ledger's ``in_flight`` until the next acquire
  heals it, but it is free to that acquire, so neither the meter nor the
  plot counts it. For the leased worker, the account's instances under a live lease:
  a ``lease_claim`` leases its ``ids`` until ``until``, an ``ok`` renewal
  moves that to its ``until``, an ``ok`` write or hand-back ends it, and a
  lease nobody renewed ends at its ``until`` (the store's rule: live while
  ``until > now``). An instance's account is the ``key`` its item was
  submitted with.
- **calls at the API**: the external API's ``in_flight`` from its
  ``api_start`` and ``api_end`` events, as in the semaphore's plot.

The strip below marks what happened: the faults (evictions, shutdowns,
pauses, lost messages; partitions are shaded), what the design did about
them (sheds, fail-opens, healed slots, lost leases, fenced writes), work
that reached the API again (``duplicate run``: a call of an item that was
running or had taken effect, the meter's rule), tolerated findings and
violations. The header line ends with the run's trade-off figures (the
``trade_offs`` event).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from semaphore_core.gate import STALE_MS
from semsim.report.steps import (
    VIOLATION_MARGIN,
    Mark,
    PlotError,
    Steps,
    stacked_axes,
    step_xy,
    value_at,
    write_header,
)

if TYPE_CHECKING:  # matplotlib is slow to import: only when drawing
    from matplotlib.figure import Figure

#: The designs this module draws (the semaphore's runs go to :mod:`semsim.report.plot`).
DESIGNS: Final = ("gate", "leased-worker")


@attrs.frozen
class AccountSeries:
    """One account's panel: the design's count and the API's, as step series."""

    account: str
    held: Steps
    api_calls: Steps


@attrs.frozen
class DesignPlotData:
    design: str
    seed: Any
    end_ms: int
    cap: int
    accounts: tuple[AccountSeries, ...]
    #: One strip for the whole run: a worker or caller serves every account.
    marks: tuple[Mark, ...]
    #: Partitions, ``(start_ms, end_ms, target)``: shaded across every panel.
    partitions: tuple[tuple[int, int, str], ...]
    #: The run's ``trade_offs`` event, without its ``t`` and ``kind`` (None: the run stopped first).
    trade_offs: Mapping[str, Any] | None


def design_of(header: Mapping[str, Any]) -> str:
    """The design a trace's header names (``semaphore`` when it names none, as older traces)."""
    config = header.get("config")
    design = config.get("design") if isinstance(config, Mapping) else None
    name = design.get("name") if isinstance(design, Mapping) else None
    return name if isinstance(name, str) else "semaphore"


class _Step:
    def __init__(self) -> None:
        self.points: list[tuple[int, int]] = [(0, 0)]

    def set(self, t_ms: int, value: int) -> None:
        """Several changes at one instant keep the last; a value equal to the one before adds none."""
        if self.points[-1][0] == t_ms and len(self.points) > 1:
            self.points.pop()
        if self.points[-1][0] == t_ms:
            self.points[-1] = (t_ms, value)
        elif self.points[-1][1] != value:
            self.points.append((t_ms, value))

    def steps(self) -> Steps:
        return tuple(self.points)


class _Leases:
    """The store's live leases, per instance, expiring at their ``until`` as the store's rule does."""

    def __init__(self) -> None:
        self.until: dict[str, tuple[str, int]] = {}
        self._expiries: list[tuple[int, str, str]] = []

    def lease(self, id: str, token: str, until_ms: int) -> None:
        self.until[id] = (token, until_ms)
        heapq.heappush(self._expiries, (until_ms, id, token))

    def end(self, id: str) -> None:
        self.until.pop(id, None)

    def expire(self, upto_ms: int) -> list[tuple[int, str]]:
        """End every lease whose ``until`` is at or before ``upto_ms``: ``(when, id)`` of each."""
        ended = []
        while self._expiries and self._expiries[0][0] <= upto_ms:
            until_ms, id, token = heapq.heappop(self._expiries)
            if self.until.get(id) == (token, until_ms):
                del self.until[id]
                ended.append((until_ms, id))
        return ended


class _Slots:
    """Each gate's slots that hold capacity back, as the meter counts them: from their acquire
    until their release or until they go stale, whichever comes first."""

    def __init__(self, stale_ms: int) -> None:
        self.stale_ms = stale_ms
        #: Per account, each counted slot's token and when it was acquired.
        self.acquired: dict[str, dict[str, int]] = {}
        #: ``(first ms it is stale, account, token)``.
        self._stale_at: list[tuple[int, str, str]] = []

    def acquire(self, account: str, token: str, t_ms: int) -> None:
        self.acquired.setdefault(account, {})[token] = t_ms
        # The ledger's rule: stale once now - acquired_at > stale_ms.
        heapq.heappush(self._stale_at, (t_ms + self.stale_ms + 1, account, token))

    def end(self, account: str, token: str) -> None:
        self.acquired.get(account, {}).pop(token, None)

    def evicted(self, account: str) -> None:
        self.acquired.pop(account, None)

    def count(self, account: str) -> int:
        return len(self.acquired.get(account, {}))

    def expire(self, upto_ms: int) -> list[tuple[int, str]]:
        """Stop counting every slot stale at or before ``upto_ms``: ``(when, account)`` of each."""
        ended = []
        while self._stale_at and self._stale_at[0][0] <= upto_ms:
            when_ms, account, token = heapq.heappop(self._stale_at)
            slots = self.acquired.get(account, {})
            if slots.get(token) == when_ms - self.stale_ms - 1:
                del slots[token]
                ended.append((when_ms, account))
        return ended


def _stale_ms(config: Mapping[str, Any]) -> int:
    """The gate's ``stale_ms`` as the header's config has it (the seed's, if it names none)."""
    design = config.get("design")
    gate = design.get("gate") if isinstance(design, Mapping) else None
    stale_ms = gate.get("stale_ms", STALE_MS) if isinstance(gate, Mapping) else STALE_MS
    if not isinstance(stale_ms, int) or isinstance(stale_ms, bool) or stale_ms < 1:
        raise PlotError(f"config.design.gate.stale_ms must be a positive integer, got {stale_ms!r}")
    return stale_ms


#: Strip rows, top down: (name, marker, colour).
_MARK_ROWS: Final = (
    ("gate evicted", "v", "#c0392b"),
    ("caller evicted", "v", "#e59866"),
    ("worker evicted", "v", "#e59866"),
    ("worker shut down", "v", "#7d6608"),
    ("paused", "|", "#7d6608"),
    ("message lost", "x", "#8e44ad"),
    ("gate errored", "X", "#d35400"),
    ("failed open", "^", "#c0392b"),
    ("shed (429)", "<", "#2e86c1"),
    ("release lost", "x", "#a04000"),
    ("slot healed", "o", "#17a589"),
    ("claim lost", "x", "#a04000"),
    ("lease lost", "X", "#a04000"),
    ("write fenced", "s", "#6e2c00"),
    ("duplicate run", "*", "#c2185b"),
)
_FINDING: Final = "tolerated"
_VIOLATION: Final = "violation"
_VIOLATION_COLOR = "#e60000"
_HELD = "#5b8fd9"
_API = "#c2185b"
_OVER = "#e60000"
_LEAKED = "#a04000"
_HEADER_IN: Final = 0.75


def design_series(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> DesignPlotData:
    """The step series and marks of a gate or leased-worker trace.

    Raises :class:`PlotError` when the header lacks what the plot needs (the
    design, the cap) or an event the plot reads is malformed.
    """
    design = design_of(header)
    if design not in DESIGNS:
        raise PlotError(f"the trace's design is {design!r}; this plot draws {' and '.join(DESIGNS)}")
    config = header.get("config")
    assert isinstance(config, Mapping)  # design_of found a design in it
    holder = config.get("holder")
    cap = holder.get("limit") if isinstance(holder, Mapping) else None
    if not isinstance(cap, int) or isinstance(cap, bool):
        raise PlotError("the header has no cap (config.holder.limit)")
    workload = config.get("workload")
    declared = workload.get("keys", ()) if isinstance(workload, Mapping) else ()
    if not isinstance(declared, list | tuple) or not all(isinstance(key, str) for key in declared):
        raise PlotError(f"config.workload.keys must be a list of account names, got {declared!r}")

    held: dict[str, _Step] = {}
    api: dict[str, _Step] = {}
    for account in declared:
        held[str(account)], api[str(account)] = _Step(), _Step()
    state = _State(design, held, api, _stale_ms(config) if design == "gate" else STALE_MS)
    end_ms = 0
    for number, event in enumerate(events, start=1):
        try:
            t = event["t"]
            if not isinstance(t, int) or isinstance(t, bool):
                raise PlotError(f"t must be an integer, got {t!r}")
            end_ms = max(end_ms, t)
            state.apply(t, event)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
            raise PlotError(
                f"event {number} ({event.get('kind')!r} at t={event.get('t')!r}) is malformed: {detail}"
            ) from None
    duration = config.get("duration_ms")
    if isinstance(duration, int) and not isinstance(duration, bool) and state.trade_offs is not None:
        end_ms = max(end_ms, duration)
    end_ms = max(end_ms, 1)
    state.finish(end_ms)
    if not held:
        raise PlotError("no account: the header's config.workload.keys is empty and no event names one")

    partitions: list[tuple[int, int, str]] = []
    faults = header.get("faults")
    if isinstance(faults, Mapping):
        for window in faults.get("partitions") or ():
            start, end = (
                window.get(name) if isinstance(window, Mapping) else None for name in ("start_ms", "end_ms")
            )
            if not all(isinstance(at, int) and not isinstance(at, bool) for at in (start, end)):
                raise PlotError(f"a partition is an object with integer start_ms and end_ms, got {window!r}")
            assert isinstance(window, Mapping)
            assert isinstance(start, int)
            assert isinstance(end, int)
            partitions.append((start, end, str(window.get("target"))))
    return DesignPlotData(
        design=design,
        seed=header.get("seed"),
        end_ms=end_ms,
        cap=cap,
        accounts=tuple(
            AccountSeries(account, held[account].steps(), api.get(account, _Step()).steps())
            for account in sorted(held)
        ),
        marks=tuple(sorted(state.marks, key=lambda m: m.t_ms)),
        partitions=tuple(partitions),
        trade_offs=state.trade_offs,
    )


class _State:
    """Folds a design trace's events into its series and marks."""

    def __init__(self, design: str, held: dict[str, _Step], api: dict[str, _Step], stale_ms: int) -> None:
        self.design = design
        self.held = held
        self.api = api
        self.marks: list[Mark] = []
        self.violations: list[Mark] = []
        self.trade_offs: Mapping[str, Any] | None = None
        self.leases = _Leases()
        self.slots = _Slots(stale_ms)
        #: Each submitted item's account (its ``key``).
        self.account_of: dict[str, str] = {}
        self.running: dict[str, int] = {}  # item -> its calls running at the API
        self.call_item: dict[str, str] = {}
        self.took_effect: set[str] = set()

    def _account(self, account: str) -> str:
        if account not in self.held:
            self.held[account], self.api[account] = _Step(), _Step()
        return account

    def _leases_changed(self, t_ms: int) -> None:
        counts = dict.fromkeys(self.held, 0)
        for id in self.leases.until:
            account = self.account_of.get(id)
            if account is not None:
                counts[self._account(account)] = counts.get(account, 0) + 1
        for account, count in counts.items():
            self.held[account].set(t_ms, count)

    def _expire(self, upto_ms: int) -> None:
        if self.design == "gate":
            for when_ms, account in self.slots.expire(upto_ms):
                self.held[account].set(when_ms, self.slots.count(account))
            return
        for when_ms, _ in self.leases.expire(upto_ms):
            self._leases_changed(when_ms)

    def finish(self, end_ms: int) -> None:
        self._expire(end_ms)
        # A run goes on past a violation its judges tolerate (a known finding); one they do not
        # stops it, so it is the last, and the run then measured no trade-offs.
        stopped = self.trade_offs is None and bool(self.violations)
        for index, mark in enumerate(self.violations):
            broke = stopped and index == len(self.violations) - 1
            self.marks.append(mark if broke else attrs.evolve(mark, kind=_FINDING))

    def apply(self, t: int, event: Mapping[str, Any]) -> None:
        kind = event["kind"]
        self._expire(t)
        if kind == "send" and event.get("src") == "workload" and event.get("method") == "submit":
            for item in event["body"]:
                self.account_of[str(item["id"])] = self._account(str(item["key"]))
        elif kind in ("gate_acquire", "gate_release"):
            account = self._account(str(event["gate"]).removeprefix("gate:"))
            token = event["token"]
            if kind == "gate_release":
                if event["released"]:
                    self.slots.end(account, str(token))
            else:
                for healed in event["healed"]:
                    self.slots.end(account, str(healed))
                if token is not None:
                    self.slots.acquire(account, str(token), t)
                if event["healed"]:
                    self.marks.append(
                        Mark(t, "slot healed", f"{event['gate']}: {', '.join(event['healed'])}")
                    )
            self.held[account].set(t, self.slots.count(account))
        elif kind == "lease_claim":
            for id in event["ids"]:
                self.leases.lease(str(id), str(event["token"]), int(event["until"]))
            if event["ids"]:
                self._leases_changed(t)
        elif kind == "lease_renew":
            if event["ok"]:
                self.leases.lease(str(event["id"]), str(event["token"]), int(event["until"]))
                self._leases_changed(t)
        elif kind == "lease_write":
            if event["ok"]:
                self.leases.end(str(event["id"]))
                self._leases_changed(t)
        elif kind in ("api_start", "api_end"):
            self._api(t, event)
        elif kind == "evict":
            name = str(event["object"])
            if name.startswith("gate:"):
                account = self._account(name.removeprefix("gate:"))
                self.slots.evicted(account)
                self.held[account].set(t, 0)
                self.marks.append(Mark(t, "gate evicted", name))
            elif name != "store":
                what = "caller evicted" if self.design == "gate" else "worker evicted"
                self.marks.append(Mark(t, what, name))
        elif kind == "fault" and event.get("fault") == "shutdown":
            self.marks.append(Mark(t, "worker shut down", str(event["target"])))
        elif kind == "paused":
            self.marks.append(Mark(t, "paused", f"{event['target']} until {event['until']} ms"))
        elif kind == "drop":
            self.marks.append(Mark(t, "message lost", f"{event['msg']} ({event['leg']}, {event['reason']})"))
        elif kind in _SIMPLE_MARKS:
            name, field = _SIMPLE_MARKS[kind]
            self.marks.append(Mark(t, name, str(event[field])))
        elif kind == "violation":
            finding = event.get("finding")
            label = str(event["invariant"]) + ("" if finding is None else f" ({finding})")
            self.violations.append(Mark(t, _VIOLATION, str(event.get("detail", "")), label))
        elif kind == "trade_offs":
            self.trade_offs = {k: v for k, v in event.items() if k not in ("t", "kind")}

    def _api(self, t: int, event: Mapping[str, Any]) -> None:
        account = self._account(str(event["account"]))
        self.api[account].set(t, int(event["in_flight"]))
        call = str(event["call"])
        if event["kind"] == "api_start":
            item = str(event["key"])
            if self.running.get(item, 0) or item in self.took_effect:
                self.marks.append(Mark(t, "duplicate run", item))
            self.running[item] = self.running.get(item, 0) + 1
            self.call_item[call] = item
            return
        item = self.call_item.pop(call, "")
        if item:
            self.running[item] -= 1
            if event.get("outcome") == "ok":
                self.took_effect.add(item)


#: Events marked as they are: kind -> (strip row, the field that says what).
_SIMPLE_MARKS: Final = {
    "gate_error": ("gate errored", "gate"),
    "fail_open": ("failed open", "reason"),
    "shed": ("shed (429)", "item"),
    "release_lost": ("release lost", "item"),
    "claim_failed": ("claim lost", "worker"),
    "lease_lost": ("lease lost", "id"),
    "write_fenced": ("write fenced", "id"),
}


def design_figure(data: DesignPlotData, *, title: str | None = None) -> Figure:
    """The figure of :func:`design_series`: a panel per account, then the strip of what happened."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = stacked_axes([3.2] * len(data.accounts) + [1.9], _HEADER_IN)
    end_s = data.end_ms / 1000
    violations = [m.t_ms / 1000 for m in data.marks if m.kind == _VIOLATION]
    margin = VIOLATION_MARGIN * end_s
    xlim = (0.0, max(end_s, max(violations, default=0.0) + (margin if violations else 0.0)))
    for ax in axes:
        ax.set_xlim(*xlim)
        for start_ms, end_ms, _ in data.partitions:
            ax.axvspan(start_ms / 1000, end_ms / 1000, color="#c0392b", alpha=0.10, lw=0)
        for t_s in sorted(set(violations)):
            ax.axvline(t_s, color=_VIOLATION_COLOR, lw=1.2, alpha=0.8, zorder=4, gid="violation-line")
    for account, ax in zip(data.accounts, axes[:-1], strict=True):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, axis="y", alpha=0.3)
        _draw_account(ax, account, data)
    _draw_strip(axes[-1], data)
    axes[-1].set_xlabel("simulated time (s)")
    scenario = f"{title} — " if title else ""
    write_header(fig, f"semsim: {scenario}seed {data.seed}   (design: {data.design})", _explanation(data))
    return fig


_COUNTED: Final = {
    "gate": "the gate's slots not yet stale",
    "leased-worker": "instances under a live lease",
}


def _explanation(data: DesignPlotData) -> str:
    line = (
        f"Blue: {_COUNTED[data.design]}. Pink: calls in flight at the external API (the ground truth). "
        "Red: calls over the cap (over-admission). Brown hatch: capacity counted as taken while no call "
        "runs (leaked)."
    )
    figures = data.trade_offs
    if figures is None:
        return line + "\nThe run stopped before its trade-offs were measured."
    recovery = figures.get("recovery_ms")
    recovered = f"{recovery / 1000:g} s" if isinstance(recovery, int | float) else "not by the end"
    return line + (
        f"\nThis run: peak over the cap {figures.get('peak_over_admission')}, "
        f"{figures.get('over_cap_permit_s')} permit-s over it, "
        f"{figures.get('duplicate_executions')} duplicate runs, "
        f"{figures.get('double_effects')} double effects, "
        f"{figures.get('leaked_cap_s')} cap-s leaked, recovered {recovered}, "
        f"{figures.get('completed')} of {figures.get('items')} items took effect."
    )


def _draw_account(ax: Any, account: AccountSeries, data: DesignPlotData) -> None:
    end = data.end_ms
    hx, hy = step_xy(account.held, end)
    ax.fill_between(hx, hy, step="post", color=_HELD, alpha=0.35, lw=0)
    ax.step(hx, hy, where="post", color=_HELD, lw=1.4, label=_COUNTED[data.design])
    ax_, ay = step_xy(account.api_calls, end)
    ax.step(ax_, ay, where="post", color=_API, lw=1.6, label="calls in flight at the API\n(ground truth)")
    ax.axhline(data.cap, color="black", lw=2.2, label=f"cap ({data.cap})")
    # Both gaps on one time base: every change of either series.
    times = sorted({t for t, _ in account.held} | {t for t, _ in account.api_calls})
    xs = [t / 1000 for t in times] + [end / 1000]
    held = [value_at(account.held, t) or 0 for t in times]
    calls = [value_at(account.api_calls, t) or 0 for t in times]
    # Zero-height where there is no gap, so no ``where=`` (which joins only selected points).
    over = [max(c, data.cap) for c in calls]
    ax.fill_between(
        xs, data.cap, [*over, over[-1]], step="post", color=_OVER, alpha=0.45, lw=0, label="over the cap"
    )
    taken = [max(min(h, data.cap), c) for h, c in zip(held, calls, strict=True)]
    ax.fill_between(
        xs,
        [*calls, calls[-1]],
        [*taken, taken[-1]],
        step="post",
        facecolor="none",
        edgecolor=_LEAKED,
        hatch="///",
        lw=0,
        label="counted, no call running\n(leaked)",
    )
    top = max(data.cap, *hy, *ay)
    ax.set_ylim(0, top * 1.15 + 1)
    ax.set_ylabel("calls / slots" if data.design == "gate" else "calls / leases")
    ax.set_title(
        f"account '{account.account}': {_COUNTED[data.design]} vs calls at the API", loc="left", fontsize=10
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _draw_strip(ax: Any, data: DesignPlotData) -> None:
    rows: list[tuple[str, list[float], str, str, bool]] = []
    for name, marker, color in _MARK_ROWS:
        times = [m.t_ms / 1000 for m in data.marks if m.kind == name]
        if times:
            rows.append((f"{name} ({len(times)})", times, marker, color, False))
    for kind, prefix, color in (
        (_FINDING, "tolerated", "#f39c12"),
        (_VIOLATION, "violated", _VIOLATION_COLOR),
    ):
        for label in sorted({m.label for m in data.marks if m.kind == kind}):
            times = [m.t_ms / 1000 for m in data.marks if m.kind == kind and m.label == label]
            rows.append((f"{prefix}: {label} ×{len(times)}", times, "*", color, True))
    ax.set_title("what happened (faults, what the design did, findings, violations)", loc="left", fontsize=10)
    ax.grid(False)
    if not rows:
        ax.set_yticks([])
        ax.text(
            0.5, 0.5, "no faults and nothing shed, lost or run twice", transform=ax.transAxes, ha="center"
        )
        return
    for index, (_, times, marker, color, big) in enumerate(rows):
        ax.scatter(
            times,
            [index] * len(times),
            marker=marker,
            color=color,
            s=110 if big else 30,
            lw=0.6 if big else 1.2,
            zorder=5 if big else 3,
            clip_on=False,
        )
        ax.axhline(index, color="#dddddd", lw=0.6, zorder=1)
    ax.set_yticks(range(len(rows)), [label for label, *_ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
