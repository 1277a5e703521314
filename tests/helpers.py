"""Builders shared by the tests: holders on in-memory SQLite, wire messages, the row mirror's
tables, the project's bindings (to show a planted bug rebinds only what it claims), a
world of three keys, and a team's module of invariants every design hears."""

from __future__ import annotations

import itertools
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

from semaphore_core import Event, Holder, HolderConfig
from semaphore_core.store import GRANTS, LEASES

if TYPE_CHECKING:
    from semsim.explore.strategies import Case
    from semsim.harness.run import WorldRun


def ids(prefix: str = "id") -> Any:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def holder(
    conn: sqlite3.Connection | None = None, events: list[Event] | None = None, **config: Any
) -> Holder:
    """A holder with deterministic ids; events are appended to ``events`` when given."""
    if events is not None:
        config["on_event"] = events.append
    config.setdefault("limit", 10)
    return Holder(conn or sqlite3.connect(":memory:"), HolderConfig(**config), new_id=ids())


def request(
    client: str,
    demand: list[tuple[str, int, int]] | None = None,
    grants: list[tuple[str, int, int]] | None = None,
    leases: list[tuple[Any, ...]] | None = None,
) -> dict[str, Any]:
    """``demand``: (group, count, oldestAt); ``grants``: (grantId, claimed, released);
    ``leases``: (leaseId, drawn, released[, retired]); None leaves the key out."""
    message: dict[str, Any] = {
        "type": "request",
        "v": 1,
        "clientId": client,
        "demand": [{"group": g, "count": n, "oldestAt": t} for g, n, t in demand or []],
        "grants": [{"grantId": i, "claimed": c, "released": r} for i, c, r in grants or []],
    }
    if leases is not None:
        message["leases"] = [_lease(entry) for entry in leases]
    return message


