"""The MCP manager against a server that misbehaves on purpose (tests/peers/raw_peer.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.errors import ErrorCode
from tavern_agent.mcp import ApprovalRequest, McpManager
from tavern_agent.mcp.logs import LOG_CAP_BYTES

from .mcp_helpers import PEERS, call, gate_for, permit, register

pytestmark = [pytest.mark.slow, pytest.mark.mcp_peers]
RAW_PEER = PEERS / "raw_peer.py"
TOOLS = ("server_error", "string_result", "no_result", "garbage", "flood", "big", "ask")


async def _raw(manager: McpManager, tmp_path: Path, **extra: Any) -> None:
    register(
        manager,
        "raw",
        {"type": "stdio", "command": sys.executable, "args": [str(RAW_PEER)]},
        **extra,
    )
    await manager.discover("raw")
    permit(manager, "raw", **dict.fromkeys(TOOLS, "allow"))


async def test_a_server_error_is_reported_with_its_message(tmp_path: Path) -> None:
    async with McpManager(tmp_path / "data") as manager:
        await _raw(manager, tmp_path)
        gate = gate_for(manager, tmp_path / "ws")
        failed = await call(gate, "mcp__raw__server_error")
        assert failed.error_code is ErrorCode.MCP_SERVER_ERROR
        assert "backend is down" in failed.content and "-32000" in failed.content
        conn = manager.pool.current("raw")
        assert conn is not None  # the connection was kept, not restarted
        again = await call(gate, "mcp__raw__garbage", cid="c2")
        assert (again.is_error, again.content) == (False, "fine after garbage")
        assert manager.pool.current("raw") is conn


@pytest.mark.parametrize(
    ("tool", "why"),
    [("string_result", "result is not an object"), ("no_result", "neither result nor error")],
)
async def test_a_malformed_response_is_reported_at_once(
    tmp_path: Path, tool: str, why: str
) -> None:
    async with McpManager(tmp_path / "data") as manager:
        await _raw(manager, tmp_path, timeouts={"callSeconds": 30})
        gate = gate_for(manager, tmp_path / "ws")
        started = time.monotonic()
        bad = await call(gate, f"mcp__raw__{tool}")
        assert time.monotonic() - started < 5  # not the 30 s call timeout
        assert bad.error_code is ErrorCode.MCP_UNSUPPORTED_RESPONSE
        assert why in bad.content


def test_parse_errors_stay_off_stderr_and_the_server_log_is_capped(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cli = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data)]
    peer = [sys.executable, str(RAW_PEER)]
    subprocess.run([*cli, "mcp", "add", "raw", "--", *peer], check=True, capture_output=True)
    subprocess.run([*cli, "mcp", "discover", "raw"], check=True, capture_output=True)
    subprocess.run(
        [*cli, "mcp", "allow", "raw", "garbage", "flood"], check=True, capture_output=True
    )
    for tool in ("garbage", "flood", "flood", "flood"):
        done = subprocess.run(
            [*cli, "call", f"mcp__raw__{tool}", "{}"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert "fine after garbage" in done.stdout or "flooded" in done.stdout
    logs = data / "mcp" / "logs"
    assert "Failed to parse JSONRPC message" in (logs / "sdk.log").read_text()
    server_log = logs / "raw.log"
    rotated = logs / "raw.log.1"
    assert rotated.exists()  # 9 MB went through, in two files of at most the cap
    assert server_log.stat().st_size <= LOG_CAP_BYTES
    assert rotated.stat().st_size == LOG_CAP_BYTES


async def test_a_result_over_4_mib_is_cut_and_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    async with McpManager(tmp_path / "data") as manager:
        await _raw(manager, tmp_path)
        gate = gate_for(manager, ws)
        big = await call(gate, "mcp__raw__big")
        assert not big.is_error
        assert "[Long result: 4,194," in big.content
        assert "sent 5.0 MiB; results are capped at 4 MiB" in big.content
        saved = (ws / big.structured["path"]).read_text()
        assert saved.replace("\n", "").count("0123456789abcdef") == 4 * 1024 * 1024 // 16


async def test_elicitation_goes_to_the_approver_with_the_schema_defaults(tmp_path: Path) -> None:
    async with McpManager(tmp_path / "data") as manager:
        await _raw(manager, tmp_path)
        gate = gate_for(manager, tmp_path / "ws")
        declined = await call(gate, "mcp__raw__ask")  # the default policy declines
        assert declined.content == '{"action": "decline"}'
        asked: list[ApprovalRequest] = []

        async def accept(request: ApprovalRequest) -> bool:
            asked.append(request)
            return True

        manager.approver = accept
        accepted = await call(gate, "mcp__raw__ask", cid="c2")
        assert accepted.content == '{"action": "accept", "content": {"count": 3, "name": "Ada"}}'
        assert [(r.kind, r.message, r.server) for r in asked] == [
            ("elicitation", "Who is asking?", "raw")
        ]

        async def edit(request: ApprovalRequest) -> bool:
            request.arguments["name"] = "Grace"
            return True

        manager.approver = edit
        edited = await call(gate, "mcp__raw__ask", cid="c3")
        assert edited.content == '{"action": "accept", "content": {"count": 3, "name": "Grace"}}'
