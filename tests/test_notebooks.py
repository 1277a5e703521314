"""The notebooks run top to bottom in CI, and are committed without outputs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_at_least_two_notebooks() -> None:
    assert len(NOTEBOOKS) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_is_committed_without_outputs(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    assert code
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_executes(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs, and leaves nothing in the temporary directory once its kernel has gone."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the kernel's tempfile.gettempdir()
    book = nbformat.read(path, as_version=4)
    client = NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    assert not list(scratch.iterdir()), "left behind in the temporary directory"
    images = [
        output
        for cell in book.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    assert images, "each notebook shows at least one plot"
    # A newcomer reads the notebook's output: no warnings in it (a log axis's mathtext labels
    # once printed a findfont warning per label).
    errors = [
        output.get("text", "")
        for cell in book.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.get("name") == "stderr"
    ]
    assert not errors, errors[0][:300]
