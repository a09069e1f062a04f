"""apply_patch: its ten ordered checks, each refusal with its own message."""

from __future__ import annotations

import json

from tavern_agent.core.errors import ErrorCode
from tavern_agent.workspace.store import Workspace

from .conftest import Agent

READ, WRITE, PATCH = "workspace_read_file", "workspace_write_file", "workspace_apply_patch"
FILE = "scratch/story.md"


def seed(ws: Workspace, text: str) -> None:
    (ws.root / "scratch").mkdir(parents=True, exist_ok=True)
    (ws.root / FILE).write_text(text)


async def patch(agent: Agent, old: str, new: str, **extra: object) -> ErrorCode | None:
    return (await agent(PATCH, file_path=FILE, old_string=old, new_string=new, **extra)).error_code


async def test_checks_1_to_4(agent: Agent, ws: Workspace) -> None:
    seed(ws, "one two\n")
    assert await patch(agent, "", "x") is ErrorCode.WORKSPACE_PATCH_EMPTY_OLD_STRING
    assert await patch(agent, "one", "one") is ErrorCode.WORKSPACE_PATCH_NO_CHANGE
    bad_path = await agent(PATCH, file_path="../x", old_string="a", new_string="b")
    assert bad_path.error_code is ErrorCode.WORKSPACE_INVALID_PATH
    read_only = await agent(PATCH, file_path="tool-results/x", old_string="a", new_string="b")
    assert read_only.error_code is ErrorCode.WORKSPACE_PATH_NOT_WRITABLE
    assert await patch(agent, "one", "1") is ErrorCode.WORKSPACE_PATCH_REQUIRES_READ


async def test_partial_read_rules_and_the_full_read_flag(agent: Agent, ws: Workspace) -> None:
    seed(ws, "".join(f"line {i}\n" for i in range(1, 11)))
    await agent(READ, file_path=FILE, offset=1, limit=3)
    # 6: replace_all after a partial read
    assert (
        await patch(agent, "line", "row", replace_all=True)
        is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    )
    # 5: the flag now blocks even a patch inside the part that was read
    assert await patch(agent, "line 2\n", "row 2\n") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    await agent(READ, file_path=FILE, offset=1, limit=3)  # a partial read does not clear it...
    assert await patch(agent, "line 2\n", "row 2\n") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    await agent(READ, file_path=FILE)  # ...a full read does
    assert await patch(agent, "line 2\n", "row 2\n") is None


async def test_partial_read_old_string_outside_what_was_read(agent: Agent, ws: Workspace) -> None:
    seed(ws, "".join(f"line {i}\n" for i in range(1, 11)))
    await agent(READ, file_path=FILE, offset=1, limit=3)
    assert (
        await patch(agent, "line 9", "row 9") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    )  # 7


async def test_partial_read_patch_inside_what_was_read_works(agent: Agent, ws: Workspace) -> None:
    seed(ws, "".join(f"line {i}\n" for i in range(1, 11)))
    await agent(READ, file_path=FILE, offset=2, limit=2)
    assert await patch(agent, "line 3", "row 3") is None
    assert "row 3" in (ws.root / FILE).read_text()


async def test_stale_file(agent: Agent, ws: Workspace) -> None:
    seed(ws, "one two\n")
    await agent(READ, file_path=FILE)
    (ws.root / FILE).write_text("one two three\n")
    assert await patch(agent, "one", "1") is ErrorCode.WORKSPACE_PATCH_STALE_FILE  # 8
    assert (ws.root / FILE).read_text() == "one two three\n"


async def test_stale_after_partial_read_sets_the_flag(agent: Agent, ws: Workspace) -> None:
    seed(ws, "one\ntwo\nthree\n")
    await agent(READ, file_path=FILE, limit=1)
    (ws.root / FILE).write_text("one\ntwo\nthree\nfour\n")
    assert await patch(agent, "one", "1") is ErrorCode.WORKSPACE_PATCH_STALE_FILE
    await agent(READ, file_path=FILE, limit=1)
    assert await patch(agent, "one", "1") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ


