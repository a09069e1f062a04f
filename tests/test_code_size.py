"""Size limits of the source tree: no module over 600 lines, no function over 80.

A module's size is its line count; a function's is from its ``def`` line to its
last line (decorators not counted); nested functions and methods count on their
own, named ``Class.method`` or ``outer.inner``. The allowlists hold today's
offenders with their current size: an entry may only shrink, and it must be
removed once the item is within the limit, so the lists never outlive the debt.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tavern_agent"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

# Path (relative to src/tavern_agent) -> lines today. May only shrink.
MODULE_ALLOWLIST: dict[str, int] = {}

# "path:qualified.name" -> lines today. May only shrink.
FUNCTION_ALLOWLIST: dict[str, int] = {}


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted(SOURCE.rglob("*.py")):
        yield path.relative_to(SOURCE).as_posix(), path.read_text(encoding="utf-8")


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            assert child.end_lineno is not None
            yield name, child.end_lineno - child.lineno + 1
            yield from _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")
        else:
            yield from _functions(child, prefix)


def _module_sizes() -> dict[str, int]:
    return {name: len(text.splitlines()) for name, text in _modules()}


def _function_sizes() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for module, text in _modules():
        for name, lines in _functions(ast.parse(text, filename=module)):
            sizes[f"{module}:{name}"] = max(lines, sizes.get(f"{module}:{name}", 0))
    return sizes


def _check(sizes: dict[str, int], allowlist: dict[str, int], limit: int) -> list[str]:
    problems: list[str] = []
    for name, lines in sorted(sizes.items()):
        allowed = allowlist.get(name)
        if allowed is None and lines > limit:
            problems.append(f"{name}: {lines} lines, over the limit of {limit}")
        elif allowed is not None and lines > allowed:
            problems.append(f"{name}: {lines} lines, grew past its allowlisted {allowed}")
    for name in sorted(allowlist):
        lines = sizes.get(name)
        if lines is None:
            problems.append(f"{name}: allowlisted but gone; remove it from the allowlist")
        elif lines <= limit:
            problems.append(
                f"{name}: {lines} lines, now within the limit of {limit}; "
                "remove it from the allowlist"
            )
    return problems


def test_no_module_over_the_limit() -> None:
    assert _check(_module_sizes(), MODULE_ALLOWLIST, MAX_MODULE_LINES) == []


def test_no_function_over_the_limit() -> None:
    assert _check(_function_sizes(), FUNCTION_ALLOWLIST, MAX_FUNCTION_LINES) == []


def test_the_check_reports_growth_new_offenders_and_stale_entries() -> None:
    sizes = {"a.py": 700, "b.py": 650, "c.py": 100, "d.py": 601}
    allowlist = {"a.py": 690, "c.py": 620, "gone.py": 900, "d.py": 601}
    assert _check(sizes, allowlist, 600) == [
        "a.py: 700 lines, grew past its allowlisted 690",
        "b.py: 650 lines, over the limit of 600",
        "c.py: 100 lines, now within the limit of 600; remove it from the allowlist",
        "gone.py: allowlisted but gone; remove it from the allowlist",
    ]


def test_function_sizes_name_methods_and_count_from_the_def_line() -> None:
    source = (
        "class A:\n"
        "    @staticmethod\n"
        "    def f():\n"
        "        def g():\n"
        "            pass\n"
        "        return g\n"
    )
    assert dict(_functions(ast.parse(source))) == {"A.f": 4, "A.f.g": 2}
