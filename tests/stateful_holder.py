"""A Hypothesis state machine that drives ``Holder`` directly (no Trio, no simulator).

Clients (plain and lease-capable) enqueue demand, ask in rounds, sync, claim,
draw, release and retire; the machine loses replies, replays stale reports,
forges reports for other clients' grants and leases, advances time, runs the
alarm's reclaim, changes the limit, group limits and entitlements, and
rebuilds the holder on the same connection (an eviction).

After every step it checks the invariants (docs/INVARIANTS.md) that hold
without a simulator (``ceiling``, ``group_ceiling``, ``reports_monotone``,
``durable``) and compares the holder's usage with a model the machine keeps
from the replies it saw and the reports it sent. In every variant (the
fixes included) it also runs :mod:`semsim.check.literal_holder`, an independent
literal model of the reference that shares no code with the core, in
lockstep on the same wire messages, and demands the same serialised replies
and events, the same rows, the same ``usage()`` in full and the same alarm
time; a rule feeds both malformed and edge wire input and demands the same
accept or reject.

The module defines the machine; ``tests/test_stateful_holder.py`` runs it.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from semaphore_core import (
    Holder,
    HolderConfig,
    LeaseGranted,
    LeaseOptions,
    Over,
    Ratio,
    Strict,
    Under,
    budgets,
)
from semaphore_core.errors import SemaphoreProtocolError
from semaphore_core.fixes import CLAIMS_RESPECT_THE_LIMIT
from semaphore_core.protocol import (
    Demand,
    GrantReport,
    LeaseReport,
    PermitGrant,
    PermitRequest,
    PermitSync,
    PermitSyncResult,
    parse_request,
)
from semsim.check.literal_holder import LiteralHolder, LiteralProtocolError, first_difference, same_wire
from semsim.check.literal_holder import options_from_config as literal_options
from semsim.check.literal_holder import parse as literal_parse
from tests.helpers import ids

GROUPS = ("g0", "g1", "g2")
#: A group limit whose callback throws.
RAISES = "raises"
#: Group limits the reference rejects (limit_resolution_error): what a bad callback returns.
BAD_GROUP_LIMITS = (-1, 2.5, "3", True, math.nan, math.inf, 2**53, RAISES)

#: Values that break a message field (or pass as edge values: 2.0 is the integer 2).
EDGE_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2.0,
    2.5,
    2**53 - 1,
    2**53,
    -(2**53),
    math.inf,
    math.nan,
    "",
    "g0",
    "\ud800",
    "x" * 1_025,
    "\u00e9",
    [],
    {},
    [{}],
)
#: Where in a message an edge value goes.
EDGE_PATHS: tuple[tuple[Any, ...], ...] = (
    ("type",),
    ("v",),
    ("clientId",),
    ("demand",),
    ("demand", 0),
    ("demand", 0, "group"),
    ("demand", 0, "count"),
    ("demand", 0, "oldestAt"),
    ("grants",),
    ("grants", 0, "grantId"),
    ("grants", 0, "claimed"),
    ("grants", 0, "released"),
    ("leases",),
    ("leases", 0, "leaseId"),
    ("leases", 0, "drawn"),
    ("leases", 0, "released"),
    ("leases", 0, "retired"),
    ("extra",),
)
#: Client ids that differ only in case (and by an ignorable character): ties under localeCompare.
EDGE_CLIENTS = ("edge", "Edge", "EDGE", "ed\x01ge", "\u00e9dge")


#: edge_message's strategies, built once (a strategy built per draw is validated per draw);
#: the draws are the same. ``oldestAt``'s depends on the time, so it is built per draw.
_EDGE_KINDS = st.sampled_from(["request", "sync"])
_EDGE_CLIENT_IDS = st.sampled_from(EDGE_CLIENTS)
_EDGE_GRANT_IDS = st.sampled_from(["nobody", "id-1", "id-2"])
_EDGE_GROUPS = st.sampled_from(GROUPS)
_EDGE_COUNTS = st.integers(0, 3)
_BOOLEANS = st.booleans()
_EDGE_DRAWN = st.integers(0, 99)
_EDGE_CHANGES = st.integers(0, 2)
_EDGE_PATHS = st.sampled_from(EDGE_PATHS)
_EDGE_VALUES = st.sampled_from(EDGE_VALUES)


@st.composite
def edge_message(draw: st.DrawFn, now: int) -> dict[str, Any]:
    """A request or sync from an edge client, valid or broken at one or two places."""
    kind = draw(_EDGE_KINDS)
    message: dict[str, Any] = {
        "type": kind,
        "v": 1,
        "clientId": draw(_EDGE_CLIENT_IDS),
        "grants": [{"grantId": draw(_EDGE_GRANT_IDS), "claimed": 1, "released": 0}],
    }
    if kind == "request":
        message["demand"] = [
            {
                "group": draw(_EDGE_GROUPS),
                "count": draw(_EDGE_COUNTS),
                "oldestAt": draw(st.sampled_from([-(2**53 - 1), -1, 0, now])),
            }
        ]
    if draw(_BOOLEANS):
        message["leases"] = [{"leaseId": "ghost", "drawn": draw(_EDGE_DRAWN), "released": 0}]
    for _ in range(draw(_EDGE_CHANGES)):
        path = draw(_EDGE_PATHS)
        parent: Any = message
        for step in path[:-1]:
            if (isinstance(parent, dict) and step in parent) or (
                isinstance(parent, list) and isinstance(step, int) and step < len(parent)
            ):
                parent = parent[step]
            else:
                parent = None
                break
        if isinstance(parent, dict):
            if draw(_BOOLEANS):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(_EDGE_VALUES)
        elif isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent):
            parent[path[-1]] = draw(_EDGE_VALUES)
    return message


def _sorted_rows(rows: dict[str, dict[str, tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    return {table: sorted(by_id.values()) for table, by_id in rows.items()}


class InvariantViolation(AssertionError):
    """An invariant failed; ``name`` is its name in docs/INVARIANTS.md."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name


