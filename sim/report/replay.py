"""``semsim replay``: recorded wire traffic through the holder model, holder-side invariants checked.

A traffic file (JSON lines) is a holder's configuration followed by what
reached it, in order: requests, syncs, rounds, reclaims, the operator's
limit changes, evictions. Replaying it through ``semaphore_core.Holder``
answers "what would the reference holder have done with this traffic, and
did it stay safe?" for traffic recorded anywhere: from a simulation
(``record_traffic``), from a production log, or written by hand to pin a
counterexample.

Everything is validated before the first message is replayed, so a
malformed file changes nothing and says which line is wrong (exit 2).
After every step the holder-side invariants (docs/INVARIANTS.md) are
checked: ``ceiling``, ``group_ceiling``, ``reports_monotone`` and, at every
eviction and at the end, ``durable``; after every round, ``reuse`` and
``lease_fairness`` (sim/check/allocation_checks.py, judged from the round's
requests, replies and rows alone). ``conservative`` and ``real_ceiling``
need to know what clients actually run, which wire traffic does not say;
``alarm_armed`` needs the platform's alarm, ``no_overask`` a client's queue:
they belong to ``semsim run``.

The format (the README has it in full). Line 1 is the config, in the
reference's names (``DurabilitySemaphoreConfig``)::

    {"kind": "config", "key": "acct", "limit": 10, "roundWaitMs": 1000, "roundPeriodMs": 2000,
     "grantTimeoutMs": 10000, "leases": {"provisioning": {"mode": "strict"}, "permitsPerLease": 64,
     "ttlMs": 1800000, "maxGroups": 100, "maxClientsPerGroup": 100, "limitedGroups": "exclude"},
     "groupLimits": {"g": 3}, "fixes": [], "schedule": "auto", "idPrefix": "acct/g-"}

Then lines with ``t`` (ms, never decreasing) and ``kind``: ``request`` and
``sync`` (``body``: the wire message), ``round`` and ``reclaim`` (run one
now), ``limit`` (``limit``), ``groupLimit`` (``group``, ``limit`` or null),
``evict``. With ``schedule: auto`` rounds are batched as the holder object
batches them and the alarm reclaims at every claim deadline; with
``explicit`` only ``round``/``reclaim`` lines run them (what a recording
uses, since it knows when they ran). Blank lines are skipped, as in a trace
(``semsim.inputs.files.json_lines``); messages' line numbers count them.
"""

from __future__ import annotations

import argparse
import importlib.resources
import itertools
import json
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from semaphore_core import (
    GrantReclaimed,
    Holder,
    HolderConfig,
    LeaseGranted,
    LeaseOptions,
    Over,
    Ratio,
    SemaphoreProtocolError,
    Strict,
    Under,
)
from semaphore_core.numbers import MAX_SAFE_INTEGER, as_safe_int
from semaphore_core.protocol import PermitRequest, PermitSync, parse_request
from semaphore_core.store import GrantRow, LeaseRow
from semsim.check.allocation_checks import LEASE_FAIRNESS, REUSE, AllocationChecks
from semsim.check.ceiling import ceiling_rule
from semsim.check.group_ceiling import group_ceiling_rule
from semsim.inputs.commands import plural
from semsim.inputs.files import InputError, json_lines, parse_json, read_from, read_text, write_text_whole

if TYPE_CHECKING:
    from semsim.harness.run import WorldRun

#: Bounds on what a traffic file may hold: replay is for recordings, not archives.
MAX_TRAFFIC_BYTES: Final = 64 * 1024 * 1024
MAX_TRAFFIC_LINES: Final = 500_000
#: How many ways to order same-instant deliveries the recorder tries for one round.
MAX_RECORDING_CHOICES: Final = 256
#: How many violations are printed one per line (all are counted).
MAX_PRINTED_VIOLATIONS: Final = 20
#: The invariants replay checks, in the order they are reported.
CHECKED: Final = ("ceiling", "group_ceiling", "reports_monotone", "durable")
#: And after every round.
ROUND_CHECKED: Final = (REUSE, LEASE_FAIRNESS)
#: The lease rows as ``SELECT *`` returns them, what the allocation checks read.
_LEASE_ROWS: Final = "SELECT * FROM durability_semaphore_leases"

Schedule = Literal["auto", "explicit"]
LINE_KINDS: Final = ("request", "sync", "round", "reclaim", "limit", "groupLimit", "evict")
_LINE_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "request": frozenset({"body"}),
    "sync": frozenset({"body"}),
    "round": frozenset(),
    "reclaim": frozenset(),
    "limit": frozenset({"limit"}),
    "groupLimit": frozenset({"group", "limit"}),
    "evict": frozenset(),
}
_CONFIG_FIELDS: Final = frozenset(
    {
        "kind",
        "key",
        "limit",
        "roundWaitMs",
        "roundPeriodMs",
        "grantTimeoutMs",
        "leases",
        "groupLimits",
        "fixes",
        "schedule",
        "idPrefix",
    }
)
#: The config's timing fields -> ``HolderConfig``'s names (and the leases' numbers -> ``LeaseOptions``').
_HOLDER_NUMBERS: Final = {
    "roundWaitMs": "round_wait_ms",
    "roundPeriodMs": "round_period_ms",
    "grantTimeoutMs": "grant_timeout_ms",
}
_LEASE_NUMBERS: Final = {
    "permitsPerLease": "permits_per_lease",
    "ttlMs": "ttl_ms",
    "maxGroups": "max_groups",
    "maxClientsPerGroup": "max_clients_per_group",
}
_LEASE_FIELDS: Final = frozenset({"provisioning", "limitedGroups", *_LEASE_NUMBERS})
_LIMITED_GROUPS: Final = {"exclude": "exclude", "withinGroupLimit": "within_group_limit"}
#: Error messages are cut to this many characters: a value may be megabytes long.
MAX_MESSAGE_CHARS: Final = 1_000


#: What ``str.splitlines`` (and a terminal) would break a message at.
_LINE_BREAKS: Final = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


class TrafficError(ValueError):
    """A traffic file is unreadable or malformed; the message names the file and line.

    The message is one line of bounded length whatever the file held (a group
    name with a newline, a limit that is a megabyte of text).
    """

    def __init__(self, message: str) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            cut = len(message) - MAX_MESSAGE_CHARS
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({cut:,} more characters)"
        super().__init__(
            "".join(c.encode("unicode_escape").decode("ascii") if c in _LINE_BREAKS else c for c in message)
        )


# --- the file -----------------------------------------------------------------------------


