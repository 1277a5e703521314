"""What a :class:`~semsim.check.checker.Checker` hears: one frozen record per event of a run.

Each record holds what the event is about and the oracle's count of the
permits actually in use (admitted by clients and not yet released,
counted from the clients' own admissions and releases, independent of the
holder's accounting). A holder's rows are read through a
:class:`HolderView`, which only reads, and only when asked: a checker that
looks at nothing costs nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

import attrs

from semaphore_core.config import LeaseOptions
from semaphore_core.durability import Event
from semaphore_core.protocol import PermitGrant, PermitRequest
from semaphore_core.store import GrantRow, HolderStore, LeaseRow
from semaphore_core.usage import Usage
from semsim.check.reads import CheckerReadError, never_built
from semsim.check.row_mirror import Rows

_GRANTS = "durability_semaphore_grants"


class HolderView:
    """The holder of one key, read-only: its grant and lease rows as they are now.

    Valid during the hook it was handed to (the rows move on as the run
    does); read again rather than keep one. A holder nobody ever called has
    no rows.
    """

    def __init__(self, key: str, storage: sqlite3.Connection, built: bool = False) -> None:
        self.key = key
        self._storage = storage
        #: Known built (a commit's holder): no need to ask the schema before every read.
        self._known_built = built

    def grants(self) -> list[GrantRow]:
        """Every grant row, in the holder's order."""
        if not self._built():
            return []
        try:
            return HolderStore(self._storage).list_grants()
        except sqlite3.OperationalError as error:
            raise CheckerReadError(f"holder {self.key}: could not list its grants: {error}") from error

    def leases(self) -> list[LeaseRow]:
        """Every lease row, live and retired, in the holder's order."""
        if not self._built():
            return []
        try:
            return HolderStore(self._storage).list_leases()
        except sqlite3.OperationalError as error:
            raise CheckerReadError(f"holder {self.key}: could not list its leases: {error}") from error

    def lease_footprints(self) -> dict[str, int]:
        """Per group, the permits its leases hold charged (live footprint), by the holder's count."""
        if not self._built():
            return {}
        try:
            totals = HolderStore(self._storage).lease_totals()
        except sqlite3.OperationalError as error:
            raise CheckerReadError(f"holder {self.key}: could not total its leases: {error}") from error
        return {group: total for group, (_, total) in totals.items()}

    def _built(self) -> bool:
        if not self._known_built:
            self._known_built = not never_built(self._storage, _GRANTS)
        return self._known_built

    def __repr__(self) -> str:
        return f"HolderView({self.key!r})"


#: A grant's or a lease's row.
Row = TypeVar("Row", GrantRow, LeaseRow)


@attrs.frozen
class RowChange(Generic[Row]):
    """One row a commit inserted, updated or deleted: as it was, and as it is (None: not there)."""

    row_id: str
    before: Row | None
    after: Row | None


class RowChanges:
    """The grant and lease rows one commit changed, before and after it; read-only.

    What the commit wrote, not every row: a row it left alone was seen when it
    last changed. Rows are built when first asked for, once for every checker
    of the commit, so a commit nobody looks at costs nothing. In the checker's
    debug mode (``--full-checks``) every row counts as changed.
    """

    def __init__(
        self,
        before: Rows,
        after: Rows,
        changed: Mapping[str, Sequence[str]],
        deadlines: Sequence[str] = (),
    ) -> None:
        self._before = before
        self._after = after
        self._changed = changed
        self._deadlines = tuple(deadlines)
        self._grants: tuple[RowChange[GrantRow], ...] | None = None
        self._leases: tuple[RowChange[LeaseRow], ...] | None = None

    def grants(self) -> tuple[RowChange[GrantRow], ...]:
        """The grants the commit changed: those still there in the holder's order, then deleted ones."""
        if self._grants is None:
            self._grants = self._rows("grants", GrantRow)
        return self._grants

    def leases(self) -> tuple[RowChange[LeaseRow], ...]:
        """The leases the commit changed, in the same order."""
        if self._leases is None:
            self._leases = self._rows("leases", LeaseRow)
        return self._leases

    def table_before(self, table: str) -> Mapping[str, tuple[Any, ...]]:
        """Every row of ``table`` (``grants`` or ``leases``) before the commit, by id, as
        ``SELECT *`` returns it: the whole table, for a rule that needs more than what changed."""
        return MappingProxyType(self._before.get(table, {}))

    def table_after(self, table: str) -> Mapping[str, tuple[Any, ...]]:
        """Every row of ``table`` after the commit, the same way."""
        return MappingProxyType(self._after.get(table, {}))

    @property
    def deadlines(self) -> tuple[str, ...]:
        """Grants whose claim deadline came since the holder's previous commit: their unclaimed
        permits stopped counting, so what the holder charges them fell with no row changed."""
        return self._deadlines

    def ids(self, table: str) -> tuple[str, ...]:
        """The ids the commit changed in ``table`` (``grants`` or ``leases``), in the same order:
        what :meth:`grants` and :meth:`leases` list, without building their rows."""
        return tuple(self._changed.get(table, ()))

    def _rows(self, table: str, kind: type[Row]) -> tuple[RowChange[Row], ...]:
        before, after = self._before.get(table, {}), self._after.get(table, {})

        def row(values: tuple[Any, ...] | None) -> Row | None:
            return None if values is None else kind(*values)

        return tuple(
            RowChange(row_id, row(before.get(row_id)), row(after.get(row_id)))
            for row_id in self._changed.get(table, ())
        )

    def __repr__(self) -> str:
        return f"RowChanges({ {table: len(ids) for table, ids in self._changed.items()} })"


