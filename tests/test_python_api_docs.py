"""Every ``python`` block of ``docs/python-api.md`` runs as the script a reader would copy.

Each block runs as ``python example.py`` in an empty folder of its own, so an
example that needs a name from an earlier block fails here as it would for a
reader. A block whose first line is ``# file: NAME`` is a file the examples
use (a server, a module): it is written into every example's folder instead.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_FILE = re.compile(r"# file: (\S+)\n")


def _blocks() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The doc's file blocks by name, and its examples with the heading each stands under."""
    text = DOC.read_text(encoding="utf-8")
    files: dict[str, str] = {}
    examples: list[tuple[str, str]] = []
    for match in _BLOCK.finditer(text):
        code = match.group(1)
        named = _FILE.match(code)
        if named:
            files[named.group(1)] = code
            continue
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        examples.append((headings[-1] if headings else "intro", code))
    return files, examples


FILES, EXAMPLES = _blocks()


def test_the_doc_has_the_five_examples() -> None:
    assert [heading for heading, _ in EXAMPLES] == [
        "One call through the gate",
        "An agent run with a scripted model",
        "A Python extension tool",
        "An MCP server",
        "Reading a run's events",
    ]


@pytest.mark.parametrize("code", [code for _, code in EXAMPLES], ids=[h for h, _ in EXAMPLES])
def test_the_example_runs(code: str, tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_examples_import_only_from_the_top_level() -> None:
    import tavern_agent

    for heading, code in EXAMPLES:
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tavern_agent"):
                assert node.module == "tavern_agent", f"{heading}: imports from {node.module}"
                for alias in node.names:
                    assert alias.name in tavern_agent.__all__, f"{heading}: {alias.name}"


def names_the_docs_use() -> set[str]:
    """Every top-level name the examples import (the public API test covers each)."""
    return {
        alias.name
        for _, code in EXAMPLES
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.ImportFrom) and node.module == "tavern_agent"
        for alias in node.names
    }
