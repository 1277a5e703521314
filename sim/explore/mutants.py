"""The mutation score: does the fuzzer catch real protocol bugs?

Each mutant of ``semsim.world.mutant_catalog`` plants one plausible bug in
``semaphore_core`` (or the alarm engine) for the duration of a campaign. A
mutant is *killed* when the campaign (the ``semsim-ci`` budget: the same runs and
seed as the pytest fuzz suite) breaks an invariant that no known finding of
the reference explains; the table reports which invariant caught it, after
how many runs, and the length of the shrunk counterexample in plan steps.
``semsim mutants --markdown docs/MUTANTS.md`` regenerates the committed table.

The committed table is also what the exit status is judged against. Before
it runs anything, ``semsim mutants`` reads the expected table (``--expected``,
by default this checkout's ``docs/MUTANTS.md``) and afterwards compares each
mutant's verdict with its row: killed or survived, and the invariant that
caught it. Exit 0 when every verdict is as in the table; 1 when one is not (a
killed mutant survives, a survivor is killed, or another invariant caught it),
with one line per difference; 2 when a named table is missing or a table is
malformed. ``--only`` compares only the mutants it names; a full run also
reports rows for mutants the catalog no longer has. Runs to kill, steps and
the campaign are reported but not compared: they move whenever the
strategies or the checkers change, and a reviewer needs to hear about
verdicts. When the default table does not exist (an installed copy, say),
the command says so and exits 0 only if every mutant is killed.

The table itself is parsed rather than paired with a JSON sidecar: it is
generated and committed already, so it stays the one record, with no second
file to forget to commit or to drift from what a reader sees. The parser needs
little of it: the rows under the header row (:data:`COLUMNS`), trimmed cells,
a row's first cell and the verdict cells counted from its end, so alignment
padding and a pipe inside a planted bug's text do not confuse it, and anything
else in a row is an error that names the line.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import re
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from semaphore_core.fixes import ALL_FIXES
from semsim.check.invariants import SEMAPHORE_FINDINGS
from semsim.explore.examples import fuzz_examples
from semsim.explore.fuzz import Campaign, campaign, case_length, design_tolerated_for
from semsim.explore.mutant_layers import (
    DEFAULT_CPU_BUDGET_S,
    LAYERS,
    NOT_RUN,
    PYTEST_LAYERS,
    SURVIVED,
    LayerVerdict,
    pytest_layers_missing,
    pytest_selection,
    run_pytest_layer,
    run_scenarios_layer,
)
from semsim.harness.catalog import MUTANTS, mutant
from semsim.inputs.files import InputError, read_text, write_text_whole, written_to
from semsim.inputs.progress import Progress
from semsim.world.design import DESIGN_FIXES, DesignName
from semsim.world.mutant_catalog import Mutant

#: The ``semsim-ci`` profile's budget, and the pytest fuzz suite's seed.
CI_RUNS: Final = 150
CI_SEED: Final = 20261129
#: The target: every counterexample at most this many plan steps.
MAX_COUNTEREXAMPLE_STEPS: Final = 15
#: Without a terminal, a progress line every this many runs (about 10 s of a campaign).
PROGRESS_EVERY_RUNS: Final = 25
#: The table the exit status is judged against, unless ``--expected`` names another.
COMMITTED_TABLE: Final = Path(__file__).resolve().parents[2] / "docs" / "MUTANTS.md"
#: The largest expected table read (``1 << 20``: Hypothesis draws integers from large literals
#: in local modules, so this module adds none; see tests/conftest.py).
MAX_TABLE_BYTES: Final = 1 << 20
#: The kill table's columns, as :func:`markdown` writes them and :func:`read_table` finds them.
COLUMNS: Final = (
    "mutant",
    "planted bug",
    "unit tests",
    "state machine",
    "scenarios",
    "fuzz",
    "campaign",
    "runs to kill",
    "steps",
)
#: ``--workers`` and ``--cpu-budget`` (seconds per pytest layer and mutant) bounds.
MAX_WORKERS: Final = 64
MAX_CPU_BUDGET_S: Final = 24 * 60 * 60


#: Why a mutant can survive the campaigns, for the table: what no honest or faulty run
#: can show through the invariants (docs/INVARIANTS.md). Printed only for mutants that survived.
WHY_IT_CAN_SURVIVE: Final[dict[str, str]] = {
    # Empty while every survivor of the layers run is explained below (WHY_THE_FUZZ_MISSES).
}

#: Why the whole-system fuzz alone misses a mutant another layer kills: what its invariants
#: (docs/INVARIANTS.md) cannot see. Printed only for mutants the fuzz layer let survive. The
#: counts of sampled drawn runs ("N of 300") here and below were measured before 2026-12-05,
#: when three drawn runs in four were near-copies of another (docs/BENCHMARKS.md, "Every run
#: drawn afresh"); the samples drawn since are other runs.
WHY_THE_FUZZ_MISSES: Final[dict[str, str]] = {
    "claim-deadline-off-by-one": (
        "Needs a claim that reaches the holder on the exact millisecond of its deadline: "
        "uniform delays never put one there; runs with delays deliver on a 500 ms tick "
        "(FaultPlan.delay_tick_ms, since 2026-12-04), and 30 of 300 sampled drawn runs kill it "
        "(benchmarks/bench_kill_rates.py, seeds 1-6, fault times spread)."
    ),
    "lease-expiry-off-by-one": (
        "Needs a round on the exact millisecond an unreported lease expires: 7 of 300 sampled "
        "drawn runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6; 1 before runs with "
        "delays delivered on a tick); the ci campaign reaches it at run 53."
    ),
    "group-policy-per-demand": (
        "Needs a callback that answers differently within one round: group limits otherwise "
        "change between rounds (a limit_workflow call, a window of time), so resolving them once "
        "per round or once per demand gives the same answers. Drawn input-fault windows of odd "
        "length flap (InputFault.flapping): 44 of 300 sampled drawn runs kill it "
        "(benchmarks/bench_kill_rates.py), and the group-limit-flapping scenario does."
    ),
    "rebuilt-holder-drops-retired-leases": (
        "Needs a holder eviction while a lease is retired but not yet settled; clients retire "
        "and report their own expired leases, so that window is short. Rare in the draws: the "
        "ci campaign first reached it (at run 53) once the swarm drew operations worlds."
    ),
    "migration-down-keeps-claim-index": (
        "Needs a schema rolled back and forward over a holder's rows: a drawn holder eviction at "
        "an odd ms is such a deploy (FaultPlan.rollbacks; since 2026-12-04), and 29 of 300 "
        "sampled drawn runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6); the "
        "deploy-rolled-back scenario does."
    ),
    "leased-write-after-expiry": (
        "The store accepts a write whose lease ran out while nobody has claimed the instance "
        "again. The leased worker skips its write once a renewal said the lease is lost, so one "
        "needs a silent expiry: the worker stalled (a pause) past its lease with its call done "
        "and no other worker claiming the instance first. Rare in the draws: before every run "
        "was a fresh draw, the ci campaigns' 300 runs never reached it; since, the ci campaign "
        "does at run 48 and the time-to-bug campaigns on every seed of 1-3 (runs 13, 94, 41); "
        "the store's state machine, which writes with stale tokens directly, kills it."
    ),
    "lease-ignores-group-room": (
        "Needs within_group_limit leases, a group cap whose room is below the equal share, and "
        "lease demand in that group in one round. Rare in the draws: 2 of 300 sampled drawn "
        "runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6; 14 before fault times were "
        "spread over the phase); the ci campaign kills it at run 70 since every run is a fresh "
        "draw, the time-to-bug campaigns on five seeds of 1-6 (all but 4)."
    ),
}


#: Why drawn runs alone (no named scenario first) can miss a mutant the scenario worlds kill: for
#: the time-to-bug section (benchmarks/bench_time_to_bug.py), beside WHY_THE_FUZZ_MISSES. Each
#: rests on the 150-run campaigns of seeds 1-3 (docs/BENCHMARKS.md, "Time to bug").
WHY_THE_DRAWS_MISS: Final[dict[str, str]] = {
    "released-not-clamped-to-claimed": (
        "Needs a grant report whose released lies above claimed but within the grant's permits "
        "(a forger's lie on a grant claimed in part) where the holder's answer shows it: 11 of "
        "300 sampled drawn runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6), in a few "
        "neighbouring worlds, so whole campaigns can miss it; the forged-grant-reports scenario "
        "does."
    ),
    "unknown-lease-debt-dropped": (
        "Needs a report of a lease the holder never knew (a forger's lie) in the very round that "
        "sizes another client's lease, with the lease budget short: 20 of 300 sampled drawn "
        "runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6); the unknown-lease-report "
        "scenario does."
    ),
    "engine-without-fallback": (
        "Needs the platform's alarm to fail on every retry while a grant waits to be claimed "
        "(alarm_armed judges the drop): in drawn runs the engine's early passes and the "
        "clients' next commits run the due work first, so 2 of 300 sampled drawn runs "
        "(benchmarks/bench_kill_rates.py, seeds 1-6) drop it; the alarm-engine-fallback "
        "scenario does."
    ),
    "report-lowers-high-water": (
        "Needs a stale grant report that lands after a newer one for the same grant (a forged "
        "or duplicated report): 3 of 300 sampled drawn runs kill it "
        "(benchmarks/bench_kill_rates.py, seeds 1-6)."
    ),
    "reclaim-takes-claimed": (
        "Needs a grant claimed in part whose timeout passes while its claimed permits still "
        "run, and a reclaim then. Drawn worlds are mostly short of permits, so a grant seldom "
        "covers more than the queue even after a cancel: with the cancels of 20 aimed at a "
        "claim in part (Cancel.in_part), 5-6 of the first 150 drawn runs of seeds 1 and 2 claim "
        "a grant in part (2-3 before). Seed 2's kill (run 62) was lost when that run's world "
        "drew a second key (strategies.keys_for); the grant-claimed-in-part scenario kills it."
    ),
    "alarm-ignores-partly-claimed": (
        "Needs a grant claimed in part with unclaimed permits left when the alarm is armed: the "
        "same world shape as reclaim-takes-claimed, as rare (1 of 300 sampled drawn runs); the "
        "grant-claimed-in-part scenario kills it."
    ),
    "claim-one-attempt-too-many": (
        "Needs a holder eviction during an operation's last attempt, so the attempt is lost and "
        "another is asked for; evictions at random times seldom find one: 5 of 300 sampled "
        "drawn runs kill it (benchmarks/bench_kill_rates.py, seeds 1-6); the "
        "last-attempt-evicted-terminal scenario does."
    ),
}


def why_drawn_runs_miss(name: str) -> str | None:
    """Why drawn runs alone can let mutant ``name`` survive, if it is explained."""
    return WHY_THE_DRAWS_MISS.get(name) or WHY_THE_FUZZ_MISSES.get(name)


@attrs.frozen
class FuzzResult:
    """What the whole-system fuzz campaigns made of one mutant."""

    killed: bool
    #: The invariant (or outcome, such as ``crash``) that caught it.
    caught_by: str | None
    #: The campaign that caught it: the faithful ``reference`` or ``every fix``.
    variant: str | None
    runs_to_kill: int
    counterexample_steps: int | None
    shrink_runs: int

    @property
    def verdict(self) -> LayerVerdict:
        return LayerVerdict("killed", self.caught_by) if self.killed else SURVIVED


def _as_dict(verdicts: Mapping[str, LayerVerdict]) -> dict[str, LayerVerdict]:
    return dict(verdicts)


@attrs.frozen
class MutantResult:
    """One mutant's verdict from each layer (``not run`` for a layer left out), and the fuzz details."""

    name: str
    description: str
    layers: Mapping[str, LayerVerdict] = attrs.field(converter=_as_dict, hash=False)
    fuzz: FuzzResult | None = None

    def __attrs_post_init__(self) -> None:
        assert tuple(self.layers) == LAYERS, self.layers

    @property
    def killed(self) -> bool:
        """Killed by the suite: by any layer."""
        return any(verdict.killed for verdict in self.layers.values())


