"""The designs compared: every design × every fault plan × every seed, and what each trades.

``compare(config, designs, plans, seeds)`` runs the matrix with
:func:`semsim.harness.designs.run_design` and returns one :class:`Cell` per
run, in matrix order (design, then plan, then seed) whatever runs them: in
this process, over local processes or on a Dask cluster (an ``Executor``).
A run is a deterministic function of its config, plan and seed, so the
cells are the same however many workers computed them. :func:`summarise`
folds the seeds of each (design, plan) into a :class:`Summary`.

The fault plans are named by what goes wrong, and each design meets its own
form of it (:func:`plan_for`), since the designs do not share objects:

- ``calm``: nothing goes wrong;
- ``lossy``: 5% of requests and of replies lost, up to 50 ms more delay,
  10% of messages held back up to 200 ms, for every design;
- ``coordinator-lost``: every holder, or every gate, evicted each minute
  (the gate loses its ledger); the leased workers' store unreachable for
  10 s each minute (a database is not evicted);
- ``workers-die``: each client, caller or worker evicted once, 45 s apart;
- ``worker-stall``: each caller or worker paused for 40 s, 60 s apart; each
  semaphore client cut off for as long (its clients have no pause);
- ``api-slow``: 30% of the calls to the API take 4 times longer.

A row of the matrix is a design, or a variant of one, ``DESIGN@VARIANT``
(:class:`Contender`): for the semaphore, any holder variant ``semsim run
--variant`` takes (``every-fix``, ``fix/NAME``, ``mutant/NAME``, a registered
name or the user's ``module:attribute``); for the gate and the leased
worker, one of their fixes (``semsim.world.design.DESIGN_FIXES``),
``every-fix``, or a variant of their own part, a gate's ``ledger`` or the
leased workers' ``store`` (a registered name or ``module:attribute``:
:mod:`semsim.world.variant`). So a team compares its own change with the
reference and the other designs under the same faults. ``DESIGN@reference``
is ``DESIGN``, and two rows that run the same (``gate@every-fix`` and
``gate@calls-end-with-their-fetch``, while that is the gate's only fix) are
refused: a row named twice would only run its cells twice.

Every run tolerates the known findings (docs/FINDINGS.md) its variant does
not fix: a comparison measures the design as it is, and says which
findings its runs met; a finding a fix corrects is a violation again.

The user's own invariants (``invariants``: references as ``semsim run
--invariant`` takes them) judge every cell beside semsim's, each row's
design as :func:`semsim.harness.designs.run_design` lets it: the semaphore
any checker, the gate and the leased worker one that hears only what they
share with it (the API, the end of the run). One that a row's design never
calls is refused before anything runs, naming the row, rather than left
out of that row's verdicts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, as_completed
from typing import Any, Final

import attrs

from semsim.check.checker import Checker
from semsim.check.design_checkers import check_design_checkers
from semsim.check.trade_offs import TradeOffs
from semsim.explore.fuzz import design_tolerated_for, tolerated_for
from semsim.harness.designs import run_design
from semsim.harness.invariants import InvariantLookupError, find_invariants
from semsim.harness.run import HolderSpec, WorldConfig, check_plan
from semsim.harness.variants import VariantLookupError, find_variant
from semsim.world.design import DESIGN_FIXES, DESIGNS, DesignName, DesignSpec
from semsim.world.faults import Eviction, FaultPlan, Pause, Window
from semsim.world.lease_store_object import NAME as STORE
from semsim.world.operations import OperationsSpec
from semsim.world.variant import REFERENCE, Variant
from semsim.world.workload import Workload

#: The fault plans, in the order tables show them (see the module docstring).
PLANS: Final = ("calm", "lossy", "coordinator-lost", "workers-die", "worker-stall", "api-slow")
#: The figures a comparison reports, in table order, with their headings.
FIGURES: Final = (
    ("peak_over_admission", "peak over cap"),
    ("over_cap_permit_s", "permit-s over cap"),
    ("duplicate_executions", "duplicate runs"),
    ("double_effects", "double effects"),
    ("leaked_cap_s", "leaked cap-s"),
    ("recovery_ms", "recovery ms"),
    ("throughput_per_min", "items/min"),
    ("queue_wait_p50_ms", "wait p50 ms"),
    ("queue_wait_p99_ms", "wait p99 ms"),
)
#: The most cells one comparison may run (a limit on everything).
MAX_CELLS: Final = 100_000
#: Between a design and its variant in a row's name: ``semaphore@every-fix``.
AT: Final = "@"
#: The variant of the gate or the leased worker with every fix of its design on.
EVERY_FIX: Final = "every-fix"


@attrs.frozen
class Contender:
    """A row of the comparison: a design, and the variant of it that runs (None: as its seed has it)."""

    design: DesignName
    variant: str | None = None

    @property
    def label(self) -> str:
        """How tables, the plot and the results database name it: ``DESIGN`` or ``DESIGN@VARIANT``."""
        return self.design if self.variant is None else f"{self.design}{AT}{self.variant}"

    def fixes(self) -> tuple[str, ...]:
        """The gate's or the leased worker's fixes this variant turns on (none for the semaphore,
        whose variant is a holder variant with fixes of its own, or for a loaded variant)."""
        if self.variant is None or self.design == "semaphore":
            return ()
        if self.variant == EVERY_FIX:
            return DESIGN_FIXES
        return (self.variant,) if self.variant in DESIGN_FIXES else ()

    def loads(self) -> bool:
        """Whether the variant is one :func:`find_variant` loads (not a design's fix)."""
        return self.variant is not None and (self.design == "semaphore" or not self.fixes())

    def world(self, config: WorldConfig) -> tuple[WorldConfig, Variant, frozenset[str]]:
        """``config`` running this row, the holder variant and the findings tolerated.

        A variant that cannot be loaded is :class:`VariantLookupError`; one that changes what the
        design does not have, ``ValueError``.
        """
        variant = find_variant(self.variant) if self.loads() and self.variant is not None else REFERENCE
        variant.check_design(self.design)
        if self.design == "semaphore":
            world = attrs.evolve(config, design=DesignSpec())
            return world, variant, tolerated_for(variant.with_fixes(config.holder.fixes))
        fixes = self.fixes()
        spec = DesignSpec(name=self.design)
        if self.design == "gate":
            spec = attrs.evolve(spec, gate=attrs.evolve(spec.gate, fixes=fixes))
        else:
            spec = attrs.evolve(spec, leased=attrs.evolve(spec.leased, fixes=fixes))
        return attrs.evolve(config, design=spec), variant, design_tolerated_for(self.design, fixes)


def contender(text: str) -> Contender:
    """The row ``DESIGN`` or ``DESIGN@VARIANT`` names (module docstring); ValueError saying why not.

    A variant is only named here; :meth:`Contender.world` loads it.
    """
    design, at, variant = text.partition(AT)
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r} in {text!r}: the designs are {', '.join(DESIGNS)}")
    if not at:
        return Contender(design)
    if not variant.strip() or variant != variant.strip():
        raise ValueError(f"{text!r}: name a variant after {AT!r}, without spaces around it")
    if variant == REFERENCE.name:  # every design's reference is the design as its seed has it
        return Contender(design)
    return Contender(design, variant)


