"""Logical path rules: every forbidden form is refused, ordinary forms normalise."""

from __future__ import annotations

import pytest

from tavern_agent.workspace.paths import InvalidPath, normalize

FORBIDDEN = [
    "",
    "/",
    "/etc/passwd",
    "..",
    "../x",
    "output/../../x",
    "output/..",
    "a/../b",
    "C:\\x",
    "c:/x",
    "D:x",
    "output\\main.md",
    "..\\..\\x",
    "a\x00b",
    "a\nb",
    "a\tb",
    "%2e%2e/x",
    "output/%2E%2E/x",
    "output%2fmain.md",
    "x%00",
    "output/main.md.",
    "output/...",
    "output/ main.md",
    "output/main.md ",
    "．．/x",  # fullwidth dots
    "‥/x",  # two-dot leader
    "output／main.md",  # fullwidth solidus
    "output∕main.md",  # division slash
    "output⁄main.md",  # fraction slash
    "output＼main.md",
    "a/" + "b" * 256,
    "/".join(["abcdefgh"] * 200),
    "\ud800",
]


@pytest.mark.parametrize("text", FORBIDDEN, ids=repr)
def test_forbidden_forms(text: str) -> None:
    with pytest.raises(InvalidPath):
        normalize(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("output/main.md", "output/main.md"),
        ("./output//main.md", "output/main.md"),
        ("output/./notes/", "output/notes"),
        ("scratch/.hidden", "scratch/.hidden"),
        ("scratch/café ☕.md", "scratch/café ☕.md"),
        ("scratch/a..b", "scratch/a..b"),
    ],
)
def test_ordinary_forms(text: str, expected: str) -> None:
    assert normalize(text) == expected


@pytest.mark.parametrize("text", ["", ".", "./", ".//."])
def test_root_spellings(text: str) -> None:
    assert normalize(text, allow_root=True) == ""