def fuzz_campaigns(
    design: DesignName = "semaphore",
) -> tuple[tuple[str, tuple[str, ...], frozenset[str]], ...]:
    """The fuzz suite's two campaigns of ``design``, in order, as ``(label, fixes, tolerated)``: the
    reference as its seed has it (its known findings tolerated), then with every fix (none)."""
    if design == "semaphore":
        every = tuple(sorted(ALL_FIXES))
        return (("reference", (), SEMAPHORE_FINDINGS), ("every fix", every, frozenset()))
    return (
        ("reference", (), design_tolerated_for(design, ())),
        ("every fix", DESIGN_FIXES, design_tolerated_for(design, DESIGN_FIXES)),
    )


def try_mutant(
    candidate: Mutant,
    runs: int = CI_RUNS,
    seed: int = CI_SEED,
    on_run: Callable[[str, Campaign, bool], None] | None = None,
) -> FuzzResult:
    """The ci campaigns of the mutant's design with ``candidate`` applied: the reference (findings
    tolerated), then every fix.

    ``on_run(variant, campaign, shrinking)`` is called after every run;
    ``variant`` names the campaign (``reference`` or ``every fix``).
    """
    runs_total = 0
    result = None
    caught_in: str | None = None
    design = candidate.design
    # The fuzz suite's two campaigns, in order: a mutant survives only if neither kills it.
    for variant, fixes, tolerated in fuzz_campaigns(design):

        def progress(state: Campaign, _report: object, shrinking: bool, variant: str = variant) -> None:
            if on_run is not None:
                on_run(variant, state, shrinking)

        planted = candidate.variant.name  # in every run, drawn or named, wherever it runs
        examples = [attrs.evolve(example, variant=planted) for example in fuzz_examples(fixes, design=design)]
        result = campaign(
            runs,
            seed,
            fixes=fixes,
            tolerated=tolerated,
            on_run=progress,
            examples=examples,
            variant=planted,
            design=design,
        )
        runs_total += result.runs
        if result.failure is not None:
            caught_in = variant
            break
    assert result is not None
    failure = result.failure
    return FuzzResult(
        killed=failure is not None,
        caught_by=None if failure is None else failure.failure_name,
        variant=caught_in,
        runs_to_kill=runs_total,
        counterexample_steps=None if failure is None else case_length(failure.case),
        shrink_runs=result.shrink_runs,
    )


