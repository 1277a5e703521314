"""Usage plots: what a trace says the holder accounted, and what clients really ran, over time.

``series(header, events)`` turns a trace (sim/runtime/trace.py) into step series per
holder key, and is pure so tests can check the numbers; ``build_figure`` draws
them (a matplotlib Figure, outside pyplot), ``plot_trace`` saves that figure;
``cmd_plot`` is ``semsim plot``. A run that breaks an invariant stops at the
violation: the time axis then extends past it, and each violation is a red
line named in the accounting panel (invariant, finding, detail) and a star in
the strip.

Where each series comes from (a trace has no "usage" line after every
commit, so some of it is derived; the derivation is exact for the holder's
committed rows, not for its ``usage(now)`` reading):

- **granted / lease footprint**: the ``usage`` of every ``round`` event is the
  holder's own snapshot after the round's commit. Two kinds of holder commit
  emit no usage: a *sync* (reports applied at once) and the alarm's
  *reclaim*. A reclaim emits ``grant_reclaimed`` with the permits it
  returned, which are subtracted. A sync's effect is derived by mirroring
  the holder's grant and lease rows (``grant`` and ``lease_granted`` events,
  then the reports in every delivered ``permits`` message) with the
  holder's clamping rules, and applying the change of the mirror when the
  sync is delivered. Between commits the plot shows committed rows: unclaimed
  permits past their claim deadline count until the reclaim commits (the
  holder's ``usage(now)`` stops counting them at the deadline).
- **in use**: the clients' ``admit`` minus ``release`` per key (the oracle
  the invariants use), independent of the holder's accounting.
- **waiting**: items enqueued and not yet admitted (queued, or being claimed
  under a grant). A ``requeue`` (a claim came back expired or not found)
  moves an item from "being claimed" back to "queued": it is still waiting,
  so it does not add to the count; a duplicated ``submit`` enqueues an item
  once.
- **calls at the API** (the account-concurrency world, ``config.operations``):
  the external API's own count of calls in flight for the account, from its
  ``api_start`` and ``api_end`` events: the ground truth the permits stand
  for. A call that outlives its attempt (a timeout, an eviction) still
  counts. The strip marks calls that outlived their attempt (an attempt
  settled, not completed, or an operation out of attempts, while its call
  runs on; or a later attempt starting while it runs, the earlier attempt
  lost to an eviction: a zombie, F5), attempts retried, attempts failed for
  good and operations that ran out of attempts.
- **limit**: the header's limit, then the operator's changes and every
  round's resolved limit. Group limits come from the operator's changes and
  from rounds that report one (a round reports the limit only of groups it
  resolved); a holder eviction forgets them, as the holder object does. In
  ``over`` mode the ceiling is limit + extra; in ``under`` mode grants may
  use only limit - reserve (both from ``semaphore_core.budgets``).
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from semaphore_core.config import Over, Provisioning, Ratio, Strict, Under, budgets
from semsim.inputs.files import read_from, write_whole, written_to
from semsim.report.steps import VIOLATION_MARGIN as VIOLATION_MARGIN
from semsim.report.steps import Mark as Mark
from semsim.report.steps import PlotError as PlotError
from semsim.report.steps import Steps as Steps
from semsim.report.steps import stacked_axes, write_header
from semsim.report.steps import step_xy as step_xy
from semsim.report.steps import value_at as value_at

if TYPE_CHECKING:  # matplotlib is slow to import: only when drawing
    from matplotlib.figure import Figure

HOLDER_PREFIX: Final = "holder:"


@attrs.frozen
class Band:
    """A window of time, drawn shaded: ``target`` was partitioned."""

    start_ms: int
    end_ms: int
    target: str

    def concerns(self, key: str) -> bool:
        """A holder's partition concerns its own key; a client's, every key it may use."""
        holder = _holder_key(self.target)
        return holder is None or holder == key


@attrs.frozen
class GroupSeries:
    group: str
    granted: Steps
    leased: Steps
    in_use: Steps
    waiting: Steps
    #: The group's limit over time; None while the group has none.
    limit: tuple[tuple[int, int | None], ...]


@attrs.frozen
class KeySeries:
    """Everything plotted for one holder key."""

    key: str
    limit: Steps
    #: ``over`` mode: limit + extra, the ceiling of grants plus leases.
    ceiling: Steps | None
    #: ``under`` mode: limit - reserve, what grants may use.
    grant_pool: Steps | None
    granted: Steps
    leased: Steps
    in_use: Steps
    waiting: Steps
    groups: tuple[GroupSeries, ...]
    marks: tuple[Mark, ...]
    #: Calls in flight at the external API for this account (None: the run has no API).
    api_calls: Steps | None = None
    #: Permits of leases no client ever reported, from each one's grant: granted in a reply
    #: that was lost, they are never settled (the documented leak, ``lease_lost_in_reply``).
    leaked: Steps = ((0, 0),)
    #: Whether ``in_use`` and ``waiting`` are known: a trace's clients tell them; a story told on
    #: the core alone (``semsim demo``) has no clients, and its plot leaves them out.
    clients_known: bool = True


@attrs.frozen
class PlotData:
    seed: Any
    end_ms: int
    #: ``none`` (no leases), ``strict``, ``under`` or ``over``.
    mode: str
    keys: tuple[KeySeries, ...]
    bands: tuple[Band, ...]


# --- extraction -------------------------------------------------------------------------


class _Step:
    """Builds one step series; several changes at one instant keep the last value."""

    def __init__(self, initial: int | None = 0) -> None:
        self.value: int | None = initial
        self.points: list[tuple[int, int | None]] = [(0, initial)]

    def set(self, t_ms: int, value: int | None) -> None:
        self.value = value
        if self.points[-1][0] == t_ms:
            self.points[-1] = (t_ms, value)
            if len(self.points) > 1 and self.points[-2][1] == value:
                self.points.pop()
        elif self.points[-1][1] != value:
            self.points.append((t_ms, value))

    def add(self, t_ms: int, delta: int) -> None:
        self.set(t_ms, (self.value or 0) + delta)

    def steps(self) -> Steps:
        return tuple((t, v or 0) for t, v in self.points)

    def optional(self) -> tuple[tuple[int, int | None], ...]:
        return tuple(self.points)


@attrs.define
class _GrantRow:
    client: str
    group: str
    permits: int
    claimed: int = 0
    released: int = 0

    def outstanding(self) -> int:
        return self.permits - self.released


@attrs.define
class _LeaseRow:
    client: str
    group: str
    permits: int
    released: int = 0

    def footprint(self) -> int:
        return max(0, self.permits - self.released)


class _Mirror:
    """The holder's grant and lease rows as far as the trace shows them, with its clamping rules.

    Only its *changes* are used (when a sync is delivered), so a row it never
    learnt of costs nothing but precision.
    """

    def __init__(self, grant_timeout_ms: int) -> None:
        self.grant_timeout_ms = grant_timeout_ms
        self.grants: dict[str, _GrantRow] = {}
        self.expires_ms: dict[str, int] = {}
        self.leases: dict[str, _LeaseRow] = {}
        #: Reports of delivered requests, applied when their round commits.
        self.pending: list[Mapping[str, Any]] = []

    def by_group(self) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        for grant in self.grants.values():
            g, leased = totals.get(grant.group, (0, 0))
            totals[grant.group] = (g + grant.outstanding(), leased)
        for lease in self.leases.values():
            g, leased = totals.get(lease.group, (0, 0))
            totals[lease.group] = (g, leased + lease.footprint())
        return totals

    def apply(self, t_ms: int, body: Mapping[str, Any]) -> None:
        """Apply one message's reports as ``apply_grant_reports`` / ``apply_lease_reports`` do."""
        client = body.get("clientId")
        for report in body.get("grants") or ():
            grant = self.grants.get(str(report.get("grantId")))
            if grant is None or grant.client != client:
                continue
            expired = t_ms >= self.expires_ms[str(report["grantId"])]
            permits = grant.claimed if expired else grant.permits
            claimed = max(grant.claimed, min(int(report.get("claimed", 0)), permits))
            released = max(grant.released, min(int(report.get("released", 0)), claimed))
            if released >= permits:
                del self.grants[str(report["grantId"])]
            else:
                grant.permits, grant.claimed, grant.released = permits, claimed, released
        for report in body.get("leases") or ():
            lease = self.leases.get(str(report.get("leaseId")))
            if lease is None or lease.client != client:
                continue
            drawn = min(max(0, int(report.get("drawn", 0))), lease.permits)
            released = max(lease.released, min(max(0, int(report.get("released", 0))), drawn))
            permits = max(released, drawn) if report.get("retired") is True else lease.permits
            if released >= permits:
                del self.leases[str(report["leaseId"])]
            else:
                lease.permits, lease.released = permits, released

    def reclaim(self, grant_id: str) -> None:
        grant = self.grants.get(grant_id)
        if grant is None:
            return
        if grant.released >= grant.claimed:
            del self.grants[grant_id]
        else:
            grant.permits = grant.claimed


