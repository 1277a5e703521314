"""The designs' trade-offs as one figure: a panel per figure, a group of bars per fault plan.

Each panel answers one question (how far over the cap, how much work ran
twice, how much capacity sat held by nothing, how long until whole again,
how long items waited), with one bar per design in every fault plan, so the
eye reads across a row of panels what each design pays under each fault.
Values are the means over the seeds (the peak's maximum), as the table has
them; a bar that is missing is a figure no run had (a design that never
recovered within its runs is marked with a cross).
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
#: The panels, by figure name (FIGURES' headings label them).
PANELS: Final = (
    "peak_over_admission",
    "over_cap_permit_s",
    "duplicate_executions",
    "leaked_cap_s",
    "recovery_ms",
    "queue_wait_p99_ms",
)


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
            # A variant (DESIGN@VARIANT) takes its design's colour, hatched.
            base, at, _ = design.partition("@")
            ax.bar(
                xs,
                heights,
                width,
                color=COLOURS.get(base, "#999999"),
                hatch="//" if at else None,
                edgecolor="white" if at else None,
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
