"""Record the reference's answers for the durability port: a corpus CI replays without Node.

    python -m tests.durability_oracle.record [--out FILE] [--seeds 1-300] [--steps 40] ...

It runs the reference under Node: build it first with ``tests/durability_oracle/node/setup.sh``
(node/README.md). Each ``--seeds A-B --steps N`` pair adds the sequences the differential
(:mod:`tests.durability_oracle.differential`) would draw for seeds A to B: a random config and
N random steps. For each, the corpus keeps the config, the steps, and the reference's
normalised observation after every step, as the differential compares them. The port runs
beside it, and where it first differs the sequence records that step, so the test
(``tests/test_durability_corpus.py``) tells a known divergence from a new one.

Observations are kept compact: the step's reply, settled tokens and events
always, the rest (rows, invocation log, alarms, running count, time) only
when they changed since the step before. The file is gzipped JSON lines
with a fixed timestamp, so the same oracle and seeds give the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import io
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from tests.durability_oracle.differential import OracleAdapter, View, choose_step, random_config
from tests.durability_oracle.observation import Normaliser, apply, first_diff, observe
from tests.durability_oracle.oracle_client import DEFAULT_BUNDLE
from tests.durability_oracle.port_adapter import SemsimAdapter
from tests.durability_oracle.repros import REPROS

FORMAT: Final = "semsim-durability-corpus/1"
DEFAULT_OUT: Final = Path(__file__).resolve().parents[1] / "fixtures" / "durability" / "corpus.jsonl.gz"
REPROS_OUT: Final = DEFAULT_OUT.with_name("repros.jsonl.gz")
#: Kept at every step; every other key only when it changed since the step before.
ALWAYS: Final = ("reply", "settled", "events")
#: Marks a value kept as the entries that changed (``compact``).
DELTA: Final = "~changed"


def compact(before: dict[str, Any] | None, observation: dict[str, Any]) -> dict[str, Any]:
    """``observation`` less what it shares with ``before``: a key whose value is unchanged is left
    out, and of the rows and the invocation log only the entries that changed are kept."""
    if before is None:
        return dict(observation)
    kept: dict[str, Any] = {}
    for key, value in observation.items():
        old = before.get(key)
        if key in ALWAYS:
            kept[key] = value
        elif old == value:
            continue
        elif key == "rows" and isinstance(old, dict):
            changed = {k: v for k, v in value.items() if old.get(k) != v}
            kept[key] = {DELTA: {"set": changed, "del": sorted(k for k in old if k not in value)}}
        elif key == "invocations" and isinstance(old, list):
            changed_at = {str(n): v for n, v in enumerate(value) if n >= len(old) or old[n] != v}
            kept[key] = {DELTA: {"set": changed_at, "len": len(value)}}
        else:
            kept[key] = value
    return kept


def expand(before: dict[str, Any] | None, kept: dict[str, Any]) -> dict[str, Any]:
    """The whole observation from its compact form and the one before it."""
    if before is None:
        return dict(kept)
    whole = {k: v for k, v in before.items() if k not in ALWAYS}
    for key, value in kept.items():
        if isinstance(value, dict) and DELTA in value:
            delta = value[DELTA]
            if key == "rows":
                rows = {k: v for k, v in before[key].items() if k not in delta["del"]}
                rows.update(delta["set"])
                whole[key] = rows  # compared as a mapping: its order does not matter
            else:
                log = list(before[key][: delta["len"]])
                log.extend([None] * (delta["len"] - len(log)))
                for n, entry in delta["set"].items():
                    log[int(n)] = entry
                whole[key] = log
        else:
            whole[key] = value
    return whole


def _seed_range(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


@contextlib.contextmanager
def _sides() -> Iterator[tuple[OracleAdapter, SemsimAdapter]]:
    """The reference (a Node process) and the port, closed after."""
    reference, port = OracleAdapter(), SemsimAdapter()
    try:
        yield reference, port
    finally:
        reference.close()
        port.close()


def record(batches: list[tuple[range, int]]) -> list[dict[str, Any]]:
    """Every sequence of ``batches`` ((seeds, steps) pairs), with the reference's observations."""
    sequences = []
    with _sides() as (reference, port):
        for seeds, steps in batches:
            for seed in seeds:
                sequences.append(_sequence(reference, port, seed, steps))
                print(f"seed {seed}: {sequences[-1]['diverges'] or 'identical'}", file=sys.stderr)
    return sequences