def default_config() -> WorldConfig:
    """The world a comparison runs unless given one: seed 003's cap (6) over four clients.

    Ten minutes of steady arrivals, each item 2-20 s of work at the API, about 4.4 calls wanted at
    once on average against the cap of 6; the API deduplicates by item (seed 000's example).
    """
    return WorldConfig(
        holder=HolderSpec(limit=6),
        operations=OperationsSpec(),
        duration_ms=600_000,
        workload=Workload(clients=4, items_per_minute=6.0, until_ms=600_000, paced_by_intake=False),
    )


def plan_for(plan: str, design: DesignName, config: WorldConfig) -> FaultPlan:
    """The fault plan ``plan`` as design ``design`` meets it in ``config`` (module docstring)."""
    duration = config.duration_ms
    clients = config.workload.client_names()
    if plan == "calm":
        return FaultPlan()
    if plan == "lossy":
        return FaultPlan(request_loss=0.05, reply_loss=0.05, delay_ms=50, reorder=0.1, reorder_ms=200)
    if plan == "coordinator-lost":
        if design == "leased-worker":
            windows = tuple(
                Window(STORE, t, min(t + 10_000, duration)) for t in range(60_000, duration - 1, 60_000)
            )
            return FaultPlan(partitions=windows)
        return FaultPlan(evict_holders_every_ms=60_000, faults_until_ms=duration)
    if plan == "workers-die":
        times = [60_000 + 45_000 * index for index in range(len(clients))]
        return FaultPlan(
            evictions=tuple(Eviction(c, t) for c, t in zip(clients, times, strict=True) if t < duration)
        )
    if plan == "worker-stall":
        spans = [
            (c, 90_000 + 60_000 * i, min(130_000 + 60_000 * i, duration))
            for i, c in enumerate(clients)
            if 90_000 + 60_000 * i < duration
        ]
        if design == "semaphore":
            return FaultPlan(partitions=tuple(Window(c, start, end) for c, start, end in spans))
        return FaultPlan(pauses=tuple(Pause(c, start, end) for c, start, end in spans))
    if plan == "api-slow":
        return FaultPlan(api_slow=0.3, api_slow_factor=4)
    raise ValueError(f"unknown plan {plan!r}: the plans are {', '.join(PLANS)}")


