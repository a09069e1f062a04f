"""tavern-agent: the agent tool system of a roleplay chat app.

The names below are the public API; each is imported on first use, so
``import tavern_agent`` stays cheap. ``docs/python-api.md`` shows each in a
runnable example::

    from tavern_agent import Assembly, Profile, Scene, ToolCall, ToolId

    profile = Profile.allowing([ToolId.builtin("dice.roll")])
    async with await Assembly.open(data_dir) as assembly:
        gate = assembly.gate(assembly.snapshot(profile, Scene.SESSION))
        executed = await gate.handle(ToolCall("call_1", "dice_roll", '{"formula": "2d6"}'))

Agent runs: :class:`RunSpec` → :meth:`Run.start` → :class:`Engine` with a
:class:`HttpGateway` (any provider), a :class:`ReplayGateway` (a recording) or
a :class:`ScriptedGateway` (a list of :class:`Turn`); :func:`read_journal`
reads a run's journal as :class:`JournalRecord` values holding typed events
(:class:`ToolResultStored`, :class:`RunCompleted`, ... in
``tavern_agent.runtime.events``). Extension tools: ``@registry.tool(...)`` on
:data:`registry` or an :class:`ExtensionRegistry` of one's own. MCP servers:
a :class:`Registration` saved and discovered through an :class:`McpManager`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "AgentToolResult": "tavern_agent.core.results",
    "Assembly": "tavern_agent.assembly",
    "ChatSource": "tavern_agent.assembly",
    "Engine": "tavern_agent.runtime.loop",
    "ErrorCode": "tavern_agent.core.errors",
    "ExtensionContext": "tavern_agent.extensions.python",
    "ExtensionRegistry": "tavern_agent.extensions.python",
    "HttpGateway": "tavern_agent.providers.gateway",
    "JournalRecord": "tavern_agent.runtime.journal",
    "McpManager": "tavern_agent.mcp.manager",
    "ModelConfig": "tavern_agent.providers.gateway",
    "ModelProtocol": "tavern_agent.core.naming",
    "Opaque": "tavern_agent.runtime.events",
    "Participants": "tavern_agent.chat.st_data",
    "Profile": "tavern_agent.core.profile",
    "Registration": "tavern_agent.mcp.registrations",
    "ReplayGateway": "tavern_agent.providers.gateway",
    "Run": "tavern_agent.runtime.run",
    "RunCompleted": "tavern_agent.runtime.events",
    "RunResult": "tavern_agent.runtime.loop",
    "RunSpec": "tavern_agent.runtime.run",
    "Scene": "tavern_agent.core.descriptors",
    "ScriptedGateway": "tavern_agent.runtime.scripted",
    "ToolCall": "tavern_agent.core.calls",
    "ToolDescriptor": "tavern_agent.core.descriptors",
    "ToolId": "tavern_agent.core.ids",
    "ToolResultStored": "tavern_agent.runtime.events",
    "Turn": "tavern_agent.runtime.scripted",
    "read_events": "tavern_agent.runtime.journal",
    "read_journal": "tavern_agent.runtime.journal",
    "registry": "tavern_agent.extensions.python",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and return the name."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tavern_agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
