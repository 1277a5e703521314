"""The holder run beside the literal model of the reference: ``exact_accounting``.

Every holder instance a monitor watches gets a :class:`Lockstep` (through
``Monitor.lockstep``): the literal model (``sim/check/literal_holder.py``, no
code shared with ``semaphore_core``) on the same wire messages, times, ids
and callbacks, on a database of its own that survives eviction as the
object's does. Any difference in parsing, replies, events, ``usage()`` or
the alarm time ends the run as ``exact_accounting``. It reads nothing the
run would not (no random draws, no ids of its own, no trace events), so a
passing run's trace is the same with or without it.

The holder object knows this class only as the protocol it defines
(``semsim.world.holder_object.ModelInLockstep``); this module knows the
monitor only as something that can fail a run (:class:`Judge`).
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from semaphore_core import Holder, HolderConfig, SemaphoreProtocolError
from semsim.check.literal_holder import (
    LiteralHolder,
    LiteralProtocolError,
    first_difference,
    options_from_config,
    same_wire,
)
from semsim.check.literal_holder import parse as literal_parse
from semsim.check.row_mirror import RowMirror, Totals
from semsim.runtime.durable import DurableObject
from semsim.world.variant import ModelFactory


class Judge(Protocol):
    """What ends a run on a difference (``semsim.check.invariants.Monitor`` is one)."""

    def fail(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None: ...


class Lockstep:
    """The literal model beside one holder instance; a difference is an ``exact_accounting`` violation.

    The model gets what the holder gets: the wire message as it arrived,
    ``now``, callbacks built alike (a set of its own: a flapping input fault
    counts each side's calls apart), and the ids the holder drew in the same
    operation (recorded, never drawn again), so its replies must be the
    same bytes. Its database hangs on the durable object and survives
    eviction; the model itself, like the holder, is rebuilt per instance and
    forgets the ``contended`` flag.
    """

    def __init__(
        self,
        obj: DurableObject,
        config: HolderConfig,
        key: str,
        monitor: Judge,
        full: bool = False,
        model: Literal["literal"] | ModelFactory = "literal",
    ) -> None:
        if obj.shadow_storage is None:
            obj.shadow_storage = sqlite3.connect(":memory:", isolation_level=None)
        self._key = key
        self._monitor = monitor
        self._ids: deque[str] = deque()
        self._extra = 0
        #: The literal model, or a variant's own (a LiteralHolder subclass, built the same way).
        build = LiteralHolder if model == "literal" else model
        self.model = build(obj.shadow_storage, options_from_config(config), self._next_id)
        #: The model's rows and ``usage()``'s sums over them, kept from what each operation
        #: changed; ``full`` (the checker's debug mode) also lists every row for those sums,
        #: as the literal ``usage()`` does, and a difference is the ``checker`` verdict.
        self._rows = RowMirror(obj.shadow_storage)
        self._full = full
        options = options_from_config(config)
        self._round_wait_ms: int = options["roundWaitMs"]
        self._round_period_ms: int = options["roundPeriodMs"]
        #: ``#scheduleRound``'s memory, as the reference's live instance keeps it (lines 655-681):
        #: the requests waiting for a round, when its timer fires (None: none armed), and when
        #: the last round ran (``-Infinity``: None).
        self._waiting: list[Any] = []
        self._round_at: int | None = None
        self._last_round_at: int | None = None

    def drew(self, new_id: str) -> str:
        """The holder drew ``new_id``; the model's next id is the same."""
        self._ids.append(new_id)
        return new_id

    def _next_id(self) -> str:
        if self._ids:
            return self._ids.popleft()
        # The model wants more ids than the holder drew: this id shows up in the comparison.
        self._extra += 1
        return f"literal-model-extra-{self._extra}"

    def begin(self) -> None:
        self._ids.clear()

    def _differ(self, what: str, detail: str) -> None:
        self._monitor.fail("exact_accounting", f"{self._key}: {what}: {detail}", key=self._key)

    def _same(self, what: str, core: Any, model: Any) -> None:
        if not same_wire(core, model):
            self._differ(what, f"holder vs literal model at {first_difference(core, model)}")

    def parsed(self, payload: Any, core_error: SemaphoreProtocolError | None) -> None:
        """The holder accepted ``payload`` (or raised ``core_error``): the model must decide the same."""
        try:
            literal_parse(payload)
            model_error: str | None = None
        except LiteralProtocolError as error:
            model_error = str(error)
        if (core_error is None) != (model_error is None):
            self._differ(
                "parsing",
                f"the holder {'rejects' if core_error else 'accepts'} a message the literal model "
                f"{'rejects' if model_error else 'accepts'} ({core_error or model_error})",
            )

    def arrived(self, payload: Any, now: int) -> None:
        """A request joined the holder's waiting list: ``handle`` pushes it and calls
        ``#scheduleRound``, which arms the round timer unless one is armed (or a round runs,
        which in the port never spans a request's arrival)."""
        self._waiting.append(payload)
        if self._round_at is None:
            earliest = None if self._last_round_at is None else self._last_round_at + self._round_period_ms
            delay = self._round_wait_ms if earliest is None else max(self._round_wait_ms, earliest - now)
            self._round_at = now + delay

    def _round_ran(self, payloads: Sequence[Any], now: int) -> None:
        """A round ran at ``now`` on ``payloads``: the reference's would run then, on those."""
        if self._round_at != now:
            self._differ(
                "round time",
                f"the holder ran a round at {now} but the reference's timer fires at {self._round_at} "
                f"(roundWaitMs {self._round_wait_ms}, roundPeriodMs {self._round_period_ms}, last round "
                f"at {self._last_round_at})",
            )
        if len(payloads) != len(self._waiting) or any(
            a is not b for a, b in zip(payloads, self._waiting, strict=False)
        ):
            self._differ(
                "round requests",
                f"the holder's round took {len(payloads)} requests where {len(self._waiting)} waited, "
                "in arrival order",
            )
        self._waiting = []
        self._round_at = None
        self._last_round_at = now

    def round(self, payloads: Sequence[Any], now: int, replies: Sequence[Any], events: Sequence[Any]) -> None:
        self._round_ran(payloads, now)
        model_replies, model_events = self.model.round(payloads, now)
        self._same("round replies", [reply.to_wire() for reply in replies], model_replies)
        self._same("round events", [event.to_wire() for event in events], model_events)

    def round_failed(self, payloads: Sequence[Any], now: int, error: Exception) -> None:
        self._round_ran(payloads, now)
        self._fails_too("round", error, lambda: self.model.round(payloads, now))

    def sync_failed(self, payload: Any, now: int, error: Exception) -> None:
        self._fails_too("sync", error, lambda: self.model.handle_sync(payload, now))

    def _fails_too(self, what: str, error: Exception, run: Callable[[], object]) -> None:
        """The holder's ``what`` raised ``error``: the model's must raise too."""
        try:
            run()
        except Exception:
            return
        self._differ(what, f"the holder's {what} failed ({error}) but the literal model's did not")

    def sync(self, payload: Any, now: int, reply: dict[str, Any]) -> None:
        self._same("sync reply", reply, self.model.handle_sync(payload, now))

    def usage(self, now: int, reply: dict[str, Any]) -> None:
        """The holder answered a ``usage`` call with ``reply``: the model's ``usage()`` must agree."""
        self._same("usage reply", reply, _outcome(lambda: self._model_usage(self._rows.totals(now))))

    def usage_failed(self, now: int, error: Exception) -> None:
        self._fails_too("usage", error, lambda: self._model_usage(self._rows.totals(now)))

    def _model_usage(self, totals: Totals) -> Any:
        """The model's ``usage()`` from the mirrored sums (it reads the callbacks, as the holder's does)."""
        return self.model.usage_from_totals(totals.granted, totals.leased, totals.groups)

    def reclaimed(self, now: int, events: Sequence[Any]) -> None:
        self._same("alarm events", [event.to_wire() for event in events], self.model.reclaim_expired(now))

    def state(self, holder: Holder, now: int) -> None:
        """After every operation: ``usage()`` in full and the alarm time.

        The caller makes these reads peek (``HolderInputs.peeking_only``): they count no call
        of a flapping input fault, so judging never changes what the holder's callbacks answer.
        """
        core = _outcome(lambda: holder.usage(now).to_wire())
        # Outside ``_outcome``: a failure of the mirror is the checker's, never the holder's.
        self._rows.refresh(now)
        totals = self._rows.totals(now)
        model = _outcome(lambda: self._model_usage(totals))
        if self._full:
            # The sums alone: the callbacks are read once per usage(), as the holder reads them.
            mirrored = (totals.granted, totals.leased, dict(totals.groups))
            listed = self.model.listed_totals(now)
            if mirrored != listed:
                self._monitor.fail(
                    "checker", f"{self._key}: usage()'s sums mirrored {mirrored} but listed {listed}"
                )
        self._same("usage()", core, model)
        self._same("next alarm", holder.next_alarm_at(), self.model.next_alarm_at())


def _outcome(read: Callable[[], Any]) -> Any:
    """What ``read`` returns, or that it raised (a limit callback that throws fails ``usage()``)."""
    try:
        return read()
    except Exception:
        return "raised"