class _KeyState:
    def __init__(self, key: str, limit: int, grant_timeout_ms: int) -> None:
        self.key = key
        self.limit = _Step(limit)
        self.granted = _Step()
        self.leased = _Step()
        self.in_use = _Step()
        self.api_calls: _Step | None = None
        #: Calls running at the API for this account: call id -> (operation id, when its work ends).
        self.api_running: dict[str, tuple[str, int]] = {}
        #: Running calls a zombie mark has covered already (so a later attempt's start marks a
        #: call of an earlier attempt only once).
        self.zombies_marked: set[str] = set()
        self.waiting = _Step()
        self.group_granted: dict[str, _Step] = {}
        self.group_leased: dict[str, _Step] = {}
        self.group_in_use: dict[str, _Step] = {}
        self.group_waiting: dict[str, _Step] = {}
        self.group_limit: dict[str, _Step] = {}
        self.marks: list[Mark] = []
        self.mirror = _Mirror(grant_timeout_ms)
        #: Every lease granted: id -> (when, permits); and those a client reported (so knew).
        self.leases_granted: dict[str, tuple[int, int]] = {}
        self.leases_known: set[str] = set()

    def group(self, table: dict[str, _Step], group: str, initial: int | None = 0) -> _Step:
        step = table.get(group)
        if step is None:
            step = table[group] = _Step(initial)
            for other in (self.group_granted, self.group_leased, self.group_in_use, self.group_waiting):
                other.setdefault(group, _Step())
            self.group_limit.setdefault(group, _Step(None))
        return step

    def groups(self) -> list[str]:
        return sorted(self.group_granted)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlotError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlotError(f"{what} must be an integer, got {value!r}")
    return value


def _provisioning(leases: Any) -> Provisioning | None:
    """The header's lease options (``semsim.harness.run.LeaseSpec`` as data) as a provisioning mode."""
    if leases is None:
        return None
    leases = _mapping(leases, "header config.holder.leases")
    mode = leases.get("provisioning", "strict")
    amount = leases.get("amount", 0)
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
        raise PlotError(f"header config.holder.leases.amount must be a number >= 0, got {amount!r}")
    value: int | Ratio = Ratio(float(amount)) if isinstance(amount, float) else amount
    if mode == "under":
        return Under(reserve=value)
    if mode == "over":
        return Over(extra=value)
    if mode == "strict":
        return Strict()
    raise PlotError(f"header config.holder.leases.provisioning must be strict, under or over, got {mode!r}")


def _holder_key(name: Any) -> str | None:
    if isinstance(name, str) and name.startswith(HOLDER_PREFIX):
        return name[len(HOLDER_PREFIX) :]
    return None