def score_mutant(
    candidate: Mutant,
    layers: Sequence[str] = LAYERS,
    cpu_budget_s: int = DEFAULT_CPU_BUDGET_S,
    on_run: Callable[[str, Campaign, bool], None] | None = None,
    on_layer: Callable[[str, LayerVerdict], None] | None = None,
) -> MutantResult:
    """Every chosen layer's verdict on ``candidate``, in :data:`LAYERS` order (all are run, kill or not).

    Each layer runs even after another killed the mutant: the table's point is
    which layers see the bug, so a reader knows what a user who runs only the
    fuzzer on their own change would catch.
    """
    verdicts: dict[str, LayerVerdict] = {}
    fuzz: FuzzResult | None = None
    for layer in LAYERS:
        if layer not in layers:
            verdict = NOT_RUN
        elif layer in PYTEST_LAYERS:
            verdict = run_pytest_layer(candidate.name, layer, cpu_budget_s, candidate.design)
        elif layer == "scenarios":
            verdict = run_scenarios_layer(candidate.name)
        else:
            fuzz = try_mutant(candidate, on_run=on_run)
            verdict = fuzz.verdict
        verdicts[layer] = verdict
        if on_layer is not None and layer in layers:
            on_layer(layer, verdict)
    return MutantResult(candidate.name, candidate.description, verdicts, fuzz)