#: A commit that changed no row.
NO_CHANGES: Final = RowChanges({}, {}, {})


@attrs.frozen
class Commit:
    """A holder transaction committed (a round, a sync, the alarm's reclaim)."""

    t_ms: int
    key: str
    #: ``Holder.usage(now)`` after the commit: limit, granted, leased, available, per group.
    usage: Usage
    #: The group caps in force (groups without one are absent).
    group_limits: Mapping[str, int]
    #: Permits actually in use for ``key`` (the oracle's count).
    in_use: int
    holder: HolderView
    #: The holder's lease options (None: a holder without leases): its provisioning mode.
    leases: LeaseOptions | None = None
    #: The earliest claim deadline of a grant with unclaimed permits (None: nothing pending),
    #: the object's stored alarm (None: none set), and the alarm's minimum delay.
    due_ms: int | None = None
    alarm_ms: int | None = None
    alarm_min_delay_ms: int = 0
    #: The grant and lease rows the commit changed, before and after it.
    changes: RowChanges = NO_CHANGES


@attrs.frozen
class Admission:
    """A client admitted ``item`` of ``key`` on a grant's or a lease's permit (one of the two is set)."""

    t_ms: int
    key: str
    group: str
    client: str
    item: str
    grant: str | None
    lease: str | None
    #: Permits actually in use for ``key``, this one included.
    in_use: int
    #: The holder's limit in force, and its lease options (None: a holder without leases).
    limit: int = 0
    leases: LeaseOptions | None = None
    #: Holder-accounted usage of ``key`` (granted plus leased), read from its storage now.
    accounted: int = 0


@attrs.frozen
class Release:
    """A client released the permit ``item`` of ``key`` ran on."""

    t_ms: int
    key: str
    group: str
    client: str
    item: str
    #: Permits actually in use for ``key``, this one no longer.
    in_use: int


@attrs.frozen
class Round:
    """A round of ``key``: its requests, and the replies sent, in the same order."""

    t_ms: int
    key: str
    requests: tuple[PermitRequest, ...]
    replies: tuple[PermitGrant, ...]
    #: The holder's lease options (None: a holder without leases) and the opt-in fixes it runs
    #: with (``semaphore_core.fixes``): what the reference's allocation rules depend on. A
    #: ``Round`` built by hand without them reads as a holder without leases and without fixes.
    leases: LeaseOptions | None = None
    fixes: frozenset[str] = frozenset()


@attrs.frozen
class Request:
    """``client`` is sending ``request`` for ``key`` (a round's request, not a sync), as it
    built it from its own queue at this moment.

    ``request`` as built, not as sent: a client that cannot take leases builds ``leases=()`` and
    the wire drops the field, so the holder's parse of it (in :attr:`Round.requests`) has
    ``leases=None``. ``wire`` is what is sent: judge it to see what a serialiser got wrong.
    """

    t_ms: int
    key: str
    client: str
    request: PermitRequest
    #: The request as it goes on the wire (the dict the holder receives), or None when the
    #: sender gave none. ``no_overask`` judges this: a demand serialised wrongly is what counts.
    #: Read it, never change it: it is the very dict the network carries. Not part of equality
    #: or the hash (a dict has none), so a ``Request`` still goes in a set.
    wire: Any = attrs.field(default=None, eq=False)


@attrs.frozen
class Operation:
    """A lifecycle event of one of ``client``'s durable operations (seed 002's events)."""

    t_ms: int
    client: str
    event: Event


@attrs.frozen
class ApiCallChange:
    """A call started (``change`` "start") or ended ("end") at the external API."""

    t_ms: int
    change: str
    #: The account (the holder's key) and the operation the call is for.
    account: str
    operation: str
    #: How many times the operation's idempotency key has taken effect at the API so far.
    effects: int
    #: Whether the API deduplicates by operation (then each must take effect at most once).
    idempotent: bool
    #: Calls in flight at the API for ``account``, after the change.
    in_flight: int = 0
    #: Permits actually in use for ``account`` (the oracle's count).
    in_use: int = 0
    #: The account's holder limit and lease options (None: no holder of that key in the run).
    limit: int | None = None
    leases: LeaseOptions | None = None
    #: Every call running at the API for ``account`` after the change, in arrival order.
    running: tuple[RunningCall, ...] = ()
    #: How many times the operation the call's request named has taken effect, under whatever
    #: idempotency keys (0: the request named none).
    operation_effects: int = 0


@attrs.frozen
class RunningCall:
    """A call running at the external API, and whether its operation's item still holds a permit."""

    operation: str
    started_at_ms: int
    #: The attempt that sent it, as its request said (None: it did not say).
    attempt: int | None
    holds_permit: bool


@attrs.frozen
class Evicted:
    """The holder of ``key`` was evicted: its live instance and memory are gone, its storage stays."""

    t_ms: int
    key: str
    #: The object's name, as the trace's ``evict`` event has it.
    object: str
    holder: HolderView


@attrs.frozen
class InstanceBuilt:
    """An instance of the holder of ``key`` is being built from its storage (its constructor has
    not run yet: ``holder`` shows the rows it is built on); ``generation`` is the instance's
    number (0: the first; each eviction adds one)."""

    t_ms: int
    key: str
    object: str
    generation: int
    holder: HolderView


@attrs.frozen
class Finish:
    """The run settled after its faults stopped: nothing runs, every change was reported."""

    t_ms: int
    #: Every holder of the run, by key.
    holders: Mapping[str, HolderView]
    #: Permits actually in use, by key (zero for a key whose items all ran).
    in_use: Mapping[str, int]
    #: Items still waiting on any client (in a capped group, say): the run settled with them.
    waiting: int