def series(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> PlotData:
    """The step series of a trace, per holder key (see the module docstring for their sources).

    Raises :class:`PlotError` when the header lacks what a plot needs (the
    holder's limit, some holder key) or an event the plot reads is malformed.
    """
    config = _mapping(header.get("config"), "header config")
    holder = _mapping(config.get("holder"), "header config.holder")
    initial_limit = _int(holder.get("limit"), "header config.holder.limit")
    grant_timeout_ms = _int(holder.get("grant_timeout_ms", 10_000), "header config.holder.grant_timeout_ms")
    provisioning = _provisioning(holder.get("leases"))
    workload = config.get("workload")
    declared = list(workload.get("keys", ())) if isinstance(workload, Mapping) else []

    keys: dict[str, _KeyState] = {}

    def state(key: str) -> _KeyState:
        if not isinstance(key, str):
            raise PlotError(f"a holder key must be a string, got {key!r}")
        if key not in keys:
            keys[key] = _KeyState(key, initial_limit, grant_timeout_ms)
        return keys[key]

    for key in declared:
        state(str(key))

    sends: dict[str, tuple[str, str, Mapping[str, Any] | None]] = {}
    #: item -> [key, group, status]
    items: dict[str, list[str]] = {}
    client_marks: list[Mark] = []
    end_ms = 0
    for number, event in enumerate(events, start=1):
        try:
            end_ms = max(end_ms, _int(event.get("t"), "t"))
            _apply(event, state, keys, sends, items, client_marks)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            if isinstance(error, PlotError):
                detail = str(error)
            elif isinstance(error, KeyError):
                detail = f"missing field {error}"
            else:
                detail = str(error)
            raise PlotError(
                f"event {number} ({event.get('kind')!r} at t={event.get('t')!r}) is malformed: {detail}"
            ) from None

    if not keys:
        raise PlotError("no holder key: the header's config.workload.keys is empty and no event names one")
    # A run stopped by a violation ends at it (the monitor records it, then raises);
    # any other run lasted its configured duration, even if its tail was quiet.
    stopped = bool(events) and any(
        e.get("kind") in ("violation", "deadlock") and e.get("t") == end_ms for e in events[-20:]
    )
    duration = config.get("duration_ms")
    if not stopped and isinstance(duration, int) and not isinstance(duration, bool):
        end_ms = max(end_ms, duration)
    end_ms = max(end_ms, 1)

    faults = header.get("faults")
    bands: list[Band] = []
    if isinstance(faults, Mapping):
        for window in faults.get("partitions") or ():
            window = _mapping(window, "header faults.partitions[]")
            bands.append(
                Band(
                    _int(window.get("start_ms"), "partition start_ms"),
                    _int(window.get("end_ms"), "partition end_ms"),
                    str(window.get("target")),
                )
            )

    mode = "none" if provisioning is None else type(provisioning).__name__.lower()
    return PlotData(
        seed=header.get("seed"),
        end_ms=end_ms,
        mode=mode,
        keys=tuple(_finish(keys[k], provisioning, client_marks) for k in sorted(keys)),
        bands=tuple(bands),
    )


def _apply(
    event: Mapping[str, Any],
    state: Any,
    keys: dict[str, _KeyState],
    sends: dict[str, tuple[str, str, Mapping[str, Any] | None]],
    items: dict[str, list[str]],
    client_marks: list[Mark],
) -> None:
    """Fold one event into the per-key state."""
    t, kind = event["t"], event["kind"]
    if kind == "round":
        s: _KeyState = state(_holder_key(event["holder"]) or event["holder"])
        usage = _mapping(event["usage"], "usage")
        for body in s.mirror.pending:
            s.mirror.apply(t, body)
        s.mirror.pending.clear()
        s.limit.set(t, _int(usage["limit"], "usage.limit"))
        s.granted.set(t, _int(usage["granted"], "usage.granted"))
        s.leased.set(t, _int(usage["leased"], "usage.leased"))
        groups = _mapping(usage.get("groups", {}), "usage.groups")
        mirrored = s.mirror.by_group()
        for group in sorted(set(groups) | set(s.group_granted)):
            entry = _mapping(groups.get(group, {}), f"usage.groups.{group}")
            s.group(s.group_granted, group).set(t, _int(entry.get("granted", 0), "granted"))
            # A round reports the limit only of groups it resolved a policy for (as the
            # reference does): a missing limit is "not looked at", not "no limit".
            if entry.get("limit") is not None:
                s.group(s.group_limit, group, None).set(t, _int(entry["limit"], "group limit"))
        for group in sorted(set(mirrored) | set(s.group_leased)):
            s.group(s.group_leased, group).set(t, mirrored.get(group, (0, 0))[1])
    elif kind == "grant":
        s = state(_holder_key(event["holder"]) or event["holder"])
        grant_id = str(event["grant"])
        s.mirror.grants[grant_id] = _GrantRow(
            str(event["client"]), str(event["group"]), _int(event["permits"], "permits")
        )
        s.mirror.expires_ms[grant_id] = t + s.mirror.grant_timeout_ms
        s.group(s.group_granted, str(event["group"]))
    elif kind == "lease_granted":
        s = state(_holder_key(event["holder"]) or event["holder"])
        lease_id, permits = str(event["leaseId"]), _int(event["permits"], "permits")
        s.mirror.leases[lease_id] = _LeaseRow(str(event["clientId"]), str(event["group"]), permits)
        s.group(s.group_leased, str(event["group"]))
        s.leases_granted.setdefault(lease_id, (t, permits))
        s.marks.append(Mark(t, "lease granted", f"{lease_id}: {permits} permits to {event['clientId']}"))
    elif kind == "lease_retired":
        s = state(_holder_key(event["holder"]) or event["holder"])
        s.marks.append(Mark(t, "lease retired", f"{event.get('leaseId')} retired by the holder"))
    elif kind == "lease_settled":
        state(str(event["key"])).marks.append(
            Mark(t, "lease retired", f"{event.get('lease')} settled by {event.get('client')}'s report")
        )
    elif kind == "grant_reclaimed":
        s = state(_holder_key(event["holder"]) or event["holder"])
        permits = _int(event["permits"], "permits")
        s.granted.add(t, -permits)
        s.group(s.group_granted, str(event["group"])).add(t, -permits)
        s.mirror.reclaim(str(event["grantId"]))
        s.marks.append(Mark(t, "permits reclaimed", f"{permits} unclaimed permits returned"))
    elif kind == "send":
        payload = event.get("body")
        sends[str(event["msg"])] = (
            str(event["src"]),
            str(event["dst"]),
            payload if event.get("method") == "permits" and isinstance(payload, Mapping) else None,
        )
        reported = payload.get("leases") if isinstance(payload, Mapping) else None
        key = _holder_key(str(event["dst"]))
        if key is not None and isinstance(reported, list):  # a client's report: it knows these
            known = state(key).leases_known
            known.update(str(e["leaseId"]) for e in reported if isinstance(e, Mapping) and "leaseId" in e)
    elif kind == "deliver":
        sent = sends.get(str(event["msg"]))
        key = None if sent is None else _holder_key(sent[1])
        if sent is not None and key is not None and sent[2] is not None:
            s = state(key)
            body = sent[2]
            if body.get("type") == "sync":
                before = s.mirror.by_group()
                s.mirror.apply(t, body)
                after = s.mirror.by_group()
                for group in sorted(set(before) | set(after)):
                    (g0, l0), (g1, l1) = before.get(group, (0, 0)), after.get(group, (0, 0))
                    if g1 != g0:
                        s.granted.add(t, g1 - g0)
                        s.group(s.group_granted, group).add(t, g1 - g0)
                    if l1 != l0:
                        s.leased.add(t, l1 - l0)
                        s.group(s.group_leased, group).add(t, l1 - l0)
            elif body.get("type") == "request":
                s.mirror.pending.append(body)
    elif kind == "drop":
        sent = sends.get(str(event["msg"]))
        if sent is not None:
            src, dst, _ = sent
            key = _holder_key(dst) or _holder_key(src)
            if key is not None:
                leg = event.get("leg")
                what = "reply lost" if leg == "reply" else "request lost"
                state(key).marks.append(Mark(t, what, f"{src} -> {dst} ({event.get('reason')})"))
    elif kind == "evict":
        key = _holder_key(event["object"])
        if key is None:
            client_marks.append(Mark(t, "client evicted", str(event["object"])))
        else:
            s = state(key)
            s.mirror.pending.clear()  # waiting requests fail with the instance
            for step in s.group_limit.values():  # limitWorkflow() caps live in instance memory
                step.set(t, None)
            s.marks.append(Mark(t, "holder evicted", str(event["object"])))
    elif kind in ("alarm", "early_alarm", "alarm_failed", "alarm_dropped"):
        key = _holder_key(event["object"])
        if key is not None:
            what = {"alarm": "alarm ran", "early_alarm": "alarm ran"}.get(kind, kind.replace("_", " "))
            state(key).marks.append(Mark(t, what))
    elif kind == "operator":
        key = str(event["key"])
        s = state(key)
        if event.get("action") == "limit":
            limit = _int(event["limit"], "limit")
            s.limit.set(t, limit)
            s.marks.append(Mark(t, "limit changed", f"limit -> {limit}"))
        elif event.get("action") == "group_limit":
            s.group(s.group_limit, str(event["group"]), None).set(t, event.get("limit"))
            s.marks.append(Mark(t, "limit changed", f"group {event['group']} -> {event.get('limit')}"))
    elif kind == "settled":  # the run settled: capacity_returns and reclaimed were judged here
        for settled in keys.values():
            settled.marks.append(
                Mark(t, "liveness judged", f"{_int(event['waiting'], 'waiting')} still waiting")
            )
    elif kind == "group_limit":
        s = state(_holder_key(event["holder"]) or event["holder"])
        s.group(s.group_limit, str(event["group"]), None).set(t, event.get("limit"))
    elif kind == "enqueue":
        item = str(event["item"])
        if item not in items:
            key, group = str(event["key"]), str(event["group"])
            items[item] = [key, group, "waiting"]
            s = state(key)
            s.waiting.add(t, 1)
            s.group(s.group_waiting, group).add(t, 1)
    elif kind == "admit":
        item, key, group = str(event["item"]), str(event["key"]), str(event["group"])
        s = state(key)
        record = items.setdefault(item, [key, group, "unknown"])
        if record[2] == "waiting":
            s.waiting.add(t, -1)
            s.group(s.group_waiting, group).add(t, -1)
        if record[2] != "running":
            record[2] = "running"
            s.in_use.add(t, 1)
            s.group(s.group_in_use, group).add(t, 1)
    elif kind == "release":
        running = items.get(str(event["item"]))
        if running is not None and running[2] == "running":
            running[2] = "done"
            s = state(running[0])
            s.in_use.add(t, -1)
            s.group(s.group_in_use, running[1]).add(t, -1)
    elif kind in ("api_start", "api_end"):
        s = state(str(event["account"]))
        if s.api_calls is None:
            s.api_calls = _Step()
        s.api_calls.set(t, _int(event["in_flight"], "in_flight"))
        if kind == "api_start":
            s.api_running[str(event["call"])] = (str(event["key"]), _int(event["until"], "until"))
        else:
            s.api_running.pop(str(event["call"]), None)
            s.zombies_marked.discard(str(event["call"]))
    elif kind == "operation":
        operated = items.get(str(event.get("id")))
        if operated is not None:
            s = state(operated[0])
            what = f"{event.get('id')} attempt {event.get('attempt')}"
            mark = _OPERATION_MARKS.get((str(event.get("type")), str(event.get("outcome"))))
            if mark is not None:
                s.marks.append(Mark(t, mark, what))
            # An attempt settled other than completed, or the operation ran out of attempts
            # (its last one lost to an eviction): whatever call it made may run on.
            over = event.get("type") == "terminal" or (
                event.get("type") == "attempt_settled" and event.get("outcome") != "completed"
            )
            running = [
                call for call, (op, until) in s.api_running.items() if op == event.get("id") and until > t
            ]
            if over and running:
                # A zombie: the attempt is over, its call runs on at the API (F5).
                s.marks.append(Mark(t, "call outlived its attempt", what))
                s.zombies_marked.update(running)
            elif event.get("type") == "attempt_started" and set(running) - s.zombies_marked:
                # A later attempt starts while an earlier one's call runs on, that attempt never
                # settled here: its instance was evicted mid-call (seed 002, "After eviction"; F5).
                s.marks.append(
                    Mark(
                        t,
                        "call outlived its attempt",
                        f"{event.get('id')} before attempt {event.get('attempt')}",
                    )
                )
                s.zombies_marked.update(running)
    elif kind == "violation":
        detail = str(event.get("detail", ""))
        target = next((k for k in sorted(keys) if detail.startswith(f"{k}:")), None)
        finding = event.get("finding")
        label = str(event.get("invariant")) + ("" if finding is None else f" ({finding})")
        for s in keys.values() if target is None else [keys[target]]:
            s.marks.append(Mark(t, "violation", detail, label))


def _scaled(limits: Steps, of: Any) -> Steps:
    return tuple((t, of(v)) for t, v in limits)


def _finish(s: _KeyState, provisioning: Provisioning | None, client_marks: list[Mark]) -> KeySeries:
    limit = s.limit.steps()
    ceiling = grant_pool = None
    if isinstance(provisioning, Over):
        ceiling = _scaled(limit, lambda v: v + budgets(provisioning, v).leases)
    elif isinstance(provisioning, Under):
        grant_pool = _scaled(limit, lambda v: budgets(provisioning, v).grants)
    groups = tuple(
        GroupSeries(
            group=g,
            granted=s.group_granted[g].steps(),
            leased=s.group_leased[g].steps(),
            in_use=s.group_in_use[g].steps(),
            waiting=s.group_waiting[g].steps(),
            limit=s.group_limit[g].optional(),
        )
        for g in s.groups()
    )
    marks = sorted([*s.marks, *client_marks], key=lambda m: (m.t_ms, m.kind))
    return KeySeries(
        key=s.key,
        limit=limit,
        ceiling=ceiling,
        grant_pool=grant_pool,
        granted=s.granted.steps(),
        leased=s.leased.steps(),
        in_use=s.in_use.steps(),
        waiting=s.waiting.steps(),
        groups=groups,
        marks=tuple(marks),
        api_calls=None if s.api_calls is None else s.api_calls.steps(),
        leaked=_leaked(s),
    )


def _leaked(s: _KeyState) -> Steps:
    """Permits of the leases no client ever reported, counted from each one's grant."""
    leaked = _Step()
    for lease_id, (t, permits) in sorted(s.leases_granted.items(), key=lambda item: (item[1][0], item[0])):
        if lease_id not in s.leases_known:
            leaked.add(t, permits)
    return leaked.steps()


# --- drawing ----------------------------------------------------------------------------

#: Rows of the event strip, top to bottom, with their marker style.
_MARK_ROWS: Final = (
    ("holder evicted", "v", "#c0392b"),
    ("client evicted", "v", "#e59866"),
    ("reply lost", "x", "#8e44ad"),
    ("request lost", "|", "#8e44ad"),
    ("alarm ran", "o", "#2e86c1"),
    ("alarm failed", "X", "#d35400"),
    ("alarm dropped", "X", "#922b21"),
    ("permits reclaimed", "^", "#17a589"),
    ("limit changed", "D", "#111111"),
    ("lease granted", "P", "#ca6f1e"),
    ("lease retired", "d", "#ca6f1e"),
    ("liveness judged", "s", "#1e8449"),
    ("call outlived its attempt", "*", "#c2185b"),
    ("attempt retried", "<", "#a04000"),
    ("attempt failed", "X", "#6e2c00"),
    ("attempts exhausted", "X", "#4a235a"),
)
#: Lifecycle events of durable operations marked in the strip: (type, outcome) -> row.
_OPERATION_MARKS: Final = {
    ("attempt_settled", "retry_scheduled"): "attempt retried",
    ("attempt_settled", "failed"): "attempt failed",
    ("terminal", "None"): "attempts exhausted",
}
#: Violations: a row of the strip per kind (after the rows above), a red star, a red line.
_VIOLATION = "#e60000"
#: Violation kinds named in the accounting panel, top down; more are counted in one line.
_VIOLATION_LABELS: Final = 4
#: Height of the figure's header band (title and explanation), in inches.
_HEADER_IN: Final = 0.62
_AFTER_RUN = "#efefef"
#: The documented leak, hatched over the lease footprint.
_LEAKED = "#a04000"
_GRANTED = "#5b8fd9"
_LEASED = "#f5b041"
_IN_USE = "#1e8449"
_API = "#c2185b"
_WAITING = "#7d3c98"


def x_limits(data: PlotData) -> tuple[float, float]:
    """The seconds the plots show: the run, widened so that every violation lies well inside.

    A run that breaks an invariant stops at it, so its violation would sit on
    the axes' edge: the axis then extends past the first and last violation
    by :data:`VIOLATION_MARGIN` of the run.
    """
    end_s = data.end_ms / 1000
    times = [m.t_ms / 1000 for key in data.keys for m in key.marks if m.kind == "violation"]
    if not times:
        return 0.0, end_s
    margin = VIOLATION_MARGIN * end_s
    return min(0.0, min(times) - margin), max(end_s, max(times) + margin)


def plot_trace(
    header: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    path: Path,
    *,
    title: str | None = None,
    per_group: bool = False,
) -> Figure:
    """Render the usage of a trace to ``path`` (PNG, or any format matplotlib writes on its own),
    whole or not at all.

    Returns the figure it saved (see :func:`build_figure`), already laid out.
    """
    fig = build_figure(header, events, title=title, per_group=per_group)
    save_figure(fig, path, dpi=fig.dpi)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str], dpi: float) -> None:
    """``fig.savefig(path)``, in the format ``path``'s extension names, written whole or not at all
    (matplotlib writes straight to the file: a full disk left a truncated image)."""
    image = io.BytesIO()
    fig.savefig(image, dpi=dpi, format=Path(path).suffix.lstrip(".").lower() or None)
    write_whole(path, image.getvalue())