def _sequence(
    reference: OracleAdapter,
    port: SemsimAdapter,
    seed: int,
    steps: int,
    script: list[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One sequence: the differential's draw for ``seed``, or ``script``'s steps on ``config``."""
    rng = random.Random(seed)
    if config is None:
        config = random_config(rng)
    ours, theirs = Normaliser(False), Normaliser(False)
    init = ours.reply(reference.init(copy.deepcopy(config)))
    port_ok = theirs.reply(port.init(copy.deepcopy(config))) == init
    view = View(config)
    actions: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    diverges: dict[str, Any] | None = None if port_ok else {"step": -1, "at": "init"}
    before = None
    for step in range(steps):
        action = copy.deepcopy(script[step]) if script is not None else choose_step(rng, view)
        observed, raw = observe(reference, apply(reference, action), ours)
        if diverges is None:
            try:
                on_port, _ = observe(port, apply(port, action), theirs)
            except Exception as error:  # the port failed outright: a divergence too
                diverges = {"step": step, "at": f"{type(error).__name__}: {error}"}
            else:
                where = first_diff(observed, on_port)
                if where is not None:
                    diverges = {"step": step, "at": where[:300]}
        view.update(action, raw)
        actions.append(action)
        observations.append(compact(before, observed))
        before = observed
    return {
        "seed": seed,
        "steps": steps,
        "config": config,
        "init": init,
        "actions": actions,
        "observations": observations,
        "diverges": diverges,
    }


def record_repros() -> list[dict[str, Any]]:
    """The reference's answers to :data:`~tests.durability_oracle.repros.REPROS`."""
    sequences = []
    with _sides() as (reference, port):
        for name, (why, config, script) in REPROS.items():
            sequence = _sequence(reference, port, 0, len(script), script, copy.deepcopy(config))
            sequences.append({"name": name, "why": why, **sequence})
            print(f"{name}: {sequence['diverges'] or 'identical'}", file=sys.stderr)
    return sequences


def write(path: Path, header: dict[str, Any], sequences: list[dict[str, Any]]) -> None:
    """The corpus as gzipped JSON lines, whole or not at all, the same bytes for the same content."""
    lines = [json.dumps(header, sort_keys=True)] + [json.dumps(s, sort_keys=True) for s in sequences]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as out:
        out.write(("\n".join(lines) + "\n").encode())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(buffer.getvalue())
        partial.replace(path)
    except OSError:
        partial.unlink(missing_ok=True)  # a full disk leaves the old corpus, never half a new one
        raise


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The corpus's header and its sequences."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    if header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return header, [json.loads(line) for line in lines[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--out", type=Path, help=f"default: {DEFAULT_OUT.name}, or {REPROS_OUT.name} with --repros"
    )
    parser.add_argument("--seeds", action="append", type=_seed_range, help="A-B (repeatable, with --steps)")
    parser.add_argument("--steps", action="append", type=int, help="steps of each --seeds batch")
    parser.add_argument(
        "--repros", action="store_true", help=f"record the known divergences' scripts to {REPROS_OUT.name}"
    )
    args = parser.parse_args(argv)
    if args.repros and (args.seeds or args.steps):
        parser.error("--repros records the known divergences' scripts: --seeds and --steps do not apply")
    seeds = args.seeds or [range(1, 301), range(5001, 5021)]
    steps = args.steps or [40, 120]
    if len(seeds) != len(steps):
        parser.error("give one --steps for each --seeds")
    if not DEFAULT_BUNDLE.is_file():
        parser.error(
            f"no {DEFAULT_BUNDLE}: build the reference first (tests/durability_oracle/node/setup.sh)"
        )
    if args.repros:
        out = args.out or REPROS_OUT
        sequences = record_repros()
        header: dict[str, Any] = {"format": FORMAT, "repros": len(sequences)}
    else:
        out = args.out or DEFAULT_OUT
        batches = list(zip(seeds, steps, strict=True))
        sequences = record(batches)
        header = {"format": FORMAT, "batches": [[s.start, s.stop - 1, n] for s, n in batches]}
        header["sequences"] = len(sequences)
    header["identical"] = sum(1 for s in sequences if s["diverges"] is None)
    try:
        write(out, header, sequences)
    except OSError as error:
        print(f"record: error: cannot write {out}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"{out}: {header['identical']}/{len(sequences)} sequences identical on the port", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
