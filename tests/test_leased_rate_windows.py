"""``RateWindowClaim`` (``semaphore_core.leased.rate_windows``): seed 004's ``rate-windows.js``, rule by rule.

Line numbers are seed 004's. The expected values are worked by hand from
the JavaScript.
"""

from __future__ import annotations

from semaphore_core.leased import PickedInstance, RateLimitRule, RateWindow, RateWindowClaim, RateWindowRow

NOW = 1_000


def picked(*items: tuple[str, str, str | None]) -> list[PickedInstance]:
    return [PickedInstance(id, workflow, key) for id, workflow, key in items]


def test_the_windows_are_each_once_by_workflow_then_key() -> None:
    """Lines 597-600: the picked instances' windows, deduplicated, sorted by workflow then key."""
    rules = [
        RateLimitRule("mail", limit=RateWindow(5, 60_000), per_key=RateWindow(1, 60_000)),
        RateLimitRule("audit", per_key=RateWindow(2, 1_000)),
    ]
    claim = RateWindowClaim(
        NOW,
        rules,
        picked(
            ("a", "mail", "bob"),
            ("b", "audit", "x"),
            ("c", "mail", "al"),
            ("d", "audit", None),
            ("e", "other", "k"),
        ),
    )
    assert claim.windows == (("audit", "x"), ("mail", ""), ("mail", "al"), ("mail", "bob"))


def test_javascript_string_order_is_utf16_code_units() -> None:
    """``a.key < b.key`` compares UTF-16 code units: an astral character sorts before U+FFFD."""
    rules = [RateLimitRule("w", per_key=RateWindow(1, 10))]
    claim = RateWindowClaim(NOW, rules, picked(("a", "w", "\ufffd"), ("b", "w", "\U0001f600")))
    assert [key for _, key in claim.windows] == ["\U0001f600", "\ufffd"]


def test_a_later_rule_for_the_same_workflow_replaces_the_earlier() -> None:
    """Line 596: ``new Map(rules.map(...))`` keeps the last entry per key."""
    rules = [RateLimitRule("w", limit=RateWindow(1, 10)), RateLimitRule("w", limit=RateWindow(3, 10))]
    granted, _ = RateWindowClaim(NOW, rules, picked(("a", "w", None), ("b", "w", None))).grant([])
    assert granted == ["a", "b"]


def test_an_instance_is_granted_only_when_every_window_has_room() -> None:
    """Lines 614-616: ``windows.every(count < max)``; a refused instance takes no room anywhere."""
    rules = [RateLimitRule("w", limit=RateWindow(2, 60_000), per_key=RateWindow(1, 60_000))]
    claim = RateWindowClaim(
        NOW, rules, picked(("a", "w", "k1"), ("b", "w", "k1"), ("c", "w", "k2"), ("d", "w", "k3"))
    )
    granted, changed = claim.grant([])
    # a opens both windows; b's key window is full; c fills the workflow's window; d finds it full.
    assert granted == ["a", "c"]
    assert changed == [
        RateWindowRow("w", "", NOW + 60_000, 2),
        RateWindowRow("w", "k1", NOW + 60_000, 1),
        RateWindowRow("w", "k2", NOW + 60_000, 1),
    ]


def test_an_open_window_counts_and_an_ended_one_counts_as_none() -> None:
    """Lines 609 and 619: ``windowEnd > now`` keeps the count; otherwise the first claim opens the
    next window, ``duration`` long from now."""
    rules = [RateLimitRule("w", limit=RateWindow(2, 500))]
    open_row = RateWindowRow("w", "", NOW + 1, 1)
    granted, changed = RateWindowClaim(NOW, rules, picked(("a", "w", None), ("b", "w", None))).grant(
        [open_row]
    )
    assert granted == ["a"]
    assert changed == [RateWindowRow("w", "", NOW + 1, 2)]

    ended = RateWindowRow("w", "", NOW, 2)  # ends exactly now: ended
    granted, changed = RateWindowClaim(NOW, rules, picked(("a", "w", None), ("b", "w", None))).grant([ended])
    assert granted == ["a", "b"]
    assert changed == [RateWindowRow("w", "", NOW + 500, 2)]


def test_instances_without_windows_are_granted_and_change_nothing() -> None:
    """``[].every(...)`` is true: an instance with no rule, or a per-key rule and no key, is granted."""
    rules = [RateLimitRule("w", per_key=RateWindow(1, 10))]
    granted, changed = RateWindowClaim(NOW, rules, picked(("a", "w", None), ("b", "free", "k"))).grant([])
    assert granted == ["a", "b"]
    assert changed == []


def test_changed_lists_each_window_once_in_first_change_order_with_its_last_count() -> None:
    """Line 622: ``changed.set(name, {...current})`` keeps a Map key's first position."""
    rules = [
        RateLimitRule("b", limit=RateWindow(5, 10)),
        RateLimitRule("a", limit=RateWindow(5, 10)),
    ]
    granted, changed = RateWindowClaim(
        NOW, rules, picked(("1", "b", None), ("2", "a", None), ("3", "b", None))
    ).grant([])
    assert granted == ["1", "2", "3"]
    assert changed == [RateWindowRow("b", "", NOW + 10, 2), RateWindowRow("a", "", NOW + 10, 1)]
