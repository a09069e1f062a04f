"""MCP registrations, import and the `tavern-agent mcp` commands (no servers started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tavern_agent.cli import cli
from tavern_agent.core.errors import ErrorCode
from tavern_agent.mcp import McpManager
from tavern_agent.mcp.registrations import (
    DiscoveredCatalog,
    DiscoveredTool,
    RegistrationError,
    RegistrationStore,
    import_mcp_servers,
    parse_registration,
)

from .mcp_helpers import call, gate_for


def test_http_is_loopback_only_unless_allowed() -> None:
    base = {"id": "w", "displayName": "w"}
    parse_registration(base | {"transport": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    with pytest.raises(RegistrationError, match="not a loopback address"):
        parse_registration(base | {"transport": {"type": "http", "url": "http://example.com/mcp"}})
    remote = {"type": "http", "url": "https://example.com/mcp", "allowRemote": True}
    assert parse_registration(base | {"transport": remote}).transport.type == "http"


def test_import_mcp_servers_file(tmp_path: Path) -> None:
    store = RegistrationStore(tmp_path)
    data = {
        "mcpServers": {
            "Memory": {"command": "npx", "args": ["-y", "x"], "env": {"A": "1"}},
            "web": {"url": "http://localhost:3001/mcp", "headers": {"X": "y"}},
            "old": {"command": "z", "disabled": True},
        }
    }
    regs = import_mcp_servers(data, store)
    assert [(r.id, r.state, r.transport.type) for r in regs] == [
        ("memory", "active", "stdio"),
        ("web", "active", "http"),
        ("old", "paused", "stdio"),
    ]
    assert all(r.tool_permissions == {} for r in regs)
    with pytest.raises(RegistrationError, match="mcpServers"):
        import_mcp_servers({"servers": {}}, store)


def test_cli_add_allow_deny_pause_list_remove(tmp_path: Path) -> None:
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["--data-dir", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
        return result.output

    run("mcp", "add", "Files", "--", "node", "server.js", "--root", "/tmp")
    store = RegistrationStore(tmp_path)
    reg = store.get("files")
    assert reg is not None and reg.transport.type == "stdio"
    assert reg.transport.args == ("server.js", "--root", "/tmp")
    tools = (DiscoveredTool(name=n, input_schema={"type": "object"}) for n in ("read", "write"))
    store.save_catalog("files", DiscoveredCatalog(discovered_at=0, tools=tuple(tools)))
    assert "off    read" in run("mcp", "list")
    run("mcp", "allow", "files", "read")
    run("mcp", "allow", "Files", "write", "--ask")
    listing = run("mcp", "list")
    assert "allow  read" in listing and "ask    write" in listing
    assert "mcp__Files__read" in run("tools", "list")
    run("mcp", "deny", "files", "--all")
    run("mcp", "pause", "files")
    entry = json.loads(run("mcp", "list", "--json"))[0]
    assert entry["state"] == "paused"
    assert entry["toolPermissions"] == {"read": "off", "write": "off"}
    run("mcp", "remove", "files")
    assert store.get("files") is None
    bad = runner.invoke(cli, ["--data-dir", str(tmp_path), "mcp", "allow", "nope", "x"])
    assert bad.exit_code != 0 and "no MCP server 'nope'" in bad.output


def test_broken_registrations_are_skipped_listed_and_removable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = CliRunner()

    def run(*args: str) -> tuple[str, str]:
        result = runner.invoke(cli, ["--data-dir", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
        assert result.exception is None
        return result.stdout, result.stderr

    run("mcp", "add", "Files", "--", "node", "server.js")
    store = RegistrationStore(tmp_path)
    tools = (DiscoveredTool(name="read", input_schema={"type": "object"}),)
    store.save_catalog("files", DiscoveredCatalog(discovered_at=0, tools=tools))
    run("mcp", "allow", "files", "read")
    regs = store.registrations_dir
    (regs / "bad.json").write_text("{nope")
    newer = store.get("files")
    assert newer is not None
    (regs / "newer.json").write_text(
        json.dumps(newer.to_json() | {"id": "newer", "oauthProfile": {"x": 1}})
    )
    (regs / "mismatch.json").write_text(json.dumps(newer.to_json()))

    listing, _ = run("mcp", "list")
    assert "files  'Files'  active" in listing and "allow  read" in listing
    assert "bad  broken" in listing and "not valid JSON" in listing
    assert "newer  broken" in listing and "unknown keys oauthProfile" in listing
    assert "mismatch  broken" in listing and "does not match the file name" in listing
    assert "run `tavern-agent mcp remove bad`" in listing
    entries = {e["id"]: e for e in json.loads(run("mcp", "list", "--json")[0])}
    assert entries["files"]["toolPermissions"] == {"read": "allow"}
    assert entries["newer"]["problem"].startswith("unknown keys oauthProfile")

    out, _ = run("tools", "list")
    assert "mcp__Files__read" in out
    assert "MCP registration bad.json skipped: not valid JSON" in caplog.text
    assert "`tavern-agent mcp remove newer`" in caplog.text
    out, _ = run("call", "dice_roll", '{"formula":"1d1"}')
    assert "1" in out

    refused = runner.invoke(cli, ["--data-dir", str(tmp_path), "mcp", "allow", "bad", "x"])
    assert refused.exit_code == 2 and "bad.json skipped: not valid JSON" in refused.output
    for reg_id in ("bad", "newer", "mismatch"):
        assert "removed" in run("mcp", "remove", reg_id)[0]
    assert sorted(p.name for p in regs.iterdir()) == ["files.json"]
    assert "broken" not in run("mcp", "list")[0]


def test_unreadable_catalog_cache_counts_as_not_discovered(tmp_path: Path) -> None:
    store = RegistrationStore(tmp_path)
    store.save(
        parse_registration(
            {"id": "w", "displayName": "w", "transport": {"type": "stdio", "command": "x"}}
        )
    )
    store.catalog_dir.mkdir(parents=True)
    (store.catalog_dir / "w.json").write_text("[1, 2")
    assert store.catalog("w") is None
    listing = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "mcp", "list"])
    assert listing.exit_code == 0 and "not discovered yet" in listing.output


async def test_a_registration_broken_after_the_snapshot_refuses_the_call(tmp_path: Path) -> None:
    async with McpManager(tmp_path / "data") as manager:
        transport = {"type": "stdio", "command": "/nonexistent/server"}
        reg = parse_registration({"id": "w", "displayName": "w", "transport": transport})
        manager.store.save(reg.with_permissions({"read": "allow"}))
        tools = (DiscoveredTool(name="read", input_schema={"type": "object"}),)
        manager.store.save_catalog("w", DiscoveredCatalog(discovered_at=0, tools=tools))
        gate = gate_for(manager, tmp_path / "ws")
        (manager.store.registrations_dir / "w.json").write_text('{"id": "w", "newKey": 1}')
        refused = await call(gate, "mcp__w__read")
        assert refused.error_code is ErrorCode.MCP_SERVER_UNAVAILABLE
        assert "registration file of its MCP server is broken" in refused.content
        assert manager.pool.current("w") is None  # nothing was started
