"""The documentation stands on its own: a clone of the repository is all a reader has.

- No tracked file sends readers to material outside the repository (the
  lead's shared folder next to the checkout, which users do not have).
- Every relative link in README.md and docs/*.md points to a file that
  exists, and an anchor in it (``FILE.md#heading``) to a heading that exists.
- Every ``semsim`` command in the parser, and each of its options, is
  documented in docs/CLI.md under that command's heading.
- The examples in docs/WIRE.md are what the code reads and writes: each
  message parses and serialises back to the same JSON, keys in the same
  order, and the case file loads.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from semaphore_core.protocol import parse_message
from semsim.cli.main import parsers
from semsim.explore.fuzz import CASE_FORMAT, KNOWN_FINDINGS, load_case
from semsim.harness.catalog import MUTANTS
from semsim.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
#: Built from parts so that this file does not match itself.
OUTSIDE = "../" + "shared"

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout (or git is missing): tracked files unknown")
    return [ROOT / name for name in out.decode().split("\0") if name]


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """``(line number, text)`` of the lines outside fenced code blocks (code spans blanked)."""
    lines = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        lines.append((number, _CODE_SPAN.sub("", line) if blank_code else line))
    return lines


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        found += [(number, target) for target in _INLINE_LINK.findall(line)]
        reference = _REFERENCE_LINK.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8"), blank_code=False):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_no_tracked_file_refers_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if OUTSIDE.encode() in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert not offenders, f"these lines refer to {OUTSIDE}, which a clone does not have: {offenders}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_something_that_exists(document: Path) -> None:
    broken = []
    for number, target in links(document):
        if _SCHEME.match(target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = document if not file_part else (document.parent / file_part).resolve()
        where = f"{document.relative_to(ROOT)}:{number}: {target}"
        if not linked.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{where} (no heading #{anchor} in {linked.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_links_and_skips_code(tmp_path: Path) -> None:
    path = tmp_path / "links.md"
    path.write_text(
        "# A `code` heading\nsee [a](docs/A.md) and ![p](x.png)\n`[no](code.md)`\n"
        "```\n[no](fenced.md)\n# not a heading\n```\n[r]: docs/B.md\n## A code heading\n",
        encoding="utf-8",
    )
    assert [target for _, target in links(path)] == ["docs/A.md", "x.png", "docs/B.md"]
    assert anchors(path) == {"a-code-heading", "a-code-heading-1"}
    assert slug("When liveness is judged") == "when-liveness-is-judged"
    assert slug("`semsim fuzz --replay`: one case") == "semsim-fuzz---replay-one-case"


def commands() -> dict[str, argparse.ArgumentParser]:
    return parsers().commands


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option a command takes but -h, as its usage line (argparse's public text) names it:
    by its first spelling (``plot -o``)."""
    return sorted(set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", parser.format_usage())) - {"-h"})


def test_every_command_and_option_is_in_the_cli_document() -> None:
    text = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        named = re.match(r"`semsim (\w+)", heading)
        if named:
            sections[named.group(1)] = sections.get(named.group(1), "") + body
    missing = []
    for name, parser in commands().items():
        if name not in sections:
            missing.append(f"semsim {name} (no '## `semsim {name} ...`' heading)")
            continue
        for option in option_names(parser):
            if option not in sections[name]:
                missing.append(f"semsim {name} {option}")
    assert not missing, "not documented in docs/CLI.md: " + ", ".join(missing)


def test_every_command_and_option_is_in_the_readme_synopsis() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```\n(semsim list .*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert blocks, "README.md has no synopsis block starting with `semsim list`"
    # A usage line continued on the next, indented line is one line.
    lines = re.sub(r"\n\s+", " ", blocks[0]).splitlines()
    missing = []
    for name, parser in commands().items():
        usage = " ".join(line for line in lines if re.match(rf"semsim {name}\b", line))
        if not usage:
            missing.append(f"semsim {name}")
        for option in option_names(parser):
            if not re.search(rf"{re.escape(option)}\b", usage):
                missing.append(f"semsim {name} {option}")
    assert not missing, "not in README.md's synopsis: " + ", ".join(missing)


def test_the_counts_the_documents_state_are_the_code_s() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cli = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    wire = (ROOT / "docs" / "WIRE.md").read_text(encoding="utf-8")
    assert f"The {len(SCENARIOS)} named failure scenarios" in readme
    fuzzed = sum(1 for scenario in SCENARIOS.values() if scenario.config.design.name == "semaphore")
    assert set(re.findall(r"\((\d+) named scenarios first\)", cli)) == {str(fuzzed)}
    assert f"too ({fuzzed} of them for the semaphore)" in " ".join(cli.split())
    assert f"`[1/{len(MUTANTS)}] NAME" in cli
    findings = sorted(KNOWN_FINDINGS, key=lambda name: int(name[1:]))
    assert findings == [f"F{n}" for n in range(1, len(findings) + 1)]
    assert wire.count(f"`F1`..`{findings[-1]}`") == 2
    assert not re.search(r"`F1`\.\.`F(?!" + findings[-1][1:] + r"`)\d+`", wire)


#: What a value's comment must look like to be checked: a repr (``Usage(...)``, ``[Violation(...)]``).
_SHOWN_REPR = re.compile(r"[(\[]*[A-Z][A-Za-z]*\(")


def _python_examples() -> list[tuple[str, int, str]]:
    """``(document, line, code)`` of every ```` ```python ```` block in README.md and docs/."""
    found = []
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = document.read_text(encoding="utf-8")
        for block in re.finditer(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            found.append((document.name, text[: block.start()].count("\n") + 1, block.group(1)))
    return found


def test_the_documents_have_python_examples_to_run() -> None:
    examples = _python_examples()
    assert len(examples) >= 5
    shown = [
        line.partition("  # ")[2] for _, _, code in examples for line in code.splitlines() if "  # " in line
    ]
    assert sum(1 for comment in shown if _SHOWN_REPR.match(comment)) >= 5  # values the next test checks


@pytest.mark.parametrize(("document", "line", "code"), _python_examples(), ids=lambda v: str(v)[:20])
def test_every_python_example_runs_and_shows_what_it_returns(
    document: str, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the example a statement at a time; a value whose comment is a repr must match it.

    ``...`` in a shown repr stands for anything. A fragment may use what the prose
    around it names: ``run`` (a finished run) and ``path`` (where to write).
    """
    from semsim.harness.run import WorldConfig, run_world
    from semsim.world.faults import FaultPlan
    from semsim.world.workload import Workload

    monkeypatch.chdir(tmp_path)  # examples write files where they run
    context: dict[str, object] = {"path": tmp_path / "run.jsonl"}
    if re.search(r"\brun\b", code) and "run = run_world(" not in code:
        context["run"] = run_world(
            WorldConfig(workload=Workload(clients=1), duration_ms=10_000), FaultPlan(), 1
        )
    source = code.splitlines()
    for statement in ast.parse(code).body:
        shown = source[statement.lineno - 1].partition("  # ")[2]
        where = f"{document}:{line + statement.lineno}"
        if isinstance(statement, ast.Expr) and _SHOWN_REPR.match(shown):
            value = eval(compile(ast.Expression(statement.value), where, "eval"), context)
            pattern = ".*".join(re.escape(part) for part in shown.split("..."))
            assert re.fullmatch(pattern, repr(value), re.DOTALL), f"{where}: shows {shown}, is {value!r}"
        else:
            exec(compile(ast.Module([statement], type_ignores=[]), where, "exec"), context)


def json_blocks(path: Path) -> list[object]:
    blocks = re.findall(r"^```json\n(.*?)^```", path.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    return [json.loads(block) for block in blocks]


def test_the_wire_examples_are_what_the_code_reads_and_writes(tmp_path: Path) -> None:
    blocks = json_blocks(ROOT / "docs" / "WIRE.md")
    messages = [b for b in blocks if isinstance(b, dict) and "type" in b]
    assert {m["type"] for m in messages} == {"request", "sync", "grant", "synced"}
    for message in messages:
        wire = parse_message(message).to_wire()
        assert json.dumps(wire) == json.dumps(message), message
    cases = [b for b in blocks if isinstance(b, dict) and b.get("format") == CASE_FORMAT]
    assert cases
    for number, case in enumerate(cases):
        path = tmp_path / f"case-{number}.json"
        path.write_text(json.dumps(case), encoding="utf-8")
        load_case(path)  # raises CaseFileError if the example is not a valid case


def test_the_replay_example_in_cli_md_is_what_replay_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from semsim.cli.main import main

    text = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    shown = text.split("$ semsim replay examples/traffic.jsonl\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    assert main(["replay", "examples/traffic.jsonl"]) == 0
    assert capsys.readouterr().out == shown


def test_every_builtin_invariant_has_its_section_in_invariants_md() -> None:
    from semsim.check.builtin import BUILTIN

    text = (ROOT / "docs" / "INVARIANTS.md").read_text(encoding="utf-8")
    headed = re.findall(r"^### `(\w+)`", text, re.MULTILINE)
    assert sorted(headed) == sorted(b.name for b in BUILTIN)
