"""Tie-breaks sort like the reference runtime's ``localeCompare`` (ICU root), not by code point."""

from __future__ import annotations

import json
from pathlib import Path

from semaphore_core.collation import locale_compare, locale_key

FIXTURE = Path(__file__).parent / "fixtures" / "collation.json"


def test_sort_order_matches_node_icu_on_the_fixture() -> None:
    # tests/fixtures/make_collation_fixture.js wrote this with Node's ICU.
    data = json.loads(FIXTURE.read_text())
    assert sorted(data["input"], key=locale_key) == data["sorted"]


def test_known_differences_from_code_point_order() -> None:
    assert locale_compare("a", "B") == -1
    assert locale_compare("a", "A") == -1
    assert locale_compare("_", "-") == -1
    assert locale_compare("-", "0") == -1
    assert locale_compare("a\x01b", "ab") == 0  # control characters are ignorable
    assert locale_compare("ab", "a") == 1