@attrs.frozen
class TrafficConfig:
    """The first line: the holder's configuration, in the reference's names."""

    key: str
    limit: int
    round_wait_ms: int = 1_000
    round_period_ms: int = 2_000
    grant_timeout_ms: int = 10_000
    leases: LeaseOptions | None = None
    group_limits: tuple[tuple[str, int], ...] = ()
    fixes: frozenset[str] = frozenset()
    #: ``auto``: rounds and the alarm's reclaims happen as the holder object schedules them;
    #: ``explicit``: only at ``round`` and ``reclaim`` lines (a recording says when they ran).
    schedule: Schedule = "auto"
    #: Ids of new grants and leases are ``{id_prefix}1``, ``{id_prefix}2``, ... as the simulator
    #: draws them, so recorded reports name the grants the replayed holder issues.
    id_prefix: str = ""


@attrs.frozen
class TrafficLine:
    """One timed line. ``message`` for request and sync lines; ``limit``/``group`` for limit lines."""

    number: int
    t_ms: int
    kind: str
    message: PermitRequest | PermitSync | None = None
    limit: int | None = None
    group: str | None = None


@attrs.frozen
class Traffic:
    path: Path
    config: TrafficConfig
    lines: tuple[TrafficLine, ...]


#: A line's latest time: half the safe integers, so the times the replay derives from it (a
#: round's wait, a claim deadline, a lease's expiry, each under 2^31 ms) stay safe integers,
#: which is what the holder takes as ``now``.
MAX_T_MS: Final = 2**52


def _safe_int(value: object, what: str, minimum: int = 0, maximum: int = MAX_SAFE_INTEGER) -> int:
    """``value`` as an int if it is a safe integer >= ``minimum`` by JavaScript's rules, as the
    wire and ``HolderConfig`` judge numbers: ``3.0`` is 3; ``true``, ``2.5`` and ``1e23`` are not."""
    as_int = as_safe_int(value)
    if as_int is None or not minimum <= as_int <= maximum:
        raise ValueError(
            f"{what} must be an integer >= {minimum} and at most {maximum}, got {json.dumps(value)}"
        )
    return as_int


def _at_most_safe(name: str, value: object) -> None:
    """Refuse an integer the core accepted past 2^53 - 1, which no JSON number from the reference
    can be: ``LeaseOptions`` and ``Under``/``Over`` bound only their delays, and a lease of 10^20
    permits would overflow the store's integers mid-replay."""
    if isinstance(value, int) and value > MAX_SAFE_INTEGER:
        raise ValueError(f"{name} must be at most {MAX_SAFE_INTEGER}, got {value!r}")


