"""The leased workers' shared store (seed 004's ``ENGINE_STORE``) as an endpoint on the network.

The store is a database every worker reaches over the network: requests to
it and replies from it are lost, delayed and partitioned like any other,
but it is never evicted and forgets nothing (it is where the leases live).
It serves :class:`semaphore_core.leased.LeaseStore` one request at a time:

- ``create`` (the workload's items, through a worker's intake): an
  instance per item, its workflow the item's account and its rate-limit key
  the item's group, so a workflow's concurrency ``limits`` is the account's
  ceiling;
- ``claim({owner, token, now, until, limit})``: the instances leased, each
  with the input its execution needs (account and work). ``now`` and
  ``until`` are the worker's, as seed 004's call passes them;
- ``renew({id, token, until})``, ``write({id, token, status})`` and
  ``handBack({id, token})``: fenced by the token and a live lease on the
  store's own clock (docs/DESIGNS.md). Renewals answer ``{ok}``, as the
  seed's ``flags !== null``.

What it must not know: workers, executions, the API.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from semaphore_core.leased import FINAL, Lease, LeaseStore, RateLimitRule
from semaphore_core.numbers import MAX_SAFE_INTEGER
from semsim.runtime.kernel import Sim
from semsim.runtime.network import RemoteError
from semsim.world.submitted import parse_items
from semsim.world.variant import REFERENCE, Variant

NAME: Final = "store"
#: What a write may set: an execution's end (the worker's ``finish``), always releasing.
_WRITE_STATUSES: Final = ("completed", "failed")


class LeaseStoreObject:
    """The store endpoint: one SQLite database and the inputs of its instances."""

    def __init__(
        self,
        sim: Sim,
        accounts: Sequence[str],
        cap: int,
        rate_limits: Sequence[RateLimitRule] = (),
        variant: Variant = REFERENCE,
    ) -> None:
        self._sim = sim
        #: The modelled ``LeaseStore``, or the variant's (semsim.world.variant); what is judged and
        #: measured reads its tables (``live_leases``, ``leased``, ...), not its methods.
        self.store: LeaseStore = variant.build_store(sqlite3.connect(":memory:", isolation_level=None))
        self._workflows = tuple(accounts)
        self._limits = {account: cap for account in accounts}
        self._rate_limits = tuple(rate_limits)
        #: Each instance's input: its account and the work its execution asks of the API.
        self.inputs: dict[str, tuple[str, int]] = {}

    def dispatch(self, method: str, payload: Any) -> Any:
        sim = self._sim
        now = sim.now()
        if method == "create":
            created = 0
            for item in parse_items(payload, NAME):
                if self.store.create(item.id, item.account, now, rate_limit_key=item.group):
                    self.inputs[item.id] = (item.account, item.work_ms)
                    created += 1
            return {"created": created}
        if method == "claim":
            owner, token, claim_now, until, limit = _fields(
                payload, ("owner", "token", "now", "until", "limit")
            )
            if not (isinstance(owner, str) and isinstance(token, str)) or not _ints(claim_now, until, limit):
                raise RemoteError("protocol", f"{NAME}: malformed claim {payload!r}")
            if until <= claim_now:
                raise RemoteError("protocol", f"{NAME}: a lease must end after it starts")
            lease = Lease(owner=owner, token=token, now_ms=claim_now, until_ms=until)
            claimed = self.store.claim(lease, limit, self._workflows, self._limits, self._rate_limits)
            sim.event("lease_claim", owner=owner, token=token, until=until, ids=[i.id for i in claimed])
            return [
                {"id": i.id, "account": self.inputs[i.id][0], "workMs": self.inputs[i.id][1], "runs": i.runs}
                for i in claimed
            ]
        if method == "renew":
            id, token, until = _fields(payload, ("id", "token", "until"))
            if not (isinstance(id, str) and isinstance(token, str)) or not _ints(until) or until <= now:
                raise RemoteError("protocol", f"{NAME}: malformed renew {payload!r}")
            ok = self.store.renew(id, token, now, until)
            sim.event("lease_renew", id=id, token=token, until=until, ok=ok)
            return {"ok": ok}
        if method in ("write", "handBack"):
            names = ("id", "token", "status") if method == "write" else ("id", "token")
            values = _fields(payload, names)
            id, token = values[0], values[1]
            if not (isinstance(id, str) and isinstance(token, str)):
                raise RemoteError("protocol", f"{NAME}: malformed {method} {payload!r}")
            if method == "write":
                status = values[2]
                if status not in _WRITE_STATUSES:
                    raise RemoteError("protocol", f"{NAME}: a write's status is one of {_WRITE_STATUSES}")
                assert status in FINAL
                ok = self.store.write(id, token, status, now, release=True)
            else:
                status = "pending"
                ok = self.store.hand_back(id, token, now)
            sim.event("lease_write", id=id, token=token, status=status, ok=ok)
            return {"ok": ok}
        raise RemoteError("protocol", f"{NAME}: unknown method {method!r}")

    def created(self) -> int:
        """Instances the store holds."""
        (count,) = self.store.conn.execute("SELECT COUNT(*) FROM workflow_instances").fetchone()
        return int(count)

    def unfinished(self) -> int:
        """Instances not yet completed or failed."""
        (count,) = self.store.conn.execute(
            "SELECT COUNT(*) FROM workflow_instances WHERE status NOT IN ('completed', 'failed', 'cancelled')"
        ).fetchone()
        return int(count)

    def live_leases(self, now_ms: int) -> list[tuple[str, str]]:
        """(instance id, token) of every live lease now, by id."""
        rows = self.store.conn.execute(
            "SELECT id, lease_token FROM workflow_instances WHERE lease_until > ? ORDER BY id", (now_ms,)
        ).fetchall()
        return [(str(id), str(token)) for id, token in rows]

    def leased(self, now_ms: int) -> dict[str, int]:
        """Instances under a live lease now, per account (``Instance.leased_at``, in SQL)."""
        rows = self.store.conn.execute(
            "SELECT workflow, COUNT(*) FROM workflow_instances WHERE lease_until > ? GROUP BY workflow"
            " ORDER BY workflow",
            (now_ms,),
        ).fetchall()
        return {str(workflow): int(count) for workflow, count in rows}


def _fields(payload: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    if not isinstance(payload, dict) or set(payload) != set(names):
        raise RemoteError("protocol", f"{NAME}: expected {{{', '.join(names)}}}, got {payload!r}")
    return tuple(payload[name] for name in names)


def _ints(*values: Any) -> bool:
    return all(type(value) is int and 0 <= value <= MAX_SAFE_INTEGER for value in values)
