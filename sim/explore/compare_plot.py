"""The designs' trade-offs as one figure: a panel per figure, a group of bars per fault plan.

Each panel answers one question (how far over the cap, how much work ran
twice, how much capacity sat held by nothing, how long until whole again,
how long items waited), with one bar per design in every fault plan, so the
eye reads across a row of panels what each design pays under each fault.
Values are the means over the seeds (the peak's maximum), as the table has
them; a bar that is missing is a figure no run had (a design that never
recovered within its runs is marked with a cross). A variant of a design
(``DESIGN@VARIANT``) is drawn in its design's colour with a hatch of its
own, so two variants of one design are told apart as well as the designs are.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from semsim.explore.compare import FIGURES, Summary
from semsim.inputs.files import write_whole

#: One colour per design, in DESIGNS order (colour-blind-safe: Okabe and Ito).
COLOURS: Final = {"semaphore": "#0072B2", "gate": "#E69F00", "leased-worker": "#009E73"}
#: A variant's hatch: the first variant of a design in the comparison takes the first, the next
#: the next; past the last, the patterns come round again drawn denser ("//" then "////").
HATCHES: Final = ("//", "\\\\", "xx", "..", "++", "oo", "--", "**")
#: The panels, by figure name (FIGURES' headings label them).
PANELS: Final = (
    "peak_over_admission",
    "over_cap_permit_s",
    "duplicate_executions",
    "leaked_cap_s",
    "recovery_ms",
    "queue_wait_p99_ms",
)


def bar_styles(designs: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Each row's ``(colour, hatch)``: a design in its colour, plain; its variants in the same
    colour, each with a hatch no other variant of that design has, in the order they come."""
    styles: dict[str, tuple[str, str | None]] = {}
    variants_of: dict[str, int] = {}
    for design in designs:
        base, at, _ = design.partition("@")
        colour = COLOURS.get(base, "#999999")
        if not at:
            styles[design] = (colour, None)
            continue
        index = variants_of.get(base, 0)
        variants_of[base] = index + 1
        styles[design] = (colour, HATCHES[index % len(HATCHES)] * (1 + index // len(HATCHES)))
    return styles


def plot_comparison(summaries: Sequence[Summary], path: Path) -> None:
    """Draw ``summaries`` and write the image to ``path`` (whole or not at all)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    headings = dict(FIGURES)
    designs = list(dict.fromkeys(summary.design for summary in summaries))
    plans = list(dict.fromkeys(summary.plan for summary in summaries))
    by = {(summary.design, summary.plan): summary for summary in summaries}
    fig = Figure(figsize=(14, 8), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3, squeeze=False)
    width = 0.8 / max(1, len(designs))
    styles = bar_styles(designs)
    for ax, name in zip(axes.flat, PANELS, strict=True):
        for index, design in enumerate(designs):
            xs, heights, never = [], [], []
            for position, plan in enumerate(plans):
                summary = by.get((design, plan))
                x = position - 0.4 + width * (index + 0.5)
                value = None if summary is None else summary.figures.get(name)
                if value is not None:
                    xs.append(x)
                    heights.append(value)
                if name == "recovery_ms" and summary is not None and summary.not_recovered:
                    never.append(x)
            colour, hatch = styles[design]
            ax.bar(
                xs,
                heights,
                width,
                color=colour,
                hatch=hatch,
                edgecolor="white" if hatch else None,
                label=design,
            )
            if never:
                ax.plot(never, [0] * len(never), "x", color="#c0392b", markersize=9)
        ax.set_ylim(bottom=0)  # every figure is a count, a duration or a rate: none is negative
        ax.set_title(headings[name])
        ax.set_xticks(range(len(plans)), plans, rotation=30, ha="right")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=max(1, len(designs)))
    fig.suptitle("What each design trades, per fault plan (means over seeds; peak: the maximum)")
    image = io.BytesIO()  # written whole or not at all (semsim.report.plot.save_figure's way)
    fig.savefig(image, dpi=fig.dpi, format=path.suffix.lstrip(".").lower() or None)
    write_whole(path, image.getvalue())
