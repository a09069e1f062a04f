"""The file tools through the gate, on a real folder."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import WorkspaceSettings
from tavern_agent.core.results import FilePatched, FileWritten
from tavern_agent.workspace import read_state
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace, WorkspaceEscape, sha256_hex

from .conftest import Agent

READ, WRITE, PATCH = "workspace_read_file", "workspace_write_file", "workspace_apply_patch"
LIST, SEARCH = "workspace_list_files", "workspace_search_files"


async def test_write_read_patch_read(agent: Agent, ws: Workspace) -> None:
    written = await agent.run(WRITE, file_path="output/main.md", content="The dragon sleeps.\n")
    assert written.result.content == "Created output/main.md: now 19 chars, 1 lines."
    assert written.effect == FileWritten("output/main.md", sha256_hex(b"The dragon sleeps.\n"))
    read = await agent(READ, file_path="output/main.md")
    assert read.content == "output/main.md: lines 1-1 of 1 (19 chars)\n1\tThe dragon sleeps."
    assert read.structured["full"] is True
    patched = await agent.run(
        PATCH, file_path="output/main.md", old_string="sleeps", new_string="wakes"
    )
    assert patched.result.content == (
        "Patched output/main.md with 1 replacement(s); file now has 18 chars / 3 words."
    )
    assert isinstance(patched.effect, FilePatched) and patched.effect.replacements == 1
    assert patched.result.structured["oldSha256"] == sha256_hex(b"The dragon sleeps.\n")
    assert (ws.root / "output/main.md").read_text() == "The dragon wakes.\n"
    assert "The dragon wakes." in (await agent(READ, file_path="output/main.md")).content


async def test_replace_needs_a_read_and_a_fresh_one(agent: Agent, ws: Workspace) -> None:
    (ws.root / "output").mkdir(parents=True)
    (ws.root / "output/main.md").write_text("old")
    refused = await agent(WRITE, file_path="output/main.md", content="new")
    assert refused.error_code is ErrorCode.WORKSPACE_WRITE_REQUIRES_READ
    assert "Read it with workspace_read_file" in refused.content
    await agent(READ, file_path="output/main.md")
    (ws.root / "output/main.md").write_text("changed by someone else")
    stale = await agent(WRITE, file_path="output/main.md", content="new")
    assert stale.error_code is ErrorCode.WORKSPACE_WRITE_STALE_FILE
    assert (ws.root / "output/main.md").read_text() == "changed by someone else"
    await agent(READ, file_path="output/main.md")
    assert not (await agent(WRITE, file_path="output/main.md", content="new")).is_error
    assert (ws.root / "output/main.md").read_text() == "new"


async def test_append_creates_and_appends_verbatim(agent: Agent, ws: Workspace) -> None:
    await agent(WRITE, file_path="scratch/log.md", content="a", mode="append")
    await agent(WRITE, file_path="scratch/log.md", content="b\n", mode="append")
    assert (ws.root / "scratch/log.md").read_text() == "ab\n"
    # Created and extended by this agent only: counts as fully read, so replace works.
    assert not (await agent(WRITE, file_path="scratch/log.md", content="c")).is_error
    bad = await agent(WRITE, file_path="scratch/log.md", content="c", mode="prepend")
    assert bad.error_code is ErrorCode.WORKSPACE_WRITE_MODE_INVALID


async def test_read_pages_long_files(agent: Agent, ws: Workspace) -> None:
    (ws.root / "scratch").mkdir(parents=True)
    (ws.root / "scratch/long.md").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    first = await agent(READ, file_path="scratch/long.md")
    assert first.content.startswith("scratch/long.md: lines 1-1200 of 3000")
    assert first.content.endswith("[1800 more lines; continue with offset=1201, limit=1200]")
    assert first.structured["full"] is False
    page = await agent(READ, file_path="scratch/long.md", offset=2999, limit=5)
    assert page.content.splitlines()[1:] == ["2999\tline 2999", "3000\tline 3000"]
    past = await agent(READ, file_path="scratch/long.md", offset=3001)
    assert past.error_code is ErrorCode.WORKSPACE_INVALID_LINE_RANGE
    assert (
        "scratch/long.md has 3,000 lines, so offset 3001 is past its end. "
        "Use an offset from 1 to 3,000." in past.content
    )


def big_file(ws: Workspace, lines: int = 200_000) -> Path:
    path = ws.root / "scratch/big.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"line {i} of the long log\n" for i in range(1, lines + 1)))
    return path


async def test_large_file_preview_reads_only_its_start(
    agent: Agent, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_state, "SETTLED_SECONDS", 0.0)  # the file was just written
    path = big_file(ws)  # 5 MB
    first = await agent(READ, file_path="scratch/big.md")
    assert first.content.splitlines()[0] == (
        f"scratch/big.md: lines 1-1200 ({path.stat().st_size:,} bytes; only its start was read)"
    )
    assert first.content.splitlines()[1] == "   1\tline 1 of the long log"
    assert first.content.endswith("[more lines follow; continue with offset=1201, limit=1200]")
    assert first.structured["lines"] is None and first.structured["full"] is False
    # The read state holds the whole file's sha256, so the write rules apply as usual.
    assert agent.gate.reads["scratch/big.md"].sha256 == sha256_hex(path.read_bytes())
    patched = await agent(
        PATCH, file_path="scratch/big.md", old_string="line 7 of", new_string="L7"
    )
    assert not patched.is_error and "L7 the long log" in path.read_text()[:200]
    # A page past the head is read from the whole file, with the exact count.
    last = await agent(READ, file_path="scratch/big.md", offset=199_999)
    assert "lines 199999-200000 of 200000" in last.content


async def test_recently_changed_large_file_is_read_whole(agent: Agent, ws: Workspace) -> None:
    big_file(ws)  # just written: a change within the timestamp granularity could go unseen
    first = await agent(READ, file_path="scratch/big.md")
    assert first.content.startswith("scratch/big.md: lines 1-1200 of 200000")


def test_a_file_changed_while_hashed_gets_no_usable_digest(ws: Workspace) -> None:
    path = big_file(ws, 1000)
    with ws.open_file("scratch/big.md") as fd:
        before = os.fstat(fd)
        time.sleep(0.05)  # past any timestamp granularity
        with path.open("r+b") as handle:  # same size, changed in place
            handle.write(b"LINE")
        state = read_state.ReadState.of_open_file(fd, before, "")
    assert state.sha256 == read_state.CHANGED_WHILE_READ != sha256_hex(path.read_bytes())
    with ws.open_file("scratch/big.md") as fd:
        settled_state = read_state.ReadState.of_open_file(fd, os.fstat(fd), "")
    assert settled_state.sha256 == sha256_hex(path.read_bytes())


async def test_overlong_lines_are_cut_with_a_note(agent: Agent, ws: Workspace) -> None:
    (ws.root / "scratch").mkdir(parents=True)
    (ws.root / "scratch/wide.md").write_text("x" * 5000 + "\nshort\n")
    read = await agent(READ, file_path="scratch/wide.md")
    assert "[1 line(s) longer than 2000 chars were cut]" in read.content
    assert read.structured["full"] is False


async def test_missing_and_folder(agent: Agent, ws: Workspace) -> None:
    missing = await agent(READ, file_path="output/nope.md")
    assert missing.error_code is ErrorCode.WORKSPACE_FILE_NOT_FOUND
    assert "workspace_list_files" in missing.content
    (ws.root / "output").mkdir(parents=True)
    folder = await agent(READ, file_path="output")
    assert folder.error_code is ErrorCode.WORKSPACE_PATH_IS_DIRECTORY


async def test_roots_and_internals(agent: Agent, ws: Workspace) -> None:
    for internal in ("input/prompt.json", "tool-args/x.json", "checkpoints/c.json", "events.jsonl"):
        result = await agent(READ, file_path=internal)
        assert result.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE, internal
    for read_only in ("tool-results/x.txt", "skills/s/SKILL.md"):
        result = await agent(WRITE, file_path=read_only, content="x")
        assert result.error_code is ErrorCode.WORKSPACE_PATH_NOT_WRITABLE, read_only
    assert not (ws.root / "tool-results").exists()
    other = await agent(WRITE, file_path="work/x.md", content="x")
    assert other.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE


def test_session_roots_and_profile_narrowing(tmp_path: Path) -> None:
    session = RootPolicy.for_scene(Scene.SESSION)
    assert session.visible == ("work", "tmp", "tool-results")
    assert session.writable == {"work", "tmp"}
    narrowed = RootPolicy.for_scene(
        Scene.CHAT,
        WorkspaceSettings(visible_roots=("output", "scratch", "work"), writable_roots=("scratch",)),
    )
    assert narrowed.visible == ("output", "scratch")  # "work" is not a chat root: never widened
    assert narrowed.writable == {"scratch"}


async def test_list_files(agent: Agent, ws: Workspace) -> None:
    await agent(WRITE, file_path="output/main.md", content="x")
    await agent(WRITE, file_path="scratch/a/b/c/d.md", content="x")
    listing = await agent(LIST)
    assert listing.content.splitlines() == ["output/", "output/main.md", "scratch/", "scratch/a/"]
    deep = await agent(LIST, path="scratch", depth=4)
    assert "scratch/a/b/c/d.md" in deep.content
    too_deep = await agent(LIST, depth=5)
    assert too_deep.error_code is ErrorCode.WORKSPACE_LIST_DEPTH_TOO_LARGE
    assert (await agent(LIST, path="plan")).error_code is ErrorCode.WORKSPACE_PATH_NOT_FOUND
    for i in range(250):
        (ws.root / "scratch" / f"f{i:03d}.md").write_text("x")
    many = await agent(LIST, path="scratch", depth=1)
    assert many.structured["truncated"] is True and len(many.structured["entries"]) == 200


async def test_search_files(agent: Agent, ws: Workspace) -> None:
    await agent(
        WRITE,
        file_path="output/main.md",
        content="The Dragon wakes.\nNothing here.\nA dragon again, dragon twice.\n",
    )
    await agent(WRITE, file_path="scratch/notes.md", content="no match\n")
    (ws.root / "tool-results").mkdir()
    (ws.root / "tool-results/old.txt").write_text("dragon in a result\n")
    hits = await agent(SEARCH, pattern="(?i)dragon")
    assert hits.content.splitlines() == [
        "output/main.md:1: The Dragon wakes.",
        "output/main.md:3: A dragon again, dragon twice.",
        "[2 matching lines in 1 files]",
    ]
    scoped = await agent(SEARCH, pattern="dragon", path="tool-results")
    assert scoped.content.splitlines()[0] == "tool-results/old.txt:1: dragon in a result"
    none = await agent(SEARCH, pattern="wyrm")
    assert not none.is_error and none.content.startswith("No matches")
    for bad in (r"(a)\1", "(?=x)", "(?<=x)y", "a++", "("):
        result = await agent(SEARCH, pattern=bad)
        assert result.error_code is ErrorCode.WORKSPACE_GREP_PATTERN_INVALID, bad
        assert "RE2 syntax" in result.content


async def test_search_is_linear_on_evil_patterns(agent: Agent, ws: Workspace) -> None:
    await agent(WRITE, file_path="scratch/a.md", content="a" * 100_000 + "b")
    # The classic catastrophic case for backtracking engines; RE2 answers at once.
    result = await agent(SEARCH, pattern="(a+)+$")
    assert result.content.startswith("No matches")
    assert "scratch/a.md:1:" in (await agent(SEARCH, pattern="(a+)+b")).content


async def test_search_caps_lines_and_cuts_long_ones(agent: Agent, ws: Workspace) -> None:
    await agent(
        WRITE, file_path="scratch/many.md", content="hit\n" * 150 + "y" * 1000 + "hit" + "z" * 1000
    )
    result = await agent(SEARCH, pattern="hit")
    assert result.structured["totalLines"] == 151 and len(result.structured["hits"]) == 100
    assert "showing the first 100" in result.content
    cut = await agent(SEARCH, pattern="yhitz")
    line = cut.content.splitlines()[0]
    assert "yhitz" in line and len(line) < 340


async def test_case_insensitive_literals_find_every_case(agent: Agent, ws: Workspace) -> None:
    # "(?i)orc_id-7" is first searched for its caseless run "-7"; every file holding a
    # match in any case, Unicode folds included, is still found.
    (ws.root / "scratch").mkdir()
    (ws.root / "scratch/a.md").write_text("x\nthe ORC_ID-7 here\n")
    (ws.root / "scratch/b.md").write_text("orc_id 7 (no dash)\n")  # the caseless run is absent
    (ws.root / "scratch/c.md").write_text("Orc_\u212aey-7\n")  # KELVIN SIGN folds to k
    (ws.root / "scratch/d.md").write_text("ORC_ID-8\n")
    result = await agent(SEARCH, pattern="(?i)orc_id-7", path="scratch")
    assert result.content.splitlines() == [
        "scratch/a.md:2: the ORC_ID-7 here",
        "[1 matching lines in 1 files]",
    ]
    kelvin = await agent(SEARCH, pattern="(?i)orc_key-7", path="scratch")
    assert kelvin.content.splitlines()[0] == "scratch/c.md:1: Orc_\u212aey-7"
    words = await agent(SEARCH, pattern="(?i)ORC", path="scratch")
    assert words.structured["files"] == 4


async def test_two_concurrent_patches_one_wins(ws: Workspace) -> None:
    first, second = Agent(ws), Agent(ws)
    await first(WRITE, file_path="output/main.md", content="alpha beta\n")
    await first(READ, file_path="output/main.md")
    await second(READ, file_path="output/main.md")
    results = await asyncio.gather(
        first(PATCH, file_path="output/main.md", old_string="alpha", new_string="ALPHA"),
        second(PATCH, file_path="output/main.md", old_string="beta", new_string="BETA"),
    )
    codes = sorted(str(r.error_code) for r in results)
    assert codes == ["None", "workspace.patch_stale_file"]
    assert (ws.root / "output/main.md").read_text() in ("ALPHA beta\n", "alpha BETA\n")


async def test_links_are_never_followed(agent: Agent, ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (ws.root / "output").mkdir(parents=True)
    os.symlink(outside / "secret.txt", ws.root / "output/leak.md")
    os.symlink(outside, ws.root / "scratch")
    for name, args in [
        (READ, {"file_path": "output/leak.md"}),
        (WRITE, {"file_path": "output/leak.md", "content": "pwned", "mode": "append"}),
        (WRITE, {"file_path": "scratch/secret.txt", "content": "pwned"}),
        (READ, {"file_path": "scratch/secret.txt"}),
        (SEARCH, {"pattern": "secret", "path": "scratch"}),
    ]:
        with pytest.raises(WorkspaceEscape):
            await agent.run(name, **args)
    assert (outside / "secret.txt").read_text() == "secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    listing = await agent(LIST)
    assert "scratch" not in listing.content and "secret" not in listing.content
    searched = await agent(SEARCH, pattern="secret")
    assert "No matches" in searched.content


async def test_link_inside_names_its_target(agent: Agent, ws: Workspace) -> None:
    await agent(WRITE, file_path="output/main.md", content="x")
    os.symlink("main.md", ws.root / "output/alias.md")
    result = await agent(READ, file_path="output/alias.md")
    assert result.error_code is ErrorCode.WORKSPACE_INVALID_PATH
    assert "use output/main.md" in result.content