def progress_reporter(
    label: str, interactive: bool, bar: Progress | None = None
) -> Callable[[str, Campaign, bool], None]:
    """Progress on stderr for one mutant's campaigns (``label`` names the mutant).

    On a terminal, the note of the command's progress bar (``bar``), after every run. Otherwise (CI,
    a pipe, a log file) plain lines, never a carriage return: one every
    :data:`PROGRESS_EVERY_RUNS` runs of a campaign, one when shrinking starts
    and one every :data:`PROGRESS_EVERY_RUNS` shrink runs, so a long run is
    never silent for minutes and a log stays short.
    """

    def report(variant: str, state: Campaign, shrinking: bool) -> None:
        if interactive:
            doing = f"shrinking ({state.shrink_runs} runs)" if shrinking else f"run {state.runs}"
            if bar is not None:
                bar.say(f"{label.split('] ', 1)[-1].strip()} {variant}: {doing}")
            return
        if shrinking and state.shrink_runs == 1:
            doing = "shrinking the counterexample"
        elif shrinking and state.shrink_runs % PROGRESS_EVERY_RUNS == 0:
            doing = f"shrinking ({state.shrink_runs} runs)"
        elif not shrinking and state.runs % PROGRESS_EVERY_RUNS == 0:
            doing = f"run {state.runs}"
        else:
            return
        print(f"{label}  {variant}: {doing}", file=sys.stderr, flush=True)

    return report


#: Each layer's heading in the table.
LAYER_HEADINGS: Final = {
    "unit": "unit tests",
    "state-machine": "state machine",
    "scenarios": "scenarios",
    "fuzz": "fuzz",
}


def _percent(count: int, total: int) -> str:
    return f"{100 * count // total}%" if total else "-"


def scores(results: Sequence[MutantResult]) -> tuple[int, int]:
    """(killed by the suite, killed by the whole-system fuzz alone)."""
    return sum(r.killed for r in results), sum(r.layers["fuzz"].killed for r in results)


