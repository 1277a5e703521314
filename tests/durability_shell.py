"""A minimal shell around ``semaphore_core.durability`` for tests: one object, its storage, its alarm.

The object's storage is one SQLite connection; its physical alarm is a
``SqliteAlarm`` in the same connection (so it commits with the rows).
``evict()`` drops the live instance (engine, helper, permits, timers,
running attempts) and builds a new one on the same connection, as the
platform does; the old engine is returned so a test can play a stale
instance whose code still runs. ``platform_alarm(now)`` is the platform
delivering the stored alarm: it clears the stored time, then calls
``Engine.alarm``.
"""

from __future__ import annotations

import itertools
import sqlite3
from typing import Any

from semaphore_core.durability import (
    Durability,
    DurabilityOptions,
    Engine,
    MethodOptions,
    RetryOptions,
    SchedulerOptions,
    SqliteAlarm,
    Step,
    all_calls,
)
from semaphore_core.durability.policy import Delay


class Shell:
    def __init__(
        self,
        *,
        handlers: tuple[str, ...] = ("run",),
        max_attempts: int = 3,
        attempt_timeout_ms: int = 60_000,
        delay: Delay | None = None,
        alarm_concurrency: int = 10,
        alarm_min_delay_ms: int = 15_000,
        alarm_handoff_ms: int = 14 * 60_000,
        live_timers: bool = False,
        fixes: frozenset[str] = frozenset(),
        include_results: bool = False,
        methods: dict[str, MethodOptions] | None = None,
    ) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.alarm = SqliteAlarm(self.conn)
        self._ids = itertools.count(1)
        self.scheduler = SchedulerOptions(
            alarm_concurrency=alarm_concurrency,
            alarm_min_delay_ms=alarm_min_delay_ms,
            alarm_handoff_ms=alarm_handoff_ms,
            live_timers=live_timers,
            fixes=fixes,
        )
        handler_map: dict[str, MethodOptions | None] = dict.fromkeys(handlers)
        handler_map.update(methods or {})
        self.options = DurabilityOptions(
            handlers=handler_map,
            attempt_timeout_ms=attempt_timeout_ms,
            retries=RetryOptions(max_attempts=max_attempts, delay=delay),
            include_results=include_results,
        )
        self.build()

    def new_id(self) -> str:
        return f"gen-{next(self._ids)}"

    def build(self) -> None:
        self.engine = Engine(self.conn, self.alarm, self.scheduler)
        self.durability = Durability(self.engine, self.options, new_id=self.new_id)

    def evict(self) -> Engine:
        """Lose the live instance; return it (a stale instance a test may keep driving)."""
        old = self.engine
        self.build()
        return old

    def register(self, id: str, payload: Any = None, now: int = 0, operation: str = "run") -> Step:
        return self.durability.register(operation, id, {"id": id} if payload is None else payload, now).step

    def platform_alarm(self, now: int) -> Step:
        at = self.alarm.get_alarm()
        assert at is not None, "no alarm stored"
        assert at <= now, f"alarm at {at} is not due at {now}"
        self.alarm.delete_alarm()
        return self.engine.alarm(now)

    def row(self, id: str) -> Any:
        [row] = [r for r in all_calls(self.conn) if r.id == id]
        return row

    def rows(self) -> list[Any]:
        return all_calls(self.conn)
