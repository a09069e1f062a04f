"""A small MCP server (the SDK's MCPServer, formerly FastMCP) for cases the reference
servers cannot show. Run: ``python fastmcp_peer.py`` over stdio.

Every tools/call is appended to ``$PEER_CALL_LOG`` (one JSON line) before it runs,
so tests can prove whether a call reached the server.

Tools: ``ok``, ``lookup`` (same name on every instance; answers with ``$PEER_NAME``),
``crash`` (exits mid-call), ``hang`` (never answers), ``huge`` (a 5 MB text),
``fail`` (a tool error), a dotted 100-character name, and ``add_tool`` (registers
a new tool, then sends ``notifications/tools/list_changed``).
"""

from __future__ import annotations

import json
import os
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NAME = os.environ.get("PEER_NAME", "peer")
LOG = os.environ.get("PEER_CALL_LOG")
DOTTED = ("very.long.dotted.name." * 5)[:96] + ".end"
assert len(DOTTED) == 100

server = MCPServer(NAME)


def record(tool: str, **arguments: object) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.write(
                json.dumps({"tool": tool, "arguments": arguments, "t": time.time()}) + "\n"
            )


@server.tool(description="Answer ok.")
def ok() -> str:
    record("ok")
    return "ok"


@server.tool(description="Say which server answered.")
def lookup(key: str) -> str:
    record("lookup", key=key)
    return f"{NAME} has {key}"


@server.tool(description="Exit the server process in the middle of the call.")
async def crash() -> str:
    record("crash")
    await anyio.sleep(0.05)
    os._exit(3)


@server.tool(description="Never answer.")
async def hang() -> str:
    record("hang")
    await anyio.sleep(3600)
    return "late"


@server.tool(description="Return a 5 MB text.")
def huge() -> str:
    record("huge")
    line = "0123456789abcdefghijklmnopqrstuvwxyz" * 2 + "ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
    return line * (5_000_000 // len(line))


@server.tool(description="Fail with a tool error.")
def fail(reason: str) -> str:
    record("fail", reason=reason)
    raise ToolError(f"cannot do that: {reason}")


def dotted() -> str:
    record(DOTTED)
    return "dotted ok"


server.add_tool(dotted, name=DOTTED, description="A tool with a dotted 100-character name.")


def extra() -> str:
    record("extra")
    return "extra ok"


@server.tool(description="Add the tool 'extra' and announce the change.")
async def add_tool(ctx: Context) -> str:
    record("add_tool")
    server.add_tool(extra, name="extra", description="Added at run time.")
    await ctx.request_context.session.send_tool_list_changed()
    return "added"


if __name__ == "__main__":
    server.run("stdio")