def check(name: str, condition: bool, detail: str) -> None:
    if not condition:
        raise InvariantViolation(name, detail)


# --- what the holder should account, kept from replies and reports ------------


@attrs.define
class ModelGrant:
    client: str
    group: str
    permits: int
    expires_at: int
    claimed: int = 0
    released: int = 0

    def outstanding(self, now: int) -> int:
        effective = self.claimed if now >= self.expires_at else self.permits
        return max(0, effective - self.released)


@attrs.define
class ModelLease:
    client: str
    group: str
    permits: int
    released: int = 0

    def footprint(self) -> int:
        return max(0, self.permits - self.released)


# --- what each client knows -------------------------------------------------------


@attrs.define
class ClientGrant:
    group: str
    permits: int
    claimed: int = 0
    released: int = 0


@attrs.define
class ClientLease:
    group: str
    permits: int
    drawn: int = 0
    released: int = 0
    retired: bool = False
    stopped: bool = False  # the holder said stop (expiresAt <= now)


@attrs.define
class Client:
    lease_capable: bool
    demand: dict[str, tuple[int, int]] = attrs.Factory(dict)  # group -> (count, oldestAt)
    grants: dict[str, ClientGrant] = attrs.Factory(dict)
    leases: dict[str, ClientLease] = attrs.Factory(dict)
    sent: list[tuple[tuple[GrantReport, ...], tuple[LeaseReport, ...] | None]] = attrs.Factory(list)
    #: From the last reply: the client does not ask again before it.
    next_request_at: int = 0

    def grant_reports(self) -> tuple[GrantReport, ...]:
        return tuple(GrantReport(gid, g.claimed, g.released) for gid, g in self.grants.items())

    def lease_reports(self) -> tuple[LeaseReport, ...] | None:
        if not self.lease_capable:
            return None
        return tuple(
            LeaseReport(lid, lease.drawn, lease.released, True if lease.retired else None)
            for lid, lease in self.leases.items()
        )


#: Provisioning per configuration family; a campaign runs each family on its
#: own budget because one derandomized run keeps mutating a few early
#: examples and would otherwise explore only one or two configurations.
PROVISIONING: dict[str, st.SearchStrategy[Any]] = {
    "none": st.none(),
    "strict": st.just(Strict()),
    "under": st.builds(
        Under, reserve=st.one_of(st.integers(0, 6), st.builds(Ratio, st.sampled_from([0.0, 0.25, 0.5, 1.5])))
    ),
    "over": st.builds(
        Over, extra=st.one_of(st.integers(0, 6), st.builds(Ratio, st.sampled_from([0.0, 0.5, 1.0])))
    ),
}
FAMILIES: tuple[tuple[str, str], ...] = (
    ("none", "exclude"),
    *(
        (mode, limited)
        for mode in ("strict", "under", "over")
        for limited in ("exclude", "within_group_limit")
    ),
)


