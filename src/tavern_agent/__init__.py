"""tavern-agent: the agent tool system of a roleplay chat app.

The names below are the public API; each is imported on first use, so
``import tavern_agent`` stays cheap::

    from tavern_agent import Assembly, Profile, Scene, ModelProtocol, ToolCall

    async with await Assembly.open(data_dir) as assembly:
        snapshot = assembly.snapshot(Profile.builtin("default-writer"), Scene.CHAT)
        gate = assembly.gate(snapshot)
        executed = await gate.handle(ToolCall("call_1", "dice_roll", '{"formula": "2d6"}'))

Agent runs: :class:`RunSpec` → :meth:`Run.start` → :class:`Engine` with a
:class:`HttpGateway` (any provider) or a :class:`ReplayGateway` (a recording).
Extension tools: ``@registry.tool(...)`` on :data:`registry`.
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
    "HttpGateway": "tavern_agent.providers.gateway",
    "ModelConfig": "tavern_agent.providers.gateway",
    "ModelProtocol": "tavern_agent.core.naming",
    "Profile": "tavern_agent.core.profile",
    "ReplayGateway": "tavern_agent.providers.gateway",
    "Run": "tavern_agent.runtime.run",
    "RunResult": "tavern_agent.runtime.loop",
    "RunSpec": "tavern_agent.runtime.run",
    "Scene": "tavern_agent.core.descriptors",
    "ToolCall": "tavern_agent.core.calls",
    "ToolDescriptor": "tavern_agent.core.descriptors",
    "ToolId": "tavern_agent.core.ids",
    "registry": "tavern_agent.extensions.python",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tavern_agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
