"""docs/COMPARISON.md, written from a comparison's result: the table and a paragraph per design.

``render_page(result)`` takes what ``semsim compare --json`` prints and
returns the page. Each design's paragraph says what the design sets out to
trade (fixed words, from its seed) and then what the runs showed, plan by
plan, in sentences made from the numbers, so the page cannot say what the
runs did not. ``docs/build_comparison.py`` runs the matrix and writes the
page, its JSON and its plot; the test suite renders the page again from
the JSON and compares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from semsim.explore.compare import Summary, markdown

#: What each design sets out to trade, in the words of its seed.
INTENTS: Final = {
    "semaphore": (
        "**The semaphore** (seeds 000-002) keeps an exact count in durable storage and hands out "
        "permits in rounds, as grants claimed by a deadline and as leases with a TTL. It promises "
        "never to go over the limit by its own accounting; what it pays is capacity: a permit "
        "lost with a reply, or held by a client that went quiet, stays counted until its deadline, "
        "its TTL or the next round's report."
    ),
    "gate": (
        '**The gate** (seed 003) counts in memory and is advisory by design: "a DO error or '
        'missing binding never blocks an audit", and an eviction "resets to all-free, the '
        'harmless direction". It pays in over-admission whenever it cannot answer, forgets, or a '
        "call outlives its caller, and a slot leaked by a dead caller comes back only after "
        "`STALE_MS`."
    ),
    "leased-worker": (
        "**The leased worker** (seed 004) leases each instance from a shared store and fences every "
        "write by the lease's token. It pays in duplicate work: an instance whose lease runs out is "
        "run again while the first execution's call may still be running, and a dead worker's "
        "instances wait for their leases to run out."
    ),
}


def _plans_where(summaries: Sequence[Summary], name: str, threshold: float = 0.0) -> list[Summary]:
    return [s for s in summaries if (s.figures.get(name) or 0.0) > threshold]


def _list(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def paragraph(design: str, summaries: Sequence[Summary]) -> str:
    """The design's paragraph: its intent, then what its runs showed."""
    mine = [s for s in summaries if s.design == design]
    sentences = [INTENTS.get(design, f"**{design}**.")]
    over = _plans_where(mine, "peak_over_admission")
    if over:
        shown = [
            f"{s.plan} (peak {s.figures['peak_over_admission']:g} over, "
            f"{s.figures['over_cap_permit_s']:g} permit-s on average)"
            for s in over
        ]
        sentences.append(f"Its runs went over the cap under {_list(shown)}.")
    else:
        sentences.append("No run of it went over the cap.")
    twice = _plans_where(mine, "duplicate_executions")
    if twice:
        shown = [f"{s.plan} ({s.figures['duplicate_executions']:g} a run)" for s in twice]
        sentences.append(f"Work ran twice under {_list(shown)}.")
    else:
        sentences.append("No work ran twice.")
    leaked = sorted(mine, key=lambda s: -(s.figures.get("leaked_cap_s") or 0.0))[:2]
    if leaked and (leaked[0].figures.get("leaked_cap_s") or 0.0) > 0:
        shown = [f"{s.plan} ({s.figures['leaked_cap_s']:g} cap-s)" for s in leaked]
        sentences.append(f"It left most capacity idle under {_list(shown)}.")
    never = [s for s in mine if s.not_recovered]
    if never:
        shown = [f"{s.plan} ({s.not_recovered} of {s.judged})" for s in never]
        sentences.append(f"Some runs had not recovered by their end: {_list(shown)}.")
    met = sorted({(f, s.plan) for s in mine for f in s.findings})
    if met:
        by_finding: dict[str, list[str]] = {}
        for finding, plan in met:
            by_finding.setdefault(finding, []).append(plan)
        shown = [f"{finding} under {_list(plans)}" for finding, plans in by_finding.items()]
        sentences.append(f"Known findings met (docs/FINDINGS.md): {_list(shown)}.")
    failed = [s for s in mine if s.judged < s.runs]
    if failed:
        shown = [f"{s.plan} ({s.runs - s.judged} of {s.runs})" for s in failed]
        sentences.append(f"Runs that broke an invariant: {_list(shown)}.")
    return " ".join(sentences)


def summary_of(row: Mapping[str, Any]) -> Summary:
    """A :class:`Summary` from its JSON form (``Summary.to_dict``)."""
    return Summary(
        design=row["design"],
        plan=row["plan"],
        runs=row["runs"],
        judged=row["judged"],
        findings=tuple(row["findings"]),
        figures=dict(row["figures"]),
        not_recovered=row["not_recovered"],
    )


def render_page(result: Mapping[str, Any]) -> str:
    """The page for ``result`` (``semsim compare --json``'s object)."""
    summaries = [summary_of(row) for row in result["summary"]]
    seeds = result["seeds"]
    cpu_s = sum(cell["cpu_s"] for cell in result["cells"])
    lines = [
        "# The designs compared",
        "",
        "<!-- Written by docs/build_comparison.py from docs/comparison.json: do not edit by hand. -->",
        "",
        f"Every design under the same workload, fault plans and seeds ({len(seeds)} seeds, "
        f"{seeds[0]}-{seeds[-1]}, per design and plan; {len(result['cells'])} runs, "
        f"{cpu_s:,.0f} CPU s), judged at the external API against the cap "
        f"({result['config']['holder']['limit']}). The fault plans and the figures are defined in "
        "[DESIGNS](DESIGNS.md#one-world-every-design) and `semsim.explore.compare`; "
        "each figure is the mean over the seeds (the peak: the maximum). Run it again with "
        "`python docs/build_comparison.py`, or your own world with `semsim compare --config`.",
        "",
        markdown(summaries).rstrip("\n"),
        "",
        "![The trade-offs, per fault plan](comparison.png)",
        "",
    ]
    for design in dict.fromkeys(s.design for s in summaries):
        lines += [f"## {design}", "", paragraph(design, summaries), ""]
    return "\n".join(lines)


#: The README's comparison block lies between these lines (docs/build_comparison.py rewrites it).
README_START: Final = "<!-- comparison: written by docs/build_comparison.py from docs/comparison.json -->"
README_END: Final = "<!-- comparison: end -->"


def readme_block(result: Mapping[str, Any]) -> str:
    """The README's tour of the comparison: the table and the plot (links relative to the repository)."""
    summaries = [summary_of(row) for row in result["summary"]]
    seeds = result["seeds"]
    return "\n".join(
        [
            README_START,
            "",
            f"`semsim compare`: {len(seeds)} seeds per design and fault plan ({len(result['cells'])} runs), "
            f"cap {result['config']['holder']['limit']}; what each figure means and a paragraph per design "
            "are in [docs/COMPARISON.md](docs/COMPARISON.md).",
            "",
            markdown(summaries).rstrip("\n"),
            "",
            "![The trade-offs, per fault plan](docs/comparison.png)",
            "",
            README_END,
        ]
    )


def with_readme_block(readme: str, result: Mapping[str, Any]) -> str:
    """``readme`` with its comparison block rendered from ``result``; ValueError if it has none."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError("the README has no comparison block (its start and end markers)")
    return readme[:start] + readme_block(result) + readme[end + len(README_END) :]
