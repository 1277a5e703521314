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

from semaphore_core.fixes import ALL_FIXES
from semsim.explore.fuzz import RunReport, campaign
from semsim.explore.strategies import Case

#: sha256 of the cases drawn for seeds 0-2, with no fix and with every fix, 30 runs each.
DRAWN_DIGEST = "80055cd13c46749edb75139f5a708ed9b3bc6df0e365302dda84aae8cc8e8909"


def _drawn(seed: int, fixes: tuple[str, ...]) -> list[Case]:
    seen: list[Case] = []

    def body(case: Case, tolerated: frozenset[str]) -> RunReport:
        seen.append(case)
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    campaign(30, seed, fixes=fixes, runner=body)
    return seen


def test_campaigns_draw_the_cases_they_always_drew() -> None:
    digest = hashlib.sha256()
    drawn = 0
    for seed in range(3):
        for fixes in ((), tuple(sorted(ALL_FIXES))):
            for case in _drawn(seed, fixes):
                digest.update(json.dumps(case.to_dict(), sort_keys=True).encode())
                drawn += 1
    assert drawn == 180
    assert digest.hexdigest() == DRAWN_DIGEST
