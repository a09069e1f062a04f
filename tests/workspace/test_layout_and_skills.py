"""The data root layout and the read-only skills view."""

from __future__ import annotations

from pathlib import Path

import pytest

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import Profile
from tavern_agent.workspace.layout import DataRoot, chat_workspace_id, front_matter

from .conftest import Agent


def make_skill(data: Path, folder: str, name: str, description: str) -> None:
    (data / "skills" / folder / "scripts").mkdir(parents=True)
    (data / "skills" / folder / "SKILL.md").write_text(
        f'---\nname: {name}\ndescription: "{description}"\n---\n# {name}\nSteps.\n'
    )
    (data / "skills" / folder / "scripts" / "run.sh").write_text("echo hi\n")


def test_chat_workspace_id_is_stable_and_safe() -> None:
    a = chat_workspace_id("integrity-1234")
    assert a == chat_workspace_id("integrity-1234") != chat_workspace_id("integrity-1235")
    assert a.startswith("chat_") and len(a) == 29


def test_layout(tmp_path: Path) -> None:
    data = DataRoot(tmp_path)
    run = data.chat_run("integrity-1", "run_001", Profile.new("p"))
    assert run.root == tmp_path / "chats" / chat_workspace_id("integrity-1") / "runs" / "run_001"
    session = data.session("s1", Profile.new("p"))
    assert session.root == tmp_path / "sessions" / "s1"
    assert session.policy.visible == ("work", "tmp", "tool-results")
    with pytest.raises(ValueError, match="bad run id"):
        data.chat_run("integrity-1", "../x", Profile.new("p"))


def test_front_matter() -> None:
    assert front_matter("---\nname: x\ndescription: 'y: z'\n---\nbody") == {
        "name": "x",
        "description": "y: z",
    }
    assert front_matter("no fences") == {}


async def test_skills_view_is_filtered_and_read_only(tmp_path: Path) -> None:
    make_skill(tmp_path, "lore", "Lore keeper", "Keeps world facts straight.")
    make_skill(tmp_path, "secret", "Secret", "Not for this agent.")
    make_skill(tmp_path, "style", "Style", "House style.")
    profile = Profile.from_json(
        {"id": "p", "name": "p", "skills": {"visible": ["lore", "secret"], "deny": ["secret"]}}
    )
    data = DataRoot(tmp_path)
    assert [(s.folder, s.name, s.description) for s in data.skills(profile)] == [
        ("lore", "Lore keeper", "Keeps world facts straight.")
    ]
    agent = Agent(data.chat_run("chat-1", "run_1", profile))
    listing = await agent("workspace_list_files", path="skills", depth=3)
    assert listing.content.splitlines() == [
        "skills/lore/",
        "skills/lore/SKILL.md",
        "skills/lore/scripts/",
        "skills/lore/scripts/run.sh",
    ]
    read = await agent("workspace_read_file", file_path="skills/lore/SKILL.md")
    assert "name: Lore keeper" in read.content
    hidden = await agent("workspace_read_file", file_path="skills/secret/SKILL.md")
    assert hidden.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE
    write = await agent("workspace_write_file", file_path="skills/lore/SKILL.md", content="x")
    assert write.error_code is ErrorCode.WORKSPACE_PATH_NOT_WRITABLE
    found = await agent("workspace_search_files", pattern="echo", path="skills")
    assert found.content.startswith("skills/lore/scripts/run.sh:1: echo hi")
    default_scope = await agent("workspace_search_files", pattern="echo")
    assert default_scope.content.startswith("No matches")