def _cell(verdict: LayerVerdict) -> str:
    if verdict.killed:
        # A node id may hold a pipe (a parametrized id): escaped, the row still splits right.
        return f"`{str(verdict.caught_by).replace('|', chr(92) + '|')}`"
    return "**survived**" if verdict.status == "survived" else verdict.status


def markdown(results: Sequence[MutantResult], runs: int, seed: int) -> str:
    suite, fuzz = scores(results)
    total = len(results)
    per_layer = ", ".join(
        f"{LAYER_HEADINGS[layer]} {sum(r.layers[layer].killed for r in results)}"
        for layer in LAYERS
        if any(r.layers[layer].status != "not run" for r in results)
    )
    lines = [
        "# Mutation score",
        "",
        "Generated by `semsim mutants --markdown docs/MUTANTS.md`: each mutant of",
        "`sim/world/mutant_catalog.py` (and of `sim/check/planted.py`, the checkers' own, last)",
        "is applied at run time (nothing is edited; in the scenarios",
        "and fuzz layers it is the holder variant `mutant/NAME`, which `semsim run` and `semsim",
        "fuzz --variant` run too) and every layer of the suite is run against it, each in full,",
        "so the table says which layers see which bugs:",
        "",
        "- **unit tests**: the pytest suite minus the other layers' files (the `semsim-ci`",
        "  profile, `-x`; the first failing test is named);",
        "- **state machine**: `tests/test_stateful_holder.py`;",
        "- **scenarios**: every named scenario's documented outcome and invariants;",
        f"- **fuzz**: the fuzz suite's campaigns, `semsim-ci` budget ({runs} runs each, seed {seed}):",
        "  first the faithful reference with its known findings tolerated, then, if the",
        "  mutant survived it, the variant with every fix, where nothing is tolerated. Each",
        "  campaign first runs the named scenarios' worlds as explicit examples. The",
        "  invariant that caught the mutant is named; runs to kill count both campaigns;",
        f"  steps are the shrunk counterexample's plan steps (target: at most {MAX_COUNTEREXAMPLE_STEPS}).",
        "",
        "The fuzz column is what a user who runs only `semsim fuzz` on their own change",
        "would catch. Targets: at least 95% killed by the suite, at least 80% by the fuzz alone.",
        "",
        f"**Killed by the suite (any layer): {suite} of {total} ({_percent(suite, total)}).**",
        f"**Killed by the whole-system fuzz alone: {fuzz} of {total} ({_percent(fuzz, total)}).**",
        f"Per layer: {per_layer}.",
        "",
    ]
    skipped = [
        LAYER_HEADINGS[layer] for layer in LAYERS if all(r.layers[layer].status == "not run" for r in results)
    ]
    if skipped:
        lines += [
            f"Layers not run for this table (`--layers`): {', '.join(skipped)}. Their cells say",
            "`not run`, and the suite's score counts only the layers that ran, so it is a floor.",
            "",
        ]
    lines += [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in results:
        detail = r.fuzz
        killed = detail is not None and detail.killed
        steps = (
            "" if detail is None or detail.counterexample_steps is None else str(detail.counterexample_steps)
        )
        lines.append(
            f"| `{r.name}` | {r.description} | "
            + " | ".join(_cell(r.layers[layer]) for layer in LAYERS)
            + f" | {(detail.variant or '') if detail else ''} "
            f"| {detail.runs_to_kill if detail and killed else ''} | {steps} |"
        )
    notes = [r for r in results if not r.killed and r.name in WHY_IT_CAN_SURVIVE]
    if notes:
        lines += ["", "## Why a survivor can survive", ""]
        lines += [f"- `{r.name}`: {WHY_IT_CAN_SURVIVE[r.name]}" for r in notes]
    blind = [r for r in results if r.layers["fuzz"].status == "survived" and r.name in WHY_THE_FUZZ_MISSES]
    if blind:
        lines += ["", "## What the whole-system fuzz does not see", ""]
        lines += [f"- `{r.name}`: {WHY_THE_FUZZ_MISSES[r.name]}" for r in blind]
    return "\n".join(lines) + "\n"


class TableError(ValueError):
    """An expected table that cannot be read as a kill table; the message names the file and line."""


_PIPE: Final = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str] | None:
    """A Markdown table row's trimmed cells (``\\|`` is a pipe inside a cell), or None when not a row."""
    line = line.strip()
    if len(line) < 2 or not (line.startswith("|") and line.endswith("|")):
        return None
    return [cell.strip().replace("\\|", "|") for cell in _PIPE.split(line[1:-1])]


