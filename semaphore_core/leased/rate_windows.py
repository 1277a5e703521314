"""``RateWindowClaim``: the rate-limit windows of one claim, ported exactly from seed 004.

``package/dist/sql/rate-windows.js`` (seed 004, lines 583-638) is the one
part of the store the seed shows in full. A claim under ``rateLimits`` locks
the rows of ``windows`` (every claim locks them in that order, so two
claims of one window wait for each other), reads them, and writes back what
:meth:`RateWindowClaim.grant` changed. Its rules, line by line:

- an instance takes room in its workflow's own window (key ``''``) when the
  workflow's rule has a ``limit``, and in its rate-limit key's window when
  the rule has a ``perKey`` and the instance has a key;
- of the picked instances, in claim order, one is granted when *every*
  window it takes room in has room (``count < max``); a refused one takes
  no room anywhere;
- a window that ended (``windowEnd <= now``) counts as none, and the first
  claim after it opens the next one, ``duration`` long from ``now``;
- the windows are sorted by workflow, then key, in JavaScript's string
  order (UTF-16 code units), and ``changed`` lists each changed window once,
  in the order it first changed, with its last count.

What it must not know: which instances are due or leased, concurrency
limits, SQL (``store.py`` does those).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs


def _js_order(text: str) -> bytes:
    """JavaScript's ``<`` on strings compares UTF-16 code units; big-endian UTF-16 bytes sort the same."""
    return text.encode("utf-16-be", "surrogatepass")


@attrs.frozen
class RateWindow:
    """``{max, duration}``: at most ``max`` claims per window of ``duration_ms``."""

    max: int
    duration_ms: int


@attrs.frozen
class RateLimitRule:
    """One ``rateLimits`` entry: the workflow's own window (``limit``) and each key's (``perKey``)."""

    workflow: str
    limit: RateWindow | None = None
    per_key: RateWindow | None = None


@attrs.frozen
class PickedInstance:
    """``PickedInstance``: an instance a claim picked and locked, in claim order."""

    id: str
    workflow: str
    rate_limit_key: str | None


@attrs.frozen
class RateWindowRow:
    """``RateWindowRow``: a window's row, the workflow's own (``key`` ``''``) or a rate-limit key's."""

    workflow: str
    key: str
    window_end_ms: int
    count: int


@attrs.frozen
class _Window:
    workflow: str
    key: str
    max: int
    duration_ms: int


@attrs.define
class _Open:
    window_end_ms: int
    count: int


def _name(workflow: str, key: str) -> str:
    """``nameOf``: ``JSON.stringify([workflow, key])``."""
    return json.dumps([workflow, key], ensure_ascii=False, separators=(",", ":"))


class RateWindowClaim:
    """The windows one claim takes room in, and which of its picked instances they grant."""

    def __init__(
        self, now_ms: int, rate_limits: Sequence[RateLimitRule], picked: Sequence[PickedInstance]
    ) -> None:
        self.now_ms = now_ms
        self.picked = tuple(picked)
        # ``new Map(rules.map(...))``: a later rule for the same workflow replaces an earlier one.
        self._rules = {rule.workflow: rule for rule in rate_limits}
        named: dict[str, _Window] = {}
        for instance in self.picked:
            for window in self._windows_of(instance):
                named[_name(window.workflow, window.key)] = window
        #: ``windows``: each once, by workflow then key: the order every claim locks them in.
        self.windows: tuple[tuple[str, str], ...] = tuple(
            sorted(
                ((window.workflow, window.key) for window in named.values()),
                key=lambda pair: (_js_order(pair[0]), _js_order(pair[1])),
            )
        )

    def grant(self, locked: Sequence[RateWindowRow]) -> tuple[list[str], list[RateWindowRow]]:
        """``grant`` (lines 607-627): the ids granted, in claim order, and the rows to write back."""
        now = self.now_ms
        open_: dict[str, _Open | None] = {
            _name(row.workflow, row.key): _Open(row.window_end_ms, row.count)
            if row.window_end_ms > now
            else None
            for row in locked
        }
        granted: list[str] = []
        changed: dict[str, RateWindowRow] = {}
        for instance in self.picked:
            windows = self._windows_of(instance)
            if not all(_count(open_.get(_name(w.workflow, w.key))) < w.max for w in windows):
                continue
            for window in windows:
                name = _name(window.workflow, window.key)
                current = open_.get(name) or _Open(now + window.duration_ms, 0)
                current.count += 1
                open_[name] = current
                changed[name] = RateWindowRow(
                    window.workflow, window.key, current.window_end_ms, current.count
                )
            granted.append(instance.id)
        return granted, list(changed.values())

    def _windows_of(self, instance: PickedInstance) -> list[_Window]:
        """``windowsOf`` (lines 628-634)."""
        rule = self._rules.get(instance.workflow)
        windows: list[_Window] = []
        if rule is not None and rule.limit is not None:
            windows.append(_Window(instance.workflow, "", rule.limit.max, rule.limit.duration_ms))
        if rule is not None and rule.per_key is not None and instance.rate_limit_key is not None:
            windows.append(
                _Window(
                    instance.workflow, instance.rate_limit_key, rule.per_key.max, rule.per_key.duration_ms
                )
            )
        return windows


def _count(window: _Open | None) -> int:
    """``open.get(name)?.count ?? 0``."""
    return 0 if window is None else window.count
