"""A campaign as a Hypothesis test of the user's own: the :func:`cases` strategy and :func:`check_case`.

::

    from hypothesis import given
    from semsim.testing import cases, check_case

    @given(cases(fixes="all", invariants=["myservice.invariants:MaxGrant"]))
    def test_every_fix_under_random_faults(case):
        check_case(case)

Each example is a whole simulation drawn as ``semsim fuzz`` draws one (a
configuration, a swarm fault plan, a seed). :func:`check_case` runs it with
every invariant judged and, when one breaks, fails the test as the plugin's
fixture does: the invariant, the case file it saved and the command that
replays it. Hypothesis's own settings and options apply as they do to any
test of the suite: the active profile's ``max_examples`` and database,
``--hypothesis-seed``, ``--hypothesis-show-statistics``.

What a user would otherwise trip on, handled here:

- **Shrinking is bounded.** A run takes a tenth of a second or more, and
  Hypothesis may try hundreds of smaller cases: once a test has failed,
  :func:`check_case` counts the simulated work of the runs that follow
  (trace events) and past ``shrink_budget_events`` answers without
  running, so the shrinker stops on the smallest case found so far. A case
  already seen failing is answered from memory (a run is deterministic),
  and only the failure first seen counts while shrinking (shrinking keeps
  the invariant), as in ``semsim fuzz``.
- **Statistics.** Each coverage counter a run reached is an ``event()``
  (``reached grant_expired``), so ``--hypothesis-show-statistics`` shows how
  often each hard-to-reach state came up; and the number reached is a
  ``target()``, which steers generation toward runs that reach more.
- **Deadlines.** Hypothesis's default deadline (200 ms) is shorter than a
  run: use one of semsim's profiles (``--hypothesis-profile=semsim-ci``),
  which lift it, or ``@settings(deadline=None)``.

The budget is kept per test (pytest's current test id), and the plugin
forgets it when the next test starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
from hypothesis import currently_in_test_context, event, target
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from semsim.explore import strategies
from semsim.explore.fuzz import SHRINK_BUDGET_EVENTS, RunReport, fixes_arg, run_case, tolerated_for
from semsim.explore.strategies import Case
from semsim.harness.variants import find_variant
from semsim.testing.failures import failure
from semsim.testing.runner import Invariants, references_of

#: Where failing cases go outside a pytest session, in the working directory (in one, the
#: plugin says: ``--semsim-out``, by default ``semsim-failures/`` in the rootdir).
DEFAULT_OUT = Path("semsim-failures")


def cases(
    fixes: str | Sequence[str] = (), variant: str = "reference", invariants: Invariants = ()
) -> st.SearchStrategy[Case]:
    """Whole-system runs to try, drawn as ``semsim fuzz`` draws them.

    ``fixes``: fix names or ``"all"`` (an unknown one is a ``ValueError``
    naming the known ones); ``variant``: the holder variant every case runs,
    by the name it is found by; ``invariants``: the user's own, judged in
    every case (checker classes, registered names or ``module:attribute``).
    Each is checked here, when the test is defined, not when it first runs.
    """
    chosen = fixes_arg(fixes if isinstance(fixes, str) else ",".join(fixes))
    if not isinstance(variant, str):
        raise TypeError(
            f"variant is the name a variant is found by, so case files can name it; got {variant!r}"
        )
    chosen = find_variant(variant).with_fixes(chosen)  # its own fixes are every case's
    return strategies.cases(chosen, variant, references_of(invariants))


@attrs.define
class _Budget:
    """One test's failures so far and the work spent shrinking them."""

    failed: dict[Case, RunReport] = attrs.Factory(dict)
    first: str | None = None
    shrink_events: int = 0
    cut_short: bool = False


_BUDGETS: dict[str, _Budget] = {}


def forget() -> None:
    """Start every test afresh (the plugin calls it as each test starts)."""
    _BUDGETS.clear()


def check_case(
    case: Case, *, tolerated: frozenset[str] | None = None, shrink_budget_events: int = SHRINK_BUDGET_EVENTS
) -> RunReport | None:
    """Run ``case``, every invariant judged; a failure fails the test with its case and replay.

    ``tolerated``: the known findings not to fail on (default: those the
    case's fixes do not correct, as ``semsim fuzz`` tolerates them). Returns
    the run's report, or None for a run skipped because the test's shrink
    budget is spent (see the module docstring).
    """
    __tracebackhide__ = True
    if not isinstance(case, Case):
        raise TypeError(f"check_case takes a case drawn from semsim.testing.cases(), got {case!r}")
    test = _current_test()
    budget = _BUDGETS.setdefault(test, _Budget())
    fixes = find_variant(case.variant).with_fixes(case.config.holder.fixes)
    allowed = tolerated_for(fixes) if tolerated is None else tolerated
    known = budget.failed.get(case)
    if known is not None:
        raise _failure(known, allowed, test)
    if budget.first is not None and budget.shrink_events >= shrink_budget_events:
        budget.cut_short = True
        return None
    report, _ = run_case(case, allowed)
    if budget.first is not None:
        budget.shrink_events += report.events
    if currently_in_test_context():
        for name in sorted(report.coverage):
            event(f"reached {name}")
        with contextlib.suppress(InvalidArgument):  # a second check_case in one example: once
            target(float(len(report.coverage)), label="coverage counters reached")
    if report.failed and budget.first in (None, report.failure_name):
        budget.first = report.failure_name
        budget.failed[case] = report
        raise _failure(report, allowed, test)
    return report


def _failure(report: RunReport, tolerated: frozenset[str], test: str) -> AssertionError:
    if report.outcome == "violation":  # the detail names the invariant and the time
        lines = [f"invariant violated: {report.detail}"]
    else:
        lines = [f"the run ended with {report.outcome} at t={report.sim_ms} ms: {report.detail}"]
    budget = _BUDGETS.get(test)
    if budget is not None and budget.cut_short:
        lines.append("(the shrink ran out of budget: the case is the smallest found so far)")
    name = test.rpartition("::")[2] or "check_case"
    return failure(lines, report.case, tolerated, report, _out_dir(), name)


def _out_dir() -> Path:
    """``--semsim-out`` as the plugin read it, else ``semsim-failures/`` in the working directory."""
    plugin = sys.modules.get("semsim.testing.plugin")
    found = getattr(plugin, "OUT_DIR", None)
    return found if isinstance(found, Path) else DEFAULT_OUT


def _current_test() -> str:
    """pytest's id of the running test (its documented ``PYTEST_CURRENT_TEST``), or "" outside pytest."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]