def build_figure(
    header: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    *,
    title: str | None = None,
    per_group: bool = False,
) -> Figure:
    """The usage of a trace as a figure: one block of panels per holder key.

    Each block: holder accounting against the limit and the permits actually
    in use; waiting demand; a strip of what went wrong (evictions, lost
    messages, alarms, limit changes, violations); with ``per_group``, one
    panel per group. Partitions are shaded across every panel; violations are
    red vertical lines, named in the accounting panel and in the strip.

    The figure is not attached to pyplot (nothing global changes, nothing to
    close); its layout is constrained, so every label stays inside it once drawn.
    """
    # A gate's or leased worker's run has no holder to draw: its own plot (imported here, as it
    # imports this module's pieces).
    from semsim.report.design_plot import DESIGNS, design_figure, design_of, design_series

    design = design_of(header)
    if design in DESIGNS:
        if per_group:
            raise PlotError(f"per-group panels show the semaphore's groups; a {design} run has none")
        return design_figure(design_series(header, events), title=title)
    return figure(series(header, events), title=title, per_group=per_group)


#: The figure's explanation line, under its title, for a simulation's trace.
EXPLANATION: Final = (
    "Stacked areas: permits the holder has charged (committed rows). Green line: permits clients "
    "actually hold. The green line should stay inside the stack and, unless leases are 'over', "
    "under the limit."
)