def _verdict(cell: str) -> LayerVerdict | None:
    """A layer cell as :func:`markdown` writes it; None when it is none of those."""
    plain = cell.strip("*").strip()
    if plain in ("survived", "timed out", "not run"):
        return LayerVerdict(plain)
    if len(cell) > 2 and cell.startswith("`") and cell.endswith("`"):
        return LayerVerdict("killed", cell[1:-1].strip())
    return None


def read_table(path: Path) -> dict[str, dict[str, LayerVerdict]]:
    """Each mutant's verdict per layer in the kill table of the Markdown file ``path``, in table order.

    Raises :class:`~semsim.inputs.files.InputError` when the file cannot be read and
    :class:`TableError` when it holds no well-formed kill table.
    """
    lines = read_text(path, MAX_TABLE_BYTES, "an expected mutation table").splitlines()
    header = next((i for i, line in enumerate(lines) if _cells(line) == list(COLUMNS)), None)
    if header is None:
        raise TableError(f"{path}: no kill table (no row of headers {' | '.join(COLUMNS)})")
    rule = _cells(lines[header + 1]) if header + 1 < len(lines) else None
    if rule is None or not all("-" in cell and set(cell) <= set(":-") for cell in rule):
        raise TableError(f"{path}, line {header + 2}: the kill table's header has no |---| line under it")
    table: dict[str, dict[str, LayerVerdict]] = {}
    for number, line in enumerate(lines[header + 2 :], start=header + 3):
        cells = _cells(line)
        if cells is None:
            break
        if len(cells) < len(COLUMNS):
            raise TableError(f"{path}, line {number}: {len(cells)} cells, not {len(COLUMNS)}")
        # The verdicts are counted from the end: a planted bug's text may hold a pipe.
        name = _unquoted(cells[0])
        layer_cells = cells[-len(COLUMNS) + 2 : -3]
        if not name:
            raise TableError(f"{path}, line {number}: no mutant name")
        if name in table:
            raise TableError(f"{path}, line {number}: {name} has a row already")
        verdicts: dict[str, LayerVerdict] = {}
        for layer, cell in zip(LAYERS, layer_cells, strict=True):
            verdict = _verdict(cell)
            if verdict is None:
                raise TableError(
                    f"{path}, line {number}: {name}: {LAYER_HEADINGS[layer]} {cell!r} is not a verdict "
                    "(`what caught it`, survived, timed out or not run)"
                )
            verdicts[layer] = verdict
        table[name] = verdicts
    if not table:
        raise TableError(f"{path}, line {header + 1}: the kill table has no rows")
    return table


#: A section of the table's file that other tools write (benchmarks/bench_time_to_bug.py): kept.
_KEPT_START: Final = "<!-- time to bug: "
_KEPT_END: Final = "<!-- time to bug: end -->"


def _kept_section(path: Path) -> str:
    """The time-to-bug section of the file at ``path``, markers included, to write back after the
    table (nothing if the file or the section is not there)."""
    try:
        page = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    start, end = page.find(_KEPT_START), page.find(_KEPT_END)
    if start < 0 or end < start:
        return ""
    return "\n" + page[start : end + len(_KEPT_END)] + "\n"


def _unquoted(cell: str) -> str:
    return cell.strip("`").strip()


def _compared(layer: str, verdict: LayerVerdict) -> tuple[str, str | None]:
    """What the exit status compares: the status, and for the fuzz the invariant that caught it.

    A pytest layer's first failing test is reported, not compared: it moves
    whenever a test is added ahead of it, and a reviewer needs to hear about
    verdicts.
    """
    return verdict.status, verdict.caught_by if layer == "fuzz" else None


def differences(
    results: Sequence[MutantResult], expected: Mapping[str, Mapping[str, LayerVerdict]], complete: bool
) -> list[str]:
    """One line per layer verdict that is not the one ``expected``, in the order of ``results``.

    A layer that did not run in this run, or is ``not run`` in the table, is not
    compared. With ``complete`` (every mutant of the catalog ran), a mutant the
    table has and the run did not is a difference too.
    """
    lines = []
    for result in results:
        was = expected.get(result.name)
        if was is None:
            verdicts = "; ".join(
                f"{layer} {v}" for layer, v in result.layers.items() if v.status != "not run"
            )
            lines.append(f"{result.name}: not in the table; this run: {verdicts}")
            continue
        for layer, now in result.layers.items():
            then = was.get(layer, NOT_RUN)
            if "not run" in (now.status, then.status):
                continue
            if _compared(layer, then) != _compared(layer, now):
                lines.append(f"{result.name}: {layer}: the table says {then}; this run: {now}")
    if complete:
        ran = {result.name for result in results}
        lines += [f"{name}: in the table, not in the catalog" for name in expected if name not in ran]
    return lines


