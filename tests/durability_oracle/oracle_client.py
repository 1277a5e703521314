"""Python side of the Durability oracle (standard library only).

Starts ``node build/oracle.mjs`` (built by ``setup.sh``) and speaks its
JSON-lines protocol: one command per line, one reply per command.

    from client import Oracle, succeed, fail, hang
    with Oracle() as o:
        o.init({"alarmConcurrency": 2, "retries": {"maxAttempts": 3}})
        o.register("a", {"x": 1}, outcomes=[fail(), succeed(42, ms=500)])
        o.advance(5_000)
        o.get_result("a")      # {"ok": True, "result": {"status": "completed", ...}}

Environment: DURABILITY_ORACLE_BUNDLE overrides the bundle path, NODE the
node binary.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_BUNDLE = HERE / "node" / "build" / "oracle.mjs"


class OracleError(RuntimeError):
    """The driver answered a command with {"error": {...}}."""

    def __init__(self, op: str, error: dict[str, Any]):
        self.op = op
        self.name = error.get("name")
        self.message = error.get("message")
        super().__init__(f"{op}: {self.name}: {self.message}")


def succeed(value: Any = "done", ms: int = 0) -> dict[str, Any]:
    return {"kind": "succeed", "value": value, "ms": ms}


def fail(message: str = "scripted failure", ms: int = 0, name: str | None = None) -> dict[str, Any]:
    o = {"kind": "fail", "message": message, "ms": ms}
    if name:
        o["name"] = name
    return o


def non_retryable(message: str = "scripted non-retryable failure", ms: int = 0) -> dict[str, Any]:
    return {"kind": "nonRetryable", "message": message, "ms": ms}


def hang(ignore_abort: bool = False) -> dict[str, Any]:
    return {"kind": "hang", "ignoreAbort": ignore_abort}


class Oracle:
    """One node driver process; every method is one protocol command."""

    def __init__(self, bundle: os.PathLike[str] | str | None = None, node: str | None = None):
        bundle = Path(bundle or os.environ.get("DURABILITY_ORACLE_BUNDLE") or DEFAULT_BUNDLE)
        if not bundle.is_file():
            raise FileNotFoundError(f"{bundle} is missing: run tests/durability_oracle/node/setup.sh")
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            [node or os.environ.get("NODE", "node"), str(bundle)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self.transcript: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def call(self, command: dict[str, Any], check: bool = True) -> dict[str, Any]:
        assert self.proc.stdin
        assert self.proc.stdout
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"oracle exited (rc={self.proc.poll()}): {self.stderr_tail()}")
        reply: dict[str, Any] = json.loads(line)
        self.transcript.append((command, reply))
        if (
            check
            and isinstance(reply, dict)
            and "error" in reply
            and "pending" not in reply
            and command.get("op") not in ("register", "getResult", "purge", "alarm")
        ):
            raise OracleError(command.get("op", "?"), reply["error"])
        return reply

    def stderr_tail(self, chars: int = 4000) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-chars:]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one method per op --------------------------------------------------
    # register/getResult/purge/alarm answer {"ok":true,"result":..},
    # {"error":{..}} (the API call rejected) or {"pending":token}.
    def init(self, config: dict[str, Any] | None = None, now: int = 0) -> dict[str, Any]:
        return self.call({"op": "init", "config": config or {}, "now": now})

    def register(
        self, id: str, payload: Any = None, operation: str = "op", outcomes: list[Any] | None = None
    ) -> dict[str, Any]:
        cmd = {"op": "register", "id": id, "payload": payload, "operation": operation}
        if outcomes is not None:
            cmd["outcomes"] = outcomes
        return self.call(cmd)

    def script(self, id: str, outcomes: list[Any]) -> dict[str, Any]:
        return self.call({"op": "script", "id": id, "outcomes": outcomes})

    def get_result(self, id: str, operation: str = "op") -> dict[str, Any]:
        return self.call({"op": "getResult", "id": id, "operation": operation})

    def result(self, id: str, operation: str = "op") -> dict[str, Any]:
        """getResult's value; raises OracleError when it rejected."""
        reply = self.get_result(id, operation)
        if "error" in reply:
            raise OracleError("getResult", reply["error"])
        result: dict[str, Any] = reply["result"]
        return result

    def settle(self, handle: int, outcome: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.call({"op": "settle", "handle": handle, "outcome": outcome or succeed()})

    def advance(self, ms: int) -> dict[str, Any]:
        return self.call({"op": "advance", "ms": ms})

    def settled(self) -> dict[str, Any]:
        return self.call({"op": "settled"})

    def alarm(self, due: bool = False, retry_count: int = 0) -> dict[str, Any]:
        return self.call({"op": "alarm", "due": due, "retryCount": retry_count})

    def evict(self) -> dict[str, Any]:
        return self.call({"op": "evict"})

    def purge(self, before: int) -> dict[str, Any]:
        return self.call({"op": "purge", "before": before})

    def state(self, id: str) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self.call({"op": "state", "id": id})["row"]
        return row

    def dump(self) -> dict[str, Any]:
        return self.call({"op": "dump"})

    def next_alarm(self) -> dict[str, Any]:
        return self.call({"op": "nextAlarm"})

    def events(self) -> list[Any]:
        events: list[Any] = self.call({"op": "events"})["events"]
        return events

    def invocations(self, id: str | None = None) -> dict[str, Any]:
        cmd: dict[str, Any] = {"op": "invocations"}
        if id is not None:
            cmd["id"] = id
        return self.call(cmd)

    def failures(self) -> dict[str, Any]:
        return self.call({"op": "failures"})

    def now(self) -> int:
        now: int = self.call({"op": "now"})["now"]
        return now
