"""The swarm draws the cases it always drew.

``semsim.explore.strategies`` builds its strategies once rather than per
draw (a speed-up); the order and structure of the draws are what decide
each case, so a campaign's seed must keep drawing the very same cases.
The digest below was recorded from the strategies before that change. A
deliberate change of the swarm changes it: record the new digest, and say
in the changelog that campaigns draw other cases from the same seeds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter

import attrs
import pytest

import semsim.explore.fuzz
from semaphore_core.fixes import ALL_FIXES, RETRIES_WAIT_THEIR_TIME
from semsim.explore import strategies
from semsim.explore.fuzz import RunReport, campaign
from semsim.explore.strategies import CLOSED_MS, DELAY_TICK_MS, KEYS, QUIET_MS, SECOND_KEY, Case, _drawn_for
from semsim.world.faults import Eviction
from semsim.world.workload import Workload
from tests.helpers import fault_times

#: sha256 of the cases drawn for seeds 0-2, with no fix and with every fix, 30 runs each
#: (every run a fresh draw since 2026-12-05: ``test_every_run_of_a_campaign_is_a_fresh_draw``;
#: a cancel of 20 aimed at a claim in part since 2026-12-05, ``Cancel.in_part``; every fix
#: includes F8's since then too; one world in four has a second key since 2026-12-05,
#: ``strategies.keys_for``, taken from the seed drawn: with the keys put back, the cases are
#: those drawn before, so ``BEFORE_DIGEST`` and ``NEAR_COPIES_DIGESTS`` hold them unchanged; a
#: limit change at a moment of 3 modulo 4 ms closes the holder since 2026-12-05,
#: ``strategies._limit_change``, taken from the moment drawn: with the limits put back, likewise).
DRAWN_DIGEST = "85b2eadae35c284e644de6d17f9ef0e34daf845d26f29a74e3ec2a30aaf68331"
#: The same before input-fault windows of odd length flapped, holder evictions at an odd ms were
#: deploys rolled back, runs with delays delivered on a tick, and fault times were spread over
#: the phase (2026-12-04), and a cancel of 20 was aimed at a claim in part (2026-12-05): the
#: levers kept every choice, so with them taken out (the evictions
#: in time order) the cases are those drawn before them. A window's end is left out: where the
#: spread start put its end past the phase, the end was cut there and the drawn length is gone.
#: Recomputed when every run became a fresh draw (2026-12-05), which changed which cases a seed
#: draws: since then it pins those cases with the levers taken out, and the digests before,
#: with Hypothesis's near-copies back, are held by ``test_with_near_copies_back_...``.
BEFORE_DIGEST = "495eab3214c9c5261731a88bef5f1cff1ad442e726094a85162f1fedf0b280c8"
#: ``DRAWN_DIGEST`` and ``BEFORE_DIGEST`` as they were before every run was a fresh draw (the
#: first with the cancels of 20 aimed at a claim in part, and F8's fix among every fix).
NEAR_COPIES_DIGESTS = (
    "20dbba3503713d6bece1eae106fae09eb0012c0a1dff03a543962daab09f7d7b",
    "b0d72df0942df226ebf1e2b72f06c18f62e6fe0c77bb0c6f1362e9bd5938d69a",
)


def _drawn(seed: int, fixes: tuple[str, ...], runs: int = 30) -> list[Case]:
    seen: list[Case] = []

    def body(case: Case, tolerated: frozenset[str]) -> RunReport:
        seen.append(case)
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    campaign(runs, seed, fixes=fixes, runner=body)
    return seen


def _one_key(case: Case) -> Case:
    """``case`` with the drawn world's first key alone (``strategies.keys_for`` taken out)."""
    return attrs.evolve(
        case, config=attrs.evolve(case.config, workload=attrs.evolve(case.config.workload, keys=KEYS))
    )


def _as_drawn_before(case: Case) -> str:
    """``case`` without the choices taken from drawn values, as JSON: steady input faults, each
    rollback the holder eviction it came from, no delivery tick, each time the integer drawn
    for it, and no window's end (see ``BEFORE_DIGEST``)."""
    faults = case.faults
    phase_ms = case.config.duration_ms - QUIET_MS
    moment, starting = _drawn_for(phase_ms), _drawn_for(phase_ms - 1)
    rolled = tuple(Eviction(f"holder:{rollback.key}", rollback.at_ms) for rollback in faults.rollbacks)
    evictions = tuple(attrs.evolve(e, at_ms=moment[e.at_ms]) for e in faults.evictions + rolled)
    # The fixes F8's came after: an every-fix case drew the same choices with one fix fewer.
    holder = attrs.evolve(
        case.config.holder, fixes=tuple(f for f in case.config.holder.fixes if f != RETRIES_WAIT_THEIR_TIME)
    )
    case = _one_key(case)
    before = attrs.evolve(
        case,
        config=attrs.evolve(case.config, holder=holder),
        faults=attrs.evolve(
            faults,
            input_faults=tuple(
                attrs.evolve(fault, start_ms=starting[fault.start_ms], end_ms=phase_ms, flapping=False)
                for fault in faults.input_faults
            ),
            partitions=tuple(
                attrs.evolve(w, start_ms=moment[w.start_ms], end_ms=phase_ms) for w in faults.partitions
            ),
            evictions=tuple(sorted(evictions, key=lambda e: (e.at_ms, e.target))),
            rollbacks=(),
            delay_tick_ms=0,
            limit_changes=tuple(attrs.evolve(c, at_ms=moment[c.at_ms]) for c in faults.limit_changes),
            group_limit_changes=tuple(
                attrs.evolve(c, at_ms=moment[c.at_ms]) for c in faults.group_limit_changes
            ),
            cancels=tuple(attrs.evolve(c, at_ms=moment[c.at_ms], in_part=False) for c in faults.cancels),
        ),
    )
    return json.dumps(before.to_dict(), sort_keys=True)


