"""The benchmarks use only names the package still has.

``make bench`` is not part of the test run (it needs the peers of the
``bench`` extra and minutes of machine time), so a renamed function would
only show when someone next measured. This reads every benchmark's imports
from ``tavern_agent`` and checks each name exists.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parent.parent / "benchmarks").glob("*.py"))


def project_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tavern_agent")
        for alias in node.names
    ]


def test_there_are_benchmarks_to_check() -> None:
    assert len(BENCHMARKS) >= 10
    assert all(project_imports(p) for p in BENCHMARKS)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_imported_name_exists(path: Path) -> None:
    missing = [
        f"{module}.{name}"
        for module, name in project_imports(path)
        if not hasattr(importlib.import_module(module), name)
        and importlib.util.find_spec(f"{module}.{name}") is None
    ]
    assert not missing, f"{path.name} imports names the package no longer has: {missing}"


def quick_scripts() -> list[str]:
    """The scripts ``make bench`` runs with ``$(QUICK)`` (``--quick``; empty for bench-full)."""
    makefile = (Path(__file__).parent.parent / "Makefile").read_text(encoding="utf-8")
    return re.findall(r"benchmarks/(\w+\.py) \$\(QUICK\)", makefile)


def test_every_script_make_bench_runs_quick_accepts_quick() -> None:
    scripts = quick_scripts()
    assert "chat.py" in scripts and "engines.py" in scripts
    without = [
        name
        for name in scripts
        if not any(
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "add_argument"
            and any(isinstance(a, ast.Constant) and a.value == "--quick" for a in node.args)
            for node in ast.walk(ast.parse((BENCHMARKS[0].parent / name).read_text("utf-8")))
        )
    ]
    assert not without, f"make bench passes --quick to scripts without it: {without}"