async def test_match_counts(agent: Agent, ws: Workspace) -> None:
    seed(ws, "cat cat dog\n")
    await agent(READ, file_path=FILE)
    assert await patch(agent, "bird", "fish") is ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND  # 9
    result = await agent(PATCH, file_path=FILE, old_string="cat", new_string="cow")
    assert result.error_code is ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_UNIQUE
    assert "occurs 2 times" in result.content and "replace_all" in result.content
    done = await agent(PATCH, file_path=FILE, old_string="cat", new_string="cow", replace_all=True)
    assert done.structured["replacements"] == 2  # 10
    assert (ws.root / FILE).read_text() == "cow cow dog\n"
    # The read state follows the patch: another patch needs no new read.
    assert await patch(agent, "dog", "") is None
    assert (ws.root / FILE).read_text() == "cow cow \n"


async def test_partial_read_not_found_in_whole_file_sets_flag(agent: Agent, ws: Workspace) -> None:
    seed(ws, "alpha\nbeta\n")
    await agent(READ, file_path=FILE, limit=1)
    # "alpha\n" is not in the text read ("alpha", no newline after the last shown line).
    assert await patch(agent, "alpha\nbeta", "x") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ


async def test_files_written_by_the_agent_count_as_read(agent: Agent, ws: Workspace) -> None:
    await agent(WRITE, file_path=FILE, content="fresh text\n")
    assert await patch(agent, "fresh", "new") is None


async def test_long_file_patch_after_partial_read_follows_the_error_text(
    agent: Agent, ws: Workspace
) -> None:
    """Over 1,200 lines no read returns the whole file: the error names the lines to read."""
    seed(ws, "".join(f"line {i}\n" for i in range(1, 3001)))
    first = await agent(READ, file_path=FILE)
    assert first.structured["endLine"] == 1200 and not first.structured["full"]
    failed = await agent(PATCH, file_path=FILE, old_string="line 2500\n", new_string="row 2500\n")
    assert failed.error_code is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    assert "no offset or limit" not in failed.content
    assert "it starts at line 2,500" in failed.content
    # Follow the text alone: the read call it names, then the same patch again.
    shown = failed.content.split(f"{READ} ", 1)[1].split(", then patch")[0]
    args = json.loads(shown)
    assert args == {"file_path": FILE, "offset": 2495, "limit": 12}
    await agent(READ, **args)
    assert await patch(agent, "line 2500\n", "row 2500\n") is None
    assert "row 2500\n" in (ws.root / FILE).read_text()


async def test_long_file_replace_all_after_partial_read_says_what_to_do(
    agent: Agent, ws: Workspace
) -> None:
    seed(ws, "".join(f"line {i}\n" for i in range(1, 3001)))
    await agent(READ, file_path=FILE, offset=10, limit=5)
    result = await agent(
        PATCH, file_path=FILE, old_string="line 11", new_string="x", replace_all=True
    )
    assert result.error_code is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    assert "too long to read at once" in result.content and "without replace_all" in result.content
    # No flag was set: a patch inside what was read still works.
    assert await patch(agent, "line 11\n", "row 11\n") is None


async def test_a_patch_after_a_partial_read_keeps_the_read_partial(
    agent: Agent, ws: Workspace
) -> None:
    seed(ws, "".join(f"line {i}\n" for i in range(1, 11)))
    await agent(READ, file_path=FILE, offset=2, limit=2)
    assert await patch(agent, "line 3", "row 3") is None
    # What it has seen, as patched, serves the next patch...
    assert await patch(agent, "row 3", "third") is None
    # ...but it still has not seen lines 1 and 4-10.
    assert await patch(agent, "line 7", "seventh") is ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ
    assert "line 7" in (ws.root / FILE).read_text()
