"""``registration_idempotent``: registering an operation again with the same payload is a no-op.

Seed 002's ``#run`` (lines 635-700) inserts the row once; the same id with
the same payload again resolves without a second row, and only another
payload raises ``DuplicateDurablePayloadError``. "The same" is by value:
the payload is compared in canonical form, so the order of an object's
keys does not matter. The account-concurrency world's drawn runs
register each admitted item's operation twice, the second time with the
payload's keys reversed (``OperationsSpec.repeat_registration``); a refusal
is reported here with the payload offered, and the payload stored is read
and compared as plain values, not through the code under test. The world
registers one payload per id, so every refusal breaks the promise: an equal
payload refused, or a payload stored altered (docs/INVARIANTS.md).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

from semaphore_core.durability import CALLS
from semsim.check.checker import Checker, Fail
from semsim.check.reads import select

_STORED: Final = f"SELECT payload FROM {CALLS.name} WHERE id = ?"


class RegistrationIdempotent(Checker):
    """Judges each refused registration (a built-in check: the client reports refusals to it alone)."""

    name = "registration_idempotent"
    description = "registering an operation again with an equal payload is accepted as a no-op"

    def __init__(self, fail: Fail) -> None:
        self.fail = fail

    def on_refused(self, client: str, id: str, payload: Any, storage: sqlite3.Connection, error: str) -> None:
        """``client`` tried to register ``id`` with ``payload`` and was refused with ``error``."""
        rows = select(storage, _STORED, (id,))
        stored = json.loads(rows[0][0]) if rows else None
        if stored == payload:
            self.fail(
                self.name,
                f"{client}: registering operation {id} again with an equal payload"
                f" (keys {', '.join(payload)}) was refused: {error}",
            )
        # The world registers one payload per id, so the port stored another than it was given.
        self.fail(
            self.name,
            f"{client}: registering operation {id} again was refused ({error}): the payload stored"
            f" is {stored!r}, not the {payload!r} this world registers under that id",
        )
