"""The multi-agent tools' argument rules: open briefs, text caps, enums, defaults, scenes."""

from __future__ import annotations

import json
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import Profile, ToolSelection
from tavern_agent.core.results import AwaitRequested, DelegateRequested, HandoffAccepted
from tavern_agent.runtime.briefs import handoff_brief, task_brief

from .conftest import make_gate

AGENT_TOOLS = ("builtin:agent.delegate", "builtin:agent.await", "builtin:agent.handoff")


def agent_profile() -> Profile:
    return Profile(id="lead", name="lead", tools=ToolSelection(allow=AGENT_TOOLS))


async def handle(assembly: Assembly, name: str, args: dict[str, Any]) -> Any:
    gate = make_gate(assembly, agent_profile())
    return await gate.handle(ToolCall("c1", name, json.dumps(args)), round=1)


async def test_a_task_is_an_open_object_whose_extra_keys_become_additional_instructions(
    assembly: Assembly,
) -> None:
    task = {"objective": "Check the bridge scene.", "tone": "terse", "avoid": "spoilers"}
    executed = await handle(assembly, "agent_delegate", {"agentId": "checker", "task": task})
    assert not executed.result.is_error
    assert isinstance(executed.effect, DelegateRequested)
    brief = task_brief(executed.effect.task, "checker", Scene.CHAT)
    assert "## Additional Instructions\n- tone: terse\n- avoid: spoilers" in brief
    assert brief.index("## Objective") < brief.index("## Additional Instructions")


async def test_a_handoff_brief_keeps_its_extra_keys_and_accepts_only_deny_if_pending(
    assembly: Assembly,
) -> None:
    brief = {
        "objective": "Polish the reply.",
        "pendingTaskPolicy": "denyIfPending",
        "style": "lyric",
    }
    executed = await handle(assembly, "agent_handoff", {"agentId": "editor", "handoff": brief})
    assert isinstance(executed.effect, HandoffAccepted)
    text = handoff_brief("lead", executed.effect.brief, 1)
    assert "- style: lyric" in text and "denyIfPending" not in text
    refused = await handle(
        assembly,
        "agent_handoff",
        {"agentId": "editor", "handoff": {"objective": "x", "pendingTaskPolicy": "cancelPending"}},
    )
    assert refused.result.error_code.value == "tool.invalid_arguments"
    assert "pendingTaskPolicy" in refused.result.content


async def test_text_fields_are_capped_at_8000_characters(assembly: Assembly) -> None:
    for task in ({"objective": "x" * 8_001}, {"objective": "ok", "notes": "y" * 8_001}):
        executed = await handle(assembly, "agent_delegate", {"agentId": "a", "task": task})
        assert executed.result.error_code.value == "tool.invalid_arguments", task.keys()
    fits = await handle(
        assembly, "agent_delegate", {"agentId": "a", "task": {"objective": "x" * 8_000}}
    )
    assert not fits.result.is_error


async def test_await_mode_defaults_to_next_completed(assembly: Assembly) -> None:
    executed = await handle(assembly, "agent_await", {})
    assert isinstance(executed.effect, AwaitRequested) and executed.effect.mode == "nextCompleted"


async def test_task_return_confidence_is_low_medium_or_high(assembly: Assembly) -> None:
    snapshot = assembly.snapshot(agent_profile(), Scene.CHAT, child=True)
    binding = snapshot.by_name("task_return")
    assert binding is not None
    assert binding.parameters["properties"]["confidence"]["enum"] == ["low", "medium", "high"]


def test_the_session_scene_has_no_delegate_await_or_handoff(assembly: Assembly) -> None:
    session = {str(d.tool_id) for d in assembly.catalog.descriptors(Scene.SESSION)}
    chat = {str(d.tool_id) for d in assembly.catalog.descriptors(Scene.CHAT)}
    assert set(AGENT_TOOLS) <= chat
    assert not set(AGENT_TOOLS) & session
