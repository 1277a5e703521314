"""``LeaseStore``: the leased worker's shared store on ``sqlite3``: claim, renew, fenced write, hand back.

Seed 004 shows the worker's side of the store (``workflow-worker.service.js``)
and, of the store itself, only ``RateWindowClaim`` (``rate_windows.py``). The
calls and what the worker's code and comments require of them:

- ``claim({owner, token, now, leaseUntil, limit, workflows, limits,
  rateLimits})`` leases due instances "under their limits": at most
  ``limit`` of them, each of a workflow this process runs, within each
  workflow's concurrency limit and rate windows, under the claim's token
  until ``leaseUntil``;
- ``renew(id, leaseToken, until)`` extends the lease, or answers ``null``
  when the lease is no longer this token's (the worker then stops counting
  on it);
- ``write(id, leaseToken, {...})`` is fenced by the token: it lands only
  while the instance is still leased under it ("Lost the lease on ...;
  another worker took over. Nothing from this execution after that point
  was recorded.");
- ``handBack(id, leaseToken, {now, ...})`` gives the lease up: the
  instance is due again at once, "for another worker (or this one, after a
  restart)";
- a lease that is not renewed runs out, and the instance is claimed again
  ("it is retried when its lease expires"; "At worst its lease expires, as
  if its worker had died").

The least those need, and so the modelling choices (docs/DESIGNS.md):

- an instance is **claimable** when it is runnable (``pending``,
  ``running`` or ``suspended``), due (``wake_at_ms <= now``) and not under a
  live lease (none, or ``lease_until_ms <= now``); claims take them oldest due
  first (then by creation, then id);
- a workflow's **concurrency limit** counts its instances under a live
  lease, those this claim takes included;
- the **rate windows** then grant or refuse each picked instance, in claim
  order (``RateWindowClaim.grant``); a refused instance stays due;
- **fencing** asks for the token *and* a live lease (issue 26 reads the
  seed so: a worker that stops renewing loses its instances when the lease
  expires), so a renewal or a write after ``lease_until_ms`` does not land
  even if no other claim took the instance yet. The seed's warning ("another
  worker took over") would fit a store that compares the token alone, but
  such a store lets a late renewal revive a lease and push a workflow past
  its concurrency limit. ``renew`` therefore takes ``now_ms``, which the
  seed's call does not pass (its store reads its own clock);
- a write with ``release`` ends or suspends the execution and gives the
  lease up; a final status without it is refused (the worker always
  releases on finish);
- not modelled: workflow versions (claims match workflow names), the
  ``compensating`` and ``compensation_failed`` statuses, a suspension with
  no wake time (waiting on a signal: a suspended instance here always has
  one), and ``handBack``'s ``leaseUntil`` and ``signalCursor`` (it makes
  the instance ``pending`` and due at once);
- an instance the rate windows refuse still used up a place of the
  claim's ``limit`` (picked, then refused), as the picked-then-granted
  shape of ``RateWindowClaim`` suggests.

What it must not know: workflows' code, journals, signals, schedules,
children, cancellation (the worker's), or time beyond the ``now_ms`` given.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypeAlias

import attrs

from semaphore_core.leased.rate_windows import PickedInstance, RateLimitRule, RateWindowClaim, RateWindowRow
from semaphore_core.transaction import transaction

Status: TypeAlias = Literal["pending", "running", "suspended", "completed", "failed", "cancelled"]
#: ``RUNNABLE_STATUSES`` ("The statuses a claim takes: an instance that hasn't finished"), less
#: ``compensating``, which this model has no use for.
RUNNABLE: Final[tuple[Status, ...]] = ("pending", "running", "suspended")
FINAL: Final[tuple[Status, ...]] = ("completed", "failed", "cancelled")

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS workflow_instances (
        id             TEXT    NOT NULL PRIMARY KEY,
        workflow       TEXT    NOT NULL,
        rate_limit_key TEXT,
        status         TEXT    NOT NULL,
        wake_at        INTEGER,
        lease_owner    TEXT,
        lease_token    TEXT,
        lease_until    INTEGER,
        runs           INTEGER NOT NULL DEFAULT 0,
        created_at     INTEGER NOT NULL,
        seq            INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS workflow_rate_windows (
        workflow   TEXT    NOT NULL,
        key        TEXT    NOT NULL,
        window_end INTEGER NOT NULL,
        count      INTEGER NOT NULL,
        PRIMARY KEY (workflow, key)
    )""",
    # Neither index is in the seed, which shows no SQL; they change no answer, only what a claim
    # reads: the due instances in claim order, and the live leases alone for the per-workflow
    # counts (a claim once read every instance, twice).
    "CREATE INDEX IF NOT EXISTS workflow_instances_due ON workflow_instances (wake_at, created_at, seq)",
    "CREATE INDEX IF NOT EXISTS workflow_instances_leased ON workflow_instances (lease_until)",
)


