"""Each finding of docs/FINDINGS.md, replayed: it breaks its invariant on the faithful
reference holder and holds once its fix is enabled.

The steps are the machine's own rules (tests/stateful_holder.py), so the
invariant checks are exactly the ones the fuzzer runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from semaphore_core import Over, Ratio, Strict, Under
from semaphore_core.fixes import GROUP_CEILING_COUNTS_LEASES, UNDER_SHARES_THE_LIMIT
from tests.stateful_holder import HolderMachine, InvariantViolation


def machine(fixes: frozenset[str]) -> HolderMachine:
    m = HolderMachine()
    m.fixes = fixes
    return m


def step(m: HolderMachine, action: Callable[[], object]) -> None:
    action()
    m.holds()


def f1_within_group_limit_grants_ignore_lease_footprint(m: HolderMachine) -> None:
    # Group g1 is limited to 2. Round 1: L0 queues one item: a grant of 1, and a
    # lease of the 1 permit of room left in the group. Round 2: L1 queues one
    # item: the grant pass sees only grants (1 of 2) and grants another.
    m.configure(
        provisioning=Strict(),
        limited_groups="within_group_limit",
        limit=5,
        permits_per_lease=3,
        capable=2,
        group_limits={"g1": 2},
    )
    m.holds()
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g1", 1)]))
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g1", 1)]))


def f2_under_leases_grow_above_a_lowered_limit(m: HolderMachine) -> None:
    # Under(reserve=1), limit 3: a plain client takes the 2 grant permits. The
    # limit falls to 2 (grants now over their pool of 1); a lease-capable client
    # still gets the reserve's permit: usage 2 + 1 grows above the limit 2.
    m.configure(provisioning=Under(reserve=1), limit=3, plain=1, capable=1)
    m.holds()
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 2)]))  # clients sort L0, p0
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g0", 1)]))


def f2_under_grants_grow_above_a_lowered_limit(m: HolderMachine) -> None:
    # Under(reserve=50%), limit 6: a lease of 3 (the reserve) and 2 granted. The
    # limit falls to 5: the reserve shrinks to 2 but the lease keeps its 3, and
    # grants may grow to their pool of 3: usage 3 + 3 grows above the limit 5.
    m.configure(provisioning=Under(reserve=Ratio(0.5)), limit=6, plain=1, capable=1)
    m.holds()
    step(
        m,
        lambda: m.run_round(
            who=[0], lose=[False] * 4, style="honest", forge_index=0, zero_demand=True, arrivals=[]
        ),
    )
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 2)]))
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 1)]))


FINDINGS = [
    ("F1", "group_ceiling", f1_within_group_limit_grants_ignore_lease_footprint, GROUP_CEILING_COUNTS_LEASES),
    ("F2", "ceiling", f2_under_leases_grow_above_a_lowered_limit, UNDER_SHARES_THE_LIMIT),
    ("F2", "ceiling", f2_under_grants_grow_above_a_lowered_limit, UNDER_SHARES_THE_LIMIT),
]


@pytest.mark.parametrize(
    ("finding", "invariant", "replay", "fix"), FINDINGS, ids=lambda v: getattr(v, "__name__", v)
)
def test_the_reference_breaks_the_invariant(finding: str, invariant: str, replay, fix: str) -> None:
    with pytest.raises(InvariantViolation) as caught:
        replay(machine(frozenset()))
    assert caught.value.name == invariant
    assert caught.value.finding == finding  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("finding", "invariant", "replay", "fix"), FINDINGS, ids=lambda v: getattr(v, "__name__", v)
)
def test_the_fix_holds_the_invariant(finding: str, invariant: str, replay, fix: str) -> None:
    replay(machine(frozenset({fix})))


def test_over_mode_is_not_affected_by_f2() -> None:
    # Over keeps two separate ceilings by design; lowering the limit there is fine.
    m = machine(frozenset())
    m.configure(provisioning=Over(extra=2), limit=3, plain=1, capable=1)
    m.holds()
    step(m, lambda: m.honest_round(who=[1], arrivals=[("g0", 3)]))
    step(m, lambda: m.lower_limit(by=1))
    step(m, lambda: m.honest_round(who=[0], arrivals=[("g0", 1)]))
