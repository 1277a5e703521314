"""``CrossCheckFailed``: the checker's debug mode found an incremental reading wrong.

A module of its own so that every reading the debug mode checks can raise it
(:mod:`semsim.check.cross_checks`, :mod:`semsim.check.client_reads`) without
one importing the other; the monitor turns it into the ``checker`` verdict.
"""

from __future__ import annotations


class CrossCheckFailed(Exception):
    """An incremental reading disagrees with the same reading made from scratch; ``key``: the
    holder whose reading it was, when the message names one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
