"""Write docs/COMPARISON.md, docs/comparison.json and docs/comparison.png from a full comparison.

    python docs/build_comparison.py [--seeds N] [--workers N]
    python docs/build_comparison.py --render-only   # the page and plot again, from the JSON

Runs ``semsim compare`` over every design and fault plan (20 seeds each by
default) on this machine's cores, keeps its JSON result, and renders the
page from it (``semsim.explore.comparison_page``): the numbers on the page
are the runs', and ``tests/test_comparison_page.py`` renders it again from
the JSON to check that they still are. Each file is written whole or not at
all; the command's exit status is ``semsim compare``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from semsim.cli.main import main
from semsim.explore.compare_plot import plot_comparison
from semsim.explore.comparison_page import render_page, summary_of, with_readme_block
from semsim.inputs.files import write_text_whole

DOCS = Path(__file__).resolve().parent


def build(seeds: int, workers: int | None) -> int:
    argv = ["compare", "--seeds", str(seeds), "--json", "--no-db", "--plot", str(DOCS / "comparison.png")]
    if workers is not None:
        argv += ["--workers", str(workers)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    if status not in (0, 1):
        return status
    result = json.loads(out.getvalue())
    write_text_whole(DOCS / "comparison.json", json.dumps(result, indent=1, sort_keys=True) + "\n")
    render(result)
    return status


def render(result: dict[str, Any]) -> None:
    """The page, the README's block and the plot, from a comparison's JSON result."""
    write_text_whole(DOCS / "COMPARISON.md", render_page(result))
    readme = DOCS.parent / "README.md"
    write_text_whole(readme, with_readme_block(readme.read_text(encoding="utf-8"), result))
    plot_comparison([summary_of(row) for row in result["summary"]], DOCS / "comparison.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--render-only", action="store_true", help="render docs/comparison.json again")
    arguments = parser.parse_args()
    if arguments.render_only:
        render(json.loads((DOCS / "comparison.json").read_text()))
        sys.exit(0)
    sys.exit(build(arguments.seeds, arguments.workers))