def sync(
    client: str,
    grants: list[tuple[str, int, int]] | None = None,
    leases: list[tuple[Any, ...]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "sync",
        "v": 1,
        "clientId": client,
        "grants": [{"grantId": i, "claimed": c, "released": r} for i, c, r in grants or []],
    }
    if leases is not None:
        message["leases"] = [_lease(entry) for entry in leases]
    return message


def _lease(entry: tuple[Any, ...]) -> dict[str, Any]:
    report: dict[str, Any] = {"leaseId": entry[0], "drawn": entry[1], "released": entry[2]}
    if len(entry) > 3:
        report["retired"] = entry[3]
    return report


def rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every committed row of both tables, for before/after comparisons."""
    return {
        table: conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        for table in ("durability_semaphore_grants", "durability_semaphore_leases")
    }


class NoLockstep:
    """Stands in for ``semsim.check.lockstep.Lockstep``: a run without the literal model in lockstep.

    For tests of other checkers whose planted failure (a holder whose every
    round throws, a mutant) the model would see first.
    """

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def drew(self, new_id: str) -> str:
        return new_id

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def full_checks_seen(monkeypatch: Any) -> list[str]:
    """Spy on the checker's debug mode: the keys its full per-client check ran for (the real check runs)."""
    from semsim.check.cross_checks import FullConservative
    from semsim.check.events import Commit

    seen: list[str] = []
    judge = FullConservative.on_commit

    def counted(self: FullConservative, commit: Commit) -> None:
        seen.append(commit.key)
        judge(self, commit)

    monkeypatch.setattr(FullConservative, "on_commit", counted)
    return seen


class OveraskJudge:
    """``no_overask`` (semsim.check.no_overask) judging one client's requests, its verdicts returned."""

    def __init__(self, conn: Any, full: bool = False, keep_counts_from: int | None = None) -> None:
        from semsim.check.no_overask import NoOverask

        self.found: list[tuple[str, str]] = []
        extra = {} if keep_counts_from is None else {"keep_counts_from": keep_counts_from}
        self.checker = NoOverask(self._fail, lambda client: conn, full=full, **extra)

    def _fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None:
        self.found.append((name, detail))

    def __call__(self, key: str, request: Any, now: int) -> str | None:
        """The detail of what ``request`` broke, sent at ``now``, or None."""
        from semsim.check.events import Request

        self.found.clear()
        self.checker.on_request(Request(now, key, request.client_id, request))
        assert all(name == "no_overask" for name, _ in self.found), self.found
        return self.found[0][1] if self.found else None


def mirror_store() -> sqlite3.Connection:
    """A connection with the holder's grant and lease tables, as the checkers' row mirror reads them."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(
        f"CREATE TABLE {GRANTS} (grant_id TEXT PRIMARY KEY, client_id TEXT, grp TEXT, permits INTEGER, "
        "claimed INTEGER, released INTEGER, created_at INTEGER, expires_at INTEGER)"
    )
    conn.execute(
        f"CREATE TABLE {LEASES} (lease_id TEXT PRIMARY KEY, client_id TEXT, grp TEXT, permits INTEGER, "
        "released INTEGER, created_at INTEGER, expires_at INTEGER, retired INTEGER)"
    )
    return conn


def bindings() -> dict[tuple[str, str], object]:
    """Every attribute of every project module, and of every class defined in one."""
    seen: dict[tuple[str, str], object] = {}
    for module_name, module in sorted(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in ("semaphore_core", "semsim"):
            continue
        for attr, value in vars(module).items():
            seen[module_name, attr] = value
            if isinstance(value, type) and value.__module__ == module_name:
                for member, member_value in vars(value).items():
                    seen[f"{module_name}.{attr}", member] = member_value
    return seen


def changed_bindings(before: dict[tuple[str, str], object]) -> set[tuple[str, str]]:
    after = bindings()
    return {key for key in before.keys() | after.keys() if before.get(key) is not after.get(key)}


def fault_times(case: Case) -> list[int]:
    """When each of ``case``'s timed faults strikes, or starts."""
    faults = case.faults
    return [
        *(eviction.at_ms for eviction in faults.evictions),
        *(rollback.at_ms for rollback in faults.rollbacks),
        *(change.at_ms for change in faults.limit_changes),
        *(change.at_ms for change in faults.group_limit_changes),
        *(cancel.at_ms for cancel in faults.cancels),
        *(window.start_ms for window in faults.partitions),
        *(fault.start_ms for fault in faults.input_faults),
    ]


def without_queue_model(monkeypatch: Any) -> None:
    """Runs in this test judge the client's queue without its model (``exact_queue``): for a test
    of another check, with a queue bug planted that the model would name first."""
    from semsim.check.invariants import Monitor

    monkeypatch.setattr(Monitor, "queue_in_lockstep", lambda self, obj, queue, return_idle_leases: None)


def three_key_world(full_checks: bool = False) -> WorldRun:
    """Four strict lease-capable clients on three keys, a reply lost now and then (seed 5), with
    the known findings tolerated (F4 meets it at its end), so it runs to its end: each client
    keeps a queue, reports and a ``nextRequestAt`` per key."""
    # Imported here, as the module's other world-level helpers are not: a test that imports this
    # module for a holder builder loads no more of semsim than it did.
    from semsim.explore.fuzz import KNOWN_FINDINGS
    from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig, run_world
    from semsim.world.faults import FaultPlan
    from semsim.world.workload import Workload

    config = WorldConfig(
        holder=HolderSpec(limit=8, leases=LeaseSpec(provisioning="strict", permits_per_lease=2)),
        workload=Workload(
            clients=4,
            keys=("acct-a", "acct-b", "acct-c"),
            items_per_minute=12,
            duration_ms=(2_000, 20_000),
            until_ms=120_000,
        ),
        duration_ms=120_000,
    )
    faults = FaultPlan(reply_loss=0.05)
    return run_world(config, faults, 5, tolerated=KNOWN_FINDINGS, full_checks=full_checks)


#: A team's module of checkers (written to a file by the tests that load it by reference): one of
#: the API, which every design calls, and one of the holder's rounds, which only the semaphore does.
TEAM_INVARIANTS = """
from semsim.check.checker import Checker, Violated


class NeverOverCap(Checker):
    name = "never_over_cap"
    description = "no account ever has more calls at the API than its cap"

    def on_api(self, call):
        if call.change == "start" and call.in_flight > call.limit:
            raise Violated(f"{call.in_flight} calls for {call.account}, cap {call.limit}")


class HearsRounds(Checker):
    name = "hears_rounds"

    def on_round(self, round):
        pass
"""