@attrs.frozen
class Instance:
    """An instance as the store holds it."""

    id: str
    workflow: str
    rate_limit_key: str | None
    status: Status
    wake_at_ms: int | None
    lease_owner: str | None
    lease_token: str | None
    lease_until_ms: int | None
    runs: int
    created_at_ms: int

    def leased_at(self, now_ms: int) -> bool:
        """Under a live lease at ``now_ms``."""
        return self.lease_until_ms is not None and self.lease_until_ms > now_ms


@attrs.frozen
class Lease:
    """One claim's lease: who claims, under which token, until when."""

    owner: str
    token: str
    now_ms: int
    until_ms: int

    def __attrs_post_init__(self) -> None:
        if self.until_ms <= self.now_ms:
            raise ValueError(f"a lease must end after it starts: {self.until_ms} <= {self.now_ms}")


_COLUMNS: Final = (
    "id, workflow, rate_limit_key, status, wake_at, lease_owner, lease_token, lease_until, runs, created_at"
)


class LeaseStore:
    """The shared store every worker claims from (one SQLite database)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None
        self.conn = conn
        with transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)

    # --- reads ------------------------------------------------------------------------------

    def get(self, id: str) -> Instance | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM workflow_instances WHERE id = ?", (id,)).fetchone()
        return None if row is None else Instance(*row)

    def instances(self) -> list[Instance]:
        """Every instance, in creation order."""
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM workflow_instances ORDER BY seq").fetchall()
        return [Instance(*row) for row in rows]

    def windows(self) -> list[RateWindowRow]:
        rows = self.conn.execute(
            "SELECT workflow, key, window_end, count FROM workflow_rate_windows ORDER BY workflow, key"
        ).fetchall()
        return [RateWindowRow(*row) for row in rows]

    # --- writes -----------------------------------------------------------------------------

    def create(self, id: str, workflow: str, now_ms: int, rate_limit_key: str | None = None) -> bool:
        """A new instance, due now; False (nothing written) when the id exists."""
        with transaction(self.conn):
            if self.get(id) is not None:
                return False
            (seq,) = self.conn.execute("SELECT COUNT(*) FROM workflow_instances").fetchone()
            self.conn.execute(
                "INSERT INTO workflow_instances"
                " (id, workflow, rate_limit_key, status, wake_at, created_at, seq)"
                " VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                (id, workflow, rate_limit_key, now_ms, now_ms, int(seq)),
            )
        return True

    def claim(
        self,
        lease: Lease,
        limit: int,
        workflows: Sequence[str],
        limits: Mapping[str, int] | None = None,
        rate_limits: Sequence[RateLimitRule] = (),
    ) -> list[Instance]:
        """Lease up to ``limit`` due instances of ``workflows`` under their limits, oldest due first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
        now = lease.now_ms
        limits = limits or {}
        with transaction(self.conn):
            live = dict(
                self.conn.execute(
                    "SELECT workflow, COUNT(*) FROM workflow_instances"
                    " WHERE lease_until > ? GROUP BY workflow",
                    (now,),
                ).fetchall()
            )
            # Read lazily, in claim order, only the workflows that may take one more (the loop
            # below skips the rest anyway, as it skips those it fills): the first ``limit`` taken
            # end it. A claim once read every due instance.
            open_workflows = sorted(
                {w for w in workflows if limits.get(w) is None or live.get(w, 0) < limits[w]}
            )
            candidates = self.conn.execute(
                f"SELECT {_COLUMNS} FROM workflow_instances"
                " WHERE status IN ('pending', 'running', 'suspended') AND wake_at <= ?"
                " AND (lease_until IS NULL OR lease_until <= ?)"
                f" AND workflow IN ({', '.join('?' * len(open_workflows))})"
                " ORDER BY wake_at, created_at, seq",
                (now, now, *open_workflows),
            )
            picked: list[Instance] = []
            for row in candidates:
                if len(picked) >= limit:
                    break
                instance = Instance(*row)
                if instance.workflow not in workflows:
                    continue
                cap = limits.get(instance.workflow)
                if cap is not None and live.get(instance.workflow, 0) >= cap:
                    continue
                live[instance.workflow] = live.get(instance.workflow, 0) + 1
                picked.append(instance)
            candidates.close()  # before the writes below
            granted_ids = self._rate_windows(now, rate_limits, picked)
            claimed: list[Instance] = []
            for instance in picked:
                if instance.id not in granted_ids:
                    continue
                self.conn.execute(
                    "UPDATE workflow_instances SET status = 'running', lease_owner = ?, lease_token = ?,"
                    " lease_until = ?, runs = runs + 1 WHERE id = ?",
                    (lease.owner, lease.token, lease.until_ms, instance.id),
                )
                leased = self.get(instance.id)
                assert leased is not None
                claimed.append(leased)
        return claimed

    def _rate_windows(
        self, now_ms: int, rate_limits: Sequence[RateLimitRule], picked: list[Instance]
    ) -> set[str]:
        """The picked instances the rate windows grant; their windows' rows written back."""
        if not rate_limits:
            return {instance.id for instance in picked}
        claim = RateWindowClaim(
            now_ms, rate_limits, [PickedInstance(i.id, i.workflow, i.rate_limit_key) for i in picked]
        )
        locked: list[RateWindowRow] = []
        for workflow, key in claim.windows:
            # Inserted where missing, so there is always a row to lock.
            self.conn.execute(
                "INSERT OR IGNORE INTO workflow_rate_windows (workflow, key, window_end, count)"
                " VALUES (?, ?, 0, 0)",
                (workflow, key),
            )
            row = self.conn.execute(
                "SELECT workflow, key, window_end, count FROM workflow_rate_windows"
                " WHERE workflow = ? AND key = ?",
                (workflow, key),
            ).fetchone()
            locked.append(RateWindowRow(*row))
        granted, changed = claim.grant(locked)
        for window in changed:
            self.conn.execute(
                "UPDATE workflow_rate_windows SET window_end = ?, count = ? WHERE workflow = ? AND key = ?",
                (window.window_end_ms, window.count, window.workflow, window.key),
            )
        return set(granted)

    def renew(self, id: str, token: str, now_ms: int, until_ms: int) -> bool:
        """Extend the lease while ``token`` holds it live; False (and nothing written) otherwise."""
        if until_ms <= now_ms:
            raise ValueError(f"a renewal must end after now: {until_ms} <= {now_ms}")
        cursor = self.conn.execute(
            "UPDATE workflow_instances SET lease_until = ?"
            " WHERE id = ? AND lease_token = ? AND lease_until > ?",
            (until_ms, id, token, now_ms),
        )
        return cursor.rowcount == 1

    def write(
        self,
        id: str,
        token: str,
        status: Status,
        now_ms: int,
        *,
        release: bool = False,
        wake_at_ms: int | None = None,
    ) -> bool:
        """A fenced write: it lands only while ``token`` holds a live lease. ``release`` gives the lease
        up (the execution ended or suspended; a suspended one is due again at ``wake_at_ms``)."""
        if status in FINAL and not release:
            raise ValueError(f"a write that ends the execution ({status}) must release its lease")
        fence = " WHERE id = ? AND lease_token = ? AND lease_until > ?"
        if release:
            sql = (
                "UPDATE workflow_instances SET status = ?, wake_at = ?,"
                " lease_owner = NULL, lease_token = NULL, lease_until = NULL" + fence
            )
            due = None if status in FINAL else (now_ms if wake_at_ms is None else wake_at_ms)
            args: tuple[object, ...] = (status, due, id, token, now_ms)
        else:
            sql = "UPDATE workflow_instances SET status = ?" + fence
            args = (status, id, token, now_ms)
        return self.conn.execute(sql, args).rowcount == 1

    def hand_back(self, id: str, token: str, now_ms: int) -> bool:
        """``handBack``: give the lease up; the instance is due at once for any worker."""
        return self.write(id, token, "pending", now_ms, release=True, wake_at_ms=now_ms)
