"""The swarm draws the cases it always drew.

``semsim.explore.strategies`` builds its strategies once rather than per
draw (a speed-up); the order and structure of the draws are what decide
each case, so a campaign's seed must keep drawing the very same cases.
The digest below was recorded from the strategies before that change. A
deliberate change of the swarm changes it: record the new digest, and say
in the changelog that campaigns draw other cases from the same seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import attrs

from semaphore_core.fixes import ALL_FIXES
from semsim.explore.fuzz import RunReport, campaign
from semsim.explore.strategies import DELAY_TICK_MS, Case
from semsim.world.faults import Eviction

#: sha256 of the cases drawn for seeds 0-2, with no fix and with every fix, 30 runs each.
DRAWN_DIGEST = "4a463e777c3681a3ac3fedd2a2115aa171412ff989e474ff3f7cbd4c6aab4111"
#: The same before input-fault windows of odd length flapped, holder evictions at an odd ms were
#: deploys rolled back, and runs with delays delivered on a tick (2026-12-04): the levers kept
#: every choice, so with them taken out (and the evictions in time order) the cases are those
#: drawn before them.
BEFORE_DIGEST = "3bbbe72017b9e973a787e20b57b44fb11421a6406b6a599576fcb43bace42905"


def _drawn(seed: int, fixes: tuple[str, ...]) -> list[Case]:
    seen: list[Case] = []

    def body(case: Case, tolerated: frozenset[str]) -> RunReport:
        seen.append(case)
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    campaign(30, seed, fixes=fixes, runner=body)
    return seen


def _as_drawn_before(case: Case) -> Case:
    """``case`` without the choices taken from drawn values: steady input faults, each rollback
    the holder eviction it came from, and no delivery tick."""
    faults = case.faults
    rolled = tuple(Eviction(f"holder:{rollback.key}", rollback.at_ms) for rollback in faults.rollbacks)
    return attrs.evolve(
        case,
        faults=attrs.evolve(
            faults,
            input_faults=tuple(attrs.evolve(fault, flapping=False) for fault in faults.input_faults),
            evictions=tuple(sorted(faults.evictions + rolled, key=lambda e: (e.at_ms, e.target))),
            rollbacks=(),
            delay_tick_ms=0,
        ),
    )


def test_campaigns_draw_the_cases_they_always_drew() -> None:
    digest, before = hashlib.sha256(), hashlib.sha256()
    drawn = 0
    windows: Counter[bool] = Counter()
    deploys: Counter[bool] = Counter()
    ticks: Counter[bool] = Counter()
    for seed in range(3):
        for fixes in ((), tuple(sorted(ALL_FIXES))):
            for case in _drawn(seed, fixes):
                digest.update(json.dumps(case.to_dict(), sort_keys=True).encode())
                before.update(json.dumps(_as_drawn_before(case).to_dict(), sort_keys=True).encode())
                drawn += 1
                for fault in case.faults.input_faults:
                    assert fault.flapping == ((fault.end_ms - fault.start_ms) % 2 == 1), fault
                    windows[fault.flapping] += 1
                for eviction in case.faults.evictions:
                    if eviction.target.startswith("holder:"):
                        assert eviction.at_ms % 2 == 0, eviction
                        deploys[False] += 1
                assert case.faults.delay_tick_ms == (DELAY_TICK_MS if case.faults.delay_ms else 0)
                ticks[bool(case.faults.delay_tick_ms)] += 1
                for rollback in case.faults.rollbacks:
                    assert rollback.at_ms % 2 == 1, rollback
                    deploys[True] += 1
    assert drawn == 180
    assert digest.hexdigest() == DRAWN_DIGEST
    assert before.hexdigest() == BEFORE_DIGEST
    assert windows[True] > 0, windows
    assert windows[False] > 0, windows
    assert deploys[True] > 0, deploys
    assert deploys[False] > 0, deploys
    assert ticks[True] > 0, ticks
    assert ticks[False] > 0, ticks
