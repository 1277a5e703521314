"""A literal model of the reference holder that shares nothing with the code it checks.

``semaphore_core`` is an optimised port: trigger-kept totals, queries that
touch only the rows that can change, typed messages. This module is the
reference *as written* (seed 000's semaphore-server.ts, semaphore-store.ts
and semaphore-leases.ts, with the request schema as docs/WIRE.md states it):
it lists every grant and lease row in every round and filters in Python,
line for line, and speaks only wire dicts (JSON-ready, keys in the order
the reference's object literals produce).

It imports nothing from ``semaphore_core``: its own parsing (the
reference's validation plus semsim's documented bounds), its own
``localeCompare``, its own policy resolution and budgets, its own SQLite
schema and rows. A bug in any of those in the core is therefore not on both
sides of a comparison. Two users run it in lockstep with ``Holder`` and
demand the same replies, events, rows and ``usage()``: the holder state
machine (``tests/stateful_holder.py``) and every simulated run
(``sim/check/lockstep.py``, invariant ``exact_accounting``).

semsim's opt-in fixes of the holder-side findings (docs/FINDINGS.md F1 to
F3) are written here again from their descriptions there, so lockstep
holds in the every-fix variant too.

What it keeps in memory is what the reference's live instance keeps: the
``contended`` flag of the last round. A new ``LiteralHolder`` on the same
connection is an evicted and rebuilt instance.

Deliberately naive and deliberately separate: do not import its logic into
the core, and do not optimise it.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

Wire: TypeAlias = dict[str, Any]

# --- numbers as JavaScript has them -----------------------------------------------

MAX_SAFE_INTEGER: Final = 2**53 - 1
#: setTimeout overflows past this; the reference caps every delay here.
MAX_DELAY_MS: Final = 2**31 - 1
#: semsim's protocol bounds (docs/FINDINGS.md, "deliberate differences"); the reference has none.
MAX_LIST_LENGTH: Final = 65_536
MAX_ID_LENGTH: Final = 1_024

#: The holder-side fixes of docs/FINDINGS.md, by the names ``HolderConfig(fixes=...)`` takes.
FIX_F1: Final = "group-ceiling-counts-leases"
FIX_F2: Final = "under-shares-the-limit"
FIX_F3: Final = "claims-respect-the-limit"


class LiteralProtocolError(Exception):
    """``SemaphoreProtocolError('Malformed semaphore message')``: the message failed the schema."""


class LiteralRangeError(ValueError):
    """The reference's ``RangeError``: a limit resolved to something that is not a count."""


def _safe_integer(value: object) -> int | None:
    """``value`` if ``Number.isSafeInteger`` accepts it (booleans are not numbers; 3.0 is 3), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value == math.floor(value):
        value = int(value)
    if isinstance(value, int) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    return None


def _truthy(value: object) -> bool:
    """JavaScript truthiness (``!(await canGrant(group))``): NaN is false, an empty array true."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return not (value == 0 or (isinstance(value, float) and math.isnan(value)))
    if isinstance(value, str):
        return value != ""
    return True


# --- String.prototype.localeCompare (ICU root collation) --------------------------

# ICU's root collation orders whitespace, then punctuation and symbols, then
# digits, then letters; case is only a tie-break (lower before upper), and C0
# controls other than whitespace, and DEL, are ignored altogether. Written
# from the CLDR root order and checked against Node's own output in
# tests/fixtures/collation.json. Characters outside ASCII follow in code
# point order, the fallback the core documents (docs/FINDINGS.md).
_ROOT_ORDER: Final = (
    "\t\n\x0b\x0c\r "  # whitespace
    "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"  # punctuation, then symbols
    "0123456789"
    "abcdefghijklmnopqrstuvwxyz"
)


def _collation_elements(text: str) -> list[tuple[int, int]]:
    """(primary, case) per character that is not ignorable."""
    elements = []
    for ch in text:
        code = ord(ch)
        if code < 0x09 or 0x0E <= code < 0x20 or code == 0x7F:
            continue  # completely ignorable
        lower = ch.lower() if "A" <= ch <= "Z" else ch
        rank = _ROOT_ORDER.find(lower)
        primary = rank if rank >= 0 else len(_ROOT_ORDER) + code
        elements.append((primary, 1 if ch != lower else 0))
    return elements


def locale_compare(left: str, right: str) -> int:
    """``left.localeCompare(right)``: -1, 0 or 1. Primary level over the whole string first, then case."""
    a, b = _collation_elements(left), _collation_elements(right)
    for level in (0, 1):
        for x, y in zip(a, b, strict=False):
            if x[level] != y[level]:
                return -1 if x[level] < y[level] else 1
        if len(a) != len(b):
            return -1 if len(a) < len(b) else 1
    return 0


def _sorted(items: list[Any], compare: Callable[[Any, Any], int]) -> list[Any]:
    """``Array.prototype.sort(compare)``: stable, as V8's is."""
    return sorted(items, key=functools.cmp_to_key(compare))


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


# --- the request schema -----------------------------------------------------------


def _bad(what: str) -> LiteralProtocolError:
    return LiteralProtocolError(f"Malformed semaphore message: {what}")


