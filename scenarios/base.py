"""What a scenario is, how one runs, and the trace readers the checks share.

A :class:`Scenario` is one story from the reference (seed 001's failure
walkthrough, seed 002's alarm engine) told as data: a world, a fault plan,
a seed, and a check that reads the run and says which of the documented
outcomes did not happen. The check records every expectation it judged,
held or not, so ``semsim run`` can print them all; calling it returns only
the unmet ones (what :func:`run_scenario` and the tests need).

Checks must fail on a wrong outcome rather than crash on it: a missing
event is an unmet expectation, so the readers here return empty lists and
``None`` instead of raising, and :class:`Check` turns anything a check
still raises into one unmet expectation naming the error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs

from semsim.check.checker import Checker
from semsim.harness.designs import DesignRun, run_design
from semsim.harness.run import WorldConfig, WorldRun, run_world
from semsim.world.faults import FaultPlan
from semsim.world.variant import REFERENCE, Variant

#: The holder object of the one key the scenarios use.
HOLDER: Final = "holder:acct"
#: What a scenario's check reads: the semaphore's world run, or a design's measured run.
Run = WorldRun | DesignRun


# --- expectations ----------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """One judged expectation: what the reference promises, whether it held, what the run showed."""

    expectation: str
    held: bool
    observed: str = ""

    def line(self) -> str:
        return self.expectation if not self.observed else f"{self.expectation} (observed: {self.observed})"


class Expect:
    """Collects a check's expectations in the order it judged them."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def that(self, held: bool, expectation: str, observed: object = "") -> bool:
        """Record one expectation; returns ``held`` so a check can skip what depends on it."""
        self.outcomes.append(Outcome(expectation, bool(held), str(observed)))
        return bool(held)


@attrs.frozen
class Check:
    """A scenario's check: ``judge(run, expect)`` records expectations; calling it lists the unmet ones."""

    #: Reads a :class:`WorldRun`, or a :class:`DesignRun` for a scenario run by ``run_design``.
    judge: Callable[[Any, Expect], None]

    def outcomes(self, run: Run) -> list[Outcome]:
        expect = Expect()
        try:
            self.judge(run, expect)
        except Exception as error:  # a check that cannot read the run has found a wrong outcome
            expect.that(False, "the check could read the run", f"{type(error).__name__}: {error}")
        return expect.outcomes

    def __call__(self, run: Run) -> list[str]:
        return [outcome.line() for outcome in self.outcomes(run) if not outcome.held]


# --- scenarios and their results ------------------------------------------------------------


@attrs.frozen
class Scenario:
    """A named failure story: the world, what goes wrong, the seed, and what must happen."""

    name: str
    #: One line, for ``semsim list``.
    description: str
    seed: int
    config: WorldConfig
    faults: FaultPlan
    check: Callable[[Any], list[str]]
    #: Known findings (docs/FINDINGS.md) this story runs into on purpose; see ``run_world``.
    tolerated: frozenset[str] = frozenset()
    #: What the reference promises, with its source (the defining function's docstring).
    promise: str = ""
    #: Run by ``run_design`` and measured at the external API (its check reads a
    #: :class:`DesignRun`): always so for a design other than the semaphore.
    measured: bool = False

    @property
    def by_design(self) -> bool:
        """Whether the story runs through ``run_design`` (its check reads a ``DesignRun``)."""
        return self.measured or self.config.design.name != "semaphore"


@attrs.frozen(hash=False)
class ScenarioResult:
    scenario: Scenario
    seed: int
    run: Run
    #: Every expectation the check judged (only the unmet ones if the check is a plain callable).
    expectations: tuple[Outcome, ...]
    #: Unmet expectations, then the run's own failure (an invariant violation, an unfinished run).
    failures: tuple[str, ...]
    #: None when every invariant held, else what broke.
    invariant_failure: str | None

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def world(self) -> WorldRun | None:
        """The semaphore's world run (its monitor, variant and judges); None for another design."""
        if isinstance(self.run, WorldRun):
            return self.run
        return self.run.world


