"""The Durable Object storage as the reference's engine awaits it: one transaction at a time.

Seed 002 awaits ``storage.transaction(closure)``, ``storage.setAlarm`` and,
inside a transaction, ``getAlarm``/``setAlarm``/``deleteAlarm``. How many
microtask hops those awaits take decides which continuation runs first
(issue 25), so this module ports the platform's side of them too. The seed
does not include the platform: this follows the durability oracle's
stand-in (``standins/do-state.ts``), the only runnable model we have, and
docs/DURABILITY.md lists it among the inferred parts:

- ``transaction(closure)`` runs one transaction at a time: a second one
  waits for the last queued one to finish. The first begins at once;
  SQL run by other code while the closure awaits joins it (there is one
  connection). The closure's alarm writes commit or roll back with the
  rows (here the alarm lives in the same database, so that is SQLite's
  doing).
- Every alarm call is an ``async`` function that returns at once.

The writes themselves stay synchronous ``sqlite3`` calls: the connection
and the ``StorageAlarm`` are the shell's, as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final

from semaphore_core.durability.alarm import StorageAlarm
from semaphore_core.durability.microtasks import JsPromise, Microtasks, js_async

#: The SAVEPOINT a platform transaction holds (outermost, it is the transaction itself).
_SAVEPOINT = "durability_storage"


def settled_call(tasks: Microtasks, call: Callable[[], Any]) -> JsPromise:
    """An ``async`` function with no ``await``: its promise, already settled with what ``call`` did."""
    try:
        value = call()
    except Exception as error:
        return JsPromise.rejected(tasks, error)
    return JsPromise.resolve(tasks, value)


#: ``staged`` before the closure wrote the alarm.
_UNSTAGED: Final = object()


class TransactionAlarm:
    """The alarm accessor a transaction's closure is handed.

    Writes are staged and applied when the transaction commits, as the
    stand-in does (``staged``, then ``world.alarmAt = staged.value`` after
    ``COMMIT``): reads see the staged value; an alarm written outside the
    transaction meanwhile (the fallback re-arm) is overwritten at commit, and
    kept if the transaction rolls back.
    """

    __slots__ = ("_alarm", "_tasks", "staged")

    def __init__(self, tasks: Microtasks, alarm: StorageAlarm) -> None:
        self._tasks = tasks
        self._alarm = alarm
        self.staged: object = _UNSTAGED

    def get_alarm(self) -> JsPromise:
        staged = self.staged
        if staged is _UNSTAGED:
            return settled_call(self._tasks, self._alarm.get_alarm)
        return JsPromise.resolve(self._tasks, staged)

    def set_alarm(self, at_ms: int) -> JsPromise:
        self.staged = at_ms
        return JsPromise.resolve(self._tasks, None)

    def delete_alarm(self) -> JsPromise:
        self.staged = None
        return JsPromise.resolve(self._tasks, None)

    def commit(self) -> None:
        """Apply the staged write (inside the transaction's SAVEPOINT, just before it is released)."""
        staged = self.staged
        if staged is _UNSTAGED:
            return
        if staged is None:
            self._alarm.delete_alarm()
        else:
            assert isinstance(staged, int)
            self._alarm.set_alarm(staged)


class PlatformStorage:
    """``ctx.storage``: ``transaction`` serialised one at a time, and the alarm outside transactions."""

    def __init__(self, tasks: Microtasks, conn: sqlite3.Connection, alarm: StorageAlarm) -> None:
        self.tasks = tasks
        self._conn = conn
        self._alarm = alarm
        self._lock: JsPromise = JsPromise.resolve(tasks)
        self._queued = 0

    def set_alarm(self, at_ms: int) -> JsPromise:
        """``storage.setAlarm``, outside any transaction."""
        return settled_call(self.tasks, lambda: self._alarm.set_alarm(at_ms))

    @js_async
    async def transaction(self, closure: Callable[[TransactionAlarm], JsPromise]) -> Any:
        """``storage.transaction(closure)``: begins at once when none is running or queued."""
        previous = self._lock if self._queued > 0 else None
        self._queued += 1
        lock = JsPromise(self.tasks)
        release, _ = lock.resolving_functions()
        self._lock = lock
        try:
            if previous is not None:
                await previous
            return await self._run_transaction(closure)
        finally:
            self._queued -= 1
            release(None)

    @js_async
    async def _run_transaction(self, closure: Callable[[TransactionAlarm], JsPromise]) -> Any:
        conn = self._conn
        conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        txn = TransactionAlarm(self.tasks, self._alarm)
        try:
            value = await closure(txn)
            txn.commit()
        except Exception:
            conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            conn.execute(f"RELEASE {_SAVEPOINT}")
            raise
        conn.execute(f"RELEASE {_SAVEPOINT}")
        return value
