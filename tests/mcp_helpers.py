"""Shared helpers for the MCP tests: real peers under tests/peers/, a gate over a manager."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.mcp import McpManager
from tavern_agent.mcp.registrations import parse_registration
from tavern_agent.tools.builtin import builtin_registry
from tavern_agent.tools.catalog import ToolCatalog
from tavern_agent.tools.dispatch import Dispatcher
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.results import DirectoryResultFiles
from tavern_agent.tools.snapshot import build_snapshot

PEERS = Path(__file__).parent / "peers"
MODULES = PEERS / "node_modules" / "@modelcontextprotocol"
EVERYTHING = MODULES / "server-everything" / "dist" / "index.js"
FILESYSTEM = MODULES / "server-filesystem" / "dist" / "index.js"
FAST_PEER = PEERS / "fastmcp_peer.py"
LOOPBACK = PEERS / "loopback-only.cjs"
DOTTED = ("very.long.dotted.name." * 5)[:96] + ".end"  # as in fastmcp_peer.py


def register(manager: McpManager, reg_id: str, transport: dict[str, Any], **extra: Any) -> None:
    data = {"id": reg_id, "displayName": extra.pop("name", reg_id), "transport": transport}
    manager.store.save(parse_registration(data | extra))


def fast_peer(log: Path, name: str = "peer") -> dict[str, Any]:
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(FAST_PEER)],
        "env": {"PEER_CALL_LOG": str(log), "PEER_NAME": name},
    }


def calls_in(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def permit(manager: McpManager, reg_id: str, **perms: str) -> None:
    reg = manager.store.get(reg_id)
    assert reg is not None
    manager.store.save(reg.with_permissions(perms))  # type: ignore[arg-type]


def gate_for(
    manager: McpManager,
    workspace: Path,
    *tool_ids: str,
    protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT,
) -> ToolRequestGate:
    catalog = ToolCatalog(builtin_registry(), mcp=manager)
    ids = [ToolId.parse(t) for t in tool_ids] or [
        d.tool_id for d in catalog.descriptors(Scene.CHAT)
    ]
    snapshot = build_snapshot(catalog, Profile.allowing(ids), Scene.CHAT, protocol, "inv_mcp")
    return ToolRequestGate(
        snapshot, Dispatcher(catalog), result_files=DirectoryResultFiles(workspace), run_id="r"
    )


async def call(
    gate: ToolRequestGate, name: str, args: dict[str, Any] | None = None, cid: str = "c1"
) -> AgentToolResult:
    raw = json.dumps(args or {})
    return (await gate.handle(ToolCall(cid, name, raw), round=1)).result