def run_scenario(
    scenario: Scenario,
    seed: int | None = None,
    full_checks: bool = False,
    variant: Variant = REFERENCE,
    checkers: Sequence[type[Checker]] = (),
    progress: Callable[[int], None] | None = None,
) -> ScenarioResult:
    """Run ``scenario`` (with its own seed unless given one) and judge it.

    ``full_checks`` runs the checker's debug mode (``run_world``'s): same verdict, slower.
    ``variant``: the holder design its holders run, and its judges (``run_world``'s).
    ``checkers``: the user's own invariants, judged beside semsim's (``run_world``'s).
    ``progress``: told the virtual time as the run goes (``run_world``'s).

    It fails when its check reports an unmet expectation, when an invariant
    was violated, or when the run did not complete (time or step limit,
    deadlock): a story that did not run to its end proves nothing. A story
    of the gate or the leased worker (or a ``measured`` one) runs through
    ``run_design``, which refuses ``full_checks`` and ``checkers`` where there
    is no holder to judge, and a ``variant`` that changes a part its design
    does not have (``ValueError``).
    """
    used = scenario.seed if seed is None else seed
    runner = run_design if scenario.by_design else run_world
    run: Run = runner(
        scenario.config,
        scenario.faults,
        used,
        tolerated=scenario.tolerated,
        full_checks=full_checks,
        variant=variant,
        checkers=checkers,
        progress=progress,
    )
    check = scenario.check
    if isinstance(check, Check):
        expectations = tuple(check.outcomes(run))
        unmet = [outcome.line() for outcome in expectations if not outcome.held]
    else:
        unmet = list(check(run))
        expectations = tuple(Outcome(line, False) for line in unmet)
    result = run.result
    invariant_failure: str | None = None
    if result.outcome == "violation":
        invariant_failure = f"invariant {result.invariant} violated: {result.detail}"
    elif result.outcome != "completed":
        invariant_failure = f"the run ended with {result.outcome} at t={result.end_ms} ms: {result.detail}"
    failures = tuple(unmet) + ((invariant_failure,) if invariant_failure else ())
    return ScenarioResult(scenario, used, run, expectations, failures, invariant_failure)


# --- reading a run ---------------------------------------------------------------------------


def events(run: Run, kind: str, **fields: Any) -> list[dict[str, Any]]:
    """Events of ``kind`` whose fields equal ``fields``."""
    return [
        event
        for event in run.trace.of_kind(kind)
        if all(event.get(name) == value for name, value in fields.items())
    ]


def first_t(items: Iterable[dict[str, Any]]) -> int | None:
    """The time of the first event, or None."""
    return next((event["t"] for event in items), None)


def sends(run: Run, src: str, message_type: str | None = None) -> list[dict[str, Any]]:
    """``permits`` calls ``src`` sent to the holder, optionally only one wire ``type``."""
    return [
        event
        for event in run.trace.of_kind("send")
        if event["src"] == src
        and event["dst"] == HOLDER
        and event["method"] == "permits"
        and (message_type is None or event["body"].get("type") == message_type)
    ]


def delivered_at(run: Run, msg: str) -> int | None:
    """When message ``msg`` reached its callee (None: lost)."""
    return first_t(e for e in run.trace.of_kind("deliver") if e["msg"] == msg)


def answers(run: Run, src: str) -> list[dict[str, Any]]:
    """Replies that reached ``src`` from the holder: ``{"t", "msg", "body" | "error"}``."""
    mine = {e["msg"] for e in sends(run, src)}
    return [e for e in run.trace.of_kind("reply") if e["msg"] in mine and not e.get("ignored")]


