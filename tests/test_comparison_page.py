"""docs/COMPARISON.md says what its runs showed: it is rendered again from docs/comparison.json."""

from __future__ import annotations

import json
from pathlib import Path

from semsim.explore.compare import Summary
from semsim.explore.comparison_page import paragraph, readme_block, render_page, with_readme_block

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_page_is_its_json_rendered() -> None:
    result = json.loads((DOCS / "comparison.json").read_text())
    assert (DOCS / "COMPARISON.md").read_text() == render_page(result)
    # The README's tour shows the same table and plot.
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert with_readme_block(readme, result) == readme
    assert readme_block(result) in readme
    assert "![The trade-offs, per fault plan](docs/comparison.png)" in readme
    assert {cell["design"] for cell in result["cells"]} == {"semaphore", "gate", "leased-worker"}


def summary(plan: str, **figures: float | None) -> Summary:
    shown: dict[str, float | None] = {
        "peak_over_admission": 0.0,
        "duplicate_executions": 0.0,
        "leaked_cap_s": 0.0,
    }
    shown.update(figures)
    return Summary("gate", plan, 20, 20, (), shown, 0)


def test_a_paragraph_says_only_what_the_runs_showed() -> None:
    calm = paragraph("gate", [summary("calm"), summary("lossy")])
    assert "No run of it went over the cap." in calm
    assert "No work ran twice." in calm
    over = paragraph("gate", [summary("lossy", peak_over_admission=3.0, over_cap_permit_s=40.5)])
    assert "went over the cap under lossy (peak 3 over, 40.5 permit-s on average)" in over