@attrs.frozen
class Cell:
    """One run of the matrix: what it ran, its verdict, its figures (None unless it completed)."""

    #: The row: the design, or ``DESIGN@VARIANT`` (:attr:`Contender.label`).
    design: str
    plan: str
    seed: int
    outcome: str
    invariant: str | None
    detail: str
    #: The known findings (docs/FINDINGS.md) the run met and tolerated, sorted.
    findings: tuple[str, ...]
    trade_offs: TradeOffs | None
    cpu_s: float

    def to_dict(self) -> dict[str, Any]:
        recorded = attrs.asdict(self, recurse=False)
        recorded["findings"] = list(self.findings)
        recorded["trade_offs"] = None if self.trade_offs is None else self.trade_offs.to_dict()
        recorded["cpu_s"] = round(self.cpu_s, 3)
        return recorded

    @property
    def judged(self) -> bool:
        """Ran to its end with every invariant judged and holding."""
        return self.outcome == "completed" and self.trade_offs is not None


def cell_of(recorded: dict[str, Any]) -> Cell:
    """A cell back from ``Cell.to_dict()`` (as the results database keeps it)."""
    figures = recorded["trade_offs"]
    return Cell(
        design=recorded["design"],
        plan=recorded["plan"],
        seed=recorded["seed"],
        outcome=recorded["outcome"],
        invariant=recorded["invariant"],
        detail=recorded["detail"],
        findings=tuple(recorded["findings"]),
        trade_offs=None if figures is None else TradeOffs(**figures),
        cpu_s=recorded["cpu_s"],
    )


def run_cell(
    config: dict[str, Any], design: str, plan: str, seed: int, invariants: tuple[str, ...] = ()
) -> Cell:
    """One cell, from the config as recorded, the row's label and the user's invariants by their
    references (what a worker process is sent)."""
    started = time.process_time()
    world, variant, tolerated = contender(design).world(WorldConfig.from_dict(config))
    run = run_design(
        world,
        plan_for(plan, world.design.name, world),
        seed,
        tolerated=tolerated,
        variant=variant,
        checkers=find_invariants(invariants),
    )
    findings = sorted({str(e["finding"]) for e in run.trace.of_kind("violation") if e.get("finding")})
    result = run.result
    return Cell(
        design=design,
        plan=plan,
        seed=seed,
        outcome=result.outcome,
        invariant=result.invariant,
        detail=result.detail,
        findings=tuple(findings),
        trade_offs=run.trade_offs,
        cpu_s=time.process_time() - started,
    )


def matrix(designs: Sequence[str], plans: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, str, int]]:
    """The cells in matrix order: design (or ``DESIGN@VARIANT``), then plan, then seed."""
    return [(design, plan, seed) for design in designs for plan in plans for seed in seeds]


def check_matrix(
    config: WorldConfig,
    designs: Sequence[str],
    plans: Sequence[str],
    seeds: Sequence[int],
    invariants: Sequence[str] = (),
) -> None:
    """ValueError naming what is wrong, before anything runs: unknown names, a variant that cannot
    be loaded, a row named twice or two rows that run the same, an empty or oversized matrix, a
    config the semaphore cannot be measured in, a plan that does not fit the config, an invariant
    that cannot be loaded or that a row's design never calls."""
    try:
        checkers = find_invariants(invariants)
    except InvariantLookupError as error:
        raise ValueError(str(error)) from None
    rows = [contender(design) for design in designs]
    labels = [row.label for row in rows]
    if len(set(labels)) != len(labels):
        twice = next(label for label in labels if labels.count(label) > 1)
        raise ValueError(f"{twice!r} is named twice")
    worlds = []
    runs: list[tuple[Contender, WorldConfig, tuple[object, ...]]] = []
    for row in rows:
        try:
            world, variant, _ = row.world(config)
        except (VariantLookupError, ValueError) as error:
            raise ValueError(f"{row.label}: {error}") from None
        same = next((earlier for earlier, w, v in runs if (w, v) == (world, _runs_as(variant))), None)
        if same is not None:
            raise ValueError(
                f"{same.label!r} and {row.label!r} run the same: the same design, fixes and variant "
                "(name one: its cells would run twice)"
            )
        runs.append((row, world, _runs_as(variant)))
        worlds.append(world)
        _check_heard(checkers, row)
    for plan in plans:
        if plan not in PLANS:
            raise ValueError(f"unknown plan {plan!r}: the plans are {', '.join(PLANS)}")
    cells = len(designs) * len(plans) * len(seeds)
    if not cells:
        raise ValueError("nothing to compare: name at least one design, one plan and one seed")
    if cells > MAX_CELLS:
        raise ValueError(f"{cells:,} runs is more than a comparison may ask for ({MAX_CELLS:,})")
    if any(row.design == "semaphore" for row in rows) and config.operations is None:
        raise ValueError("the semaphore is measured at the external API: the config needs operations")
    for row, world in zip(rows, worlds, strict=True):
        for plan in plans:
            faults = plan_for(plan, world.design.name, world)
            try:  # the rules run_design applies
                check_plan(world, faults)
            except ValueError as error:
                raise ValueError(f"plan {plan!r} for design {row.label!r}: {error}") from None