def mutants_json(
    results: Sequence[MutantResult], layers: Sequence[str], table: Path | None, changed: Sequence[str] | None
) -> dict[str, Any]:
    """``semsim mutants --json``'s object, but for ``passed`` (docs/CLI.md lists its fields)."""
    suite, fuzz_kills = scores(results)

    def verdict(layer_verdict: LayerVerdict) -> dict[str, Any]:
        return {"status": layer_verdict.status, "caught_by": layer_verdict.caught_by}

    return {
        "layers": list(layers),
        "runs": CI_RUNS,
        "seed": CI_SEED,
        "killed_by_suite": suite,
        "killed_by_fuzz": fuzz_kills,
        "expected": None if table is None else str(table),
        "differences": None if changed is None else list(changed),
        "mutants": [
            {
                "name": result.name,
                "description": result.description,
                "killed": result.killed,
                "layers": {layer: verdict(result.layers[layer]) for layer in layers},
                "fuzz": None if result.fuzz is None else attrs.asdict(result.fuzz),
            }
            for result in results
        ],
    }


def _score_in_worker(name: str, layers: tuple[str, ...], cpu_budget_s: int, label: str) -> MutantResult:
    """One mutant's score in a worker process; progress as plain lines on stderr."""
    return score_mutant(
        mutant(name),
        layers,
        cpu_budget_s,
        on_run=progress_reporter(label, interactive=False),
        on_layer=_layer_reporter(label),
    )


def _layer_reporter(label: str) -> Callable[[str, LayerVerdict], None]:
    def report(layer: str, verdict: LayerVerdict) -> None:
        print(f"{label}  {layer}: {verdict}", file=sys.stderr, flush=True)

    return report


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it waited for (pytest layers, workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _parse_layers(text: str | None) -> tuple[str, ...]:
    from semsim.inputs.commands import UsageError

    if text is None:
        return LAYERS
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in LAYERS]
    if unknown or not names:
        raise UsageError(
            f"--layers: unknown layer {unknown[0]!r}; layers: {', '.join(LAYERS)}"
            if unknown
            else f"--layers names no layer (give some of {','.join(LAYERS)})"
        )
    return tuple(layer for layer in LAYERS if layer in names)


def cmd_mutants(args: argparse.Namespace) -> int:
    from semsim.inputs.commands import json_result

    with json_result(getattr(args, "json", False)) as out:
        status = _mutants(args, out)
    return status


