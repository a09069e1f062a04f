"""The import contracts of ``[tool.importlinter]`` hold, and break on an upward import or a cycle.

Each breaking case copies the package and the configuration to a temporary
folder, adds one module there and runs ``lint-imports`` on the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tavern_agent"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = "Layers: the CLI on top, core at the bottom, nothing imports upward"
ACYCLIC = "No import cycles between modules, at any depth"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_the_project(tmp_path: Path, added: dict[str, str]) -> Path:
    root = tmp_path / "project"
    shutil.copytree(
        PACKAGE, root / "src" / "tavern_agent", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for relative, text in added.items():
        (root / "src" / "tavern_agent" / relative).write_text(text, encoding="utf-8")
    return root


def test_the_contracts_hold_for_the_package() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{LAYERS} KEPT" in done.stdout
    assert f"{ACYCLIC} KEPT" in done.stdout


def test_core_importing_the_runtime_breaks_the_layers(tmp_path: Path) -> None:
    root = copy_of_the_project(
        tmp_path, {"core/upward.py": "from tavern_agent.runtime import journal\n"}
    )
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{LAYERS} BROKEN" in done.stdout
    assert "tavern_agent.core is not allowed to import tavern_agent.runtime" in done.stdout
    assert "tavern_agent.core.upward -> tavern_agent.runtime.journal" in done.stdout


def test_an_upward_import_under_type_checking_breaks_the_layers(tmp_path: Path) -> None:
    typed_only = (
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n"
        "    from tavern_agent.endpoint import app\n"
    )
    root = copy_of_the_project(tmp_path, {"workspace/upward.py": typed_only})
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tavern_agent.workspace is not allowed to import tavern_agent.endpoint" in done.stdout


def test_two_modules_importing_each_other_break_the_acyclic_contract(tmp_path: Path) -> None:
    typed_only = (
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n"
        "    from tavern_agent.tools import ping\n"
    )
    root = copy_of_the_project(
        tmp_path,
        {"tools/ping.py": "from tavern_agent.tools import pong\n", "tools/pong.py": typed_only},
    )
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{ACYCLIC} BROKEN" in done.stdout
    assert f"{LAYERS} KEPT" in done.stdout
    assert "No cycles are allowed in tavern_agent.tools." in done.stdout