def _check_heard(checkers: Sequence[type[Checker]], row: Contender) -> None:
    """ValueError unless ``row``'s design calls what each of the user's ``checkers`` hears."""
    if row.design == "semaphore":
        return
    try:
        check_design_checkers(checkers, row.design)
    except ValueError as error:
        raise ValueError(
            f"{row.label}: {error}; leave the row out (--designs) or the invariant (--invariant)"
        ) from None


def _runs_as(variant: Variant) -> tuple[object, ...]:
    """What of ``variant`` a run depends on: all but the names it goes by, which change nothing
    that runs or judges."""
    return tuple(
        getattr(variant, field.name)
        for field in attrs.fields(Variant)
        if field.name not in ("name", "description")
    )


def compare(
    config: WorldConfig,
    designs: Sequence[str],
    plans: Sequence[str],
    seeds: Sequence[int],
    executor: Executor | None = None,
    on_cell: Callable[[Cell], None] | None = None,
    invariants: Sequence[str] = (),
) -> list[Cell]:
    """Run the matrix (in this process without an ``executor``), each cell judged by the user's
    ``invariants`` too (their references); ``on_cell`` hears each cell as it comes back, the
    result is in matrix order."""
    check_matrix(config, designs, plans, seeds, invariants)
    recorded = config.to_dict()
    jobs = matrix(designs, plans, seeds)
    references = tuple(invariants)
    if executor is None:
        cells = []
        for job in jobs:
            cell = run_cell(recorded, *job, references)
            if on_cell is not None:
                on_cell(cell)
            cells.append(cell)
        return cells
    futures: list[Future[Cell]] = [executor.submit(run_cell, recorded, *job, references) for job in jobs]
    for future in as_completed(futures):
        if on_cell is not None:
            on_cell(future.result())
    return [future.result() for future in futures]


@attrs.frozen
class Summary:
    """One (design, plan) over its seeds: how many runs were judged, and each figure's mean (the
    peak's maximum; recovery over the runs that recovered, and how many did not)."""

    design: str
    plan: str
    runs: int
    judged: int
    findings: tuple[str, ...]
    figures: dict[str, float | None]
    not_recovered: int

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self, recurse=False), "findings": list(self.findings)}


def summarise(cells: Sequence[Cell]) -> list[Summary]:
    """Per (design, plan), in the cells' order."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.design, cell.plan), []).append(cell)
    summaries = []
    for (design, plan), group in groups.items():
        measured = [cell.trade_offs for cell in group if cell.judged and cell.trade_offs is not None]
        figures: dict[str, float | None] = {}
        for name, _ in FIGURES:
            values = [getattr(t, name) for t in measured if getattr(t, name) is not None]
            if not values:
                figures[name] = None
            elif name == "peak_over_admission":
                figures[name] = float(max(values))
            else:
                figures[name] = round(statistics.fmean(values), 3)
        summaries.append(
            Summary(
                design=design,
                plan=plan,
                runs=len(group),
                judged=len(measured),
                findings=tuple(sorted({f for cell in group for f in cell.findings})),
                figures=figures,
                not_recovered=sum(1 for t in measured if t.recovery_ms is None),
            )
        )
    return summaries


def markdown(summaries: Sequence[Summary]) -> str:
    """The summary as a markdown table: a row per (design, plan)."""
    head = ["design", "plan", "runs judged", *(heading for _, heading in FIGURES), "findings met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for summary in summaries:
        shown = [_shown(summary.figures[name]) for name, _ in FIGURES]
        if summary.not_recovered:
            shown[[name for name, _ in FIGURES].index("recovery_ms")] += f" ({summary.not_recovered} never)"
        row = [summary.design, summary.plan, f"{summary.judged}/{summary.runs}", *shown]
        row.append(", ".join(summary.findings) or "none")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _shown(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"
