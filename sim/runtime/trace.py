"""Traces: JSON lines, a header then one event per line (docs/WIRE.md, "Traces").

Events are kept as tuples while the run goes and serialised once at the
end. Serialisation is canonical (fields in the order they were recorded,
compact separators, no NaN), so the same seed and fault plan give the same
bytes on every machine; ``digest()`` is the SHA-256 of exactly those bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

from semsim.inputs.files import InputError, json_lines, parse_json, read_from, read_text, write_whole

TRACE_VERSION: Final = 1
#: Bounds on what a trace file may hold when read back.
MAX_TRACE_BYTES: Final = 512 * 1024 * 1024


class TraceError(ValueError):
    """A trace file is unreadable or malformed; the message says where."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Trace:
    """An in-memory trace: ``header`` fields, then events ``(t_ms, kind, fields)``."""

    def __init__(self, seed: int, config: Mapping[str, Any], faults: Mapping[str, Any]) -> None:
        self.header: dict[str, Any] = {
            "kind": "header",
            "seed": seed,
            "config": dict(config),
            "faults": dict(faults),
            "version": TRACE_VERSION,
        }
        self._events: list[tuple[int, str, dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self._events)

    def event(self, t_ms: int, kind: str, fields: dict[str, Any]) -> None:
        self._events.append((t_ms, kind, fields))

    def events(self) -> Iterator[dict[str, Any]]:
        """Events as trace lines would hold them: ``{"t", "kind", ...fields}``."""
        for t_ms, kind, fields in self._events:
            yield {"t": t_ms, "kind": kind, **fields}

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        wanted = set(kinds)
        return [event for event in self.events() if event["kind"] in wanted]

    def lines(self) -> Iterator[str]:
        yield _dumps(self.header)
        for event in self.events():
            yield _dumps(event)

    def to_bytes(self) -> bytes:
        return ("\n".join(self.lines()) + "\n").encode()

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the trace's bytes to ``path`` (a ``str`` or a path-like object), whole or not at all."""
        write_whole(path, self.to_bytes())


def read_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trace file's header and events; raises TraceError naming the line that is wrong."""
    try:
        text = read_text(path, MAX_TRACE_BYTES, "a trace")
    except InputError as error:
        raise TraceError(str(error)) from None
    where = read_from(path)  # what messages call it: standard input, for -
    lines = json_lines(text)
    if not lines:
        raise TraceError(f"{where}: empty: a trace starts with a header line")
    records = []
    for number, line in lines:
        try:
            record = parse_json(line)
        except InputError as error:
            raise TraceError(f"{where}:{number}: {error}") from None
        if not isinstance(record, dict):
            raise TraceError(f"{where}:{number}: each line must be a JSON object")
        records.append(record)
    header, events = records[0], records[1:]
    first = lines[0][0]
    if header.get("kind") != "header":
        raise TraceError(f'{where}:{first}: the first line must be the header ({{"kind": "header", ...}})')
    if header.get("version") != TRACE_VERSION:
        raise TraceError(
            f"{where}:{first}: trace version {header.get('version')!r}; this semsim reads {TRACE_VERSION}"
        )
    for (number, _), event in zip(lines[1:], events, strict=True):
        t, kind = event.get("t"), event.get("kind")
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise TraceError(f"{where}:{number}: an event needs an integer time 't' >= 0")
        if not isinstance(kind, str):
            raise TraceError(f"{where}:{number}: an event needs a string 'kind'")
    return header, events
