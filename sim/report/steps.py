"""Step series and marks: what every semsim plot draws, the holder's (:mod:`semsim.report.plot`)
and the other designs' (:mod:`semsim.report.design_plot`).

A series is a tuple of ``(t_ms, value)`` points, each value holding until the
next point; a mark is one instant, drawn as a tick in a plot's strip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

if TYPE_CHECKING:  # matplotlib is slow to import: only when drawing
    from matplotlib.figure import Figure

#: A step series: ``(t_ms, value)`` points; each value holds until the next point.
Steps = tuple[tuple[int, int], ...]


class PlotError(ValueError):
    """A trace parses but cannot be plotted (a field the plot needs is missing or malformed)."""


@attrs.frozen
class Mark:
    """Something that happened at one instant, drawn as a tick: ``kind`` names its row.

    A violation's ``label`` names what broke, ``invariant (finding)``, and its
    ``detail`` is the monitor's text.
    """

    t_ms: int
    kind: str
    detail: str = ""
    label: str = ""


#: How far (a fraction of the run) the time axis extends past a violation, so it lies inside.
VIOLATION_MARGIN: Final = 0.04


def value_at(steps: Iterable[tuple[int, int | None]], t_ms: int) -> int | None:
    """The value of a step series at ``t_ms`` (after every change at that instant)."""
    value: int | None = None
    for at, v in steps:
        if at > t_ms:
            break
        value = v
    return value


def step_xy(steps: Iterable[tuple[int, int | None]], end_ms: int) -> tuple[list[float], list[float]]:
    """Seconds and values for ``step(where="post")``, held to the end of the run."""
    points = list(steps)
    xs = [t / 1000 for t, _ in points] + [end_ms / 1000]
    ys = [float("nan") if v is None else float(v) for _, v in points]
    return xs, [*ys, ys[-1]]


def stacked_axes(ratios: Sequence[float], header_in: float) -> tuple[Figure, Any]:
    """A figure 13 inches wide of panels stacked on one time axis, ``ratios`` inches high each,
    under a header band of ``header_in`` inches that :func:`write_header` fills.

    The header is placed by hand; the constrained layout fits the panels, their titles,
    labels and legends below it. The figure is not attached to pyplot (nothing global
    changes, nothing to close). Returns the figure and its column of axes.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    height_in = header_in + 0.3 + sum(ratios)
    fig = Figure(
        figsize=(13, height_in),
        dpi=90,
        layout=ConstrainedLayoutEngine(rect=(0, 0, 1, 1 - header_in / height_in), h_pad=0.06),
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(
        len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": list(ratios)}, squeeze=False
    )
    return fig, axes[:, 0]


def write_header(fig: Figure, heading: str, explanation: str) -> None:
    """The figure's title line, bold, and the explanation under it, in its header band."""
    height_in = fig.get_figheight()
    fig.text(0.01, 1 - 0.12 / height_in, heading, va="top", fontsize=12, fontweight="bold")
    fig.text(0.01, 1 - 0.40 / height_in, explanation, va="top", fontsize=8.5, color="#444444")
