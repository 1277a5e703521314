"""``semsim list`` and ``semsim run NAME`` (docs/CLI.md).

``run`` prints a short report a person can read in a few seconds: which
story, which seed, a few numbers saying what happened, every expectation
with PASS or FAIL, and the invariants. On failure it ends with the seed and
a one-line command that reproduces the run with its trace, so a failure
seen once can be studied at leisure.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from semsim.check.builtin import BUILTIN
from semsim.check.design_checkers import check_design_checkers
from semsim.cli.loading import load_invariants, load_variant
from semsim.harness.designs import DesignRun
from semsim.harness.invariants import installed as installed_invariants
from semsim.harness.run import WorldRun
from semsim.harness.variants import builtin as builtin_variants
from semsim.harness.variants import installed as installed_variants
from semsim.inputs.commands import (
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    distinct_files,
    json_result,
    output_file,
)
from semsim.inputs.files import written_to
from semsim.inputs.progress import Progress
from semsim.inputs.references import importable_from_working_directory
from semsim.scenarios import Scenario, ScenarioResult, run_scenario
from semsim.scenarios.base import summary
from semsim.scenarios.registry import ScenarioLookupError, every_scenario, find
from semsim.world.variant import REFERENCE, Variant


def cmd_list(args: argparse.Namespace) -> int:
    """One line per scenario, in the registry's order: the name, padded, then its description.

    ``--variants`` and ``--invariants`` list what ``--variant`` and ``--invariant`` find by
    name instead, loading each: one an installed package registers but cannot load is a
    usage error naming it. ``--json``: ``{"listing": ..., "items": [{"name", "description", ...}]}``.
    """
    with json_result(args.json) as out:
        listing, items = _listed(args)
        width = max(len(item["name"]) for item in items)
        for item in items:
            print(f"{item['name']:<{width}}  {item['description']}".rstrip())
        if out is not None:
            out.update(listing=listing, items=items)
    return EXIT_OK


def _listed(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]]]:
    """What ``semsim list`` lists, and each item's fields (docs/CLI.md names them)."""
    if args.variants:
        items = [_variant_item(name, variant) for name, variant in builtin_variants().items()]
        for name in installed_variants():  # by the name it is registered under, which finds it
            items.append(_variant_item(name, load_variant(name, "semsim list --variants")))
        return "variants", items
    if args.invariants:
        items = [
            {
                "name": invariant.name,
                "description": f"{invariant.promise} ({invariant.kind})",
                "kind": invariant.kind,
                "source": "semsim",
            }
            for invariant in BUILTIN
        ]
        for name in installed_invariants():
            (checker,) = load_invariants([name], "semsim list --invariants")
            described = checker.description or checker.name
            items.append(
                {
                    "name": name,
                    "description": f"{described} ({checker.kind}; {checker.__module__})",
                    "kind": checker.kind,
                    "source": checker.__module__,
                }
            )
        return "invariants", items
    try:
        scenarios = every_scenario()
    except ScenarioLookupError as error:
        raise UsageError(str(error)) from None
    return "scenarios", [{"name": name, "description": s.description} for name, s in scenarios.items()]


def _variant_item(name: str, variant: Variant) -> dict[str, Any]:
    return {"name": name, "description": variant.description, "judges": list(variant.judges())}


def lookup(name: str) -> Scenario:
    """The scenario ``name`` names (registered, or ``module:function``), or a usage error saying why not."""
    importable_from_working_directory(name)
    try:
        return find(name)
    except ScenarioLookupError as error:
        raise UsageError(str(error)) from None


def reproduce_command(
    name: str, seed: int, variant: str | None = None, invariants: Sequence[str] = ()
) -> str:
    on = "" if variant is None else f" --variant {shlex.quote(variant)}"
    on += "".join(f" --invariant {shlex.quote(reference)}" for reference in invariants)
    return f"semsim run {shlex.quote(name)} --seed {seed}{on} --trace out.jsonl"


def cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario; exit 0 if every expectation and invariant held, else 1 (``--json``: the
    result as one object on standard output, the report on standard error)."""
    with json_result(args.json) as result:
        status = _run(args, result)
    return status


def _run(args: argparse.Namespace, out: dict[str, Any] | None) -> int:
    scenario = lookup(args.name)
    # A reference is how the scenario is found again; a registered name is its own.
    again = scenario.name if scenario.name == args.name else args.name
    trace_path: Path | None = args.trace
    plot_path: Path | None = args.plot
    # Fail on an unwritable output before the run, not after it.
    if trace_path is not None:
        output_file(trace_path, "--trace")
    if plot_path is not None:
        output_file(plot_path, "--plot", image=True)
    elif args.per_group:
        raise UsageError("--per-group adds panels to the plot: it goes with --plot F.png")
    outputs = (("--trace", trace_path), ("--plot", plot_path))
    distinct_files([], [(option, path) for option, path in outputs if path is not None])

    design = scenario.config.design.name
    if design != "semaphore":
        given = [
            option
            for option, value in (
                ("--full-checks", args.full_checks),
                ("--per-group", args.per_group),
            )
            if value
        ]
        if given:
            raise UsageError(
                f"{' and '.join(given)} concern the semaphore's holder; scenario {scenario.name} runs "
                f"the {design} design, judged by its own promises and plotted without groups "
                "(docs/DESIGNS.md)"
            )
    variant = REFERENCE if args.variant is None else load_variant(args.variant, "--variant")
    try:
        variant.check_design(design)
    except ValueError as error:
        raise UsageError(f"--variant: {error}") from None
    checkers = load_invariants(args.invariant or (), "--invariant")
    if design != "semaphore":
        try:
            check_design_checkers(checkers, design)
        except ValueError as error:
            raise UsageError(f"--invariant: {error}") from None
    duration_s = scenario.config.duration_ms / 1000
    with Progress(f"simulating {scenario.name}", duration_s, "simulated s") as progress:
        result = run_scenario(
            scenario,
            args.seed,
            full_checks=bool(args.full_checks),
            variant=variant,
            checkers=checkers,
            progress=lambda now_ms: progress.update(
                now_ms / 1000, "settling" if now_ms > scenario.config.duration_ms else ""
            ),
        )
    if design != "semaphore":
        named = "" if variant == REFERENCE else f", variant {args.variant or variant.name}"
        print(f"design {design}{named}, judged by: {', '.join(result.run.judges())}")
    elif variant != REFERENCE or checkers:
        print(f"variant {args.variant or variant.name}, judged by: {', '.join(result.run.judges())}")
    print_report(result)

    if trace_path is not None:
        result.run.trace.write(trace_path)
        print(f"trace written to {written_to(trace_path)}")
    if plot_path is not None:
        from semsim.report.plot import plot_trace  # matplotlib is slow to import: only when asked

        trace = result.run.trace
        plot_trace(
            trace.header,
            list(trace.events()),
            plot_path,
            title=scenario.name,  # the plot adds the seed from the trace header
            per_group=bool(args.per_group),
        )
        print(f"plot written to {written_to(plot_path)}")

    command = reproduce_command(again, result.seed, args.variant, args.invariant or ())
    if out is not None:
        out.update(_run_json(result, variant, again, command, trace_path, plot_path))
    if result.passed:
        print("\nevery expectation and invariant held")
        return EXIT_OK
    print(file=sys.stderr)
    for failure in result.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    if result.invariant_failure is None and result.seed != scenario.seed:
        # The protocol held; the story did not happen as told (its faults drew other times).
        print(
            f"no invariant broke: the expectations tell this scenario's story under its own seed "
            f"({scenario.seed}), and under seed {result.seed} the run went another way",
            file=sys.stderr,
        )
    print(f"seed {result.seed}; reproduce with: {command}", file=sys.stderr)
    return EXIT_VIOLATION


def _run_json(
    result: ScenarioResult,
    variant: Variant,
    name: str,
    command: str,
    trace: Path | None,
    plot: Path | None,
) -> dict[str, Any]:
    """``semsim run --json``'s object (docs/CLI.md lists its fields).

    ``variant`` is the one the run ran: a gate's or leased worker's run has no world to ask,
    and its variant (a ledger, a store) must be named as the semaphore's is.
    """
    run, world = result.run, result.world
    figures = run.trade_offs if isinstance(run, DesignRun) else None
    return {
        "scenario": name,
        "seed": result.seed,
        "passed": result.passed,
        "design": result.scenario.config.design.name,
        "variant": variant.name,
        "judges": list(run.judges()),
        "expectations": [
            {"expectation": outcome.expectation, "held": outcome.held, "observed": outcome.observed}
            for outcome in result.expectations
        ],
        "outcome": run.result.outcome,
        "invariant": run.result.invariant,
        "finding": run.result.finding,
        "detail": run.result.detail,
        "end_ms": run.result.end_ms,
        "failures": list(result.failures),
        "documented": {} if world is None else dict(sorted(_documented(world).items())),
        "tolerated": dict(sorted(_tolerated_in(run, world).items())),
        "trade_offs": None if figures is None else figures.to_dict(),
        "trace": None if trace is None else str(trace),
        "plot": None if plot is None else str(plot),
        "reproduce": command,
    }


def print_report(result: ScenarioResult) -> None:
    scenario, run = result.scenario, result.run
    print(f"scenario {scenario.name}, seed {result.seed}")
    print(f"  {scenario.description}")
    # The promise is a docstring: its ``literal`` markup reads as `literal` on a terminal.
    reference = scenario.promise.split("\n\n")[0].replace("``", "`")
    if reference:
        print(textwrap.indent(textwrap.fill(" ".join(reference.split()), width=96), "  | "))
    numbers = summary(run)
    shown = ", ".join(f"{label} {value}" for label, value in numbers.items() if value or label == "rounds")
    print(f"\nwhat happened in {run.result.end_ms / 1000:g} simulated seconds: {shown}")
    print("\nexpectations:")
    for outcome in result.expectations:
        # What the run showed matters when an expectation failed; a pass needs no evidence.
        print(f"  PASS  {outcome.expectation}" if outcome.held else f"  FAIL  {outcome.line()}")
    if not result.expectations:
        print("  (the check reported no unmet expectation)")
    print("\ninvariants:")
    if result.invariant_failure is None:
        print("  PASS  every invariant held")
    else:
        print(f"  FAIL  {result.invariant_failure}")
    world = result.world
    if world is not None:
        documented = _documented(world)
        if documented:
            counted = ", ".join(f"{name} x{count}" for name, count in sorted(documented.items()))
            print(f"  documented behaviour counted, not a violation: {counted}")
        tolerated = world.monitor.violations
        if tolerated:
            names = ", ".join(sorted({f"{v.name} ({v.finding})" for v in tolerated}))
            print(f"  known findings tolerated by this scenario: {names}")
    if world is None and isinstance(run, DesignRun) and run.findings:
        counted = ", ".join(f"{name} x{count}" for name, count in sorted(run.findings.items()))
        print(f"  known findings tolerated by this scenario: {counted}")
    if isinstance(run, DesignRun) and run.trade_offs is not None:
        print("\nwhat it traded, at the external API:")
        for field, value in run.trade_offs.to_dict().items():
            print(f"  {field.replace('_', ' ')}: {value}")


def _documented(world: WorldRun) -> Counter[str]:
    """Documented behaviour the run showed. Counter addition sums a name counted in both and drops
    the names counted zero times: a report is for behaviour that happened."""
    return world.monitor.leaks + world.monitor.documented


def _tolerated_in(run: WorldRun | DesignRun, world: WorldRun | None) -> Counter[str]:
    """The known findings a run tolerated, by name: the semaphore's monitor's, or the design's judges'."""
    if world is not None:
        return _tolerated(world)
    return run.findings if isinstance(run, DesignRun) else Counter()


def _tolerated(world: WorldRun) -> Counter[str]:
    return Counter(v.finding for v in world.monitor.violations if v.finding)
