"""``durable`` on the checker interface: a holder's rows as its eviction found them are the rows its
next instance is built on, and a checker of a team's own hears both moments."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from semaphore_core import Holder, HolderConfig
from semaphore_core.store import GrantRow, HolderStore
from semsim.check.checker import Checker
from semsim.check.durable import Durable
from semsim.check.events import Evicted, HolderView, InstanceBuilt
from semsim.scenarios import SCENARIOS, run_scenario

KEY = "acct"
OBJECT = "holder:acct"


def _holder_storage() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    Holder(conn, HolderConfig(limit=4), lambda: "g-1")  # its schema
    HolderStore(conn).insert(GrantRow("g-1", "client-0", "wf-1", 2, 1, 0, 0, 10_000))
    return conn


def test_durable_fails_when_a_row_changed_across_an_eviction() -> None:
    failed: list[str] = []
    check = Durable(lambda name, detail, finding=None, **state: failed.append(f"{name}: {detail}"))
    conn = _holder_storage()
    check.on_instance(
        InstanceBuilt(0, KEY, OBJECT, 0, HolderView(KEY, conn))
    )  # the first: nothing to compare
    check.on_evict(Evicted(5, KEY, OBJECT, HolderView(KEY, conn)))
    check.on_instance(InstanceBuilt(6, KEY, OBJECT, 1, HolderView(KEY, conn)))
    assert failed == []  # the same rows
    check.on_evict(Evicted(7, KEY, OBJECT, HolderView(KEY, conn)))
    conn.execute("UPDATE durability_semaphore_grants SET claimed = 0")  # the eviction lost a claim
    check.on_instance(InstanceBuilt(8, KEY, OBJECT, 2, HolderView(KEY, conn)))
    assert failed == ["durable: holder:acct: committed rows changed across an eviction"]


class HearsEvictions(Checker):
    name = "hears_evictions"

    def __init__(self) -> None:
        self.heard: Counter[str] = Counter()
        self.generations: list[int] = []

    def on_evict(self, evicted: Evicted) -> None:
        self.heard["evict"] += 1
        assert evicted.object == f"holder:{evicted.key}"

    def on_instance(self, built: InstanceBuilt) -> None:
        self.heard["instance"] += 1
        self.generations.append(built.generation)


@pytest.mark.parametrize("name", ["evicted-before-round", "alarm-reclaims-after-eviction"])
def test_a_checker_hears_each_eviction_and_each_instance_built(name: str) -> None:
    result = run_scenario(SCENARIOS[name], checkers=[HearsEvictions])
    assert result.passed, result.failures
    assert result.world is not None
    (heard,) = result.world.monitor.checkers
    assert isinstance(heard, HearsEvictions)
    evictions = [e for e in result.run.trace.of_kind("evict") if e["object"].startswith("holder:")]
    assert heard.heard["evict"] == len(evictions) > 0
    assert heard.generations == sorted(heard.generations)
    assert heard.generations[0] == 0
