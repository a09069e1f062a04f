"""Shared helpers for the MCP tests: real peers under tests/peers/, a gate over a manager."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.mcp import McpManager
from tavern_agent.mcp.registrations import parse_registration
from tavern_agent.tools.gate import ToolRequestGate

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
    assembly = Assembly(workspace / "data", mcp=manager)
    ids = [ToolId.parse(t) for t in tool_ids] or [
        d.tool_id for d in assembly.catalog.descriptors(Scene.CHAT)
    ]
    snapshot = assembly.snapshot(Profile.allowing(ids), Scene.CHAT, protocol, "inv_mcp")
    return assembly.gate(snapshot, results_root=workspace, run_id="r")


async def call(
    gate: ToolRequestGate, name: str, args: dict[str, Any] | None = None, cid: str = "c1"
) -> AgentToolResult:
    raw = json.dumps(args or {})
    return (await gate.handle(ToolCall(cid, name, raw), round=1)).result


class RecordingProxy:
    """A TCP forwarder on 127.0.0.1 that keeps every byte the client sends.

    Put in front of an HTTP MCP server, it shows what reached the server —
    whatever the HTTP framing — so a test can prove a call was never sent.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = bytearray()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RecordingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            try:
                while data := await src.read(65536):
                    if record:
                        self.sent.extend(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    def tool_calls(self) -> list[str]:
        """Names of the tools/call requests that passed through, in order."""
        text = self.sent.decode("utf-8", errors="replace")
        names = []
        for match in re.finditer(r'"method"\s*:\s*"tools/call"', text):
            found = re.search(r'"name"\s*:\s*"([^"]+)"', text[match.end() : match.end() + 400])
            if found:
                names.append(found.group(1))
        return names