def test_campaigns_draw_the_cases_they_always_drew(monkeypatch: pytest.MonkeyPatch) -> None:
    digest, before = hashlib.sha256(), hashlib.sha256()
    windows: Counter[bool] = Counter()
    deploys: Counter[bool] = Counter()
    ticks: Counter[bool] = Counter()
    aimed: Counter[bool] = Counter()
    two_keys: Counter[bool] = Counter()
    closed: Counter[bool] = Counter()
    tenths: Counter[int] = Counter()  # timed faults by the tenth of the fault phase they strike in
    campaigns = [(seed, fixes) for seed in range(3) for fixes in ((), tuple(sorted(ALL_FIXES)))]
    drawn = [case for seed, fixes in campaigns for case in _drawn(seed, fixes)]
    for case in drawn:
        digest.update(json.dumps(case.to_dict(), sort_keys=True).encode())
        for fault in case.faults.input_faults:
            assert fault.flapping == ((fault.end_ms - fault.start_ms) % 2 == 1), fault
            windows[fault.flapping] += 1
        for eviction in case.faults.evictions:
            if eviction.target.startswith("holder:"):
                assert eviction.at_ms % 2 == 0, eviction
                deploys[False] += 1
        assert case.faults.delay_tick_ms == (DELAY_TICK_MS if case.faults.delay_ms else 0)
        ticks[bool(case.faults.delay_tick_ms)] += 1
        for cancel in case.faults.cancels:
            assert cancel.in_part == (cancel.count == 20), cancel
            aimed[cancel.in_part] += 1
        phase_ms = case.config.duration_ms - QUIET_MS
        keys = case.config.workload.keys
        assert keys == (KEYS if case.seed % 4 != 3 else (*KEYS, SECOND_KEY)), case.seed
        two_keys[len(keys) == 2] += 1
        for rollback in case.faults.rollbacks:
            assert rollback.at_ms % 2 == 1, rollback
            deploys[True] += 1
        for at_ms in fault_times(case):
            tenths[at_ms * 10 // phase_ms] += 1
    assert len(drawn) == 180
    assert digest.hexdigest() == DRAWN_DIGEST
    # Closing the holder keeps every other choice: with it taken out, each campaign draws the
    # cases it drew before, and closing their limit changes gives these.
    monkeypatch.setattr(strategies, "_with_closings", lambda plan: plan)
    drawn_before = [case for seed, fixes in campaigns for case in _drawn(seed, fixes)]
    monkeypatch.undo()
    for now, then in zip(drawn, drawn_before, strict=True):
        before.update(_as_drawn_before(then).encode())
        assert now == attrs.evolve(then, faults=strategies._with_closings(then.faults))
        phase_ms = then.config.duration_ms - QUIET_MS
        for change in then.faults.limit_changes:
            closes = change.at_ms % 4 == 3
            closed[closes] += 1
            if closes:  # 0 at the moment drawn, the limit drawn once closed long enough
                reopen_ms = min(change.at_ms + CLOSED_MS, phase_ms - 1)
                assert attrs.evolve(change, limit=0) in now.faults.limit_changes, now.faults
                assert attrs.evolve(change, at_ms=reopen_ms) in now.faults.limit_changes, now.faults
    assert before.hexdigest() == BEFORE_DIGEST
    assert windows[True] > 0, windows
    assert windows[False] > 0, windows
    assert deploys[True] > 0, deploys
    assert deploys[False] > 0, deploys
    assert ticks[True] > 0, ticks
    assert ticks[False] > 0, ticks
    assert aimed[True] > 0, aimed
    assert aimed[False] > 0, aimed
    assert 0 < two_keys[True] < two_keys[False], two_keys
    assert 0 < closed[True] < closed[False], closed
    # Spread over the phase: no tenth holds more than a fifth of them. Drawn as Hypothesis
    # draws an integer, 69% of them struck in the first tenth.
    assert set(tenths) == set(range(10)), tenths
    assert max(tenths.values()) < sum(tenths.values()) / 5, tenths


def test_every_run_of_a_campaign_is_a_fresh_draw() -> None:
    """Hypothesis's generate phase follows each case it draws with up to five near-copies of it
    (one span copied over another of the same label); a campaign turns that off, so its runs
    are as many worlds as it has runs. With the near-copies, 27 of seed 1's first 60 runs
    repeated an earlier run's world (its config) and 87 of its first 150."""
    from hypothesis.internal.conjecture.engine import ConjectureRunner

    mutator = ConjectureRunner.generate_mutations_from
    for seed in (1, 2):
        seen = _drawn(seed, (), runs=60)
        assert len(seen) == 60
        assert len({json.dumps(attrs.asdict(case.config), sort_keys=True) for case in seen}) == 60
    assert ConjectureRunner.generate_mutations_from is mutator  # put back after the campaign


def test_with_near_copies_back_a_campaign_draws_what_it_drew_before_fresh_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Turning Hypothesis's mutator off is all that changed the draws: with it back on, the
    cases are those pinned before (and, with the 2026-12-04 levers taken out, those before
    the levers), so the levers' evidence stands."""
    monkeypatch.setattr(semsim.explore.fuzz, "_every_run_drawn_afresh", contextlib.nullcontext)
    monkeypatch.setattr(strategies, "_with_closings", lambda plan: plan)  # the limit changes as drawn before
    digest, before = hashlib.sha256(), hashlib.sha256()
    for seed in range(3):
        for fixes in ((), tuple(sorted(ALL_FIXES))):
            for case in _drawn(seed, fixes):
                digest.update(json.dumps(_one_key(case).to_dict(), sort_keys=True).encode())
                before.update(_as_drawn_before(case).encode())
    assert (digest.hexdigest(), before.hexdigest()) == NEAR_COPIES_DIGESTS


@pytest.mark.parametrize("internal", ["_MUTATOR", "_LOCAL_CONSTANTS"])
def test_a_hypothesis_without_an_internal_the_draws_rest_on_is_warned_of(
    monkeypatch: pytest.MonkeyPatch, internal: str
) -> None:
    """A campaign on a Hypothesis that renamed either internal still runs, but says its cases may
    not be the pinned ones (and may be near-copies) instead of reverting silently."""
    monkeypatch.setattr(semsim.explore.fuzz, internal, "renamed_in_a_later_hypothesis")
    with pytest.warns(semsim.explore.fuzz.DrawsWarning, match="renamed_in_a_later_hypothesis"):
        assert len(_drawn(0, (), runs=3)) == 3


def _offered_per_minute(case: Case) -> float:
    workload = case.config.workload
    if workload.arrival == "steady":
        return workload.items_per_minute * workload.clients
    return workload.burst_size * workload.clients * 60_000 / workload.burst_every_ms


def test_an_overloaded_world_is_bounded_and_nothing_else_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals offer at most ``MAX_LOAD`` times what the limit can run; the bound is applied to
    the values drawn, so the draws, and every other choice, stay as they were. Seed 4 draws a
    limit of 1 with four clients at 90 items a minute of up to 45 s (136 times its capacity)."""
    bounded = _drawn(4, (), runs=150)
    monkeypatch.setattr(strategies, "bounded_load", lambda workload, limit: workload)
    as_drawn = _drawn(4, (), runs=150)
    cut = [(a, b) for a, b in zip(as_drawn, bounded, strict=True) if a != b]
    assert 1 <= len(cut) <= 10, len(cut)
    for before, after in cut:
        assert (
            attrs.evolve(after, config=attrs.evolve(after.config, workload=before.config.workload)) == before
        )
        assert _offered_per_minute(after) < _offered_per_minute(before)
    for case in bounded:
        mean_ms = sum(case.config.workload.duration_ms) / 2
        most = strategies.MAX_LOAD * case.config.holder.limit * 60_000 / mean_ms
        assert _offered_per_minute(case) <= most * 1.001 or case.config.workload.burst_size == 1, case


@pytest.mark.parametrize(
    ("arrival", "offered", "limit", "expected"),
    [
        ("steady", 90.0, 1, 84.396 / 4),  # 32 x 60 s / 22.75 s a minute, over four clients
        ("steady", 10.0, 1, 10.0),  # within the bound: as drawn
        ("bursts", 8, 1, 7),  # 84.4 a minute is 7.03 a client every 20 s: 7 whole items
        ("bursts", 8, 10, 8),
    ],
)
def test_bounded_load_cuts_a_rate_or_a_burst_to_the_bound(
    arrival: str, offered: float, limit: int, expected: float
) -> None:
    workload = Workload(
        clients=4,
        arrival=arrival,  # type: ignore[arg-type]
        items_per_minute=offered if arrival == "steady" else 20.0,
        burst_size=int(offered) if arrival == "bursts" else 20,
        burst_every_ms=20_000,
        duration_ms=(500, 45_000),
    )
    got = strategies.bounded_load(workload, limit)
    value = got.items_per_minute if arrival == "steady" else got.burst_size
    assert value == pytest.approx(expected, abs=0.001)