def grant_results(run: Run, src: str, grant: str) -> list[tuple[int, dict[str, Any]]]:
    """``(t, result)`` for every grant result about ``grant`` that reached ``src``."""
    found = []
    for reply in answers(run, src):
        for result in (reply.get("body") or {}).get("grantResults", []):
            if result["grantId"] == grant:
                found.append((reply["t"], result))
    return found


def lease_echoes(run: Run, src: str, lease: str) -> list[tuple[int, dict[str, Any]]]:
    """``(t, echo)`` for every lease echo about ``lease`` that reached ``src``."""
    found = []
    for reply in answers(run, src):
        for echo in (reply.get("body") or {}).get("leases") or []:
            if echo["leaseId"] == lease:
                found.append((reply["t"], echo))
    return found


def rounds(run: Run, start_ms: int = 0, end_ms: int | None = None) -> list[dict[str, Any]]:
    """Round events in ``[start_ms, end_ms)``."""
    return [
        event
        for event in run.trace.of_kind("round")
        if start_ms <= event["t"] and (end_ms is None or event["t"] < end_ms)
    ]


def in_use_series(run: Run) -> list[tuple[int, int]]:
    """``(t, permits actually in use)`` after every admission and release (the monitor's oracle)."""
    running: set[str] = set()
    series = []
    for event in run.trace.of_kind("admit", "release"):
        if event["kind"] == "admit":
            running.add(event["item"])
        else:
            running.discard(event["item"])
        series.append((event["t"], len(running)))
    return series


def peak_in_use(run: Run, start_ms: int = 0, end_ms: int | None = None) -> int:
    return max(
        (n for t, n in in_use_series(run) if start_ms <= t and (end_ms is None or t < end_ms)), default=0
    )


def admitted_items(run: Run, client: str | None = None) -> list[str]:
    return [e["item"] for e in run.trace.of_kind("admit") if client in (None, e["client"])]


def submitted(config: WorldConfig) -> int:
    """How many items a scripted workload submits."""
    return sum(arrival.count for arrival in config.workload.script)


def summary(run: Run) -> dict[str, int]:
    """A few key numbers of a run, for reports (a design's: :func:`design_summary`)."""
    if isinstance(run, DesignRun) and run.design != "semaphore":
        return design_summary(run)
    kinds = Counter(event["kind"] for event in run.trace.events())
    grants = run.trace.of_kind("grant")
    reclaimed = run.trace.of_kind("grant_reclaimed")
    admits = run.trace.of_kind("admit")
    return {
        "rounds": kinds["round"],
        "permits granted": sum(g["permits"] for g in grants),
        "items admitted": len(admits),
        "through leases": sum(1 for a in admits if a.get("lease")),
        "items released": kinds["release"],
        "permits reclaimed": sum(r["permits"] for r in reclaimed),
        "leases granted": kinds["lease_granted"],
        "leases retired": kinds["lease_retired"],
        "peak in use": peak_in_use(run),
        "messages dropped": kinds["drop"],
        "evictions": kinds["evict"],
        "alarm runs": kinds["alarm"] + kinds["early_alarm"],
        "alarm failures": kinds["alarm_failed"],
    }


def design_summary(run: DesignRun) -> dict[str, int]:
    """A few key numbers of a gate's or a leased worker's run, for reports."""
    kinds = Counter(event["kind"] for event in run.trace.events())
    figures = run.trade_offs
    return {
        "items done": kinds["item_done"] + sum(1 for e in run.trace.of_kind("lease_write") if e["ok"]),
        "calls at the API": kinds["api_start"],
        "peak over cap": 0 if figures is None else figures.peak_over_admission,
        "duplicate runs": 0 if figures is None else figures.duplicate_executions,
        "shed": kinds["shed"],
        "failed open": kinds["fail_open"],
        "claims": sum(1 for e in run.trace.of_kind("lease_claim") if e["ids"]),
        "leases lost": kinds["lease_lost"],
        "writes fenced": kinds["write_fenced"],
        "messages dropped": kinds["drop"],
        "evictions": kinds["evict"],
    }
