"""OAuth 2.1 against an authorization server and a protected MCP server on 127.0.0.1.

Both come from tests/peers/oauth_peer.py (the MCP SDK's server-side auth). The
"browser" is a plain HTTP GET of the authorization URL, which the server
answers by redirecting to our loopback listener with a code.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tavern_agent.cli import cli
from tavern_agent.core.errors import ErrorCode
from tavern_agent.mcp import McpManager, RegistrationError
from tavern_agent.mcp.oauth import FileTokenStorage, login

from .mcp_helpers import PEERS, call, gate_for, permit, register

pytestmark = [pytest.mark.slow, pytest.mark.mcp_peers]
ACCESS_SECONDS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    as_port, rs_port = _free_port(), _free_port()
    log = tmp_path / "oauth-peer.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(PEERS / "oauth_peer.py"), str(as_port), str(rs_port)],
            env={**os.environ, "ACCESS_SECONDS": str(ACCESS_SECONDS)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        for port in (as_port, rs_port):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"no server: {log.read_text()}") from None
                    time.sleep(0.1)
        yield f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{rs_port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def _stats(auth_url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{auth_url}/admin/stats") as reply:
        data: dict[str, int] = json.loads(reply.read())
    return data


async def _browse(url: str) -> None:
    """The person approving in a browser: follow the redirect back to our listener."""
    await asyncio.to_thread(lambda: urllib.request.urlopen(url).read())


async def test_login_call_refresh_revoke_logout(tmp_path: Path, servers: tuple[str, str]) -> None:
    auth_url, mcp_url = servers
    data = tmp_path / "data"
    runner = CliRunner()
    async with McpManager(data) as manager:
        register(manager, "prot", {"type": "http", "url": mcp_url}, name="Protected")
        # Before any login: discovery and the CLI say which command to run.
        with pytest.raises(
            RegistrationError, match="needs a login; run `tavern-agent mcp login prot`"
        ):
            await manager.discover("prot")
        token_file = manager.store.oauth_path("prot")
        assert not token_file.exists()  # a run registers no client and stores nothing

        # Login through the CLI, with a "browser" command that follows the redirect.
        fetch = "import sys,urllib.request;urllib.request.urlopen(sys.argv[1]).read()"
        browser = f'{sys.executable} -c "{fetch}" %s'
        os.environ["BROWSER"] = browser
        try:
            done = await asyncio.to_thread(
                runner.invoke, cli, ["--data-dir", str(data), "mcp", "login", "prot"]
            )
        finally:
            del os.environ["BROWSER"]
        assert done.exit_code == 0, done.output
        assert "prot: logged in" in done.stdout and "/authorize?" in done.stderr
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        stored = json.loads(token_file.read_text())
        assert stored["tokens"]["access_token"] and stored["client"]["client_id"]
        assert _stats(auth_url)["registrations"] == 1  # dynamic client registration

        found = await manager.discover("prot")
        assert found.names == ["whoami"]
        permit(manager, "prot", whoami="allow")
        gate = gate_for(manager, tmp_path / "ws")
        hello = await call(gate, "mcp__Protected__whoami")
        assert (hello.is_error, hello.content) == (False, "hello, logged-in user")

        # The access token expires: the next call refreshes it, on the open connection.
        before = _stats(auth_url)["refreshes"]
        await asyncio.sleep(ACCESS_SECONDS + 0.5)
        again = await call(gate, "mcp__Protected__whoami", cid="c2")
        assert again.content == "hello, logged-in user"
        assert _stats(auth_url)["refreshes"] == before + 1

    # A new process loads the stored tokens with their expiry and refreshes too.
    await asyncio.sleep(ACCESS_SECONDS + 0.5)
    async with McpManager(data) as manager:
        gate = gate_for(manager, tmp_path / "ws")
        third = await call(gate, "mcp__Protected__whoami", cid="c3")
        assert third.content == "hello, logged-in user"
        assert _stats(auth_url)["refreshes"] == before + 2

        # Revoked at the server: a clear result at once, the call not sent.
        urllib.request.urlopen(urllib.request.Request(f"{auth_url}/admin/revoke", method="POST"))
        started = time.monotonic()
        revoked = await call(gate, "mcp__Protected__whoami", cid="c4")
        assert time.monotonic() - started < 10
        assert revoked.error_code is ErrorCode.MCP_LOGIN_REQUIRED
        assert "`tavern-agent mcp login prot`" in revoked.content
        assert "not sent" in revoked.content

        # Logging in again (in-process, the URL "opened" by _browse) fixes it.
        storage = FileTokenStorage(token_file)
        assert await login(mcp_url, {}, storage, _browse, 10)
        assert _stats(auth_url)["registrations"] == 1  # the stored client was reused
        fixed = await call(gate, "mcp__Protected__whoami", cid="c5")
        assert fixed.content == "hello, logged-in user"

    out = runner.invoke(cli, ["--data-dir", str(data), "mcp", "logout", "prot"])
    assert out.exit_code == 0 and "prot: logged out" in out.output
    assert not token_file.exists()
    async with McpManager(data) as manager:
        gate = gate_for(manager, tmp_path / "ws")
        gone = await call(gate, "mcp__Protected__whoami", cid="c6")
        assert gone.error_code is ErrorCode.MCP_LOGIN_REQUIRED
