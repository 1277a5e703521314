"""JavaScript number rules, so Python values are judged as the reference would.

The reference validates with ``Number.isSafeInteger``: an integer-valued
number within 2^53 - 1. A float such as ``3.0`` *is* an integer to
JavaScript, and ``true`` is not a number at all; Python disagrees on both
(``True`` is an ``int``), so every check goes through here.
"""

from __future__ import annotations

import math
from typing import Final

MAX_SAFE_INTEGER: Final = 2**53 - 1
#: setTimeout overflows past this, so the reference caps every delay at it.
MAX_DELAY_MS: Final = 2**31 - 1


def as_safe_int(value: object) -> int | None:
    """``value`` as an int if JavaScript's ``Number.isSafeInteger`` accepts it, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        as_int = int(value)
        return as_int if -MAX_SAFE_INTEGER <= as_int <= MAX_SAFE_INTEGER else None
    return None
