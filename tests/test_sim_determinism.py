"""``deterministic``: the same seed and plan give the same trace bytes, whatever ``PYTHONHASHSEED`` is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.determinism_worker import DESIGN_SEEDS, DESIGNS, design_digest, digest

ROOT = Path(__file__).resolve().parent.parent
#: Every provisioning mode eight times over (a seed's mode is ``seed % 3``), each under its own
#: random fault plan; the two processes run side by side, so this is two cores' worth of runs.
SEEDS = 24


def digests_in_fresh_processes(*hash_seeds: str) -> list[list[str]]:
    """Each hash seed's digests from its own process; the processes run side by side."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.determinism_worker", "0", str(SEEDS)],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            stdout=subprocess.PIPE,
            text=True,
        )
        for hash_seed in hash_seeds
    ]
    outputs = []
    for worker in workers:
        out, _ = worker.communicate()
        assert worker.returncode == 0
        outputs.append(out.splitlines())
    return outputs


def test_two_dozen_seeds_with_random_fault_plans_give_identical_traces_in_separate_processes() -> None:
    """And the gate's and the leased worker's runs too (``DESIGN:SEED`` lines)."""
    first, second = digests_in_fresh_processes("0", "12345")
    assert len(first) == SEEDS + len(DESIGNS) * DESIGN_SEEDS
    assert first == second
    # Different seeds give different runs.
    assert len({line.split()[1] for line in first}) == len(first)


def test_the_same_seed_twice_in_one_process_gives_the_same_digest() -> None:
    assert digest(11) == digest(11)
    assert design_digest("leased-worker", 2) == design_digest("leased-worker", 2)