def _obj(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(f"{where} is not an object")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if key not in obj or not isinstance(value, str):
        raise _bad(f"{key} is not a string")
    if len(value) > MAX_ID_LENGTH:
        raise _bad(f"{key} is longer than {MAX_ID_LENGTH}")
    # ASCII text holds no surrogate; only other text is walked (every id of every message).
    if not value.isascii() and any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise _bad(f"{key} holds a lone surrogate")
    return value


def _int(obj: Mapping[str, Any], key: str, *, nonnegative: bool) -> int:
    number = _safe_integer(obj.get(key))
    if key not in obj or number is None:
        raise _bad(f"{key} is not a safe integer")
    if nonnegative and number < 0:
        raise _bad(f"{key} is negative")
    return number


def _array(obj: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = obj.get(key)
    if key not in obj or not isinstance(value, list | tuple):
        raise _bad(f"{key} is not an array")
    if len(value) > MAX_LIST_LENGTH:
        raise _bad(f"{key} has more than {MAX_LIST_LENGTH} entries")
    return value


def _grant_reports(obj: Mapping[str, Any]) -> list[Wire]:
    reports = []
    for entry in _array(obj, "grants"):
        report = _obj(entry, "grants[]")
        reports.append(
            {
                "grantId": _str(report, "grantId"),
                "claimed": _int(report, "claimed", nonnegative=True),
                "released": _int(report, "released", nonnegative=True),
            }
        )
    return reports


def _lease_reports(obj: Mapping[str, Any]) -> list[Wire] | None:
    if "leases" not in obj:
        return None  # optional: absent is a plain client; null is not absent
    reports = []
    for entry in _array(obj, "leases"):
        report = _obj(entry, "leases[]")
        parsed: Wire = {
            "leaseId": _str(report, "leaseId"),
            "drawn": _int(report, "drawn", nonnegative=True),
            "released": _int(report, "released", nonnegative=True),
        }
        if "retired" in report:
            if not isinstance(report["retired"], bool):
                raise _bad("retired is not a boolean")
            parsed["retired"] = report["retired"]
        reports.append(parsed)
    return reports


def parse(message: object) -> Wire:
    """``semaphoreRequestSchema.safeParse``: a clean request or sync (unknown keys stripped), or raise."""
    obj = _obj(message, "message")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in ("request", "sync"):
        raise _bad("type is neither request nor sync")
    if _safe_integer(obj.get("v")) != 1:
        raise _bad("v is not 1")
    client_id = _str(obj, "clientId")
    parsed: Wire = {"type": kind, "v": 1, "clientId": client_id}
    if kind == "request":
        demand = []
        for entry in _array(obj, "demand"):
            item = _obj(entry, "demand[]")
            demand.append(
                {
                    "group": _str(item, "group"),
                    "count": _int(item, "count", nonnegative=True),
                    "oldestAt": _int(item, "oldestAt", nonnegative=False),
                }
            )
        parsed["demand"] = demand
    parsed["grants"] = _grant_reports(obj)
    leases = _lease_reports(obj)
    if leases is not None:
        parsed["leases"] = leases
    return parsed


# --- configuration -------------------------------------------------------------------


def options_from_config(config: Any) -> Wire:
    """A ``HolderConfig`` as the reference's ``DurabilitySemaphoreConfig`` (read by attribute names only).

    The callables are the very ones the core calls, so the model calls them
    where the reference does; they must be pure (the model calls them too).
    """
    leases = config.leases
    lease_options: Wire | None = None
    if leases is not None:
        provisioning = leases.provisioning
        mode = type(provisioning).__name__.lower()
        spec: Wire = {"mode": mode}
        if mode in ("under", "over"):
            amount = provisioning.reserve if mode == "under" else provisioning.extra
            spec["reserve" if mode == "under" else "extra"] = (
                amount if isinstance(amount, int) else {"ratio": amount.value}
            )
        lease_options = {
            "provisioning": spec,
            "permitsPerLease": leases.permits_per_lease,
            "ttlMs": leases.ttl_ms,
            "maxGroups": leases.max_groups,
            "maxClientsPerGroup": leases.max_clients_per_group,
            "limitedGroups": "withinGroupLimit"
            if leases.limited_groups == "within_group_limit"
            else "exclude",
        }
    return {
        "limit": config.limit,
        "groupLimit": config.group_limit,
        "canGrant": config.can_grant,
        "roundWaitMs": config.round_wait_ms,
        "roundPeriodMs": config.round_period_ms,
        "grantTimeoutMs": config.grant_timeout_ms,
        "leases": lease_options,
        "fixes": frozenset(config.fixes),
    }


def _positive(name: str, value: object, maximum: int = MAX_SAFE_INTEGER) -> int:
    # assertPositiveInteger, then the setTimeout cap where the reference has one.
    number = _safe_integer(value)
    if number is None or number <= 0:
        raise ValueError(f"{name} must be a positive integer")
    if number > maximum:
        raise ValueError(f"{name} must be at most {maximum}")
    return number


def _lease_policy(options: Mapping[str, Any]) -> Wire:
    """``resolveLeasePolicy``: defaults, then the reference's checks."""
    policy = {
        "provisioning": options["provisioning"],
        "permitsPerLease": options.get("permitsPerLease", 64),
        "ttlMs": options.get("ttlMs", 30 * 60_000),
        "maxGroups": options.get("maxGroups", 100),
        "maxClientsPerGroup": options.get("maxClientsPerGroup", 100),
        "limitedGroups": options.get("limitedGroups", "exclude"),
    }
    for name in ("permitsPerLease", "ttlMs", "maxGroups", "maxClientsPerGroup"):
        policy[name] = _positive(f"leases.{name}", policy[name])
    if policy["ttlMs"] > MAX_DELAY_MS:
        raise ValueError(f"leases.ttlMs must be at most {MAX_DELAY_MS}")
    mode = policy["provisioning"]["mode"]
    if mode not in ("strict", "under", "over"):
        raise ValueError(f"unknown provisioning mode {mode!r}")
    if mode != "strict":
        amount = policy["provisioning"]["reserve" if mode == "under" else "extra"]
        value = amount["ratio"] if isinstance(amount, Mapping) else amount
        if not math.isfinite(value) or value < 0:
            raise ValueError("lease provisioning amounts must be non-negative")
    return policy


def _scaled(amount: int | Mapping[str, float], limit: int) -> int:
    return math.floor(limit * amount["ratio"]) if isinstance(amount, Mapping) else int(amount)


def budgets(provisioning: Mapping[str, Any], limit: int) -> Wire:
    """``budgets``: permits grants may use and leases may hold, for one limit."""
    if provisioning["mode"] == "over":
        return {"grants": limit, "leases": _scaled(provisioning["extra"], limit), "shared": False}
    if provisioning["mode"] == "under":
        # The reserve never takes the last permit.
        reserve = min(max(0, limit - 1), _scaled(provisioning["reserve"], limit))
        return {"grants": limit - reserve, "leases": reserve, "shared": False}
    return {"grants": limit, "leases": limit, "shared": True}


# --- the store -----------------------------------------------------------------------------

GRANTS: Final = "durability_semaphore_grants"
LEASES: Final = "durability_semaphore_leases"
GRANT_COLUMNS: Final = (
    "grant_id",
    "client_id",
    "grp",
    "permits",
    "claimed",
    "released",
    "created_at",
    "expires_at",
)
LEASE_COLUMNS: Final = (
    "lease_id",
    "client_id",
    "grp",
    "permits",
    "released",
    "created_at",
    "expires_at",
    "retired",
)


class _Store:
    """``HolderStore``: rows as dicts; aggregates are computed from ``list()``, as the reference does."""

    def __init__(self, sql: sqlite3.Connection) -> None:
        self.sql = sql

    def migrate(self) -> None:
        # grantRowSchema and leaseRowSchema as tables. IF NOT EXISTS: on a database the
        # core migrated, the reference's columns are the same tables.
        self.sql.execute(
            f"CREATE TABLE IF NOT EXISTS {GRANTS} (grant_id TEXT PRIMARY KEY, client_id TEXT NOT NULL, "
            "grp TEXT NOT NULL, permits INTEGER NOT NULL, claimed INTEGER NOT NULL, "
            "released INTEGER NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL)"
        )
        self.sql.execute(
            f"CREATE TABLE IF NOT EXISTS {LEASES} (lease_id TEXT PRIMARY KEY, client_id TEXT NOT NULL, "
            "grp TEXT NOT NULL, permits INTEGER NOT NULL, released INTEGER NOT NULL, "
            "created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, retired INTEGER NOT NULL)"
        )

    def _rows(self, table: str, columns: Sequence[str], where: str = "", *args: Any) -> list[Wire]:
        # ORDER BY created_at as the reference; SQLite breaks its ties in rowid (insertion) order.
        query = f"SELECT {', '.join(columns)} FROM {table} {where} ORDER BY created_at, rowid"
        return [dict(zip(columns, row, strict=True)) for row in self.sql.execute(query, args)]

    def list_grants(self) -> list[Wire]:  # ``list()``
        return self._rows(GRANTS, GRANT_COLUMNS)

    def get(self, grant_id: str) -> Wire | None:
        rows = self._rows(GRANTS, GRANT_COLUMNS, "WHERE grant_id = ?", grant_id)
        return rows[0] if rows else None

    def next_pending_at(self) -> int | None:
        row = self.sql.execute(
            f"SELECT expires_at FROM {GRANTS} WHERE claimed < permits ORDER BY expires_at ASC LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def insert(self, row: Wire) -> None:
        self.sql.execute(
            f"INSERT INTO {GRANTS} ({', '.join(GRANT_COLUMNS)}) VALUES ({', '.join('?' * 8)}) "
            "ON CONFLICT(grant_id) DO NOTHING",
            [row[c] for c in GRANT_COLUMNS],
        )

    def update(self, row: Wire) -> None:
        self.sql.execute(
            f"UPDATE {GRANTS} SET permits = ?, claimed = ?, released = ?, expires_at = ? WHERE grant_id = ?",
            (row["permits"], row["claimed"], row["released"], row["expires_at"], row["grant_id"]),
        )

    def remove(self, grant_id: str) -> None:
        self.sql.execute(f"DELETE FROM {GRANTS} WHERE grant_id = ?", (grant_id,))

    def list_leases(self) -> list[Wire]:
        return self._rows(LEASES, LEASE_COLUMNS)

    def get_lease(self, lease_id: str) -> Wire | None:
        rows = self._rows(LEASES, LEASE_COLUMNS, "WHERE lease_id = ?", lease_id)
        return rows[0] if rows else None

    def insert_lease(self, row: Wire) -> None:
        self.sql.execute(
            f"INSERT INTO {LEASES} ({', '.join(LEASE_COLUMNS)}) VALUES ({', '.join('?' * 8)}) "
            "ON CONFLICT(lease_id) DO NOTHING",
            [row[c] for c in LEASE_COLUMNS],
        )

    def update_lease(self, row: Wire) -> None:
        self.sql.execute(
            f"UPDATE {LEASES} SET permits = ?, released = ?, expires_at = ?, retired = ? WHERE lease_id = ?",
            (row["permits"], row["released"], row["expires_at"], row["retired"], row["lease_id"]),
        )

    def remove_lease(self, lease_id: str) -> None:
        self.sql.execute(f"DELETE FROM {LEASES} WHERE lease_id = ?", (lease_id,))


class _Transaction:
    """``engine.transaction``: all of the block's writes, or none."""

    def __init__(self, sql: sqlite3.Connection) -> None:
        self.sql = sql

    def __enter__(self) -> None:
        self.sql.execute("SAVEPOINT literal_holder")

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is not None:
            self.sql.execute("ROLLBACK TO literal_holder")
        self.sql.execute("RELEASE literal_holder")


def _effective_permits(grant: Wire, now: int) -> int:
    return int(grant["claimed"] if now >= grant["expires_at"] else grant["permits"])


def _outstanding(grant: Wire, now: int) -> int:
    return max(0, _effective_permits(grant, now) - int(grant["released"]))


def _lease_footprint(lease: Wire) -> int:
    return max(0, int(lease["permits"]) - int(lease["released"]))


def _to_lease_grant(lease: Wire, now: int) -> Wire:
    """A retired lease is echoed as expired so the client stops drawing at once."""
    return {
        "leaseId": lease["lease_id"],
        "group": lease["grp"],
        "permits": lease["permits"],
        "expiresAt": now if lease["retired"] else lease["expires_at"],
    }


def _event(kind: str, now: int, **fields: Any) -> Wire:
    return {"entityKind": "semaphore", "type": kind, "timestamp": now, **fields}


def _lease_event(kind: str, now: int, lease: Wire, permits: int) -> Wire:
    return _event(
        kind, now, leaseId=lease["lease_id"], clientId=lease["client_id"], group=lease["grp"], permits=permits
    )


# --- the holder ------------------------------------------------------------------------------


class LiteralHolder:
    """``DurabilitySemaphoreServer`` without the scheduler: one round when told, replies as wire dicts."""

    def __init__(
        self, sql: sqlite3.Connection, options: Mapping[str, Any], new_id: Callable[[], str]
    ) -> None:
        limit = options["limit"]
        self._limit: Callable[[], object] = limit if callable(limit) else (lambda: limit)
        if not callable(limit) and ((checked := _safe_integer(limit)) is None or checked < 0):
            raise ValueError("limit must be a non-negative safe integer")
        self._group_limit: Callable[[str], object] | None = options.get("groupLimit")
        self._can_grant: Callable[[str], object] | None = options.get("canGrant")
        self.round_wait_ms = _positive("roundWaitMs", options.get("roundWaitMs", 1_000), MAX_DELAY_MS)
        self.round_period_ms = _positive("roundPeriodMs", options.get("roundPeriodMs", 2_000), MAX_DELAY_MS)
        self.grant_timeout_ms = _positive(
            "grantTimeoutMs", options.get("grantTimeoutMs", 10_000), MAX_DELAY_MS
        )
        leases = options.get("leases")
        self._leases: Wire | None = None if leases is None else _lease_policy(leases)
        self._fixes: frozenset[str] = frozenset(options.get("fixes", ()))
        self._new_id = new_id
        sql.isolation_level = None
        self._sql = sql
        self._store = _Store(sql)
        with _Transaction(sql):
            self._store.migrate()
        # From the last round; in memory, so an eviction forgets it.
        self._contended = False

    # --- reading ---------------------------------------------------------------------------

    def rows(self) -> dict[str, dict[str, tuple[Any, ...]]]:
        """Every stored grant and lease, by id, as column tuples (the reference's columns)."""
        return {
            "grants": {g["grant_id"]: tuple(g[c] for c in GRANT_COLUMNS) for g in self._store.list_grants()},
            "leases": {x["lease_id"]: tuple(x[c] for c in LEASE_COLUMNS) for x in self._store.list_leases()},
        }

    def next_alarm_at(self) -> int | None:
        """``nextPendingAt``: the earliest claim deadline of a grant with unclaimed permits."""
        return self._store.next_pending_at()

    def usage(self, now: int) -> Wire:
        """``usage()``, with ``groups`` as an object (a ``Map`` in the reference)."""
        limit = self._resolve_limit()
        granted, leased, by_group = self.listed_totals(now)
        groups: dict[str, Wire] = {name: {"granted": count} for name, count in by_group.items()}
        return self._usage_of(limit, granted, leased, groups)

    def listed_totals(self, now: int) -> tuple[int, int, dict[str, int]]:
        """``usage()``'s sums, as it lists every row for them: outstanding grant permits (all, and
        per group in the order the rows list them) and the lease footprint. Reads no callback."""
        by_group: dict[str, int] = {}
        granted = 0
        for grant in self._store.list_grants():
            count = _outstanding(grant, now)
            granted += count
            by_group[grant["grp"]] = by_group.get(grant["grp"], 0) + count
        leased = 0
        for lease in self._store.list_leases():
            leased += _lease_footprint(lease)
        return granted, leased, by_group

    def usage_from_totals(self, granted: int, leased: int, groups_granted: Mapping[str, int]) -> Wire:
        """``usage()`` from its sums over the rows, kept elsewhere as the rows change
        (``semsim.check.row_mirror``); the rest is the reference's, as in :meth:`usage`."""
        limit = self._resolve_limit()
        groups: dict[str, Wire] = {name: {"granted": count} for name, count in groups_granted.items()}
        return self._usage_of(limit, granted, leased, groups)

    def _usage_of(self, limit: int, granted: int, leased: int, groups: dict[str, Wire]) -> Wire:
        for name, group in groups.items():
            policy = self._group_policy(name)
            if "limit" in policy:
                group["limit"] = policy["limit"]
        return {
            "limit": limit,
            "granted": granted,
            "leased": leased,
            "available": self._grant_room(limit, granted, leased),
            "groups": groups,
        }

    def _grant_room(self, limit: int, granted: int, leased: int) -> int:
        if self._leases is None:
            return max(0, limit - granted)
        budget = budgets(self._leases["provisioning"], limit)
        return max(0, int(budget["grants"]) - granted - (leased if budget["shared"] else 0))

    # --- policy -------------------------------------------------------------------------------

    def _resolve_limit(self) -> int:
        limit = _safe_integer(self._limit())
        if limit is None or limit < 0:
            raise LiteralRangeError("limit must resolve to a non-negative safe integer")
        return limit

    def _group_policy(self, group: str) -> Wire:
        """``#groupPolicy``: resolution failures block the group rather than grant unlimited permits."""
        try:
            if self._can_grant is not None and not _truthy(self._can_grant(group)):
                return {"blocked": "not_permitted"}
            limit = None if self._group_limit is None else self._group_limit(group)
            if limit is None:
                return {}
            checked = _safe_integer(limit)
            if checked is None or checked < 0:
                raise LiteralRangeError(f'groupLimit for "{group}" must be a non-negative safe integer')
            return {"limit": checked}
        except Exception:
            return {"blocked": "limit_resolution_error"}

    def _lease_eligible(self, group: Mapping[str, Any]) -> bool:
        assert self._leases is not None
        return "blocked" not in group and (
            "limit" not in group or self._leases["limitedGroups"] == "withinGroupLimit"
        )

    # --- entry points -------------------------------------------------------------------------

    def handle_sync(self, message: object, now: int) -> Wire:
        """``handle`` for a sync: parse, then ``#sync``."""
        parsed = parse(message)
        if parsed["type"] != "sync":
            raise _bad("expected a sync")
        return self.sync(parsed, now)

    def round(self, messages: Sequence[object], now: int) -> tuple[list[Wire], list[Wire]]:
        """``#runRound`` for these requests: (replies in request order, events in emission order).

        A limit that throws or resolves to a bad value fails the whole round
        before anything is written: the error propagates.
        """
        pending = [parse(message) for message in messages]
        if any(request["type"] != "request" for request in pending):
            raise _bad("a round takes requests")
        limit = self._resolve_limit()
        # Held leases are re-checked every round, not only when their group is requested.
        lease_groups = [lease["grp"] for lease in self._store.list_leases()] if self._leases else []
        groups = dict.fromkeys([d["group"] for r in pending for d in r["demand"]] + lease_groups)
        policies = {group: self._group_policy(group) for group in groups}
        with _Transaction(self._sql):
            result = self._allocate(pending, limit, policies, now)

        next_request_at = now + self.round_period_ms
        self._contended = result["contended"]
        replies = []
        for request, allocation in zip(pending, result["allocations"], strict=True):
            reply: Wire = {
                "type": "grant",
                "v": 1,
                "grants": allocation["grants"],
                "blocked": allocation["blocked"],
                "grantResults": allocation["grantResults"],
                "nextRequestAt": next_request_at,
            }
            if "leases" in request:
                reply["leases"] = allocation["leases"]
                if result["contended"]:
                    reply["contended"] = True
            replies.append(reply)
        events = [*result["reclaimed"], *result["leaseEvents"]]
        events.append(
            _event(
                "round", now, requested=result["requested"], granted=result["granted"], usage=result["usage"]
            )
        )
        for group, reason, count in _blocked_counts(pending, result["allocations"]):
            events.append(_event("blocked", now, group=group, reason=reason, count=count))
        return replies, events

    def sync(self, message: Wire, now: int) -> Wire:
        """``#sync`` of a parsed sync: reports only, in one transaction."""
        limit = self._resolve_limit() if FIX_F3 in self._fixes else 0  # F3 resolves it for syncs too
        with _Transaction(self._sql):
            room = self._claim_room(limit)
            grant_results = self._apply_reports(message["clientId"], message["grants"], now, room)
            echoes = (
                self._apply_lease_reports(message["clientId"], message["leases"], now)["echoes"]
                if self._leases and "leases" in message
                else None
            )
        reply: Wire = {"type": "synced", "v": 1, "grantResults": grant_results}
        if echoes is not None:
            reply["leases"] = echoes
            if self._contended:
                reply["contended"] = True
        return reply

    def reclaim_expired(self, now: int) -> list[Wire]:
        """``#reclaimExpired``: what the alarm runs; returns the events it emits."""
        with _Transaction(self._sql):
            return self._reclaim(now)[1]

    # --- #allocate ----------------------------------------------------------------------------

    def _allocate(self, pending: list[Wire], limit: int, policies: Mapping[str, Wire], now: int) -> Wire:
        store = self._store
        allocations: list[Wire] = []
        unknown_debt = 0
        drawn: dict[str, int] = {}
        for request in pending:
            client_id = request["clientId"]
            room = self._claim_room(limit)
            grant_results = self._apply_reports(client_id, request["grants"], now, room)
            leases: list[Wire] = []
            if self._leases and "leases" in request:
                outcome = self._apply_lease_reports(client_id, request["leases"], now)
                leases.extend(outcome["echoes"])
                unknown_debt += outcome["unknownDebt"]
                drawn.update(outcome["drawn"])
            allocations.append({"grants": [], "blocked": [], "grantResults": grant_results, "leases": leases})

        used: dict[str, int] = {}
        total = 0
        kept, reclaimed = self._reclaim(now)
        for grant in kept:
            count = _outstanding(grant, now)
            total += count
            used[grant["grp"]] = used.get(grant["grp"], 0) + count
        # In strict mode live lease footprint is reserved from the same pool as grants.
        budget = (
            budgets(self._leases["provisioning"], limit)
            if self._leases
            else {"grants": limit, "leases": 0, "shared": False}
        )
        # Fix F2: under mode's two pools also stay within the room the whole limit has.
        under_shares = (
            FIX_F2 in self._fixes
            and self._leases is not None
            and self._leases["provisioning"]["mode"] == "under"
        )
        leased = 0
        if self._leases and (budget["shared"] or under_shares):
            for lease in store.list_leases():
                leased += _lease_footprint(lease)
        remaining = budget["grants"] - total - (leased if budget["shared"] else 0)
        if under_shares:
            remaining = min(remaining, limit - total - leased)
        # Fix F1: with withinGroupLimit, the grant pass counts the group's live lease footprint.
        group_leased: dict[str, int] = {}
        if FIX_F1 in self._fixes and self._leases and self._leases["limitedGroups"] == "withinGroupLimit":
            for lease in store.list_leases():
                group_leased[lease["grp"]] = group_leased.get(lease["grp"], 0) + _lease_footprint(lease)

        demands = [(index, demand) for index, request in enumerate(pending) for demand in request["demand"]]
        demands = _sorted(
            demands,
            lambda left, right: (
                _sign(left[1]["oldestAt"] - right[1]["oldestAt"])
                or locale_compare(pending[left[0]]["clientId"], pending[right[0]]["clientId"])
            ),
        )
        requested = 0
        granted = 0
        for index, demand in demands:
            requested += demand["count"]
            allocation = allocations[index]
            policy = policies.get(demand["group"], {})
            if "blocked" in policy:
                allocation["blocked"].append({"group": demand["group"], "reason": policy["blocked"]})
                continue
            group_used = used.get(demand["group"], 0)
            group_remaining: float = (
                math.inf
                if "limit" not in policy
                else policy["limit"] - group_used - group_leased.get(demand["group"], 0)
            )
            give = int(max(0, min(demand["count"], group_remaining, remaining)))
            if give > 0:
                grant = {
                    "grant_id": self._new_id(),
                    "client_id": pending[index]["clientId"],
                    "grp": demand["group"],
                    "permits": give,
                    "claimed": 0,
                    "released": 0,
                    "created_at": now,
                    "expires_at": now + self.grant_timeout_ms,
                }
                store.insert(grant)
                allocation["grants"].append(
                    {"grantId": grant["grant_id"], "group": demand["group"], "permits": give}
                )
                remaining -= give
                used[demand["group"]] = group_used + give
                granted += give
            if give < demand["count"]:
                # The group gate is checked first so attribution names the tighter one.
                allocation["blocked"].append(
                    {
                        "group": demand["group"],
                        "reason": "group_limit" if group_remaining - give <= 0 else "limit",
                    }
                )

        lease_events: list[Wire] = []
        contended = False
        if self._leases:
            candidates = [
                {"clientId": request["clientId"], "group": d["group"], "oldestAt": d["oldestAt"]}
                for request in pending
                if "leases" in request
                for d in request["demand"]
            ]
            # The allocator nets out live footprint itself; hand it gross capacity.
            lease_budget = max(0, limit - total - granted) if budget["shared"] else budget["leases"]
            if under_shares:
                lease_budget = min(lease_budget, max(0, limit - total - granted))
            outcome = self._allocate_leases(
                lease_budget, unknown_debt, drawn, candidates, policies, used, now
            )
            leased = outcome["footprint"]
            lease_events = outcome["events"]
            # Returned headroom helps grants only when they share the limit with leases.
            contended = bool(outcome["unserved"]) or bool(
                budget["shared"] and any(b["reason"] == "limit" for a in allocations for b in a["blocked"])
            )
            for request, allocation in zip(pending, allocations, strict=True):
                # One echo per lease; the allocator's view (e.g. retired) supersedes the report's.
                by_lease: dict[str, Wire] = {}
                for lease in [*allocation["leases"], *outcome["grants"].get(request["clientId"], [])]:
                    by_lease[lease["leaseId"]] = lease
                allocation["leases"] = list(by_lease.values())
            if budget["shared"]:
                remaining = limit - total - granted - leased

        groups: dict[str, Wire] = {}
        for group, count in used.items():
            policy = policies.get(group, {})
            groups[group] = (
                {"granted": count} if "limit" not in policy else {"granted": count, "limit": policy["limit"]}
            )
        return {
            "allocations": allocations,
            "requested": requested,
            "granted": granted,
            "reclaimed": reclaimed,
            "leaseEvents": lease_events,
            "contended": contended,
            "usage": {
                "limit": limit,
                "granted": total + granted,
                "leased": leased,
                "available": max(0, remaining),
                "groups": groups,
            },
        }

    # --- #applyReports, with fix F3 ---------------------------------------------------------------

    def _claim_room(self, limit: int) -> int | None:
        """Fix F3: how far claimed-and-unreleased permits (plus lease footprint in strict and under
        modes) may still grow under the current limit. None: the fix is off (the reference)."""
        if FIX_F3 not in self._fixes:
            return None
        in_use = sum(grant["claimed"] - grant["released"] for grant in self._store.list_grants())
        leased = 0
        if self._leases is not None and self._leases["provisioning"]["mode"] != "over":
            leased = sum(_lease_footprint(lease) for lease in self._store.list_leases())
        return int(limit - in_use - leased)

    def _apply_reports(self, client_id: str, reports: list[Wire], now: int, room: int | None) -> list[Wire]:
        """Cumulative claim/release reports: counts only move forward, clamped to what the grant honours."""
        store = self._store
        results: list[Wire] = []
        for report in reports:
            grant = store.get(report["grantId"])
            if grant is None or grant["client_id"] != client_id:
                results.append({"grantId": report["grantId"], "claimed": 0, "status": "not_found"})
                continue
            expired = now >= grant["expires_at"]
            permits = _effective_permits(grant, now)
            claimed = max(grant["claimed"], min(report["claimed"], permits))
            over_limit = False
            if room is not None and claimed - grant["claimed"] > max(0, room):
                # F3: the excess is clamped and answered expired, like a late claim.
                claimed, over_limit = grant["claimed"] + max(0, room), True
            released = max(grant["released"], min(report["released"], claimed))
            if room is not None:
                room -= (claimed - grant["claimed"]) - (released - grant["released"])
            updated = {**grant, "permits": permits, "claimed": claimed, "released": released}
            if released >= permits:
                store.remove(grant["grant_id"])
            else:
                store.update(updated)
            results.append(
                {
                    "grantId": grant["grant_id"],
                    "claimed": claimed,
                    "status": "expired" if (expired or over_limit) and report["claimed"] > claimed else "ok",
                }
            )
        return results

    def _reclaim(self, now: int) -> tuple[list[Wire], list[Wire]]:
        """``#reclaim``: every grant, after unclaimed permits past their window were taken back."""
        store = self._store
        kept: list[Wire] = []
        events: list[Wire] = []
        for grant in store.list_grants():
            if now < grant["expires_at"] or grant["claimed"] >= grant["permits"]:
                kept.append(grant)
                continue
            updated = {**grant, "permits": grant["claimed"]}
            if updated["released"] >= updated["permits"]:
                store.remove(grant["grant_id"])
            else:
                store.update(updated)
                kept.append(updated)
            events.append(
                _event(
                    "grant_reclaimed",
                    now,
                    grantId=grant["grant_id"],
                    clientId=grant["client_id"],
                    group=grant["grp"],
                    permits=grant["permits"] - grant["claimed"],
                )
            )
        return kept, events

    # --- semaphore-leases.ts ------------------------------------------------------------------------

    def _apply_lease_reports(self, client_id: str, reports: list[Wire], now: int) -> Wire:
        """``applyLeaseReports``: heartbeat, advance releases, retire, settle; charge unknown leases."""
        policy = self._leases
        assert policy is not None
        store = self._store
        outcome: Wire = {"echoes": [], "unknownDebt": 0, "drawn": {}}
        for report in reports:
            lease = store.get_lease(report["leaseId"])
            if lease is None or lease["client_id"] != client_id:
                outcome["echoes"].append(
                    {
                        "leaseId": report["leaseId"],
                        "group": lease["grp"] if lease is not None else "",
                        "permits": lease["permits"] if lease is not None else 0,
                        "expiresAt": now,
                    }
                )
                # Client-reported usage is untrusted: clamp before it can affect budget.
                live = max(0, report["drawn"] - max(0, report["released"]))
                outcome["unknownDebt"] += min(live, policy["permitsPerLease"])
                continue
            drawn = min(max(0, report["drawn"]), lease["permits"])
            outcome["drawn"][lease["lease_id"]] = drawn
            released = max(lease["released"], min(max(0, report["released"]), drawn))
            retired = lease["retired"] == 1 or report.get("retired") is True or lease["expires_at"] <= now
            permits = max(released, drawn) if report.get("retired") is True else lease["permits"]
            if released >= permits:
                store.remove_lease(lease["lease_id"])
                outcome["echoes"].append(
                    {**_to_lease_grant(lease, now), "permits": released, "expiresAt": now}
                )
                continue
            refreshed = {
                **lease,
                "permits": permits,
                "released": released,
                "retired": 1 if retired else 0,
                "expires_at": lease["expires_at"] if retired else now + policy["ttlMs"],
            }
            store.update_lease(refreshed)
            outcome["echoes"].append(_to_lease_grant(refreshed, now))
        return outcome

    def _allocate_leases(
        self,
        budget: int,
        unknown_debt: int,
        drawn: Mapping[str, int],
        candidates: list[Wire],
        policies: Mapping[str, Wire],
        group_used: Mapping[str, int],
        now: int,
    ) -> Wire:
        """``allocateLeases``: retire, net out footprint, share the budget among the oldest candidates."""
        policy = self._leases
        assert policy is not None
        store = self._store
        grants: dict[str, list[Wire]] = {}
        events: list[Wire] = []

        def echo(client_id: str, grant: Wire) -> None:
            grants[client_id] = [*grants.get(client_id, []), grant]

        footprint = 0
        group_footprint: dict[str, int] = {}
        usable: set[tuple[str, str]] = set()
        for lease in store.list_leases():
            group = policies.get(lease["grp"], {})
            current = lease
            if not lease["retired"] and (lease["expires_at"] <= now or not self._lease_eligible(group)):
                # Stop draws now; the full footprint stays until the client confirms.
                current = {**lease, "retired": 1}
                store.update_lease(current)
                echo(lease["client_id"], _to_lease_grant(current, now))
                events.append(
                    _lease_event(
                        "lease_retired",
                        now,
                        lease,
                        lease["permits"] - drawn.get(lease["lease_id"], lease["permits"]),
                    )
                )
            live = _lease_footprint(current)
            footprint += live
            group_footprint[lease["grp"]] = group_footprint.get(lease["grp"], 0) + live
            # An unreported lease is assumed fully drawn.
            if not current["retired"] and drawn.get(lease["lease_id"], lease["permits"]) < lease["permits"]:
                usable.add((lease["client_id"], lease["grp"]))

        by_group: dict[str, list[Wire]] = {}
        for candidate in candidates:
            if (
                not self._lease_eligible(policies.get(candidate["group"], {}))
                or (candidate["clientId"], candidate["group"]) in usable
            ):
                continue
            existing = by_group.get(candidate["group"], [])
            prior = next((c for c in existing if c["clientId"] == candidate["clientId"]), None)
            if prior is not None:
                prior["oldestAt"] = min(prior["oldestAt"], candidate["oldestAt"])
            else:
                existing.append({**candidate})
            by_group[candidate["group"]] = existing
        entries = []
        for group_name, clients in by_group.items():
            ordered = _sorted(
                clients,
                lambda a, b: (
                    _sign(a["oldestAt"] - b["oldestAt"]) or locale_compare(a["clientId"], b["clientId"])
                ),
            )
            entries.append(
                {
                    "group": group_name,
                    "clients": ordered[: policy["maxClientsPerGroup"]],
                    "oldestAt": min(c["oldestAt"] for c in clients),
                }
            )
        entries = _sorted(
            entries,
            lambda a, b: _sign(a["oldestAt"] - b["oldestAt"]) or locale_compare(a["group"], b["group"]),
        )
        chosen = [client for entry in entries[: policy["maxGroups"]] for client in entry["clients"]]

        # A lowered budget retires leases with undrawn headroom, newest first.
        excess = footprint + unknown_debt - budget
        if excess > 0:
            live_leases = [
                lease for lease in store.list_leases() if lease["expires_at"] > now and not lease["retired"]
            ]
            live_leases = _sorted(live_leases, lambda a, b: _sign(b["created_at"] - a["created_at"]))
            for lease in live_leases:
                if excess <= 0:
                    break
                count = drawn.get(lease["lease_id"])
                if count is None or count >= lease["permits"]:
                    continue
                retired = {**lease, "retired": 1}
                store.update_lease(retired)
                excess -= lease["permits"] - count
                echo(lease["client_id"], _to_lease_grant(retired, now))
                events.append(_lease_event("lease_retired", now, lease, lease["permits"] - count))

        eligible = sum(len(clients) for clients in by_group.values())
        remaining = max(0, budget - footprint - unknown_debt)
        # With fewer permits than candidates, the oldest demand gets one each.
        share = min(policy["permitsPerLease"], max(1, remaining // max(1, len(chosen))))
        issued = 0
        for candidate in chosen:
            if remaining <= 0:
                break
            group = policies.get(candidate["group"], {})
            group_room = (
                share
                if "limit" not in group
                else group["limit"]
                - group_used.get(candidate["group"], 0)
                - group_footprint.get(candidate["group"], 0)
            )
            permits = min(share, group_room, remaining)
            if permits <= 0:
                continue
            remaining -= permits
            issued += 1
            lease = {
                "lease_id": self._new_id(),
                "client_id": candidate["clientId"],
                "grp": candidate["group"],
                "permits": permits,
                "released": 0,
                "created_at": now,
                "expires_at": now + policy["ttlMs"],
                "retired": 0,
            }
            store.insert_lease(lease)
            footprint += permits
            group_footprint[candidate["group"]] = group_footprint.get(candidate["group"], 0) + permits
            echo(candidate["clientId"], _to_lease_grant(lease, now))
            events.append(_lease_event("lease_granted", now, lease, permits))
        return {"grants": grants, "footprint": footprint, "events": events, "unserved": issued < eligible}


def _blocked_counts(pending: list[Wire], allocations: list[Wire]) -> list[tuple[str, str, int]]:
    """``blockedCounts``: permits left queued per (group, reason) across one round's allocations."""
    counts: dict[tuple[str, str], int] = {}
    for request, allocation in zip(pending, allocations, strict=True):
        given: dict[str, int] = {}
        for grant in allocation["grants"]:
            given[grant["group"]] = given.get(grant["group"], 0) + grant["permits"]
        for blocked in allocation["blocked"]:
            # ``demand.find``: the first demand entry of the group.
            demanded = next((d for d in request["demand"] if d["group"] == blocked["group"]), None)
            count = (demanded["count"] if demanded is not None else 0) - given.get(blocked["group"], 0)
            key = (blocked["group"], blocked["reason"])
            counts[key] = counts.get(key, 0) + count
    return [(group, reason, count) for (group, reason), count in counts.items()]


# --- comparing with the core ------------------------------------------------------------------


def comparable(value: Any) -> str:
    """JSON text of a wire value for lockstep comparison.

    Key order is part of the wire (traces hold the reference's bytes), so it
    is kept, except in ``usage.groups``: the reference orders groups by their
    oldest grant and the core by name, a documented difference
    (docs/FINDINGS.md), so groups are compared sorted.
    """
    return _dumps(_groups_sorted(value))


def same_wire(core: Any, model: Any) -> bool:
    """Whether two wire values are equal as :func:`comparable` judges them.

    Equal bytes are equal whatever the groups' order, so the walk that sorts
    groups runs only for values whose bytes differ (the lockstep compares
    every reply, event and ``usage()`` of a run). Before the bytes, the
    cheaper ``repr``: for the JSON types (dict, list, str, int, float, bool,
    None) equal ``repr`` means the same types, values and key order, so the
    same bytes; unequal ``repr`` proves nothing (a tuple and a list are the
    same JSON array), and the bytes decide.
    """
    return repr(core) == repr(model) or _dumps(core) == _dumps(model) or comparable(core) == comparable(model)


#: One encoder for every comparison: ``json.dumps`` with arguments builds a new one per call.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _groups_sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {key: _groups_sorted(item) for key, item in value.items()}
        groups = out.get("groups")
        if "available" in out and isinstance(groups, dict):
            out["groups"] = dict(sorted(groups.items()))
        return out
    if isinstance(value, list | tuple):
        return [_groups_sorted(item) for item in value]
    return value


def first_difference(core: Any, model: Any) -> str:
    """Where two wire values first differ, as ``path: core ... model ...`` (for a violation's detail)."""

    def walk(a: Any, b: Any, path: str) -> str | None:
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            if list(a) != list(b) and set(a) == set(b) and not path.endswith("groups"):
                return f"{path}: keys in order {list(a)} vs {list(b)}"
            for key in sorted(set(a) | set(b), key=str):
                if key not in a or key not in b:
                    return f"{path}.{key}: {a.get(key, '(missing)')!r} vs {b.get(key, '(missing)')!r}"
                found = walk(a[key], b[key], f"{path}.{key}")
                if found:
                    return found
            return None
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            for index, (x, y) in enumerate(zip(a, b, strict=False)):
                found = walk(x, y, f"{path}[{index}]")
                if found:
                    return found
            if len(a) != len(b):
                return f"{path}: {len(a)} entries vs {len(b)}"
            return None
        if a != b or type(a) is not type(b):
            return f"{path}: {a!r} vs {b!r}"
        return None

    found = walk(_groups_sorted(core), _groups_sorted(model), "")
    text = found or "same content"
    return text if len(text) <= 300 else text[:297] + "..."
