"""Tool descriptions as a snapshot offers them: real tool names, this profile's limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import builtin_model_name
from tavern_agent.core.profile import Profile
from tavern_agent.tools.snapshot import ToolSnapshot


def snapshot(tmp_path: Path, scene: Scene, allow: list[str], **extra: object) -> ToolSnapshot:
    assembly = Assembly(tmp_path / "data")
    profile = Profile.from_json({"id": "p", "name": "p", "tools": {"allow": allow}, **extra})
    return assembly.snapshot(profile, scene)


def description(snap: ToolSnapshot, name: str) -> str:
    binding = snap.by_name(name)
    assert binding is not None
    return binding.descriptor.description


@pytest.mark.parametrize("scene", list(Scene))
def test_each_description_names_only_tools_of_its_snapshot(tmp_path: Path, scene: Scene) -> None:
    assembly = Assembly(tmp_path / "data")
    builtins = [t for t in assembly.catalog.builtins if t.descriptor.serves(scene)]
    every = {builtin_model_name(t.tool_id) for t in assembly.catalog.builtins}
    for tool in builtins:
        if tool.child_only:
            continue
        alone = assembly.snapshot(
            Profile.from_json({"id": "p", "name": "p", "tools": {"allow": [str(tool.tool_id)]}}),
            scene,
        )
        own = builtin_model_name(tool.tool_id)
        text = description(alone, own)
        for other in every - {own}:
            assert other not in text, f"{own} names {other}: {text}"
            assert other.replace("_", " ") not in text, f"{own} names {other}: {text}"


def test_delegate_names_agent_await_only_when_offered(tmp_path: Path) -> None:
    both = snapshot(tmp_path, Scene.CHAT, ["builtin:agent.delegate", "builtin:agent.await"])
    assert "collect the result with agent_await" in description(both, "agent_delegate")
    alone = snapshot(tmp_path, Scene.CHAT, ["builtin:agent.delegate"])
    assert "await" not in description(alone, "agent_delegate")
    handoff = snapshot(tmp_path, Scene.CHAT, ["builtin:agent.handoff"])
    assert description(handoff, "agent_handoff").startswith("Hand off the rest of this run")


def test_shell_description_follows_the_profile_and_the_scene(tmp_path: Path) -> None:
    chat = snapshot(
        tmp_path, Scene.CHAT, ["builtin:workspace.shell"], limits={"shell": {"timeoutSeconds": 5}}
    )
    text = description(chat, "workspace_shell")
    assert "5 s limit" in text and "30 s" not in text
    assert "e.g. /output/main.md; /tool-results and /skills are read-only" in text
    session = snapshot(tmp_path, Scene.SESSION, ["builtin:workspace.shell"])
    text = description(session, "workspace_shell")
    assert "e.g. /work/notes.md; /tool-results is read-only" in text
    assert "/output" not in text and "/skills" not in text
    narrowed = snapshot(
        tmp_path,
        Scene.CHAT,
        ["builtin:workspace.shell"],
        workspace={"visibleRoots": ["scratch", "tool-results"], "writableRoots": ["scratch"]},
    )
    assert "e.g. /scratch/notes.md; /tool-results is read-only" in description(
        narrowed, "workspace_shell"
    )


def test_role_mode_and_ref_have_descriptions(tmp_path: Path) -> None:
    snap = snapshot(
        tmp_path,
        Scene.CHAT,
        ["builtin:chat.search", "builtin:agent.await", "builtin:worldinfo.read_activated"],
    )

    def prop(name: str, *path: str) -> dict[str, object]:
        binding = snap.by_name(name)
        assert binding is not None
        node: dict[str, object] = dict(binding.parameters)
        for key in path:
            node = node[key]  # type: ignore[assignment]
        return node

    assert prop("chat_search", "properties", "role")["description"]
    assert prop("agent_await", "properties", "mode")["description"]
    entry = prop("worldinfo_read_activated", "properties", "entries", "items", "properties")
    assert entry["ref"]["description"]  # type: ignore[index]
