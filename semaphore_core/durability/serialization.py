"""Payloads and results as JSON text (the seed's ``serialization.js``, inferred).

Seed 002 imports ``serialize``, ``deserialize`` and ``canonical`` without
their source. What they must do comes from its docs (seed 002, "Reading
results", the last paragraph, and the idempotency passage after it):
"Payloads and results must be JSON-serializable; as with JSON.stringify,
undefined properties are dropped" and "Registering it again with the same
operation and the same data (object key order does not matter; array order
and values do) is a no-op".

So ``serialize`` is ``JSON.stringify`` on JSON-like Python values: a float
with an integral value is written as an integer (JavaScript has one number
type, so ``1.0`` and ``1`` are the same payload), and a non-finite float
becomes ``null``. ``canonical`` re-serialises with object keys sorted.
Anything else (sets, objects, non-string keys other than numbers) raises
``TypeError``, as ``JSON.stringify`` throws on a ``BigInt``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _js(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, list | tuple):
        return [_js(item) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, str | int | float):
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            out[key if isinstance(key, str) else json.dumps(_js(key))] = _js(item)
        return out
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def serialize(value: Any) -> str:
    """``JSON.stringify``: compact JSON text of a JSON-like value."""
    return json.dumps(_js(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def deserialize(text: str) -> Any:
    """``JSON.parse``."""
    return json.loads(text)


def canonical(text: str) -> str:
    """The same JSON with object keys sorted: equal for payloads equal as data."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
