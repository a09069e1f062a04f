"""Every file under the data dir that holds a key is owner-only (0600)."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tavern_agent.endpoint import keys
from tavern_agent.extensions.remote import HostFiles
from tavern_agent.mcp.oauth import FileTokenStorage
from tavern_agent.mcp.registrations import RegistrationStore
from tests.test_cli import run

HEADER = "Bearer hdr-Secret0123456789"
ENV_KEY = "env-Secret0123456789"
ARG_KEY = "arg-Secret0123456789"
OLD_KEY = "old-Secret0123456789"
ACCESS = "access-Secret0123456789"
CLIENT_SECRET = "client-Secret0123456789"
ENDPOINT_KEY = "ta-endpoint-Secret0123456789"
EXT_TOKEN = "ext-Secret0123456789"
SECRETS = (HEADER, ENV_KEY, ARG_KEY, OLD_KEY, ACCESS, CLIENT_SECRET, ENDPOINT_KEY, EXT_TOKEN)


def _older_registration(data: Path) -> Path:
    """A registration with a secret as an older version wrote it: 0644."""
    path = RegistrationStore(data).registrations_dir / "old.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    reg = {
        "id": "old",
        "displayName": "Old",
        "transport": {"type": "stdio", "command": "node", "env": {"KEY": OLD_KEY}},
    }
    path.write_text(json.dumps(reg))
    path.chmod(0o644)
    return path


async def _oauth_tokens(path: Path) -> None:
    storage = FileTokenStorage(path)
    await storage.set_client_info(
        OAuthClientInformationFull(
            client_id="c1", client_secret=CLIENT_SECRET, redirect_uris=["http://127.0.0.1:1/cb"]
        )
    )
    await storage.set_tokens(OAuthToken(access_token=ACCESS, token_type="Bearer"))


def test_every_file_holding_a_key_is_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    web = ["mcp", "add", "Web", "--url", "http://127.0.0.1:3001/mcp"]
    assert run(*web, "--header", f"Authorization={HEADER}", data_dir=data).returncode == 0
    memory = ["mcp", "add", "Memory", "--env", f"API_KEY={ENV_KEY}", "--"]
    assert run(*memory, "node", "server.js", f"--key={ARG_KEY}", data_dir=data).returncode == 0
    older = _older_registration(data)
    paused = run("mcp", "pause", "old", data_dir=data)  # any rewrite tightens the old file
    assert paused.returncode == 0, paused.stderr
    asyncio.run(_oauth_tokens(RegistrationStore(data).oauth_path("web")))
    key_file = keys.key_path(data)
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(ENDPOINT_KEY + "\n")  # a key the user wrote by hand
    key_file.chmod(0o644)
    assert keys.load_or_create(data) == (ENDPOINT_KEY, False)
    HostFiles(data).write("ws://127.0.0.1:1", EXT_TOKEN)

    holding: dict[str, list[str]] = {}
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        found = [s for s in SECRETS if s in text]
        if found:
            holding[str(path.relative_to(data))] = found
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, found)
    assert older.name in {Path(p).name for p in holding}
    # Each secret was found, so the walk above checked every kind of file.
    assert {s for found in holding.values() for s in found} == set(SECRETS), holding