def _mutants(args: argparse.Namespace, out_json: dict[str, Any] | None) -> int:
    from semsim.inputs.commands import EXIT_OK, EXIT_VIOLATION, UsageError, output_file, wall_clock

    names = list(dict.fromkeys(name.strip() for name in (args.only or "").split(",") if name.strip()))
    if args.only is not None and not names:
        raise UsageError("--only names no mutant (give A,B; leave it out to run them all)")
    try:
        chosen = [mutant(name) for name in names] if names else list(MUTANTS)
    except ValueError as error:
        raise UsageError(str(error)) from None
    layers = _parse_layers(getattr(args, "layers", None))
    workers: int = getattr(args, "workers", 1)
    cpu_budget_s: int = getattr(args, "cpu_budget", DEFAULT_CPU_BUDGET_S)
    if not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be from 1 to {MAX_WORKERS}, got {workers}")
    if not 1 <= cpu_budget_s <= MAX_CPU_BUDGET_S:
        raise UsageError(f"--cpu-budget must be from 1 to {MAX_CPU_BUDGET_S} seconds, got {cpu_budget_s}")
    out: Path | None = args.markdown
    if out is not None:
        output_file(out, "--markdown")
    # Read before any run, so a bad table fails at once and --markdown may overwrite it.
    named: Path | None = args.expected
    table = COMMITTED_TABLE if named is None else named
    expected: dict[str, dict[str, LayerVerdict]] | None = None
    if named is not None or table.exists():
        try:
            expected = read_table(table)
        except (InputError, TableError) as error:
            raise UsageError(f"expected table: {error}") from None
    if any(layer in PYTEST_LAYERS for layer in layers):
        missing = pytest_layers_missing()
        if missing is not None:  # a pytest that cannot start would look like a kill
            raise UsageError(f"{missing}; or leave those layers out (--layers scenarios,fuzz)")
    # Every pytest layer must pass on the clean code first: a layer that fails anyway
    # (a stale doc, a broken test) would "kill" every mutant and report nothing.
    for layer in layers:
        if layer not in PYTEST_LAYERS:
            continue
        # One baseline per selection the chosen mutants meet (a design's own state machine, say).
        designs: dict[tuple[str, ...], str] = {}
        for candidate in chosen:
            designs.setdefault(pytest_selection(layer, candidate.design), candidate.design)
        for selection, design in designs.items():
            shown = "" if selection == PYTEST_LAYERS[layer] else f" ({' '.join(selection)})"
            print(f"baseline: the {layer} layer without a mutant{shown}", file=sys.stderr, flush=True)
            clean = run_pytest_layer(None, layer, cpu_budget_s, design)
            if clean.status != "survived":
                raise UsageError(
                    f"the {layer} layer fails without a mutant ({clean}); fix it before scoring mutants"
                )
    interactive = sys.stderr.isatty() and workers == 1
    bar = Progress("mutants", len(chosen), "mutants", interactive=True) if interactive else None
    width = max(len(m.name) for m in chosen)
    labels = [f"[{index}/{len(chosen)}] {m.name:<{width}}" for index, m in enumerate(chosen, start=1)]
    started, cpu_started = wall_clock(), _cpu_seconds()

    def report(label: str, result: MutantResult) -> None:
        if bar is not None:
            bar.update(len(results))  # called once the result is in
        verdicts = "; ".join(f"{layer} {result.layers[layer]}" for layer in layers)
        fuzz = result.fuzz
        if fuzz is not None and fuzz.killed:
            verdicts += f" ({fuzz.variant}, {fuzz.runs_to_kill} runs, {fuzz.counterexample_steps} steps)"
        print(f"{label}  {'killed' if result.killed else 'SURVIVED'}: {verdicts}", flush=True)

    results: list[MutantResult] = []
    try:
        if workers == 1:
            for candidate, label in zip(chosen, labels, strict=True):
                if not interactive:
                    print(f"{label}  started", file=sys.stderr, flush=True)
                result = score_mutant(
                    candidate,
                    layers,
                    cpu_budget_s,
                    on_run=progress_reporter(label, interactive, bar),
                    on_layer=None if interactive else _layer_reporter(label),
                )
                results.append(result)
                report(label, result)
        else:
            # Each mutant in a fresh process (spawned: no Trio or Hypothesis state is inherited), so the
            # verdicts are those of a serial run; they are printed and tabled in catalog order.
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
                futures = [
                    pool.submit(_score_in_worker, m.name, layers, cpu_budget_s, label)
                    for m, label in zip(chosen, labels, strict=True)
                ]
                for future, label in zip(futures, labels, strict=True):
                    result = future.result()
                    results.append(result)
                    report(label, result)
    finally:
        if bar is not None:
            bar.close()
    suite, fuzz_kills = scores(results)
    print(
        f"\n{suite} of {len(results)} mutants killed by the suite, {fuzz_kills} by the fuzz alone "
        f"(layers: {', '.join(layers)}) in {wall_clock() - started:.0f} s, "
        f"{_cpu_seconds() - cpu_started:.0f} s of CPU time"
    )
    if out is not None:
        write_text_whole(out, markdown(results, CI_RUNS, CI_SEED) + _kept_section(out))
        print(f"table written to {written_to(out)}")
    too_long = [
        r.name
        for r in results
        if r.fuzz is not None and (r.fuzz.counterexample_steps or 0) > MAX_COUNTEREXAMPLE_STEPS
    ]
    if too_long:
        print(f"counterexamples longer than {MAX_COUNTEREXAMPLE_STEPS} steps: {', '.join(too_long)}")
    if expected is None:
        print(f"no expected table at {table}: exit 0 only if every mutant is killed", flush=True)
        changed = None
        passed = suite == len(results)
    else:
        changed = differences(results, expected, complete=not names)
        passed = not changed
        if not changed:
            print(f"every verdict as in {table}", flush=True)
        else:
            print(f"{len(changed)} {'difference' if len(changed) == 1 else 'differences'} from {table}:")
            for line in changed:
                print(f"  {line}", flush=True)
    if out_json is not None:
        out_json.update(mutants_json(results, layers, None if expected is None else table, changed))
        out_json["passed"] = passed
    if passed:
        return EXIT_OK
    return EXIT_VIOLATION
