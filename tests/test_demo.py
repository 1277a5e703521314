"""The quick start's main job: the scripted story holds, and the CLI reports it with the right exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsim.cli.demo import run_demo
from semsim.cli.main import main
from semsim.inputs.commands import EXIT_OK, EXIT_USAGE


def test_every_expectation_of_the_demo_holds() -> None:
    result = run_demo()
    assert result.failures == []
    assert [(m.t_ms, m.usage.granted, m.usage.leased, m.usage.limit) for m in result.moments] == [
        (0, 4, 0, 8),
        (1_000, 8, 0, 8),
        (2_000, 8, 0, 8),
        (5_000, 4, 0, 8),
        (6_000, 7, 1, 8),
        (8_000, 7, 1, 4),
        (10_000, 3, 1, 4),
        (12_000, 3, 1, 4),
    ]


def test_demo_command_prints_the_timeline_and_writes_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo.png"
    assert main(["demo", "--plot", str(out)]) == EXIT_OK
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "every expectation held" in capsys.readouterr().out


def test_a_plot_path_in_a_missing_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--plot", str(tmp_path / "nope" / "demo.png")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no directory" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["demo", "--nope"]])
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == EXIT_USAGE


def test_the_demo_plot_is_drawn_in_run_plots_style(tmp_path: Path) -> None:
    from semsim.cli.demo import plot, run_demo

    fig = plot(run_demo(), tmp_path / "demo.png")
    usage, strip = fig.axes  # the accounting panel and the strip; no clients, so no demand panel
    assert usage.get_title(loc="left") == "key 'demo': holder accounting vs the limit"
    rows = [label.get_text() for label in strip.get_yticklabels()]
    assert rows == ["reply lost (1)", "permits reclaimed (1)", "limit changed (1)"]
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")
