"""The MCP manager against real servers: the reference servers and small FastMCP peers."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.naming import NAME_RULES, ModelProtocol
from tavern_agent.mcp import ApprovalRequest, McpManager

from .mcp_helpers import (
    DOTTED,
    EVERYTHING,
    FILESYSTEM,
    LOOPBACK,
    RecordingProxy,
    call,
    calls_in,
    fast_peer,
    gate_for,
    permit,
    register,
)

pytestmark = [pytest.mark.slow, pytest.mark.mcp_peers]

EVERYTHING_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "simulate-research-query",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
}  # fmt: skip  (the elicitation tools are listed because our client can answer elicitation)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def everything_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("http") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["node", "--require", str(LOOPBACK), str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"no server: {log.read_text()}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def _everything(transport: str, tmp_path: Path, http_url: str) -> dict[str, Any]:
    if transport == "http":
        return {"type": "http", "url": http_url}
    # A tee in front of the server records every JSON-RPC message it receives.
    wire = tmp_path / "wire.log"
    return {
        "type": "stdio",
        "command": "sh",
        "args": ["-c", f'tee -a "$WIRE_LOG" | exec node "{EVERYTHING}" stdio'],
        "env": {"WIRE_LOG": str(wire)},
    }


def _tool_calls(wire: Path) -> list[str]:
    if not wire.exists():
        return []
    found = []
    for line in wire.read_text().splitlines():
        message = json.loads(line)
        if message.get("method") == "tools/call":
            found.append(message["params"]["name"])
    return found


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_server_everything(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("everything_http") if transport == "http" else ""
    ws = tmp_path / "ws"
    # Over HTTP a recording proxy sits in front of the server, as the tee does for stdio.
    proxy = RecordingProxy(int(url.rsplit(":", 1)[1].split("/")[0])) if url else None
    if proxy is not None:
        await proxy.__aenter__()
        url = f"http://127.0.0.1:{proxy.port}/mcp"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "everything", _everything(transport, tmp_path, url))
        found = await manager.discover("everything")
        assert set(found.names) == EVERYTHING_TOOLS and not found.skipped
        reg = manager.store.get("everything")
        assert reg is not None
        assert {reg.permission(t) for t in found.names} == {"off"}
        # Everything off: nothing is offered.
        assert not [d for d in gate_for(manager, ws).snapshot.bindings if d.tool_id.kind == "mcp"]

        tools = ["echo", "get-sum", "get-structured-content", "get-tiny-image"]
        permit(manager, "everything", **dict.fromkeys(tools, "allow"))
        gate = gate_for(manager, ws)
        names = {b.model_name for b in gate.snapshot.bindings}
        assert {f"mcp__everything__{t}" for t in tools} <= names

        echo = await call(gate, "mcp__everything__echo", {"message": "hello"})
        assert (echo.is_error, echo.content) == (False, "Echo: hello")
        total = await call(gate, "mcp__everything__get-sum", {"a": 2, "b": 3})
        assert total.content == "The sum of 2 and 3 is 5."

        weather = await call(
            gate, "mcp__everything__get-structured-content", {"location": "Chicago"}
        )
        assert not weather.is_error
        assert weather.structured == {
            "temperature": 36,
            "conditions": "Light rain / drizzle",
            "humidity": 82,
        }

        image = await call(gate, "mcp__everything__get-tiny-image")
        assert not image.is_error
        pngs = [r for r in image.resource_refs if r.endswith(".png")]
        assert len(pngs) == 1 and pngs[0].startswith("tool-results/inv_mcp/")
        assert (ws / pngs[0]).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert f"[image saved: {pngs[0]}" in image.content

        # Switched off after the snapshot was built: refused before sending.
        permit(manager, "everything", echo="off")
        denied = await call(gate, "mcp__everything__echo", {"message": "secret"}, cid="c9")
        assert denied.is_error and denied.error_code is ErrorCode.MCP_PERMISSION_DENIED
        assert "not sent" in denied.content
    if proxy is not None:
        await proxy.__aexit__()
        sent = proxy.tool_calls()
    else:
        sent = _tool_calls(tmp_path / "wire.log")
    # The echo switched off ("secret") never reached the server.
    assert sent == ["echo", "get-sum", "get-structured-content", "get-tiny-image"]


async def test_off_tool_is_never_sent_to_the_peer(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(log))
        await manager.discover("peer")
        permit(manager, "peer", ok="allow", lookup="allow")
        gate = gate_for(manager, tmp_path / "ws")
        assert (await call(gate, "mcp__peer__ok")).content == "ok"
        permit(manager, "peer", lookup="off")
        refused = await call(gate, "mcp__peer__lookup", {"key": "k"})
        assert refused.error_code is ErrorCode.MCP_PERMISSION_DENIED
        reg = manager.store.get("peer")
        assert reg is not None
        manager.store.save(reg.model_copy(update={"state": "paused"}))
        paused = await call(gate, "mcp__peer__ok")
        assert paused.error_code is ErrorCode.MCP_PERMISSION_DENIED and "paused" in paused.content
        manager.store.remove("peer")
        gone = await call(gate, "mcp__peer__ok")
        assert gone.error_code is ErrorCode.MCP_PERMISSION_DENIED and "removed" in gone.content
    assert [c["tool"] for c in calls_in(log)] == ["ok"]


async def test_ask_declines_by_default_and_asks_a_callback(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(log))
        await manager.discover("peer")
        permit(manager, "peer", lookup="ask")
        gate = gate_for(manager, tmp_path / "ws")
        declined = await call(gate, "mcp__peer__lookup", {"key": "k1"})
        assert declined.error_code is ErrorCode.MCP_PERMISSION_DENIED
        assert "declined" in declined.content
        assert calls_in(log) == []

        asked: list[ApprovalRequest] = []

        async def yes(request: ApprovalRequest) -> bool:
            asked.append(request)
            return True

        manager.approver = yes
        allowed = await call(gate, "mcp__peer__lookup", {"key": "k2"})
        assert allowed.content == "peer has k2"
        assert [(r.tool, r.preview) for r in asked] == [("lookup", '{"key":"k2"}')]
    assert [c["arguments"] for c in calls_in(log)] == [{"key": "k2"}]


async def test_crash_mid_call_is_unknown_and_the_server_restarts(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(log))
        register(manager, "other", fast_peer(tmp_path / "other.log", "other"))
        for reg in ("peer", "other"):
            await manager.discover(reg)
            permit(manager, reg, ok="allow", crash="allow")
        gate = gate_for(manager, tmp_path / "ws")
        crashed = await call(gate, "mcp__peer__crash")
        assert crashed.error_code is ErrorCode.MCP_CALL_OUTCOME_UNKNOWN
        assert "may have run" in crashed.content and "before repeating" in crashed.content
        assert (await call(gate, "mcp__other__ok", cid="c2")).content == "ok"
        again = await call(gate, "mcp__peer__ok", cid="c3")
        assert (again.is_error, again.content) == (False, "ok")
    assert [c["tool"] for c in calls_in(log)] == ["crash", "ok"]  # never retried


async def test_hang_times_out_as_unknown(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(log), timeouts={"callSeconds": 1})
        await manager.discover("peer")
        permit(manager, "peer", ok="allow", hang="allow")
        gate = gate_for(manager, tmp_path / "ws")
        started = time.monotonic()
        hung = await call(gate, "mcp__peer__hang")
        assert time.monotonic() - started < 5
        assert hung.error_code is ErrorCode.MCP_CALL_OUTCOME_UNKNOWN
        assert "no answer within 1 s" in hung.content
        assert (await call(gate, "mcp__peer__ok", cid="c2")).content == "ok"
    assert [c["tool"] for c in calls_in(log)] == ["hang", "ok"]


async def test_huge_result_goes_through_the_long_result_step(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(tmp_path / "calls.log"))
        await manager.discover("peer")
        permit(manager, "peer", huge="allow", ok="allow", fail="allow")
        gate = gate_for(manager, ws)
        big = await call(gate, "mcp__peer__huge")
        assert not big.is_error
        assert big.content.startswith("[Long result: 4,194,")  # cut at 4 MiB first
        assert len(big.content) < 5_000
        path = big.structured["path"]
        assert big.resource_refs == (path,)
        assert 4_190_000 <= len((ws / path).read_text()) <= 4_300_000
        # The audit file keeps the (cut) reply in its wire form, as the server sent it.
        raw = json.loads((ws / big.structured["auditPath"]).read_text())["raw"]
        assert raw["isError"] is False and raw["content"][0]["type"] == "text"
        assert len(raw["content"][0]["text"].encode()) == 4 * 1024 * 1024  # the cut text
        assert (await call(gate, "mcp__peer__ok", cid="c2")).content == "ok"
        failed = await call(gate, "mcp__peer__fail", {"reason": "no"}, cid="c3")
        assert failed.error_code is ErrorCode.MCP_TOOL_ERROR
        assert "cannot do that: no" in failed.content


async def test_same_names_on_two_servers_and_a_dotted_long_name(tmp_path: Path) -> None:
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "a", fast_peer(tmp_path / "a.log", "A"), name="twin")
        register(manager, "b", fast_peer(tmp_path / "b.log", "B"), name="twin")
        for reg in ("a", "b"):
            await manager.discover(reg)
            permit(manager, reg, lookup="allow", **{DOTTED: "allow"})
        for protocol in ModelProtocol:
            names = [
                b.model_name
                for b in gate_for(manager, tmp_path, protocol=protocol).snapshot.bindings
            ]
            assert len(set(names)) == len(names)
            assert all(NAME_RULES[protocol].accepts(n) for n in names)
        gate = gate_for(manager, tmp_path / "ws")
        first = await call(gate, "mcp__twin__lookup", {"key": "k"})
        second = await call(gate, "mcp__twin__lookup__2", {"key": "k"}, cid="c2")
        assert (first.content, second.content) == ("A has k", "B has k")
        dotted = [b.model_name for b in gate.snapshot.bindings if b.tool_id.name == DOTTED]
        assert len(dotted) == 2
        answer = await call(gate, dotted[0], cid="c3")
        assert answer.content == "dotted ok"


async def test_list_changed_refreshes_the_cache_and_new_tools_start_off(tmp_path: Path) -> None:
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(tmp_path / "calls.log"))
        first = await manager.discover("peer")
        assert "extra" not in first.names
        permit(manager, "peer", add_tool="allow")
        gate = gate_for(manager, tmp_path / "ws")
        assert (await call(gate, "mcp__peer__add_tool")).content == "added"
        for _ in range(100):
            cached = manager.store.catalog("peer")
            if cached is not None and "extra" in cached.names:
                break
            await asyncio.sleep(0.05)
        assert cached is not None and "extra" in cached.names
        assert cached.discovered_at > first.discovered_at
        reg = manager.store.get("peer")
        assert reg is not None and reg.permission("extra") == "off"


async def test_filesystem_read_outside_its_root_is_a_tool_error(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "note.txt").write_text("inside text")
    (outside / "secret.txt").write_text("TOP SECRET")
    transport = {"type": "stdio", "command": "node", "args": [str(FILESYSTEM), str(root)]}
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "files", transport)
        await manager.discover("files")
        permit(manager, "files", read_text_file="allow")
        gate = gate_for(manager, tmp_path / "ws")
        inside = await call(gate, "mcp__files__read_text_file", {"path": str(root / "note.txt")})
        assert (inside.is_error, inside.content) == (False, "inside text")
        result = await call(
            gate, "mcp__files__read_text_file", {"path": str(outside / "secret.txt")}, cid="c2"
        )
        assert result.error_code is ErrorCode.MCP_TOOL_ERROR
        assert "Access denied" in result.content
        assert "TOP SECRET" not in result.content