def figure(
    data: PlotData,
    *,
    title: str | None = None,
    per_group: bool = False,
    explanation: str = EXPLANATION,
    heading: str | None = None,
) -> Figure:
    """:func:`build_figure` of series already extracted (``semsim demo`` builds its own):
    ``explanation`` is the line under the title, ``heading`` replaces the title line."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    layout: list[tuple[str, KeySeries, GroupSeries | None]] = []
    for key in data.keys:
        layout += [("usage", key, None)]
        if key.clients_known:
            layout += [("waiting", key, None)]
        layout += [("marks", key, None)]
        if per_group:
            layout += [("group", key, group) for group in key.groups]
    heights = {"usage": 3.2, "waiting": 1.3, "marks": 1.6, "group": 2.0}
    ratios = [heights[kind] for kind, _, _ in layout]
    fig, axes = stacked_axes(ratios, _HEADER_IN)
    xlim = x_limits(data)
    for (kind, key, group), ax in zip(layout, axes, strict=True):
        ax.set_xlim(*xlim)
        ax.grid(True, axis="y", alpha=0.3)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        for band in data.bands:
            if not band.concerns(key.key):
                continue
            ax.axvspan(band.start_ms / 1000, band.end_ms / 1000, color="#c0392b", alpha=0.10, lw=0)
        if xlim[1] > data.end_ms / 1000:
            ax.axvspan(data.end_ms / 1000, xlim[1], color=_AFTER_RUN, lw=0, zorder=0)
        for mark in key.marks:
            if mark.kind == "holder evicted" and kind != "marks":
                ax.axvline(mark.t_ms / 1000, color="#c0392b", lw=0.9, ls="--", alpha=0.7)
        for t_ms in sorted({m.t_ms for m in key.marks if m.kind == "violation"}):
            ax.axvline(t_ms / 1000, color=_VIOLATION, lw=1.2, alpha=0.8, zorder=4, gid="violation-line")
        prefix = f"key '{key.key}': "
        if kind == "usage":
            _draw_usage(ax, key, data, prefix, xlim)
        elif kind == "waiting":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
            xs, ys = step_xy(key.waiting, data.end_ms)
            ax.fill_between(xs, ys, step="post", color=_WAITING, alpha=0.25, lw=0)
            ax.step(xs, ys, where="post", color=_WAITING, lw=1.2, label="items waiting")
            ax.set_ylabel("items")
            # Nothing ever waited: 0 to 1 item, not matplotlib's 0 to 0.05 in fractions of one.
            ax.set_ylim(0, None if max(ys, default=0) > 0 else 1)
            ax.set_title(f"{prefix}demand: items enqueued and not yet admitted", loc="left", fontsize=10)
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
        elif kind == "marks":
            _draw_marks(ax, key, data, prefix, xlim, Line2D, Patch)
        else:
            assert group is not None
            _draw_group(ax, group, data, prefix, MaxNLocator)
    axes[-1].set_xlabel("simulated time (s)")
    scenario = f"{title} — " if title else ""
    write_header(
        fig,
        heading or f"semsim: {scenario}seed {data.seed}   ({_mode_label(data.mode)})",
        explanation
        + (
            "\nDashed line: calls in flight at the external API (the ground truth), which should stay "
            "under the limit too."
            if any(key.api_calls is not None for key in data.keys)
            else ""
        ),
    )
    _fit_labels(fig)
    return fig


#: Labels that hang beside a point of their panel, and move to its other side if they do not fit.
_SIDE_LABELS: Final = ("limit-label", "violation-label")


def _fit_labels(fig: Figure) -> None:
    """Move every side label that would leave its axes to the other side of its point.

    A label's side is chosen before the layout is known; once laid out, one
    that crosses the edge of its panel (a change near the end of the run)
    is mirrored onto the side that has room. The layout is redone when the
    figure is saved.
    """
    from matplotlib.text import Annotation

    labels = [a for a in fig.findobj(Annotation) if a.get_gid() in _SIDE_LABELS]
    if not labels:
        return
    fig.draw_without_rendering()
    for label in labels:
        extent = label.get_window_extent()
        box = label.axes.get_window_extent() if label.axes is not None else fig.bbox
        dx, dy = label.xyann
        if (extent.x1 > box.x1 and dx > 0) or (extent.x0 < box.x0 and dx < 0):
            label.xyann = (-dx, dy)
            label.set_horizontalalignment("right" if dx > 0 else "left")


def _mode_label(mode: str) -> str:
    return {
        "none": "no leases",
        "strict": "strict leases: grants and leases share the limit",
        "under": "under: a reserve inside the limit is kept for leases",
        "over": "over: leases get extra permits above the limit",
    }[mode]


def _stack_charged(ax: Any, granted: Steps, leased: Steps, end: int) -> tuple[list[float], list[float]]:
    """Granted permits and lease footprint stacked, on every instant at which either changes."""
    base = _merge(granted, leased)
    bx, by_granted = step_xy(tuple((t, g) for t, g, _ in base), end)
    _, by_leased = step_xy(tuple((t, footprint) for t, _, footprint in base), end)
    ax.stackplot(
        bx,
        by_granted,
        by_leased,
        step="post",
        colors=[_GRANTED, _LEASED],
        alpha=0.55,
        labels=["granted (holder)", "lease footprint (holder)"],
    )
    return by_granted, by_leased


def _draw_leaked(ax: Any, key: KeySeries, end: int, by_granted: list[float], accounted: list[float]) -> None:
    """The leak, hatched at the top of the lease footprint and named where it ends.

    A band nobody labels reads as a bug; this one is the documented leak: a
    lease granted in a reply that was lost, so no client ever settles it.
    """
    if not any(permits for _, permits in key.leaked):
        return
    base = _merge(key.granted, key.leased)
    xs, _ = step_xy(tuple((t, g) for t, g, _ in base), end)
    at = [value_at(key.leaked, t) or 0 for t, _, _ in base]
    leaked = [*at, at[-1]]  # held to the end, as _xy holds the stack
    bottom = [max(g, top - n) for g, top, n in zip(by_granted, accounted, leaked, strict=True)]
    ax.fill_between(
        xs,
        bottom,
        accounted,
        step="post",
        facecolor="none",
        edgecolor=_LEAKED,
        hatch="////",
        lw=0,
        label="leaked: a lease in a lost\nreply (documented)",
    )
    final = leaked[-1]
    if final:
        ax.annotate(
            f"{final} leased permit{'s' if final > 1 else ''} never come back: the lease's grant reply was\n"
            "lost, so no client knows it to settle it (documented: lease_lost_in_reply)",
            (xs[-1], accounted[-1] - final / 2),
            xytext=(-6, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=7.5,
            color=_LEAKED,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "alpha": 0.85, "lw": 0},
        )


def _draw_usage(ax: Any, key: KeySeries, data: PlotData, prefix: str, xlim: tuple[float, float]) -> None:
    end = data.end_ms
    by_granted, by_leased = _stack_charged(ax, key.granted, key.leased, end)
    lx, ly = step_xy(key.limit, end)
    ax.step(lx, ly, where="post", color="black", lw=2.2, label="limit")
    top = max(ly)
    if key.ceiling is not None:
        cx, cy = step_xy(key.ceiling, end)
        ax.step(cx, cy, where="post", color="black", lw=1.4, ls="--", label="ceiling (limit + extra)")
        top = max(top, *cy)
    if key.grant_pool is not None:
        px, py = step_xy(key.grant_pool, end)
        ax.step(px, py, where="post", color="black", lw=1.0, ls=":", label="grant pool (limit − reserve)")
    uy: list[float] = []
    if key.clients_known:
        ux, uy = step_xy(key.in_use, end)
        label = "in use by clients\n(admitted, not released)"
        ax.step(ux, uy, where="post", color=_IN_USE, lw=1.6, label=label)
    accounted = [g + leased_ for g, leased_ in zip(by_granted, by_leased, strict=True)]
    _draw_leaked(ax, key, end, by_granted, accounted)
    top = max(top, *accounted, *uy)
    if key.api_calls is not None:
        ax_, ay = step_xy(key.api_calls, end)
        ax.step(
            ax_,
            ay,
            where="post",
            color=_API,
            lw=1.3,
            ls="--",
            label="calls in flight at the API\n(ground truth)",
        )
        top = max(top, *ay)
    labelled = min(len(_violations(key)), _VIOLATION_LABELS + 1)
    # Room above the data for the violations' labels, which hang from the top of the panel.
    ax.set_ylim(0, (top * 1.12 + 1) * (1 + 0.16 * labelled))
    for band in data.bands:
        if not band.concerns(key.key):
            continue
        ax.text(
            band.start_ms / 1000,
            0.98,
            f" {band.target} cut off",
            transform=ax.get_xaxis_transform(),
            va="top",
            fontsize=7,
            color="#922b21",
        )
    for (_, before), (t, after) in itertools.pairwise(key.limit):
        # After the change (before it, if there is no room: see _fit_labels), just above the
        # new level if it fell, below it if it rose.
        ax.annotate(
            f"limit {before} → {after}",
            (t / 1000, after),
            xytext=(4, 3 if after < before else -3),
            textcoords="offset points",
            ha="left",
            va="bottom" if after < before else "top",
            fontsize=8,
            gid="limit-label",
        )
    _label_violations(ax, key, xlim)
    ax.set_ylabel("permits")
    against = "permits actually in use" if key.clients_known else "the limit"
    ax.set_title(f"{prefix}holder accounting vs {against}", loc="left", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _right_half(x: float, xlim: tuple[float, float]) -> bool:
    """Whether ``x`` lies in the right half of the axis: its labels then go to its left."""
    return x - xlim[0] > (xlim[1] - xlim[0]) / 2


def _violations(key: KeySeries) -> list[tuple[str, list[Mark]]]:
    """A key's violations by label (``invariant (finding)``), in the order each first happened."""
    kinds: dict[str, list[Mark]] = {}
    for mark in key.marks:
        if mark.kind == "violation":
            kinds.setdefault(mark.label, []).append(mark)
    return list(kinds.items())


