"""What an engine's participants have pending, read from their rows apart from the engine.

Seed 002's ``reconcile`` (lines 1284-1319) arms the physical alarm and the
early timer from ``pendingTimes`` (lines 1242-1278): per participant, the
first pending row by ``next_attempt_at`` (with live timers, the first whose
key is not executing, for the timer). The engine's reading of it is the
code under test, so a checker of the alarm and the timers needs its own:
this one asks each durable table for the least ``next_attempt_at`` of its
pending rows with a query apart from the engine's (``least_pending_at``),
so a head read in the wrong order, or from the wrong rows, disagrees with
it. A participant that computes its
own time (a holder's grants, a client's queue) is read as it reports
itself: ``alarm_armed`` judges a holder's; a client's is its loop's next
wakeup, of which ``exact_queue`` judges the queue's part, and nothing the
rest (retries, report delays, the finished check's time). Two things are
taken from the engine as it says them: whether live timers are on, and
which keys are executing (with live timers, the timer skips those), so a
bug in that bookkeeping passes here.

Taken at the moment ``reconcile`` reads (the engine's ``targets_observer``),
inside the transaction, so both readings see the same rows.

The same holds for an alarm pass's due rows: ``#runDue`` (lines 594-621)
reads a table's pending rows due now, earliest first, the first
``DUE_BATCH``; ``rows_due`` reads the due rows with a query of its own at
the moment ``#runDue`` reads (the engine's ``due_observer``), so a pass that
reads fewer, or other, rows than are due disagrees with it.
"""

from __future__ import annotations

import attrs

from semaphore_core.durability import Engine
from semaphore_core.durability.storage import least_pending_at


@attrs.frozen
class TargetsRead:
    """One ``reconcile``'s reading, and the same reading taken from the rows (None: nothing)."""

    now_ms: int
    #: The earliest physical and timer times, as ``reconcile`` read them.
    physical_ms: int | None
    timer_ms: int | None
    #: The same two, read here from the participants' rows.
    rows_physical_ms: int | None
    rows_timer_ms: int | None


@attrs.frozen
class DueRead:
    """One ``#runDue``'s read of a table's due rows, and the due rows read here at that moment."""

    now_ms: int
    table: str
    #: The ids ``#runDue`` read, in its order.
    read: tuple[str, ...]
    #: Every pending row due then, ``(next_attempt_at, id)``, earliest first (ties by id).
    due: tuple[tuple[int, str], ...]


def rows_due(engine: Engine, table_name: str, now_ms: int) -> tuple[tuple[int, str], ...]:
    """Every pending row of ``table_name`` due at ``now_ms``, ``(next_attempt_at, key)``,
    earliest first: seed 002's WHERE (lines 601-603), without its LIMIT, by a query of its own."""
    (table,) = [p.table for p in engine.participants if p.table.name == table_name]
    rows = engine.conn.execute(
        f"SELECT next_attempt_at, {table.key} FROM {table.name} "
        "WHERE status = 'pending' AND next_attempt_at <= ?",
        (now_ms,),
    ).fetchall()
    return tuple(sorted((int(at), str(key)) for at, key in rows))


def reads_tables(engine: Engine) -> bool:
    """Whether any participant is a durable table (only then can the two readings differ)."""
    return any(participant.next_pending_at is None for participant in engine.participants)


def rows_targets(engine: Engine) -> tuple[int | None, int | None]:
    """The earliest physical and timer times, from each participant's rows: ``(physical, timer)``."""
    conn = engine.conn
    physical: list[int] = []
    timer: list[int] = []
    for participant in engine.participants:
        if participant.next_pending_at is not None:
            at = participant.next_pending_at(conn)
            if at is None:
                continue
            physical.append(at)
            if participant.holding is None or not participant.holding():
                timer.append(at)
            continue
        table = participant.table
        least = least_pending_at(conn, table)
        if least is None:
            continue
        physical.append(least)
        active = engine.active_keys(table.name) if engine.live_timers else frozenset()
        if not active:
            timer.append(least)
            continue
        eligible = [
            int(at)
            for key, at in conn.execute(
                f"SELECT {table.key}, next_attempt_at FROM {table.name} WHERE status = 'pending'"
            )
            if str(key) not in active
        ]
        if eligible:
            timer.append(min(eligible))
    return min(physical, default=None), min(timer, default=None)