class HolderMachine(RuleBasedStateMachine):
    """Subclasses set ``fixes``; the reference variant has none."""

    fixes: frozenset[str] = frozenset()
    #: Findings (docs/FINDINGS.md) this variant is known to exhibit: a violation
    #: attributed to one of them is recorded in ``violations`` instead of failing.
    tolerated: frozenset[str] = frozenset()
    #: Tolerated violations per finding across a campaign (class-level, reset by the runner).
    seen: dict[str | None, int] = {}  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.clients: dict[str, Client] = {}
        self.grants: dict[str, ModelGrant] = {}
        self.leases: dict[str, ModelLease] = {}
        self.violations: list[InvariantViolation] = []

    #: The configuration family (provisioning mode, limited groups); None draws any.
    family: tuple[str, str] | None = None

    @initialize(
        data=st.data(),
        limit=st.integers(1, 12),
        grant_timeout_ms=st.sampled_from([1_000, 3_000]),
        ttl_ms=st.sampled_from([2_000, 8_000]),
        permits_per_lease=st.integers(1, 6),
        max_groups=st.integers(1, 3),
        max_clients_per_group=st.integers(1, 3),
        plain=st.integers(0, 2),
        capable=st.integers(1, 3),
        group_limits=st.dictionaries(st.sampled_from(GROUPS), st.integers(1, 8), min_size=1, max_size=2),
        warmup=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(1, 4)), min_size=1, max_size=3),
    )
    def setup(
        self,
        data: st.DataObject,
        limit: int,
        grant_timeout_ms: int,
        ttl_ms: int,
        permits_per_lease: int,
        max_groups: int,
        max_clients_per_group: int,
        plain: int,
        capable: int,
        group_limits: dict[str, int],
        warmup: list[tuple[str, int]],
    ) -> None:
        if self.family is None:
            mode = data.draw(st.sampled_from(sorted(PROVISIONING)), label="mode")
            limited_groups: Any = data.draw(
                st.sampled_from(["exclude", "within_group_limit"]), label="limited"
            )
        else:
            mode, limited_groups = self.family
        self.configure(
            provisioning=data.draw(PROVISIONING[mode], label="provisioning"),
            limited_groups=limited_groups,
            limit=limit,
            grant_timeout_ms=grant_timeout_ms,
            ttl_ms=ttl_ms,
            permits_per_lease=permits_per_lease,
            max_groups=max_groups,
            max_clients_per_group=max_clients_per_group,
            plain=plain,
            capable=capable,
            group_limits=group_limits,
        )
        # Swarm testing may disable every rule that asks for permits; a first
        # round in which every client asks keeps each example from being inert.
        self.run_round(list(range(len(self.clients))), [False] * 4, "honest", 0, False, warmup)

    def configure(
        self,
        *,
        provisioning: Any,
        limited_groups: Any = "exclude",
        limit: int,
        grant_timeout_ms: int = 3_000,
        ttl_ms: int = 8_000,
        permits_per_lease: int = 3,
        max_groups: int = 3,
        max_clients_per_group: int = 3,
        plain: int = 0,
        capable: int = 1,
        group_limits: dict[str, int] | None = None,
    ) -> None:
        """Build the holder and clients; replays of findings call this directly."""
        self.limit = self.initial_limit = limit
        #: Group limits; a value that is not an int is a bad one (``RAISES`` makes the callback throw).
        self.group_limits: dict[str, Any] = dict(group_limits or {})
        self.denied: set[str] = set()
        leases = (
            None
            if provisioning is None
            else LeaseOptions(
                provisioning=provisioning,
                permits_per_lease=permits_per_lease,
                ttl_ms=ttl_ms,
                max_groups=max_groups,
                max_clients_per_group=max_clients_per_group,
                limited_groups=limited_groups,
            )
        )
        self.config = HolderConfig(
            limit=lambda: self.limit,
            group_limit=self._group_limit,
            can_grant=lambda group: group not in self.denied,
            grant_timeout_ms=grant_timeout_ms,
            leases=leases,
            fixes=self.fixes,
        )
        self.conn = sqlite3.connect(":memory:")
        self.holder_ids = ids("id")
        self.holder = Holder(self.conn, self.config, new_id=self.holder_ids)
        # The literal model, on its own database, with the same callables and the same ids.
        self.model_conn = sqlite3.connect(":memory:")
        self.model_ids = ids("id")
        self.model = LiteralHolder(self.model_conn, literal_options(self.config), new_id=self.model_ids)
        for i in range(plain):
            self.clients[f"p{i}"] = Client(lease_capable=False)
        for i in range(capable):
            self.clients[f"L{i}"] = Client(lease_capable=True)
        if not self.clients:
            self.clients["p0"] = Client(lease_capable=False)
        self.snapshot = self._rows()
        self.previous_usage = self._usage_totals()
        self.previous_groups: dict[str, tuple[int, int]] = {}

    # --- helpers ---------------------------------------------------------------

    def _client(self, index: int) -> tuple[str, Client]:
        name = sorted(self.clients)[index % len(self.clients)]
        return name, self.clients[name]

    def _rows(self) -> dict[str, dict[str, tuple[Any, ...]]]:
        grants = {r[0]: r for r in self.conn.execute("SELECT * FROM durability_semaphore_grants")}
        leases = {r[0]: r for r in self.conn.execute("SELECT * FROM durability_semaphore_leases")}
        return {"grants": grants, "leases": leases}

    def _usage_totals(self) -> tuple[int, int]:
        usage = self.holder.usage(self.now)
        return usage.granted, usage.leased

    def _group_limit(self, group: str) -> Any:
        value = self.group_limits.get(group)
        if value is RAISES:
            raise RuntimeError(f"group limit of {group} cannot be resolved")
        return value

    def _lockstep(self, what: str, core: Any, model: Any) -> None:
        """The core and the literal model must agree exactly (serialised, key order included;
        ``same_wire`` compares the bytes only when the values' ``repr`` differ)."""
        assert same_wire(core, model), (
            f"{what}: the holder and the literal model differ at {first_difference(core, model)}"
        )

    def _violation(self, name: str, condition: bool, detail: str, finding: str | None = None) -> None:
        """Check one invariant; ``finding`` names the known finding that explains a failure here."""
        try:
            check(name, condition, detail)
        except InvariantViolation as violation:
            violation.finding = finding  # type: ignore[attr-defined]
            if finding is None or finding not in self.tolerated:
                raise
            self.violations.append(violation)

    def _claim_room(self) -> int | None:
        """Fix F3: how far claims may go under the current limit (None: the reference)."""
        if CLAIMS_RESPECT_THE_LIMIT not in self.fixes:
            return None
        options = self.config.leases
        leased = (
            0
            if options is None or isinstance(options.provisioning, Over)
            else sum(lease.footprint() for lease in self.leases.values())
        )
        return self.limit - sum(g.claimed - g.released for g in self.grants.values()) - leased

    def _model_report(self, client: str, report: GrantReport, room: int | None = None) -> int | None:
        grant = self.grants.get(report.grant_id)
        if grant is None or grant.client != client:
            return room
        expired = self.now >= grant.expires_at
        permits = grant.claimed if expired else grant.permits
        before_claimed, before_released = grant.claimed, grant.released
        claimed = max(grant.claimed, min(report.claimed, permits))
        if room is not None:
            claimed = min(claimed, grant.claimed + max(0, room))
        grant.claimed = claimed
        grant.released = max(grant.released, min(report.released, grant.claimed))
        grant.permits = permits
        if grant.released >= permits:
            del self.grants[report.grant_id]
        if room is None:
            return None
        return room - (grant.claimed - before_claimed) + (grant.released - before_released)

    def _model_lease_report(self, client: str, report: LeaseReport) -> None:
        lease = self.leases.get(report.lease_id)
        if lease is None or lease.client != client:
            return
        drawn = min(report.drawn, lease.permits)
        lease.released = max(lease.released, min(report.released, drawn))
        if report.retired:
            lease.permits = max(lease.released, drawn)
        if lease.released >= lease.permits:
            del self.leases[report.lease_id]

    def _model_reclaim(self) -> None:
        for grant_id, grant in list(self.grants.items()):
            if self.now >= grant.expires_at and grant.claimed < grant.permits:
                grant.permits = grant.claimed
                if grant.released >= grant.permits:
                    del self.grants[grant_id]

    def _receive_grant_reply(self, name: str, reply: PermitGrant, lost: bool) -> None:
        for granted in reply.grants:
            self.grants[granted.grant_id] = ModelGrant(
                client=name,
                group=granted.group,
                permits=granted.permits,
                expires_at=self.now + self.config.grant_timeout_ms,
            )
        if lost:
            return
        client = self.clients[name]
        client.next_request_at = reply.next_request_at
        for granted in reply.grants:
            # The queue reports a claim for every item it can admit; the claim
            # travels in its next report.
            client.grants[granted.grant_id] = ClientGrant(
                group=granted.group, permits=granted.permits, claimed=granted.permits
            )
            count, oldest = client.demand.get(granted.group, (0, self.now))
            left = max(0, count - granted.permits)
            if left:
                client.demand[granted.group] = (left, oldest)
            else:
                client.demand.pop(granted.group, None)
        self._receive_lease_echoes(client, reply.leases)

    def _draw_for_queue(self, client: Client) -> None:
        """As the queue does: admit queued items through live leases first, one permit each."""
        for lease in client.leases.values():
            if lease.retired or lease.stopped:
                continue
            count, oldest = client.demand.get(lease.group, (0, self.now))
            take = min(count, lease.permits - lease.drawn)
            if take <= 0:
                continue
            lease.drawn += take
            if count - take:
                client.demand[lease.group] = (count - take, oldest)
            else:
                del client.demand[lease.group]

    def _receive_lease_echoes(self, client: Client, echoes: tuple[Any, ...] | None) -> None:
        for echo in echoes or ():
            known = client.leases.get(echo.lease_id)
            if known is None:
                if echo.expires_at > self.now:
                    client.leases[echo.lease_id] = ClientLease(group=echo.group, permits=echo.permits)
                continue
            if echo.expires_at <= self.now:
                known.stopped = True
                if echo.permits <= known.released:
                    del client.leases[echo.lease_id]  # settled: every permit it drew is back

    def _apply_results(self, client: Client, results: tuple[Any, ...]) -> None:
        for result in results:
            grant = client.grants.get(result.grant_id)
            if grant is None:
                continue
            if result.status == "not_found":
                del client.grants[result.grant_id]
            elif result.status == "expired":
                grant.claimed = min(grant.claimed, result.claimed)
                grant.permits = result.claimed
                grant.released = min(grant.released, grant.claimed)

    def _reports_for(
        self, name: str, client: Client, style: str, forge_index: int
    ) -> tuple[tuple[GrantReport, ...], tuple[LeaseReport, ...] | None]:
        grants, leases = client.grant_reports(), client.lease_reports()
        if style == "stale" and client.sent:
            grants, leases = client.sent[forge_index % len(client.sent)]
            if client.lease_capable and leases is None:
                leases = ()
        elif style == "reordered":
            grants, leases = tuple(reversed(grants)), None if leases is None else tuple(reversed(leases))
        elif style == "forged":
            others = [(n, c) for n, c in sorted(self.clients.items()) if n != name]
            stolen = [gid for _, c in others for gid in c.grants]
            stolen_leases = [lid for _, c in others for lid in c.leases]
            grants = (*grants, GrantReport("nobody", 3, 3))
            if stolen:
                grants = (*grants, GrantReport(stolen[forge_index % len(stolen)], 9, 9))
            if leases is not None:
                leases = (*leases, LeaseReport("ghost", 2, 0))
                if stolen_leases:
                    leases = (
                        *leases,
                        LeaseReport(stolen_leases[forge_index % len(stolen_leases)], 9, 9, True),
                    )
        client.sent.append((client.grant_reports(), client.lease_reports()))
        del client.sent[:-6]
        return grants, leases

    def _model_apply(
        self, name: str, grants: tuple[GrantReport, ...], leases: tuple[LeaseReport, ...] | None
    ) -> None:
        room = self._claim_room()
        for report in grants:
            room = self._model_report(name, report, room)
        if self.config.leases is not None and leases is not None:
            for lease_report in leases:
                self._model_lease_report(name, lease_report)

    # --- rules: the holder's inputs ------------------------------------------------

    @rule(
        who=st.lists(st.integers(0, 5), min_size=1, max_size=4),
        lose=st.lists(st.booleans(), min_size=4, max_size=4),
        style=st.sampled_from(["honest", "honest", "stale", "reordered", "forged"]),
        forge_index=st.integers(0, 9),
        zero_demand=st.booleans(),
        arrivals=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(1, 4)), max_size=2),
    )
    def run_round(
        self,
        who: list[int],
        lose: list[bool],
        style: str,
        forge_index: int,
        zero_demand: bool,
        arrivals: list[tuple[str, int]],
    ) -> None:
        names: list[str] = []
        requests: list[PermitRequest] = []
        for index in who:
            name, client = self._client(index)
            for group, count in arrivals:
                queued, oldest = client.demand.get(group, (0, self.now))
                client.demand[group] = (queued + count, oldest)
            if style == "honest":
                self._draw_for_queue(client)
            grants, leases = self._reports_for(name, client, style, forge_index)
            demand = [(g, n, t) for g, (n, t) in sorted(client.demand.items())]
            if zero_demand and client.lease_capable and not demand:
                demand = [(GROUPS[forge_index % len(GROUPS)], 0, self.now)]
            requests.append(
                PermitRequest(
                    client_id=name,
                    demand=tuple(Demand(g, n, t) for g, n, t in demand),
                    grants=grants,
                    leases=leases,
                )
            )
            names.append(name)
        wire = [request.to_wire() for request in requests]
        outcome = self.holder.round(wire, self.now)
        replies, events = self.model.round(wire, self.now)
        self._lockstep("round replies", [reply.to_wire() for reply in outcome.replies], replies)
        self._lockstep("round events", [event.to_wire() for event in outcome.events], events)
        for name, request in zip(names, requests, strict=True):
            self._model_apply(name, request.grants, request.leases)
        self._model_reclaim()
        # New leases are the round's lease_granted events; a reply's echo of a
        # refreshed lease is not news (and may echo one a later request settled).
        for event in outcome.events:
            if isinstance(event, LeaseGranted):
                self.leases[event.lease_id] = ModelLease(
                    client=event.client_id, group=event.group, permits=event.permits
                )
        for i, (name, reply) in enumerate(zip(names, outcome.replies, strict=True)):
            self._receive_grant_reply(name, reply, lost=lose[i % len(lose)])
            if not lose[i % len(lose)]:
                self._apply_results(self.clients[name], reply.grant_results)

    @rule(
        who=st.lists(st.integers(0, 5), min_size=1, max_size=3),
        arrivals=st.lists(st.tuples(st.sampled_from(GROUPS), st.integers(1, 4)), min_size=1, max_size=2),
    )
    def honest_round(self, who: list[int], arrivals: list[tuple[str, int]]) -> None:
        """The common case, picked as often as every fault-laden round together."""
        self.run_round(who, [False] * 4, "honest", 0, False, arrivals)

    @rule(
        index=st.integers(0, 5),
        style=st.sampled_from(["honest", "stale", "forged"]),
        forge_index=st.integers(0, 9),
    )
    def sync(self, index: int, style: str, forge_index: int) -> None:
        name, client = self._client(index)
        grants, leases = self._reports_for(name, client, style, forge_index)
        wire = PermitSync(client_id=name, grants=grants, leases=leases).to_wire()
        reply = self.holder.sync_message(wire, self.now)
        self._lockstep("sync reply", reply.to_wire(), self.model.handle_sync(wire, self.now))
        self._model_apply(name, grants, leases)
        self._apply_results(client, reply.grant_results)
        self._receive_sync(client, reply)

    def _receive_sync(self, client: Client, reply: PermitSyncResult) -> None:
        self._receive_lease_echoes(client, reply.leases)

    @rule(ms=st.sampled_from([1, 500, 999, 1_000, 2_500, 8_000]))
    def advance(self, ms: int) -> None:
        """Time passes; clients with queued items whose ``nextRequestAt`` passed ask, as they would."""
        self.now += ms
        due = [
            index
            for index, name in enumerate(sorted(self.clients))
            if self.clients[name].demand and self.clients[name].next_request_at <= self.now
        ]
        if due:
            self.run_round(due, [False] * 4, "honest", 0, False, [])

    @rule()
    def alarm(self) -> None:
        events = self.holder.reclaim_expired(self.now)
        self._lockstep(
            "alarm events", [event.to_wire() for event in events], self.model.reclaim_expired(self.now)
        )
        self._model_reclaim()

    @rule(
        change=st.sampled_from(["limit", "group_limit", "entitlement"]),
        group=st.sampled_from(GROUPS),
        value=st.one_of(st.none(), st.integers(0, 12)),
    )
    def change_policy(self, change: str, group: str, value: int | None) -> None:
        """The operator changes the limit, a group limit, or a group's entitlement."""
        if change == "limit":
            self.limit = self.initial_limit if value is None else value
        elif change == "group_limit":
            if value is None:
                self.group_limits.pop(group, None)
            else:
                self.group_limits[group] = value // 2
        else:
            self.denied.symmetric_difference_update({group})

    @rule(group=st.sampled_from(GROUPS), bad=st.sampled_from(BAD_GROUP_LIMITS))
    def bad_group_limit(self, group: str, bad: Any) -> None:
        """The group-limit callback throws or returns a bad value: the group fails closed."""
        self.group_limits[group] = bad

    @rule(data=st.data(), count=st.integers(1, 3))
    def edge_input(self, data: st.DataObject, count: int) -> None:
        """Malformed and edge wire messages: the core and the literal model accept and reject the same.

        The accepted requests run as one round (their clients differ only in
        case, so ties go by localeCompare), the accepted syncs one by one, on both.
        """
        requests = []
        for _ in range(count):
            message = data.draw(edge_message(self.now), label="message")
            try:
                parsed: Any = parse_request(message)
            except SemaphoreProtocolError as error:
                parsed = error
            try:
                literal_parse(message)
                model_accepts = True
            except LiteralProtocolError:
                model_accepts = False
            core_accepts = not isinstance(parsed, SemaphoreProtocolError)
            assert core_accepts == model_accepts, (
                f"holder accepts: {core_accepts}, literal model accepts: {model_accepts}, for {message!r}"
            )
            if not core_accepts:
                continue
            self._model_apply(parsed.client_id, parsed.grants, parsed.leases)
            if isinstance(parsed, PermitRequest):
                requests.append(message)
                continue
            synced = self.holder.sync_message(message, self.now)
            self._lockstep("sync reply", synced.to_wire(), self.model.handle_sync(message, self.now))
        if not requests:
            return
        outcome = self.holder.round(requests, self.now)
        replies, events = self.model.round(requests, self.now)
        self._lockstep("round replies", [reply.to_wire() for reply in outcome.replies], replies)
        self._lockstep("round events", [event.to_wire() for event in outcome.events], events)
        self._model_reclaim()
        for event in outcome.events:
            if isinstance(event, LeaseGranted):
                self.leases[event.lease_id] = ModelLease(
                    client=event.client_id, group=event.group, permits=event.permits
                )
        for message, reply in zip(requests, outcome.replies, strict=True):
            self._receive_grant_reply(message["clientId"], reply, lost=True)

    @rule(by=st.integers(1, 3))
    def lower_limit(self, by: int) -> None:
        """Lower the limit a little: just under current usage is where ceilings are tested.

        Never to 0 (an absolute change can do that): a holder at 0 admits
        nothing, and an example stuck there explores nothing more."""
        self.limit = max(1, self.limit - by)

    @rule()
    def evict(self) -> None:
        before = self._rows()
        self.holder = Holder(self.conn, self.config, new_id=self.holder_ids)
        # The model loses what the reference's instance keeps in memory, too.
        self.model = LiteralHolder(self.model_conn, literal_options(self.config), new_id=self.model_ids)
        self._violation("durable", self._rows() == before, "rebuilding the holder changed committed rows")

    # --- rules: the clients ---------------------------------------------------------

    @rule(
        action=st.sampled_from(
            ["enqueue", "claim", "claim_part", "release", "draw", "lease_release", "lease_retire"]
        ),
        index=st.integers(0, 5),
        pick=st.integers(0, 9),
        count=st.integers(1, 4),
        group=st.sampled_from(GROUPS),
    )
    def client_acts(self, action: str, index: int, pick: int, count: int, group: str) -> None:
        """One client does one thing locally; the holder hears of it in its next report."""
        _, client = self._client(index)
        grants = list(client.grants.values())
        leases = list(client.leases.values())
        if action == "enqueue":
            queued, oldest = client.demand.get(group, (0, self.now))
            client.demand[group] = (queued + count, oldest)
        elif action in ("claim", "claim_part") and grants:
            grant = grants[pick % len(grants)]
            grant.claimed = max(grant.claimed, grant.permits - (1 if action == "claim_part" else 0))
        elif action == "release" and grants:
            grant = grants[pick % len(grants)]
            grant.released = min(grant.claimed, grant.released + count)
        elif action == "draw":
            live = [lease for lease in leases if not lease.retired and not lease.stopped]
            if live:
                lease = live[pick % len(live)]
                lease.drawn = min(lease.permits, lease.drawn + count)
        elif action == "lease_release" and leases:
            lease = leases[pick % len(leases)]
            lease.released = min(lease.drawn, lease.released + count)
        elif action == "lease_retire" and leases:
            leases[pick % len(leases)].retired = True

    # --- invariants ------------------------------------------------------------------

    def _ceiling(self, usage: Any) -> None:
        granted, leased = usage.granted, usage.leased
        before_granted, before_leased = self.previous_usage
        options = self.config.leases
        if options is not None and isinstance(options.provisioning, Over):
            extra = budgets(options.provisioning, usage.limit).leases
            self._violation(
                "ceiling",
                granted <= usage.limit or granted <= before_granted,
                f"grants {granted} > limit {usage.limit} and grew from {before_granted}",
            )
            self._violation(
                "ceiling",
                leased <= extra or leased <= before_leased,
                f"leases {leased} > extra {extra} and grew from {before_leased}",
            )
        else:
            total, before = granted + leased, before_granted + before_leased
            finding = None
            if options is not None and isinstance(options.provisioning, Under):
                # F2: under mode budgets its two pools separately; after the limit
                # falls, each may stay within its own pool while the sum grows.
                pools = budgets(options.provisioning, usage.limit)
                within_pools = (granted <= pools.grants or granted <= before_granted) and (
                    leased <= pools.leases or leased <= before_leased
                )
                finding = "F2" if within_pools else None
            self._violation(
                "ceiling",
                total <= usage.limit or total <= before,
                f"usage {granted}+{leased} > limit {usage.limit} and grew from {before}",
                finding=finding,
            )

    def _group_usage(self, group: str) -> tuple[int, int]:
        granted = sum(g.outstanding(self.now) for g in self.grants.values() if g.group == group)
        leased = sum(lease.footprint() for lease in self.leases.values() if lease.group == group)
        return granted, leased

    def _group_ceiling(self) -> None:
        within = self.config.leases is not None and self.config.leases.limited_groups == "within_group_limit"
        for group, limit in sorted(self.group_limits.items()):
            if isinstance(limit, bool) or not isinstance(limit, int):
                continue  # a bad group limit blocks the group (limit_resolution_error)
            if group in self.denied:
                continue
            granted, leased = self._group_usage(group)
            before_granted, before_leased = self.previous_groups.get(group, (0, 0))
            self._violation(
                "group_ceiling",
                granted <= limit or granted <= before_granted,
                f"group {group}: {granted} granted > {limit}, grew from {before_granted}",
            )
            if within:
                # F1: the grant pass ignores the group's lease footprint.
                used, before = granted + leased, before_granted + before_leased
                self._violation(
                    "group_ceiling",
                    used <= limit or used <= before,
                    f"group {group}: {granted} granted + {leased} leased > {limit}, grew from {before}",
                    finding="F1",
                )

    def _reports_monotone(self) -> None:
        now = self._rows()
        for grant_id, row in now["grants"].items():
            _, _, _, permits, claimed, released, _, _ = row
            self._violation("reports_monotone", released <= claimed <= permits, f"grant {grant_id} row {row}")
            old = self.snapshot["grants"].get(grant_id)
            if old is not None:
                self._violation(
                    "reports_monotone",
                    claimed >= old[4] and released >= old[5] and permits <= old[3],
                    f"grant {grant_id} moved back: {old} -> {row}",
                )
        for lease_id, row in now["leases"].items():
            _, _, _, permits, released, _, _, retired = row
            self._violation("reports_monotone", released <= permits, f"lease {lease_id} row {row}")
            old = self.snapshot["leases"].get(lease_id)
            if old is not None:
                self._violation(
                    "reports_monotone",
                    released >= old[4] and permits <= old[3] and retired >= old[7],
                    f"lease {lease_id} moved back: {old} -> {row}",
                )
        self.snapshot = now

    @invariant()
    def holds(self) -> None:
        if not hasattr(self, "holder"):
            return
        usage = self.holder.usage(self.now)
        model_granted = sum(g.outstanding(self.now) for g in self.grants.values())
        model_leased = sum(lease.footprint() for lease in self.leases.values())
        assert (usage.granted, usage.leased) == (model_granted, model_leased), (
            f"holder accounts {usage.granted}+{usage.leased}, model expects {model_granted}+{model_leased}"
        )
        self._ceiling(usage)
        self._group_ceiling()
        self._reports_monotone()
        self._lockstep("usage()", usage.to_wire(), self.model.usage(self.now))
        self._lockstep("rows", _sorted_rows(self._rows()), _sorted_rows(self.model.rows()))
        self._lockstep("next alarm", self.holder.next_alarm_at(), self.model.next_alarm_at())
        self.previous_usage = (usage.granted, usage.leased)
        self.previous_groups = {group: self._group_usage(group) for group in GROUPS}

    def teardown(self) -> None:
        for violation in self.violations:
            finding = getattr(violation, "finding", None)
            type(self).seen[finding] = type(self).seen.get(finding, 0) + 1