def _shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut at a word so no number is left half-shown."""
    if len(text) <= limit:
        return text
    cut = text[:limit]  # a space just past the last word shown still ends it
    words = cut.rsplit(" ", 1)[0] if " " in cut else cut[: limit - 1]
    return words.rstrip(" ,;:") + "…"


#: Vertical step between stacked violation labels (two lines of 8 pt text in a box), in points.
_VIOLATION_LABEL_STEP: Final = 28


def _label_violations(ax: Any, key: KeySeries, xlim: tuple[float, float]) -> None:
    """Name each kind of violation next to its first line, stacked down from the panel's top."""
    kinds = _violations(key)
    for row, (label, marks) in enumerate(kinds[:_VIOLATION_LABELS]):
        first = marks[0]
        x = first.t_ms / 1000
        left = _right_half(x, xlim)
        times = f" ×{len(marks)}, first at {x:g} s" if len(marks) > 1 else f" at {x:g} s"
        ax.annotate(
            f"violated: {label}{times}\n{_shorten(first.detail, 64)}",
            (x, 1.0),
            xycoords=ax.get_xaxis_transform(),
            xytext=(-6 if left else 6, -5 - row * _VIOLATION_LABEL_STEP),
            textcoords="offset points",
            ha="right" if left else "left",
            va="top",
            fontsize=8,
            color="#a00000",
            bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": _VIOLATION, "lw": 0.8, "alpha": 0.92},
            zorder=6,
            gid="violation-label",
        )
    more = len(kinds) - _VIOLATION_LABELS
    if more > 0:
        ax.annotate(
            f"and {more} more violated invariant{'s' if more > 1 else ''} (see the strip below)",
            (1.0, 1.0),
            xycoords="axes fraction",
            xytext=(-6, -5 - _VIOLATION_LABELS * _VIOLATION_LABEL_STEP),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=8,
            color="#a00000",
            zorder=6,
            gid="violation-label",
        )