def _amount(value: object, what: str) -> object:
    """An absolute amount (for ``Under``/``Over`` to judge) or ``{"ratio": x}`` as a ``Ratio``."""
    if not isinstance(value, Mapping):
        return value
    if set(value) != {"ratio"}:
        raise ValueError(f'{what} must be an integer or {{"ratio": number}}, got {json.dumps(value)}')
    ratio = value["ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, int | float):
        raise ValueError(f"{what}.ratio must be a number, got {json.dumps(ratio)}")
    if ratio > MAX_SAFE_INTEGER:  # before float(): an integer past the largest double overflows
        raise ValueError(f"{what}.ratio must be at most {MAX_SAFE_INTEGER}, got {json.dumps(ratio)}")
    return Ratio(float(ratio))  # finite and >= 0, or SemaphoreConfigError


_PROVISIONING_SHAPES: Final = (
    '{"mode": "strict"}, {"mode": "under", "reserve": N} or {"mode": "over", "extra": N} '
    '(N an integer or {"ratio": x})'
)


def _provisioning(value: object) -> Strict | Under | Over:
    if not isinstance(value, Mapping):
        raise ValueError(f"leases.provisioning must be an object, got {json.dumps(value)}")
    mode = value.get("mode")
    if mode not in ("strict", "under", "over"):
        raise ValueError(f"leases.provisioning must be {_PROVISIONING_SHAPES}; got mode {json.dumps(mode)}")
    if mode == "strict" and set(value) == {"mode"}:
        return Strict()
    if mode == "under" and set(value) == {"mode", "reserve"}:
        under = Under(reserve=_amount(value["reserve"], "leases.provisioning.reserve"))
        _at_most_safe("leases.provisioning.reserve", under.reserve)
        return under
    if mode == "over" and set(value) == {"mode", "extra"}:
        over = Over(extra=_amount(value["extra"], "leases.provisioning.extra"))
        _at_most_safe("leases.provisioning.extra", over.extra)
        return over
    raise ValueError(f"leases.provisioning must be {_PROVISIONING_SHAPES}, got {json.dumps(value)}")


def _lease_options(value: object) -> LeaseOptions | None:
    """``leases`` -> ``LeaseOptions``, which judges the numbers (absent ones take its defaults)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"leases must be an object or null, got {json.dumps(value)}")
    unknown = sorted(set(value) - _LEASE_FIELDS)
    if unknown:
        raise ValueError(f"leases: unknown field {unknown[0]!r} (known: {', '.join(sorted(_LEASE_FIELDS))})")
    numbers = {name: value[field] for field, name in _LEASE_NUMBERS.items() if field in value}
    limited = value.get("limitedGroups", "exclude")
    if not isinstance(limited, str) or limited not in _LIMITED_GROUPS:
        raise ValueError(
            f'leases.limitedGroups must be "exclude" or "withinGroupLimit", got {json.dumps(limited)}'
        )
    options = LeaseOptions(
        provisioning=_provisioning(value.get("provisioning", {"mode": "strict"})),
        limited_groups=_LIMITED_GROUPS[limited],  # type: ignore[arg-type]
        **numbers,
    )
    for name in ("permits_per_lease", "max_groups", "max_clients_per_group"):
        _at_most_safe(f"leases.{name}", getattr(options, name))
    return options


def _group_limits(value: object) -> tuple[tuple[str, int], ...]:
    """Each group's answer from the ``groupLimit`` callback; null (or no entry) is no limit."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValueError(f"config.groupLimits must be an object or null, got {json.dumps(value)}")
    limits = []
    for group, limit in sorted(value.items()):
        if limit is None:
            continue
        as_int = as_safe_int(limit)
        if as_int is None or as_int < 0:
            raise ValueError(
                f"config.groupLimits[{json.dumps(group)}] must be null or an integer >= 0 and at most "
                f"{MAX_SAFE_INTEGER}, got {json.dumps(limit)}"
            )
        limits.append((group, as_int))
    return tuple(limits)


def _config(record: Mapping[str, Any]) -> TrafficConfig:
    """Line 1. The holder's numbers are judged by ``HolderConfig``/``LeaseOptions`` themselves, so
    replay accepts what the core accepts and refuses the rest with the core's messages; this
    checks only what the core cannot see (names, shapes, the file's own fields).

    Not structured by cattrs, as case files are (:mod:`semsim.inputs.structure`): the line is
    in the reference's wire names, with JavaScript's number rules (``3.0`` is 3), and its values'
    types and ranges already live in one place, the core's ``HolderConfig`` and ``LeaseOptions``,
    which judge them here. What is left is shape: which fields, and the few the core never sees."""
    if record.get("kind") != "config":
        raise ValueError('the first line must be the holder\'s config ({"kind": "config", ...})')
    unknown = sorted(set(record) - _CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"config: unknown field {unknown[0]!r} (known: {', '.join(sorted(_CONFIG_FIELDS))})")
    if "key" not in record:
        raise ValueError("config needs 'key': the holder's key, a non-empty string")
    key = record["key"]
    if not isinstance(key, str) or not key:
        raise ValueError(f"config.key must be a non-empty string, got {json.dumps(key)}")
    if "limit" not in record:
        raise ValueError("config needs 'limit': the deployment's limit, a non-negative safe integer")
    fixes = record.get("fixes")
    if fixes is None:
        fixes = []
    if not isinstance(fixes, list) or not all(isinstance(f, str) for f in fixes):
        raise ValueError(f"config.fixes must be a list of fix names, got {json.dumps(fixes)}")
    schedule = record.get("schedule", "auto")
    if schedule not in ("auto", "explicit"):
        raise ValueError(f'config.schedule must be "auto" or "explicit", got {json.dumps(schedule)}')
    id_prefix = record.get("idPrefix", f"{key}/g-")
    if not isinstance(id_prefix, str):
        raise ValueError(f"config.idPrefix must be a string, got {json.dumps(id_prefix)}")
    group_limits = _group_limits(record.get("groupLimits"))
    timing = {name: record[field] for field, name in _HOLDER_NUMBERS.items() if field in record}
    holder = HolderConfig(
        limit=record["limit"], leases=_lease_options(record.get("leases")), fixes=frozenset(fixes), **timing
    )
    assert isinstance(holder.limit, int)  # HolderConfig refused anything else
    return TrafficConfig(
        key=key,
        limit=holder.limit,
        round_wait_ms=holder.round_wait_ms,
        round_period_ms=holder.round_period_ms,
        grant_timeout_ms=holder.grant_timeout_ms,
        leases=holder.leases,
        group_limits=group_limits,
        fixes=holder.fixes,
        schedule=schedule,
        id_prefix=id_prefix,
    )


def _line(number: int, record: Mapping[str, Any], schedule: Schedule) -> TrafficLine:
    if "kind" not in record:
        raise ValueError(f"a line needs 'kind': one of {', '.join(LINE_KINDS)}")
    kind = record["kind"]
    if kind == "config":
        raise ValueError("only the first line is a config line")
    if not isinstance(kind, str) or kind not in _LINE_FIELDS:
        raise ValueError(f"unknown kind {json.dumps(kind)} (known: {', '.join(LINE_KINDS)})")
    a_kind = f"{_article(kind)} {kind} line"
    unknown = sorted(set(record) - {"t", "kind"} - _LINE_FIELDS[kind])
    if unknown:
        raise ValueError(f"{a_kind} has no field {unknown[0]!r}")
    if "t" not in record:
        raise ValueError(
            f"{a_kind} needs 't': its time in virtual milliseconds, an integer >= 0 and at most {MAX_T_MS}"
        )
    t_ms = _safe_int(record["t"], "t", maximum=MAX_T_MS)
    if kind == "round" and schedule != "explicit":
        raise ValueError(
            'round lines need "schedule": "explicit" in the config (auto schedules rounds itself)'
        )
    if kind in ("request", "sync"):
        if "body" not in record:
            raise ValueError(f"{a_kind} needs a 'body': the wire message")
        message = parse_request(record["body"])
        if (kind == "request") != isinstance(message, PermitRequest):
            raise ValueError(f"{a_kind}'s body must be a wire {kind}, got type {record['body']['type']!r}")
        return TrafficLine(number, t_ms, kind, message=message)
    if kind == "limit":
        if "limit" not in record:
            raise ValueError(f"a limit line needs 'limit': an integer >= 0 and at most {MAX_SAFE_INTEGER}")
        return TrafficLine(number, t_ms, kind, limit=_safe_int(record["limit"], "limit"))
    if kind == "groupLimit":
        group = record.get("group")
        if not isinstance(group, str):
            raise ValueError(f"a groupLimit line needs a string 'group', got {json.dumps(group)}")
        if "limit" not in record:
            raise ValueError(
                "a groupLimit line needs 'limit': an integer >= 0, or null to lift the group's limit"
            )
        limit = record["limit"]
        return TrafficLine(
            number, t_ms, kind, group=group, limit=None if limit is None else _safe_int(limit, "limit")
        )
    return TrafficLine(number, t_ms, kind)


def read_traffic(path: str | os.PathLike[str]) -> Traffic:
    """Parse and validate a whole traffic file; raises TrafficError naming the file and line."""
    path = Path(path)
    try:
        # Refuses devices, pipes and directories unread, and stops reading past the bound
        # (``st_size`` is 0 for ``/dev/zero``, which once grew replay to 13 GB).
        text = read_text(path, MAX_TRAFFIC_BYTES, "a traffic file")
    except InputError as error:
        raise TrafficError(str(error)) from None
    where = read_from(path)  # what messages call it: standard input, for -
    numbered = json_lines(text)  # blank lines skipped, as in a trace; numbers count every line
    if not numbered:
        raise TrafficError(
            f'{where}: empty: a traffic file starts with a config line ({{"kind": "config", ...}})'
        )
    if len(numbered) > MAX_TRAFFIC_LINES:
        raise TrafficError(
            f"{where}: {len(numbered)} lines (blank ones not counted); "
            f"replay reads at most {MAX_TRAFFIC_LINES}"
        )
    config: TrafficConfig | None = None
    lines: list[TrafficLine] = []
    last_t, last_number = 0, 1
    for number, text_line in numbered:
        try:
            record = parse_json(text_line)
        except InputError as error:
            raise TrafficError(f"{where}:{number}: {error}") from None
        if not isinstance(record, dict):
            raise TrafficError(f"{where}:{number}: each line must be a JSON object")
        try:
            if config is None:
                config = _config(record)
                continue
            line = _line(number, record, config.schedule)
        except (ValueError, SemaphoreProtocolError) as error:
            raise TrafficError(f"{where}:{number}: {error}") from None
        if line.t_ms < last_t:
            raise TrafficError(
                f"{where}:{number}: time goes backwards ({line.t_ms} ms after {last_t} ms) since line "
                f"{last_number}: t must never decrease"
            )
        last_t, last_number = line.t_ms, number
        lines.append(line)
    assert config is not None
    return Traffic(path=path, config=config, lines=tuple(lines))


# --- the replay ---------------------------------------------------------------------------


@attrs.frozen
class Violation:
    """An invariant that failed after a step; ``finding`` names the known finding that explains it."""

    invariant: str
    t_ms: int
    #: The traffic lines the step came from (a round: its requests' lines).
    lines: tuple[int, ...]
    step: str
    detail: str
    finding: str | None = None
    #: The last line replayed before the step (0: none); what locates an auto round or alarm.
    after_line: int = 0

    def describe(self, path: Path) -> str:
        source = read_from(path)
        where = (
            f"{source}:{_line_list(self.lines)}" if self.lines else f"{source}, after line {self.after_line}"
        )
        known = f" [known finding {self.finding}, docs/FINDINGS.md]" if self.finding else ""
        return f"VIOLATED {self.invariant} at {where}, t={self.t_ms} ms, {self.step}: {self.detail}{known}"


@attrs.frozen
class Summary:
    """What the replay did and the most the holder charged."""

    key: str
    lines: int
    first_ms: int
    last_ms: int
    requests: int
    syncs: int
    rounds: int
    #: Requests queued for a round when the holder was evicted (their callers got an error).
    requests_lost: int
    reclaim_passes: int
    evictions: int
    limit_changes: int
    grants: int
    granted_permits: int
    leases: int
    leased_permits: int
    reclaimed_permits: int
    report_results: tuple[tuple[str, int], ...]
    blocked: tuple[tuple[str, int], ...]
    peak_usage: int
    peak_granted: int
    peak_leased: int
    peak_at_ms: int
    final_granted: int
    final_leased: int


@attrs.frozen
class ReplayResult:
    summary: Summary
    violations: tuple[Violation, ...]
    #: The holder's grant and lease rows at the end, oldest first.
    grants: tuple[GrantRow, ...] = ()
    leases: tuple[LeaseRow, ...] = ()


def _article(word: str) -> str:
    """``a`` or ``an`` before ``word`` (a line's kind: ``an evict line``, ``a request line``)."""
    return "an" if word[:1].lower() in ("a", "e", "i", "o", "u") else "a"


def _line_list(numbers: Sequence[int]) -> str:
    if len(numbers) == 1:
        return str(numbers[0])
    if list(numbers) == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    shown = ",".join(str(n) for n in numbers[:8])
    return shown + (",..." if len(numbers) > 8 else "")


def _holder_config(config: TrafficConfig, limit: Any, group_limits: Mapping[str, int]) -> HolderConfig:
    return HolderConfig(
        limit=limit,
        group_limit=group_limits.get,
        round_wait_ms=config.round_wait_ms,
        round_period_ms=config.round_period_ms,
        grant_timeout_ms=config.grant_timeout_ms,
        leases=config.leases,
        fixes=config.fixes,
    )


_Rows = tuple[dict[str, GrantRow], dict[str, LeaseRow]]


class _Replayer:
    """One replay: the holder on its connection, the schedule, the invariant checks and the counts."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic
        self.config = config = traffic.config
        self.limit = config.limit
        self.group_limits: dict[str, int] = dict(config.group_limits)
        self.conn = sqlite3.connect(":memory:")
        self._ids = 0
        self.holder = self._build()
        self.pending: list[tuple[TrafficLine, PermitRequest]] = []
        self.round_due_ms: int | None = None
        self.last_round_ms: int | None = None
        self.violations: list[Violation] = []
        self.counts: Counter[str] = Counter()
        self.results: Counter[str] = Counter()
        self.blocked: Counter[str] = Counter()
        self.peak = (0, 0, 0, 0)  # total, granted, leased, t
        self.usage_before = (0, 0)
        self.groups_before: dict[str, tuple[int, int]] = {}
        self.rows_before: _Rows = ({}, {})
        self.allocation = AllocationChecks()
        self.after_line = 1  # the config line

    def _new_id(self) -> str:
        self._ids += 1
        return f"{self.config.id_prefix}{self._ids}"

    def _build(self) -> Holder:
        """A holder instance on the (durable) connection; the id counter outlives instances."""
        return Holder(
            self.conn, _holder_config(self.config, lambda: self.limit, self.group_limits), new_id=self._new_id
        )

    # --- driving ---------------------------------------------------------------------------

    def run(self, progress: Callable[[int], None] | None = None) -> ReplayResult:
        for index, line in enumerate(self.traffic.lines, start=1):
            if self.config.schedule == "auto":
                self._due_work(until_ms=line.t_ms)
            self._line(line)
            self.after_line = line.number
            if progress is not None and index % PROGRESS_EVERY_LINES == 0:
                progress(index)
        if self.config.schedule == "auto":
            self._due_work(until_ms=None)
        end_ms = self.traffic.lines[-1].t_ms if self.traffic.lines else 0
        self._durable(end_ms, (), "end of traffic")
        store = self.holder.store
        return ReplayResult(
            self._summary(),
            tuple(self.violations),
            grants=tuple(store.list_grants()),
            leases=tuple(store.list_leases()),
        )

    def _due_work(self, until_ms: int | None) -> None:
        """Auto schedule: run due rounds and alarm reclaims at their times, up to ``until_ms``.

        Work due at ``T`` runs before a line stamped ``T``: a request arriving at
        the very instant a round fires joins the next one.
        """
        while True:
            alarm_ms = self.holder.next_alarm_at()
            round_ms = self.round_due_ms if self.pending else None
            due = [t for t in (alarm_ms, round_ms) if t is not None and (until_ms is None or t <= until_ms)]
            if not due:
                return
            at_ms = min(due)
            if alarm_ms == at_ms:
                self._reclaim(at_ms, (), "alarm")
            else:
                self._round(at_ms)

    def _line(self, line: TrafficLine) -> None:
        t, where = line.t_ms, (line.number,)
        if line.kind == "request":
            assert isinstance(line.message, PermitRequest)
            self.counts["requests"] += 1
            self.pending.append((line, line.message))
            if self.config.schedule == "auto" and self.round_due_ms is None:
                # The holder object's #scheduleRound: wait for more requests, never closer
                # than a period after the last round.
                earliest = (
                    t if self.last_round_ms is None else self.last_round_ms + self.config.round_period_ms
                )
                self.round_due_ms = max(t + self.config.round_wait_ms, earliest)
        elif line.kind == "sync":
            assert isinstance(line.message, PermitSync)
            self.counts["syncs"] += 1
            reply = self.holder.sync_message(line.message, t)
            self.results.update(result.status for result in reply.grant_results)
            self._check(t, where, f"sync from {line.message.client_id}", sync_client=line.message.client_id)
        elif line.kind == "round":
            self._round(t, explicit_line=line.number)
        elif line.kind == "reclaim":
            self._reclaim(t, where, "reclaim")
        elif line.kind == "limit":
            assert line.limit is not None
            self.counts["limit_changes"] += 1
            self.limit = line.limit
            self._check(t, where, f"limit set to {line.limit}")
        elif line.kind == "groupLimit":
            assert line.group is not None
            self.counts["limit_changes"] += 1
            if line.limit is None:
                self.group_limits.pop(line.group, None)
            else:
                self.group_limits[line.group] = line.limit
            self._check(t, where, f"group {line.group} limit set to {line.limit}")
        elif line.kind == "evict":
            self._evict(t, line.number)

    def _round(self, t_ms: int, explicit_line: int | None = None) -> None:
        pending, self.pending = self.pending, []
        self.round_due_ms = None
        self.last_round_ms = t_ms
        leases_before = {row[0]: tuple(row) for row in self.conn.execute(_LEASE_ROWS)}
        outcome = self.holder.round([request for _, request in pending], t_ms)
        self.counts["rounds"] += 1
        for reply in outcome.replies:
            self.counts["grants"] += len(reply.grants)
            self.counts["granted_permits"] += sum(grant.permits for grant in reply.grants)
            self.results.update(result.status for result in reply.grant_results)
            self.blocked.update(blocked.reason for blocked in reply.blocked)
        for event in outcome.events:
            if isinstance(event, LeaseGranted):
                self.counts["leases"] += 1
                self.counts["leased_permits"] += event.permits
            elif isinstance(event, GrantReclaimed):
                self.counts["reclaimed_permits"] += event.permits
        numbers = tuple(line.number for line, _ in pending)
        if explicit_line is not None:
            numbers += (explicit_line,)
        self._check(t_ms, numbers, f"a round of {plural(len(pending), 'request')}")
        leases_after = {row[0]: tuple(row) for row in self.conn.execute(_LEASE_ROWS)}
        self.allocation.committed(
            self.config.key,
            {"leases": leases_before},
            {"leases": leases_after},
            self.holder.usage(t_ms),
            self.group_limits,
        )
        requests = [request for _, request in pending]
        for name, detail in self.allocation.round(
            self.config.key, self.config.leases, self.config.fixes, requests, outcome.replies, t_ms
        ):
            self._fail(name, t_ms, numbers, f"a round of {plural(len(pending), 'request')}", detail)

    def _reclaim(self, t_ms: int, where: tuple[int, ...], what: str) -> None:
        events = self.holder.reclaim_expired(t_ms)
        self.counts["reclaim_passes"] += 1
        self.counts["reclaimed_permits"] += sum(event.permits for event in events)
        self._check(t_ms, where, f"{what} reclaimed {plural(sum(e.permits for e in events), 'permit')}")

    def _evict(self, t_ms: int, number: int) -> None:
        """The instance goes: requests waiting for a round fail, the schedule and ``contended`` go."""
        self.counts["evictions"] += 1
        self.counts["requests_lost"] += len(self.pending)
        self.pending, self.round_due_ms, self.last_round_ms = [], None, None
        self._durable(t_ms, (number,), "eviction")

    def _durable(self, t_ms: int, where: tuple[int, ...], what: str) -> None:
        """``durable``: a new instance on the same storage sees exactly the committed rows.

        A transaction still open when the instance goes would lose its writes.
        """
        if self.conn.in_transaction:
            self._fail("durable", t_ms, where, what, "a transaction was still open: its writes would be lost")
        before = self._rows()
        self.holder = self._build()
        after = self._rows()
        if after != before:
            lost = sorted(set(before[0]) - set(after[0]) | set(before[1]) - set(after[1]))
            self._fail(
                "durable", t_ms, where, what, f"committed rows changed across a rebuild (e.g. {lost[:3]})"
            )

    # --- invariants ------------------------------------------------------------------------

    def _rows(self) -> _Rows:
        store = self.holder.store
        return (
            {grant.grant_id: grant for grant in store.list_grants()},
            {lease.lease_id: lease for lease in store.list_leases()},
        )

    def _fail(
        self,
        invariant: str,
        t_ms: int,
        where: tuple[int, ...],
        step: str,
        detail: str,
        finding: str | None = None,
    ) -> None:
        self.violations.append(Violation(invariant, t_ms, where, step, detail, finding, self.after_line))

    def _check(self, t_ms: int, where: tuple[int, ...], step: str, sync_client: str | None = None) -> None:
        """Every holder-side invariant after one step; remembers this step's state for the next."""
        usage = self.holder.usage(t_ms)
        options = self.config.leases
        broken = ceiling_rule(options, usage.limit, usage.granted, usage.leased, self.usage_before)
        if broken:
            self._fail("ceiling", t_ms, where, step, broken[0], broken[1])
        self.usage_before = (usage.granted, usage.leased)
        total = usage.granted + usage.leased
        if total > self.peak[0]:
            self.peak = (total, usage.granted, usage.leased, t_ms)

        footprints = {group: total for group, (_, total) in self.holder.store.lease_totals().items()}
        within = options is not None and options.limited_groups == "within_group_limit"
        groups = {
            group: (usage.groups[group].granted if group in usage.groups else 0, footprints.get(group, 0))
            for group in sorted(set(usage.groups) | set(footprints))
        }
        for group, limit in sorted(self.group_limits.items()):
            granted, leased = groups.get(group, (0, 0))
            broken = group_ceiling_rule(within, limit, granted, leased, self.groups_before.get(group, (0, 0)))
            if broken:
                self._fail("group_ceiling", t_ms, where, step, f"group {group}: {broken[0]}", broken[1])
        self.groups_before = groups

        rows = self._rows()
        for detail in _monotone(self.rows_before, rows, sync_client):
            self._fail("reports_monotone", t_ms, where, step, detail)
        self.rows_before = rows

    def _summary(self) -> Summary:
        lines = self.traffic.lines
        final = self.holder.usage(lines[-1].t_ms if lines else 0)
        c = self.counts
        return Summary(
            key=self.config.key,
            lines=len(lines) + 1,
            first_ms=lines[0].t_ms if lines else 0,
            last_ms=lines[-1].t_ms if lines else 0,
            requests=c["requests"],
            syncs=c["syncs"],
            rounds=c["rounds"],
            requests_lost=c["requests_lost"],
            reclaim_passes=c["reclaim_passes"],
            evictions=c["evictions"],
            limit_changes=c["limit_changes"],
            grants=c["grants"],
            granted_permits=c["granted_permits"],
            leases=c["leases"],
            leased_permits=c["leased_permits"],
            reclaimed_permits=c["reclaimed_permits"],
            report_results=tuple(sorted(self.results.items())),
            blocked=tuple(sorted(self.blocked.items())),
            peak_usage=self.peak[0],
            peak_granted=self.peak[1],
            peak_leased=self.peak[2],
            peak_at_ms=self.peak[3],
            final_granted=final.granted,
            final_leased=final.leased,
        )


def _monotone(before: _Rows, after: _Rows, sync_client: str | None) -> Iterator[str]:
    """``reports_monotone``: counts only move forward and stay ordered; a sync touches only its own rows.

    A grant or lease row that disappears was settled (fully released), which
    is forward; one that appears in a sync, or changes for another client's
    sync, means a report freed or took capacity it had no right to.
    """
    old_grants, old_leases = before
    grants, leases = after
    for grant_id, row in grants.items():
        if not row.released <= row.claimed <= row.permits:
            yield (
                f"grant {grant_id}: released {row.released} <= claimed {row.claimed} "
                f"<= permits {row.permits} broken"
            )
        old = old_grants.get(grant_id)
        if old is None:
            if sync_client is not None:
                yield f"grant {grant_id} appeared in a sync"
            continue
        if row.claimed < old.claimed or row.released < old.released or row.permits > old.permits:
            yield (
                f"grant {grant_id} moved back: (permits, claimed, released) "
                f"{(old.permits, old.claimed, old.released)} -> {(row.permits, row.claimed, row.released)}"
            )
        if sync_client is not None and row != old and row.client_id != sync_client:
            yield f"a sync from {sync_client} changed grant {grant_id} of {row.client_id}"
    for grant_id, old in old_grants.items():
        if grant_id not in grants and sync_client is not None and old.client_id != sync_client:
            yield f"a sync from {sync_client} settled grant {grant_id} of {old.client_id}"
    for lease_id, lease in leases.items():
        if lease.released > lease.permits:
            yield f"lease {lease_id}: released {lease.released} > permits {lease.permits}"
        old_lease = old_leases.get(lease_id)
        if old_lease is None:
            if sync_client is not None:
                yield f"lease {lease_id} appeared in a sync"
            continue
        if (
            lease.released < old_lease.released
            or lease.permits > old_lease.permits
            or lease.retired < old_lease.retired
        ):
            yield f"lease {lease_id} moved back: {old_lease} -> {lease}"
        if sync_client is not None and lease != old_lease and lease.client_id != sync_client:
            yield f"a sync from {sync_client} changed lease {lease_id} of {lease.client_id}"
    for lease_id, old_lease in old_leases.items():
        if lease_id not in leases and sync_client is not None and old_lease.client_id != sync_client:
            yield f"a sync from {sync_client} settled lease {lease_id} of {old_lease.client_id}"


#: How often (in traffic lines) a replay tells its ``progress`` observer how many it has done.
PROGRESS_EVERY_LINES: Final = 1024


def replay(traffic: Traffic, progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay validated traffic through a fresh holder; every holder-side invariant checked.

    ``progress`` is told how many lines are done, now and then (a command's progress bar)."""
    return _Replayer(traffic).run(progress)


def format_summary(path: Path, result: ReplayResult) -> list[str]:
    s = result.summary

    def counted(pairs: Iterable[tuple[str, int]]) -> str:
        return ", ".join(f"{n} {name}" for name, n in pairs) or "none"

    lines = [
        f"replayed {read_from(path)}: {plural(s.lines, 'line')} for key {s.key!r}, "
        f"t={s.first_ms}..{s.last_ms} ms",
        f"  requests {s.requests}, syncs {s.syncs}, rounds {s.rounds}, reclaim passes {s.reclaim_passes}, "
        f"evictions {s.evictions} ({plural(s.requests_lost, 'waiting request')} lost), "
        f"limit changes {s.limit_changes}",
        f"  grants {s.grants} ({plural(s.granted_permits, 'permit')}), "
        f"leases {s.leases} ({plural(s.leased_permits, 'permit')}), "
        f"reclaimed {plural(s.reclaimed_permits, 'unclaimed permit')}",
        f"  report results: {counted(s.report_results)}; blocked: {counted(s.blocked)}",
        f"  peak usage {plural(s.peak_usage, 'permit')} ({s.peak_granted} granted + {s.peak_leased} leased) "
        f"at t={s.peak_at_ms} ms; at the end {s.final_granted} granted + {s.final_leased} leased",
    ]
    if not result.violations:
        lines.append(
            f"invariants checked after every step: {', '.join(CHECKED)}; "
            f"after every round: {', '.join(ROUND_CHECKED)}: all held"
        )
        return lines
    by_name = Counter(
        v.invariant if v.finding is None else f"{v.invariant} (finding {v.finding})"
        for v in result.violations
    )
    lines.append(f"{plural(len(result.violations), 'violation')}: {counted(sorted(by_name.items()))}")
    for violation in result.violations[:MAX_PRINTED_VIOLATIONS]:
        lines.append(violation.describe(path))
    if len(result.violations) > MAX_PRINTED_VIOLATIONS:
        lines.append(f"... and {len(result.violations) - MAX_PRINTED_VIOLATIONS} more")
    return lines


def cmd_replay(args: argparse.Namespace) -> int:
    """``semsim replay TRAFFIC.jsonl``: 0 all held, 1 an invariant failed, 2 a malformed file."""
    from semsim.inputs.commands import json_result

    with json_result(args.json) as out:
        status = _replay(args, out)
    return status


def _replay(args: argparse.Namespace, out: dict[str, Any] | None) -> int:
    from semsim.inputs.commands import EXIT_OK, EXIT_VIOLATION, UsageError

    if args.example == (args.traffic is not None):
        raise UsageError("give a TRAFFIC.jsonl file to replay, or --example for the one semsim ships")
    path: Path = shipped_example() if args.example else args.traffic
    try:
        traffic = read_traffic(path)
    except TrafficError as error:
        hint = ""
        if not path.exists() and path.name == "traffic.jsonl" and path.parent.name == "examples":
            hint = " (outside semsim's repository, `semsim replay --example` replays the copy it ships)"
        raise UsageError(f"{error}{hint}") from None
    from semsim.inputs.progress import Progress

    with Progress(f"replaying {read_from(path)}", len(traffic.lines), "lines") as shown:
        result = replay(traffic, shown.update)
    for line in format_summary(path, result):
        print(line)
    if out is not None:
        out.update(replay_json(read_from(path), result))
    return EXIT_VIOLATION if result.violations else EXIT_OK


def replay_json(traffic: str, result: ReplayResult) -> dict[str, Any]:
    """``semsim replay --json``'s object (docs/CLI.md lists its fields)."""
    summary = attrs.asdict(result.summary)
    for field in ("report_results", "blocked"):
        summary[field] = dict(summary[field])
    return {
        "traffic": traffic,
        "held": not result.violations,
        "checked": {"every_step": list(CHECKED), "every_round": list(ROUND_CHECKED)},
        "summary": summary,
        "violations": [attrs.asdict(violation) for violation in result.violations],
    }


# --- recording ----------------------------------------------------------------------------


class RecordingError(ValueError):
    """A trace cannot be turned into traffic that reproduces its holder's rounds."""


def record_traffic(run: WorldRun, key: str | None = None) -> list[dict[str, Any]]:
    """The traffic that reached one holder of a simulation run, as traffic-file records."""
    return traffic_from_trace(run.trace.header, list(run.trace.events()), key)


def traffic_from_trace(
    header: Mapping[str, Any], events: Sequence[Mapping[str, Any]], key: str | None = None
) -> list[dict[str, Any]]:
    """Turn a trace into a traffic file for holder ``key`` (the only one if None) that replays exactly.

    Requests and syncs are recorded where they were *delivered* to the holder
    (a duplicate delivery twice, a lost request not at all); rounds and
    reclaim passes where the holder ran them (``schedule: explicit``), with
    the simulator's id prefix, so the replayed holder issues the same ids and
    recorded reports name its grants. Alarm passes that reclaimed nothing
    are left out: they change nothing. The simulated holder keeps
    ``limitWorkflow`` caps in instance memory, so an eviction lifts them.

    The trace records a delivery when the message arrives, and the holder
    handles it there and then (runtime schedule 2; in schedule 1 it did so
    in a task of its own, possibly after a round due at the same instant).
    A round and a delivery due at the same instant still run in heap order,
    which a trace does not show. So the recorder runs a holder alongside and, for each
    round, decides which same-instant deliveries it served by finding the
    choice that reproduces the round's grants, leases and usage exactly (a
    request handled too late joins the next round). A round no choice
    reproduces raises :class:`RecordingError`.
    """
    return _Recorder(header, key).record(events)


class _Recorder:
    def __init__(self, header: Mapping[str, Any], key: str | None) -> None:
        config = header["config"]
        holder = config["holder"]
        keys = list(config["workload"]["keys"])
        if key is None:
            if len(keys) != 1:
                raise RecordingError(f"the run has holder keys {keys}: name one")
            key = keys[0]
        elif key not in keys:
            raise RecordingError(f"the run has no holder key {key!r} (it has {keys})")
        self.key = key
        self.name = f"holder:{key}"
        self.config_record: dict[str, Any] = {
            "kind": "config",
            "key": key,
            "limit": holder["limit"],
            "roundWaitMs": holder["round_wait_ms"],
            "roundPeriodMs": holder["round_period_ms"],
            "grantTimeoutMs": holder["grant_timeout_ms"],
            "leases": _lease_record(holder["leases"]),
            "groupLimits": {},
            "fixes": list(holder.get("fixes", [])),
            "schedule": "explicit",
            "idPrefix": f"{self.name}/g-",
        }
        self.config = _config(self.config_record)
        self.limit = self.config.limit
        self.group_limits: dict[str, int] = {}
        self.ids = 0
        self.conn = sqlite3.connect(":memory:")
        self.holder = self._holder(self.conn)
        self.out: list[dict[str, Any]] = [self.config_record]
        #: Delivered, not yet placed: (record, message); placed once a later instant or action comes.
        self.limbo: list[tuple[dict[str, Any], PermitRequest | PermitSync, str]] = []
        self.pending: list[PermitRequest] = []

    def _holder(self, conn: sqlite3.Connection) -> Holder:
        def new_id() -> str:
            self.ids += 1
            return f"{self.config.id_prefix}{self.ids}"

        return Holder(conn, _holder_config(self.config, lambda: self.limit, self.group_limits), new_id=new_id)

    def record(self, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        bodies: dict[str, Any] = {}
        evicted_msgs = {str(e["msg"]) for e in events if e["kind"] == "reply" and e.get("error") == "evicted"}
        name = self.name
        for index, event in enumerate(events):
            t, kind = event["t"], event["kind"]
            if kind == "send" and event["dst"] == name and event["method"] == "permits":
                bodies[event["msg"]] = event["body"]
                continue
            if kind == "deliver" and event["msg"] in bodies:
                body = bodies[event["msg"]]
                message = parse_request(body)
                line_kind = "request" if isinstance(message, PermitRequest) else "sync"
                self.limbo.append(({"t": t, "kind": line_kind, "body": body}, message, str(event["msg"])))
                continue
            if kind == "round" and event["holder"] == name:
                self._round(t, event, _round_outcome(events, index, name))
            elif kind == "grant_reclaimed" and event["holder"] == name and not _in_round(events, index, name):
                self._place(before=t)
                if self.out[-1] != {"t": t, "kind": "reclaim"}:
                    self.out.append({"t": t, "kind": "reclaim"})
                    self.holder.reclaim_expired(t)
            elif kind == "evict" and event["object"] == name:
                # A request delivered at this instant and handled before the eviction was
                # lost with the instance (its caller heard "evicted"); any other joins the next one.
                self._place(before=t, lost=lambda msg: msg in evicted_msgs)
                self.out.append({"t": t, "kind": "evict"})
                self.pending.clear()
                self.out += [
                    {"t": t, "kind": "groupLimit", "group": g, "limit": None} for g in self.group_limits
                ]
                self.group_limits.clear()
                self._place(before=t + 1)
            elif kind == "operator" and event.get("key") == self.key and event["action"] == "limit":
                self._place(before=t)
                self.out.append({"t": t, "kind": "limit", "limit": event["limit"]})
                self.limit = event["limit"]
            elif (
                kind == "operator" and event.get("key") == self.key and event["action"] == "group_limit"
            ) or (kind == "group_limit" and event["holder"] == name):
                group, limit = event["group"], event["limit"]
                self._place(before=t)
                self.out.append({"t": t, "kind": "groupLimit", "group": group, "limit": limit})
                if limit is None:
                    self.group_limits.pop(group, None)
                else:
                    self.group_limits[group] = limit
        self._place(before=None)
        return self.out

    def _place(self, before: int | None, lost: Any = None) -> None:
        """Place (and apply) every delivery earlier than ``before`` (all if None), in order.

        With ``lost``, deliveries at the eviction instant ``before`` are placed
        too: those ``lost(msg)`` says were handled before it; the rest wait.
        """
        keep = []
        for record, message, msg in self.limbo:
            earlier = before is None or record["t"] < before
            if earlier or (lost is not None and lost(msg)):
                self._apply(record, message)
            else:
                keep.append((record, message, msg))
        self.limbo = keep

    def _apply(self, record: dict[str, Any], message: PermitRequest | PermitSync) -> None:
        self.out.append(record)
        if isinstance(message, PermitRequest):
            self.pending.append(message)
        else:
            self.holder.sync_message(message, record["t"])

    def _round(self, t_ms: int, event: Mapping[str, Any], expected: _Outcome) -> None:
        self._place(before=t_ms)
        undecided = self.limbo
        # Trace order first (every same-instant delivery served), then fewer; each choice is
        # tried on a copy of the holder's storage.
        choices = itertools.chain.from_iterable(
            itertools.combinations(range(len(undecided)), size) for size in range(len(undecided), -1, -1)
        )
        for chosen in itertools.islice(choices, MAX_RECORDING_CHOICES):
            served = [undecided[i] for i in chosen]
            conn = sqlite3.connect(":memory:")
            self.conn.backup(conn)
            ids = self.ids
            holder = self._holder(conn)
            for record, message, _ in served:
                if isinstance(message, PermitSync):
                    holder.sync_message(message, record["t"])
            requests = self.pending + [m for _, m, _ in served if isinstance(m, PermitRequest)]
            outcome = holder.round(requests, t_ms)
            if _matches(outcome, requests, expected, event["usage"]):
                self.out += [record for record, _, _ in served]
                self.out.append({"t": t_ms, "kind": "round"})
                self.conn, self.holder, self.pending = conn, holder, []
                self.limbo = [entry for i, entry in enumerate(undecided) if i not in chosen]
                return
            self.ids = ids
        raise RecordingError(f"{self.name}: no order of the deliveries reproduces the round at t={t_ms} ms")


@attrs.frozen
class _Outcome:
    grants: tuple[tuple[str, str, str, int], ...]
    leases: tuple[tuple[str, str, str, int], ...]


def _round_outcome(events: Sequence[Mapping[str, Any]], index: int, name: str) -> _Outcome:
    """What the trace says round ``index`` did: its new leases (emitted before it) and grants (after)."""
    t = events[index]["t"]
    leases = []
    for event in reversed(events[:index]):
        if event.get("holder") != name or event["t"] != t:
            break
        if event["kind"] == "lease_granted":
            leases.append((event["leaseId"], event["clientId"], event["group"], event["permits"]))
    grants = []
    for event in events[index + 1 :]:
        if event["kind"] in ("violation", "documented") and event["t"] == t:
            continue  # the monitor's verdict on the commit, recorded before the replies
        if event.get("holder") != name or event["t"] != t or event["kind"] not in ("blocked", "grant"):
            break
        if event["kind"] == "grant":
            grants.append((event["grant"], event["client"], event["group"], event["permits"]))
    return _Outcome(grants=tuple(sorted(grants)), leases=tuple(sorted(leases)))


def _matches(outcome: Any, requests: Sequence[PermitRequest], expected: _Outcome, usage: Any) -> bool:
    grants = sorted(
        (grant.grant_id, request.client_id, grant.group, grant.permits)
        for request, reply in zip(requests, outcome.replies, strict=True)
        for grant in reply.grants
    )
    leases = sorted(
        (e.lease_id, e.client_id, e.group, e.permits) for e in outcome.events if isinstance(e, LeaseGranted)
    )
    return (
        tuple(grants) == expected.grants
        and tuple(leases) == expected.leases
        and outcome.usage.to_wire() == usage
    )


def _in_round(events: Sequence[Mapping[str, Any]], index: int, name: str) -> bool:
    """Whether the ``grant_reclaimed`` at ``index`` was emitted by a round (which emits its reclaims,
    then its lease events, then ``round``, all at once) rather than by an alarm's reclaim pass."""
    for event in events[index + 1 :]:
        if event.get("holder") != name or event["t"] != events[index]["t"]:
            return False
        if event["kind"] == "round":
            return True
        if event["kind"] not in ("grant_reclaimed", "lease_granted", "lease_retired"):
            return False
    return False


def _lease_record(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``semsim.harness.run.LeaseSpec`` as data -> the traffic file's (the reference's) lease options."""
    if spec is None:
        return None
    amount = spec["amount"]
    value: Any = {"ratio": amount} if isinstance(amount, float) else amount
    mode = spec["provisioning"]
    provisioning: dict[str, Any] = {"mode": mode}
    if mode == "under":
        provisioning["reserve"] = value
    elif mode == "over":
        provisioning["extra"] = value
    return {
        "provisioning": provisioning,
        "permitsPerLease": spec["permits_per_lease"],
        "ttlMs": spec["ttl_ms"],
        "maxGroups": spec["max_groups"],
        "maxClientsPerGroup": spec["max_clients_per_group"],
        "limitedGroups": {"exclude": "exclude", "within_group_limit": "withinGroupLimit"}[
            spec["limited_groups"]
        ],
    }


def write_traffic(records: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """One compact JSON object per line, fields in recorded order (diff-friendly, deterministic).

    ``path``: a ``str`` or a path-like object.
    """
    text = "".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records)
    write_text_whole(path, text)


# --- the shipped example ------------------------------------------------------------------

#: ``examples/traffic.jsonl``: ``write_traffic(example_traffic(), Path("examples/traffic.jsonl"))``.
EXAMPLE_SEED: Final = 3


def shipped_example() -> Path:
    """The copy of ``examples/traffic.jsonl`` installed with semsim (package data; a wheel and an
    editable install both keep it as a file)."""
    return Path(str(importlib.resources.files("semsim.report") / "example_traffic.jsonl"))


def example_traffic() -> list[dict[str, Any]]:
    """A 90 s recording: three clients (one lease-capable) in two groups, a lost reply or two,
    and the operator lowering the limit from 6 to 4 at 60 s. It replays clean."""
    from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
    from semsim.world.faults import FaultPlan, LimitChange
    from semsim.world.workload import Workload

    config = WorldConfig(
        duration_ms=90_000,
        holder=HolderSpec(limit=6, leases=LeaseSpec(permits_per_lease=3)),
        workload=Workload(
            clients=3, plain_clients=2, items_per_minute=8.0, duration_ms=(2_000, 12_000), until_ms=75_000
        ),
    )
    plan = FaultPlan(reply_loss=0.03, limit_changes=(LimitChange(60_000, 4),))
    return record_traffic(run_world(config, plan, seed=EXAMPLE_SEED))
