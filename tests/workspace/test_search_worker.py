"""A large ``workspace_search_files`` shares its files with a second process: same answer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import re2

from tavern_agent.tools.builtin import search_worker
from tavern_agent.tools.builtin.search import CHUNK, search
from tavern_agent.tools.builtin.search_scan import OPTIONS
from tavern_agent.workspace.store import Workspace


def fill(ws: Workspace, outside: Path) -> None:
    for d in range(4):
        folder = ws.root / "scratch" / f"d{d}"
        folder.mkdir(parents=True)
        for i in range(CHUNK + 30):
            text = f"line one\nthe Needle {d}-{i} is here\n" if i % 40 == 0 else "nothing\n"
            (folder / f"f{i:03d}.md").write_text(text * (1 + i % 3))
    outside.mkdir()
    (outside / "secret.md").write_text("the Needle outside\n")
    os.symlink(outside, ws.root / "scratch" / "d9")  # a folder link leading out: never read


def test_the_second_process_gives_the_same_answer_and_follows_no_link(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(ws, tmp_path / "outside")
    pattern = re2.compile(rb"(?i)needle \d", OPTIONS)
    with monkeypatch.context() as m:
        m.setattr(search_worker, "helper", lambda start=False: None)
        alone = search(ws, pattern, "scratch", True)
    helper = search_worker.helper(start=True)
    assert helper is not None
    helper.wait_ready(60)
    before = helper.jobs
    shared = search(ws, pattern, "scratch", True)
    assert helper.jobs > before  # the worker searched some of the runs
    assert shared.content == alone.content and shared.structured == alone.structured
    assert "[28 matching lines in 16 files]" in shared.content
    assert "outside" not in shared.content