def _merge(a: Steps, b: Steps) -> list[tuple[int, int, int]]:
    """Two step series on one time base: ``(t, a(t), b(t))`` at every change of either."""
    times = sorted({t for t, _ in a} | {t for t, _ in b})
    return [(t, value_at(a, t) or 0, value_at(b, t) or 0) for t in times]


def _draw_marks(
    ax: Any, key: KeySeries, data: PlotData, prefix: str, xlim: tuple[float, float], line2d: Any, patch: Any
) -> None:
    #: (tick label, times in s, marker, colour, is a violation): one row per kind, one per violation.
    rows: list[tuple[str, list[float], str, str, bool]] = [
        (
            f"{name} ({_count(key, name)})",
            [m.t_ms / 1000 for m in key.marks if m.kind == name],
            marker,
            color,
            False,
        )
        for name, marker, color in _MARK_ROWS
        if any(m.kind == name for m in key.marks)
    ]
    rows += [
        (f"violated: {label} ×{len(marks)}", [m.t_ms / 1000 for m in marks], "*", _VIOLATION, True)
        for label, marks in _violations(key)
    ]
    what = "faults, alarms, operator, violations" if _violations(key) else "faults, alarms, operator"
    ax.set_title(f"{prefix}what happened ({what})", loc="left", fontsize=10)
    ax.grid(False)
    if not rows:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no faults, alarms or limit changes", transform=ax.transAxes, ha="center")
    for index, (_, times, marker, color, violation) in enumerate(rows):
        if violation:
            # Big, above the violation's line, and never clipped: the run may end on it.
            ax.scatter(
                times,
                [index] * len(times),
                marker=marker,
                color=color,
                edgecolors="#7b0000",
                s=110,
                lw=0.6,
                zorder=5,
                clip_on=False,
                gid="violation-marker",
            )
        else:
            # Unclipped too: a run's last event (liveness judged, say) sits on the axis's edge.
            ax.scatter(
                times, [index] * len(times), marker=marker, color=color, s=30, lw=1.2, zorder=3, clip_on=False
            )
        ax.axhline(index, color="#dddddd", lw=0.6, zorder=1)
    if rows:
        ax.set_yticks(range(len(rows)), [label for label, *_ in rows], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
    handles = []
    if any(band.concerns(key.key) for band in data.bands):
        handles.append(patch(color="#c0392b", alpha=0.15, label="partition (shaded)"))
    if any(m.kind == "holder evicted" for m in key.marks):
        handles.append(line2d([], [], color="#c0392b", lw=0.9, ls="--", label="holder evicted"))
    if any(m.kind == "violation" for m in key.marks):
        handles.append(line2d([], [], color=_VIOLATION, lw=1.2, alpha=0.8, label="invariant violated"))
    if xlim[1] > data.end_ms / 1000:
        handles.append(patch(color=_AFTER_RUN, label="after the run ended"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _count(key: KeySeries, kind: str) -> int:
    return sum(1 for m in key.marks if m.kind == kind)


def _draw_group(ax: Any, group: GroupSeries, data: PlotData, prefix: str, integer_ticks: Any) -> None:
    end = data.end_ms
    by_granted, by_leased = _stack_charged(ax, group.granted, group.leased, end)
    ux, uy = step_xy(group.in_use, end)
    ax.step(ux, uy, where="post", color=_IN_USE, lw=1.4, label="in use by clients")
    top = max([*uy, *(g + leased for g, leased in zip(by_granted, by_leased, strict=True)), 1])
    if any(v is not None for _, v in group.limit):
        gx, gy = step_xy(group.limit, end)
        ax.step(gx, gy, where="post", color="black", lw=1.6, label="group limit")
        top = max(top, *(v for v in gy if v == v))  # v == v: not NaN (no limit then)
    ax.set_ylim(0, top * 1.15 + 0.5)
    ax.set_ylabel("permits")
    ax.set_title(f"{prefix}group '{group.group}'", loc="left", fontsize=10)
    # Waiting items can outnumber permits by far: their own scale, on the right.
    twin = ax.twinx()
    wx, wy = step_xy(group.waiting, end)
    twin.step(wx, wy, where="post", color=_WAITING, lw=1.0, ls="--", label="items waiting (right axis)")
    twin.set_ylim(0, max(wy) * 1.15 + 0.5)
    twin.set_ylabel("items waiting", color=_WAITING, fontsize=8)
    twin.tick_params(axis="y", colors=_WAITING, labelsize=8)
    twin.yaxis.set_major_locator(integer_ticks(integer=True, nbins=4))
    handles, labels = ax.get_legend_handles_labels()
    more_handles, more_labels = twin.get_legend_handles_labels()
    ax.legend(
        handles + more_handles,
        labels + more_labels,
        loc="upper left",
        bbox_to_anchor=(1.045, 1.0),
        fontsize=8,
        frameon=False,
    )


# --- the command ------------------------------------------------------------------------


def cmd_plot(args: argparse.Namespace) -> int:
    """``semsim plot TRACE.jsonl -o F.png [--per-group]``.

    A trace that parses but names no holder (or lacks the holder's limit)
    is an error: there is nothing to draw against. A trace of a run in which
    nothing happened is a valid, nearly empty plot (just the limit).
    """
    from semsim.inputs.commands import json_result

    with json_result(args.json) as out:
        status = _plot(args, out)
    return status


def _plot(args: argparse.Namespace, out: dict[str, Any] | None) -> int:
    from semsim.inputs.commands import UsageError, distinct_files, output_file
    from semsim.runtime.trace import TraceError, read_trace

    trace_path: Path = args.trace
    output: Path = output_file(args.output, "-o", image=True)
    distinct_files([("the trace being plotted (TRACE.jsonl)", trace_path)], [("-o", output)])
    try:
        header, events = read_trace(trace_path)
    except TraceError as error:
        raise UsageError(str(error)) from None
    try:
        plot_trace(header, events, output, title=trace_path.name, per_group=bool(args.per_group))
    except PlotError as error:
        raise UsageError(f"{trace_path}: cannot plot: {error}") from None
    print(f"plot written to {written_to(output)}")
    if out is not None:
        out.update(trace=read_from(trace_path), plot=written_to(output), per_group=bool(args.per_group))
    return 0


# --- the documentation's example ----------------------------------------------------------

#: docs/example-plot.png: ``render_example(Path("docs/example-plot.png"))``.
EXAMPLE_SEED: Final = 3
EXAMPLE_TITLE: Final = "eviction, lost replies, lowered limit"


def example_run() -> Any:
    """A short run with a story: the holder is evicted at 45 s, 8% of replies are lost, client-1 is
    cut off from 70 s to 80 s, and the operator lowers the limit from 8 to 4 at 90 s."""
    from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
    from semsim.world.faults import Eviction, FaultPlan, LimitChange, Window
    from semsim.world.workload import Workload

    config = WorldConfig(
        duration_ms=150_000,
        holder=HolderSpec(limit=8, leases=LeaseSpec(permits_per_lease=3)),
        workload=Workload(
            clients=3, plain_clients=1, items_per_minute=9.0, duration_ms=(3_000, 15_000), until_ms=120_000
        ),
    )
    plan = FaultPlan(
        reply_loss=0.08,
        evictions=(Eviction("holder:acct", 45_000),),
        partitions=(Window("client-1", 70_000, 80_000),),
        limit_changes=(LimitChange(90_000, 4),),
    )
    return run_world(config, plan, seed=EXAMPLE_SEED)


def render_example(path: Path) -> None:
    """Render the documentation's example plot (deterministic: same bytes of trace every time)."""
    run = example_run()
    plot_trace(run.trace.header, list(run.trace.events()), path, title=EXAMPLE_TITLE)
