"""The oracle's observation of one step, normalised, and the first difference between two.

From the durability oracle's ``diff.py`` (its normalisation, ``observe``,
``first_diff`` and ``apply``): the differential (:mod:`tests.durability_oracle.differential`)
and the corpus test (``tests/test_durability_corpus.py``, which needs no Node) both
compare through it.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Protocol


class Adapter(Protocol):
    """What the observation reads (the differential's ``DurableAdapter``, less ``init`` and ``close``)."""

    def register(
        self, id: str, payload: Any, operation: str, outcomes: list[Any] | None
    ) -> dict[str, Any]: ...
    def get_result(self, id: str, operation: str) -> dict[str, Any]: ...
    def settle(self, handle: int, outcome: dict[str, Any]) -> dict[str, Any]: ...
    def advance(self, ms: int) -> dict[str, Any]: ...
    def settled(self) -> dict[str, Any]: ...
    def alarm(self, due: bool, retry_count: int = 0) -> dict[str, Any]: ...
    def fault(self, transactions: int, alarms: int) -> dict[str, Any]: ...
    def failures(self) -> dict[str, Any]: ...
    def evict(self) -> dict[str, Any]: ...
    def purge(self, before: int) -> dict[str, Any]: ...
    def calls(self) -> list[dict[str, Any]]: ...
    def events(self) -> list[dict[str, Any]]: ...
    def next_alarm(self) -> dict[str, Any]: ...
    def invocations(self) -> dict[str, Any]: ...
    def hook(self, throws: bool, rejects: bool) -> dict[str, Any]: ...
    def unhook(self, hook: int) -> dict[str, Any]: ...
    def extra(self, key: str, due_at: int, fails: int, ms: int) -> dict[str, Any]: ...
    def tables(self) -> dict[str, Any]: ...


# ------------------------------------------------------- normalisation
def _is_error(v: Any) -> bool:
    return isinstance(v, dict) and "name" in v and "message" in v and set(v) <= {"name", "message", "cause"}


def parsed(text: Any) -> Any:
    """A stored JSON text as its value (``{"unparsed": text}`` when it is not JSON)."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return {"unparsed": text}
    return text


class Normaliser:
    """Per-adapter maps: generation ids and async tokens by first appearance."""

    def __init__(self, messages: bool):
        self.messages = messages
        self.gens: dict[str, str] = {}
        self.tokens: dict[Any, str] = {}

    def gen(self, g: Any) -> Any:
        if g is None:
            return None
        return self.gens.setdefault(g, f"G{len(self.gens) + 1}")

    def token(self, t: Any) -> str:
        return self.tokens.setdefault(t, f"T{len(self.tokens) + 1}")

    def value(self, v: Any) -> Any:
        """Errors to their class (and message with --messages); recursive."""
        if _is_error(v):
            out = {"name": v["name"]}
            if self.messages:
                out["message"] = v["message"]
            return out
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items() if self.messages or k != "lastError"}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v

    def reply(self, r: Any) -> Any:
        if not isinstance(r, dict):
            return r
        r = dict(r)
        if "pending" in r:
            r["pending"] = self.token(r["pending"])
        if "token" in r:
            r["token"] = self.token(r["token"])
        if isinstance(r.get("settled"), list):
            r["settled"] = [self.reply(e) for e in r["settled"]]
        if "error" in r and "pending" not in r:
            r["error"] = self.value(r["error"])
        return self.value(r)

    def row(self, r: dict[str, Any]) -> dict[str, Any]:
        out = {
            "operation": r.get("operation"),
            "payload": parsed(r.get("payload")),
            "status": r.get("status"),
            "result": parsed(r.get("result")),
            "attempt": r.get("attempt"),
            "generation": self.gen(r.get("generation_id")),
            "next_attempt_at": r.get("next_attempt_at"),
            "last_error_name": r.get("last_error_name"),
            "completed_at": r.get("completed_at"),
            "created_at": r.get("created_at"),
        }
        if self.messages:
            out["last_error"] = r.get("last_error")
        return out

    def memo(self, m: dict[str, Any]) -> dict[str, Any]:
        return {
            "table": m.get("table_name"),
            "key": m.get("record_key"),
            "generation": self.gen(m.get("generation_id")),
            "memo": m.get("memo_key"),
            "value": parsed(m.get("value")),
            "attempt": m.get("attempt"),
        }

    def event(self, e: dict[str, Any]) -> dict[str, Any]:
        e = dict(e)
        if "generation" in e:
            e["generation"] = self.gen(e["generation"])
        normalised: dict[str, Any] = self.value(e)
        return normalised

    def invocation(self, i: dict[str, Any]) -> dict[str, Any]:
        i = dict(i)
        i["abortReason"] = self.value(i.get("abortReason"))
        return i


def observe(ad: Adapter, reply: Any, norm: Normaliser) -> tuple[dict[str, Any], dict[str, Any]]:
    """(normalised observation, raw pieces the generator reads)."""
    settled = ad.settled()
    rows = sorted(ad.calls(), key=lambda r: (r.get("created_at"), r.get("id")))
    events = ad.events()
    alarm = ad.next_alarm()
    inv = ad.invocations()
    failed = ad.failures()
    tables = ad.tables()
    obs = {
        "reply": norm.reply(reply),
        "settled": [norm.reply(e) for e in settled.get("settled", [])],
        "now": settled.get("now"),
        "rows": {r["id"]: norm.row(r) for r in rows},
        "events": [norm.event(e) for e in events],
        "alarmAt": alarm.get("alarmAt"),
        "timerAt": alarm.get("timerAt"),
        "invocations": [norm.invocation(i) for i in inv.get("invocations", [])],
        "running": inv.get("running"),
        # reportFailure calls and onAlarmRetry calls since the last step.
        "failures": norm.value(failed.get("failures", [])),
        "alarmRetries": norm.value(failed.get("alarmRetries", [])),
        # durability_memos, and the jobs of the driver's own participant (config ``extra``).
        "memos": [norm.memo(m) for m in tables.get("memos", [])],
        "extra": tables.get("extra", []),
    }
    raw = {
        "reply": reply,
        "settled": settled.get("settled", []),
        "rows": rows,
        "alarmAt": alarm.get("alarmAt"),
        "inv": inv,
        "now": settled.get("now"),
    }
    return obs, raw


def first_diff(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path or '.'}: reference {a!r} != port {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in b:
                return f"{path}.{k}: only in reference: {a[k]!r}"
            if k not in a:
                return f"{path}.{k}: only in port: {b[k]!r}"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for n, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_diff(x, y, f"{path}[{n}]")
            if d:
                return d
        if len(a) != len(b):
            n = min(len(a), len(b))
            return (
                f"{path}: lengths {len(a)} != {len(b)}; "
                f"next: reference {a[n : n + 1]!r} port {b[n : n + 1]!r}"
            )
        return None
    return None if a == b else f"{path or '.'}: reference {a!r} != port {b!r}"


def apply(ad: Adapter, a: dict[str, Any]) -> Any:
    op = a["op"]
    if op == "register":
        return ad.register(a["id"], copy.deepcopy(a["payload"]), a["operation"], copy.deepcopy(a["outcomes"]))
    if op == "getResult":
        return ad.get_result(a["id"], a["operation"])
    if op == "advance":
        return ad.advance(a["ms"])
    if op == "alarm":
        return ad.alarm(a["due"], a.get("retryCount", 0))
    if op == "fault":
        return ad.fault(a["transactions"], a["alarms"])
    if op == "evict":
        return ad.evict()
    if op == "settle":
        return ad.settle(a["handle"], copy.deepcopy(a["outcome"]))
    if op == "purge":
        return ad.purge(a["before"])
    if op == "hook":
        return ad.hook(bool(a.get("throws")), bool(a.get("rejects")))
    if op == "unhook":
        return ad.unhook(a["hook"])
    if op == "extra":
        return ad.extra(a["key"], a["dueAt"], a.get("fails", 0), a.get("ms", 0))
    if op == "settled":
        return None  # the observation's own settled() read covers it
    raise ValueError(op)
