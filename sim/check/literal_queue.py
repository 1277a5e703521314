"""A literal model of the client's queue that shares nothing with the code it checks.

``semaphore_core.queue`` is an optimised client: its state is kept in
memory with sorted indexes and written through to SQLite, statement by
statement, inside transactions that reload memory on an error. This module
is the same contract written plainly, from the documents it follows (seed
001's "Leases" and "Grants and reports", seed 000's account-concurrency
composition, and the rules ``semaphore_core/queue.py``'s docstring states):
a few lists and dicts, every question answered by scanning all of them,
and every message as the wire dict, built and read here.

It imports nothing from ``semaphore_core``. A bug in the core's indexes,
its SQL, its serialiser or its reply parser is therefore not on both sides
of a comparison. :mod:`semsim.check.queue_lockstep` runs it beside every
client's queue in a judged run and demands the same answers to every call
(invariant ``exact_queue``), as :mod:`semsim.check.literal_holder` does for
the holder. Where the core and this model read the documents alike, a
misreading is shared: this model judges the port, not the reading (what
the documents leave open, and how semsim chose, is in docs/FINDINGS.md).

The queue keeps nothing in memory that storage does not hold, so one model
lives as long as the client object's storage: an evicted and rebuilt
client meets the same model.

Deliberately naive and deliberately separate: do not import its logic into
the core, and do not optimise it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

Wire: TypeAlias = dict[str, Any]


class LiteralQueue:
    """One client's items, grants, leases and per-key bookkeeping, as plain records.

    Items are dicts with ``id``, ``key``, ``group``, ``body``, ``status``
    (``queued``, ``claiming``, ``running``), ``at`` (when enqueued), ``n``
    (the order of enqueueing), ``grant``, ``lease`` and ``admitted_at``.
    Grants: ``permits``, ``claimed`` (what the client claimed), ``confirmed``
    (what the holder honoured), ``released`` and ``reported`` (``released``
    as last sent). Leases: ``permits``, ``drawn``, ``released``,
    ``retired``, ``expires_at``, ``reported_at`` and ``reported``. Keys:
    ``next_request_at``, ``changes`` (local changes the holder must hear)
    and ``acked`` (the changes a reply has covered).
    """

    def __init__(self, client_id: str, return_idle_leases: bool = False) -> None:
        self.client_id = client_id
        #: Fix F4 (docs/FINDINGS.md): a lease's undrawn permits go back as soon as nothing
        #: is queued in its group, not only on a ``contended`` reply.
        self.return_idle_leases = return_idle_leases
        self.items: list[dict[str, Any]] = []
        self.done: set[str] = set()
        self.grants: list[dict[str, Any]] = []
        self.leases: list[dict[str, Any]] = []
        self.keys: list[dict[str, Any]] = []
        self._enqueued = 0

    # --- plain lookups ------------------------------------------------------------

    def _item(self, item_id: str) -> dict[str, Any] | None:
        return _find(self.items, "id", item_id)

    def _grant(self, grant_id: str) -> dict[str, Any] | None:
        return _find(self.grants, "id", grant_id)

    def _lease(self, lease_id: str) -> dict[str, Any] | None:
        return _find(self.leases, "id", lease_id)

    def _key(self, key: str) -> dict[str, Any] | None:
        return _find(self.keys, "key", key)

    def _queued(self, key: str, group: str | None = None) -> list[dict[str, Any]]:
        """The key's (and group's) queued items, the oldest arrival first."""
        waiting = [
            item
            for item in self.items
            if item["status"] == "queued" and item["key"] == key and (group is None or item["group"] == group)
        ]
        return sorted(waiting, key=lambda item: (item["at"], item["n"]))

    def _has_queued(self, key: str) -> bool:
        return any(item["status"] == "queued" and item["key"] == key for item in self.items)

    def _live(self, lease: Mapping[str, Any]) -> bool:
        return not lease["retired"]

    def _in_use(self, lease: Mapping[str, Any]) -> bool:
        return self._live(lease) and lease["drawn"] > lease["released"]

    @staticmethod
    def _heartbeat(lease: Mapping[str, Any]) -> int:
        """Half the lease's lifetime since its last report (integer halves round towards zero)."""
        span = int(lease["expires_at"]) - int(lease["reported_at"])
        half = abs(span) // 2
        return int(lease["reported_at"]) + (half if span >= 0 else -half)

    def _touch(self, key: str) -> dict[str, Any]:
        row = self._key(key)
        if row is None:
            row = {"key": key, "next_request_at": 0, "changes": 0, "acked": 0}
            self.keys.append(row)
        return row

    def _changed(self, key: str) -> None:
        self._touch(key)["changes"] += 1

    def _finish(self, item: dict[str, Any]) -> None:
        self.items.remove(item)
        self.done.add(item["id"])

    # --- enqueue, release, cancel ---------------------------------------------------

    def enqueue(self, items: Iterable[tuple[str, str, str, str]], now: int) -> int:
        """Items ``(id, key, group, body)``; an id seen before (open or finished) is ignored."""
        added = 0
        for item_id, key, group, body in items:
            if item_id in self.done or self._item(item_id) is not None:
                continue
            self._enqueued += 1
            self.items.append(
                {
                    "id": item_id,
                    "key": key,
                    "group": group,
                    "body": body,
                    "status": "queued",
                    "at": now,
                    "n": self._enqueued,
                    "grant": None,
                    "lease": None,
                    "admitted_at": None,
                }
            )
            self._touch(key)
            added += 1
        return added

    def release(self, item_id: str) -> tuple[str, str] | None:
        """A running item finished: its grant's or lease's ``released`` moves on by one."""
        item = self._item(item_id)
        if item is None or item["status"] != "running":
            return None
        self._finish(item)
        grant = None if item["grant"] is None else self._grant(item["grant"])
        if grant is not None:
            grant["released"] += 1
        lease = None if item["lease"] is None else self._lease(item["lease"])
        if lease is not None:
            lease["released"] += 1
        self._changed(item["key"])
        return item["key"], item["group"]

    def cancel(self, item_id: str) -> bool:
        item = self._item(item_id)
        if item is None or item["status"] != "queued":
            return False
        self._finish(item)
        return True

    def status(self, item_id: str) -> str | None:
        item = self._item(item_id)
        if item is not None:
            return str(item["status"])
        return "done" if item_id in self.done else None

    def running(self) -> list[tuple[str, int]]:
        running = [item for item in self.items if item["status"] == "running"]
        running.sort(key=lambda item: (item["admitted_at"], item["n"]))
        return [(item["id"], item["admitted_at"]) for item in running]

    def newest_queued(self, count: int) -> list[str]:
        queued = [item for item in self.items if item["status"] == "queued"]
        queued.sort(key=lambda item: (item["at"], item["n"]), reverse=True)
        if count >= 0:
            queued = queued[:count]
        return [item["id"] for item in queued]

    # --- leases -------------------------------------------------------------------------

    def draw_leases(self, now: int) -> list[tuple[str, str, str, str, str | None, str | None]]:
        """Queued items admitted through live leases: the soonest-expiring lease first, each
        item one permit, the oldest items first. Admissions as ``(item, key, group, body,
        grant, lease)``."""
        drawable = [
            lease
            for lease in self.leases
            if self._live(lease) and lease["expires_at"] > now and lease["drawn"] < lease["permits"]
        ]
        drawable.sort(key=lambda lease: (lease["expires_at"], lease["id"]))
        admitted: list[tuple[str, str, str, str, str | None, str | None]] = []
        for lease in drawable:
            waiting = self._queued(lease["key"], lease["group"])
            if not waiting:
                continue
            taken = waiting[: lease["permits"] - lease["drawn"]]
            for item in taken:
                item["status"] = "running"
                item["lease"] = lease["id"]
                item["admitted_at"] = now
                admitted.append((item["id"], lease["key"], lease["group"], item["body"], None, lease["id"]))
            lease["drawn"] += len(taken)
            self._changed(lease["key"])
        if self.return_idle_leases:
            for key in sorted({lease["key"] for lease in drawable}):
                self._return_idle(key)
        return admitted

    def lease_expiry_at(self) -> int | None:
        times = [lease["expires_at"] for lease in self.leases if self._live(lease)]
        return min(times) if times else None

    def retire_expired(self, now: int, key: str | None = None) -> list[tuple[str, str]]:
        """Live leases (of ``key``, or of any key) whose expiry has come stop drawing."""
        stopped = [
            lease
            for lease in self.leases
            if self._live(lease) and lease["expires_at"] <= now and (key is None or lease["key"] == key)
        ]
        stopped.sort(key=lambda lease: (lease["key"], lease["id"]))
        for lease in stopped:
            lease["retired"] = True
        for changed in sorted({lease["key"] for lease in stopped}):
            self._changed(changed)
        return [(lease["key"], lease["id"]) for lease in stopped]

    def heartbeat_at(self) -> int | None:
        times = [self._heartbeat(lease) for lease in self.leases if self._in_use(lease)]
        return min(times) if times else None

    def heartbeat_keys(self, now: int) -> list[str]:
        return sorted(
            {lease["key"] for lease in self.leases if self._in_use(lease) and self._heartbeat(lease) <= now}
        )

    def _return_idle(self, key: str) -> None:
        """Live leases of ``key`` with undrawn permits, in groups where nothing is queued, stop."""
        idle = [
            lease
            for lease in self.leases
            if lease["key"] == key
            and self._live(lease)
            and lease["drawn"] < lease["permits"]
            and not self._queued(key, lease["group"])
        ]
        for lease in idle:
            lease["retired"] = True
        if idle:
            self._changed(key)

    # --- when to ask ------------------------------------------------------------------

    def keys_due(self, now: int) -> list[str]:
        return sorted(
            row["key"] for row in self.keys if self._has_queued(row["key"]) and row["next_request_at"] <= now
        )

    def next_request_at(self) -> int | None:
        times = [row["next_request_at"] for row in self.keys if self._has_queued(row["key"])]
        return min(times) if times else None

    def dirty_keys(self) -> list[str]:
        return sorted(row["key"] for row in self.keys if row["changes"] > row["acked"])

    def next_wakeup(self) -> tuple[int | None, int | None, int | None, int | None]:
        running = self.running()
        return (
            self.next_request_at(),
            self.heartbeat_at(),
            running[0][1] if running else None,
            self.lease_expiry_at(),
        )

    # --- what is sent -----------------------------------------------------------------

    def _reports(self, key: str) -> tuple[list[Wire], list[Wire]]:
        grants = sorted((grant for grant in self.grants if grant["key"] == key), key=lambda g: g["id"])
        leases = sorted((lease for lease in self.leases if lease["key"] == key), key=lambda le: le["id"])
        grant_reports = [
            {"grantId": grant["id"], "claimed": grant["claimed"], "released": grant["released"]}
            for grant in grants
        ]
        lease_reports: list[Wire] = []
        for lease in leases:
            report: Wire = {"leaseId": lease["id"], "drawn": lease["drawn"], "released": lease["released"]}
            if lease["retired"]:
                report["retired"] = True
            lease_reports.append(report)
        return grant_reports, lease_reports

    def build_request(self, key: str, now: int) -> Wire:
        """A request: per group of the key's queued items (groups in code point order), how many
        wait and when the oldest arrived; then every grant and lease report of the key."""
        demand = []
        for group in sorted({item["group"] for item in self._queued(key)}):
            waiting = self._queued(key, group)
            demand.append({"group": group, "count": len(waiting), "oldestAt": waiting[0]["at"]})
        grants, leases = self._reports(key)
        return {
            "type": "request",
            "v": 1,
            "clientId": self.client_id,
            "demand": demand,
            "grants": grants,
            "leases": leases,
        }

    def build_sync(self, key: str, now: int) -> Wire:
        grants, leases = self._reports(key)
        return {"type": "sync", "v": 1, "clientId": self.client_id, "grants": grants, "leases": leases}

    def sent(self, key: str, now: int) -> int:
        """The key's reports left: what they said is what the holder will answer."""
        row = self._touch(key)
        for lease in self.leases:
            if lease["key"] == key:
                lease["reported_at"] = now
                lease["reported"] = lease["released"]
        for grant in self.grants:
            if grant["key"] == key:
                grant["reported"] = grant["released"]
        return int(row["changes"])

    def acked(self, key: str, changes: int) -> None:
        row = self._key(key)
        if row is not None:
            row["acked"] = max(row["acked"], changes)

    # --- what came back -------------------------------------------------------------

    def on_grant(self, key: str, reply: Mapping[str, Any], now: int) -> Wire:
        """A round's reply, as the wire's dict: results, then new grants (each claimed at once
        with the oldest queued items of its group), then lease echoes."""
        row = self._key(key)
        if row is not None:
            row["next_request_at"] = int(reply["nextRequestAt"])
        step = self._results(key, reply["grantResults"], now)
        claims = [
            (
                granted["grantId"],
                self._claim(key, granted["grantId"], granted["group"], int(granted["permits"])),
            )
            for granted in reply["grants"]
        ]
        step["settled"] = self._echoes(key, reply.get("leases") or [], now)
        if reply.get("contended", False) or self.return_idle_leases:
            self._return_idle(key)
        claimed = any(count for _, count in claims)
        if claimed:
            self._changed(key)
        step["claims"] = claims
        step["needs_sync"] = claimed
        return step

    def on_synced(self, key: str, reply: Mapping[str, Any], now: int) -> Wire:
        step = self._results(key, reply["grantResults"], now)
        step["settled"] = self._echoes(key, reply.get("leases") or [], now)
        if reply.get("contended", False) or self.return_idle_leases:
            self._return_idle(key)
        return step

    def _claim(self, key: str, grant_id: str, group: str, permits: int) -> int:
        taken = self._queued(key, group)[:permits]
        if self._grant(grant_id) is None:
            self.grants.append(
                {
                    "id": grant_id,
                    "key": key,
                    "group": group,
                    "permits": permits,
                    "claimed": len(taken),
                    "confirmed": 0,
                    "released": 0,
                    "reported": 0,
                }
            )
        for item in taken:
            item["status"] = "claiming"
            item["grant"] = grant_id
        return len(taken)

    def _requeue(self, items: Iterable[dict[str, Any]]) -> list[str]:
        ids = []
        for item in items:
            item["status"] = "queued"
            item["grant"] = None
            ids.append(item["id"])
        return ids

    def _results(self, key: str, results: Iterable[Mapping[str, Any]], now: int) -> Wire:
        """Each grant result: admit what the holder honoured beyond what already runs, requeue
        what it refused; drop a grant with nothing left to report."""
        admitted: list[tuple[Any, ...]] = []
        requeued: list[str] = []
        for result in results:
            grant = self._grant(result["grantId"])
            if grant is None:
                continue
            carrying = sorted(
                (item for item in self.items if item["grant"] == grant["id"]),
                key=lambda item: (item["at"], item["n"]),
            )
            claiming = [item for item in carrying if item["status"] == "claiming"]
            if result["status"] == "not_found":
                requeued += self._requeue(claiming)
                self.grants.remove(grant)
                continue
            admit = max(0, int(result["claimed"]) - grant["confirmed"])
            for item in claiming[:admit]:
                item["status"] = "running"
                item["admitted_at"] = now
                admitted.append((item["id"], key, grant["group"], item["body"], grant["id"], None))
            grant["confirmed"] = max(grant["confirmed"], int(result["claimed"]))
            if result["status"] == "expired":
                requeued += self._requeue(claiming[admit:])
                grant["claimed"] = grant["permits"] = grant["confirmed"]
            still_open = [item for item in self.items if item["grant"] == grant["id"]]
            if not still_open and grant["reported"] == grant["confirmed"] == grant["claimed"]:
                self.grants.remove(grant)
        if requeued:
            self._touch(key)
        return {"admitted": admitted, "requeued": requeued}

    def _echoes(self, key: str, echoes: Iterable[Mapping[str, Any]], now: int) -> list[str]:
        """The holder's word on each lease: live (its expiry), or stopped (settled once the holder
        holds every release the client sent, else retired here and reported)."""
        settled = []
        for echo in echoes:
            # The wire's numbers may be floats with integer values (JSON has one number type).
            echo = {**echo, "permits": int(echo["permits"]), "expiresAt": int(echo["expiresAt"])}
            lease = self._lease(echo["leaseId"])
            if lease is None:
                if echo["expiresAt"] > now:
                    self.leases.append(
                        {
                            "id": echo["leaseId"],
                            "key": key,
                            "group": echo["group"],
                            "permits": echo["permits"],
                            "drawn": 0,
                            "released": 0,
                            "retired": False,
                            "expires_at": echo["expiresAt"],
                            "reported_at": now,
                            "reported": 0,
                        }
                    )
                continue
            if echo["expiresAt"] > now:
                lease["expires_at"] = echo["expiresAt"]
            elif echo["permits"] <= lease["reported"]:
                self.leases.remove(lease)
                settled.append(echo["leaseId"])
            elif not lease["retired"]:
                lease["retired"] = True
                lease["expires_at"] = now
                self._changed(key)
        self.retire_expired(now, key)
        return settled

    # --- for comparison -----------------------------------------------------------------

    def rows(self) -> Wire:
        """Every record, field for field as the queue's tables hold them (items in the order
        they were enqueued, the rest by id), to be held to what its storage holds."""
        items = sorted(self.items, key=lambda item: item["n"])
        return {
            "items": [
                [
                    item["id"],
                    item["key"],
                    item["group"],
                    item["body"],
                    item["status"],
                    item["at"],
                    item["grant"],
                    item["lease"],
                    item["admitted_at"],
                ]
                for item in items
            ],
            "done": sorted(self.done),
            "grants": sorted(
                [
                    g["id"],
                    g["key"],
                    g["group"],
                    g["permits"],
                    g["claimed"],
                    g["confirmed"],
                    g["released"],
                    g["reported"],
                ]
                for g in self.grants
            ),
            "leases": sorted(
                [
                    le["id"],
                    le["key"],
                    le["group"],
                    le["permits"],
                    le["drawn"],
                    le["released"],
                    int(le["retired"]),
                    le["expires_at"],
                    le["reported_at"],
                    le["reported"],
                ]
                for le in self.leases
            ),
            "keys": sorted(
                [row["key"], row["next_request_at"], row["changes"], row["acked"]] for row in self.keys
            ),
        }


def _find(records: list[dict[str, Any]], field: str, value: str) -> dict[str, Any] | None:
    """The record whose ``field`` is ``value``, by a scan of them all (there is at most one)."""
    return next((record for record in records if record[field] == value), None)
