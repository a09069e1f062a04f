"""`mcp list` does not print the secrets a registration carries unless asked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import run

TOKEN = "Bearer ghp_Secret0123456789"
ENV_KEY = "sk-env-Secret0123456789"
URL_PASSWORD = "pw-Secret0123456789"


def test_mcp_list_masks_header_env_and_url_secrets_unless_asked(tmp_path: Path) -> None:
    url = f"http://reader:{URL_PASSWORD}@127.0.0.1:3001/mcp"
    added = run(
        "mcp", "add", "Web", "--url", url, "--header", f"Authorization={TOKEN}", data_dir=tmp_path
    )
    assert added.returncode == 0, added.stderr
    stdio = ["mcp", "add", "Memory", "--env", f"API_KEY={ENV_KEY}", "--", "node", "server.js"]
    assert run(*stdio, data_dir=tmp_path).returncode == 0
    secrets = (TOKEN.split()[1], ENV_KEY, URL_PASSWORD)

    for args in (["mcp", "list"], ["mcp", "list", "--json"]):
        proc = run(*args, data_dir=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert not [s for s in secrets if s in proc.stdout + proc.stderr], args
    entries = {
        e["id"]: e for e in json.loads(run("mcp", "list", "--json", data_dir=tmp_path).stdout)
    }
    assert entries["web"]["transport"]["headers"] == {"Authorization": "[redacted]"}
    assert entries["web"]["transport"]["url"] == "http://[redacted]@127.0.0.1:3001/mcp"
    assert entries["memory"]["transport"]["env"] == {"API_KEY": "[redacted]"}

    shown = run("mcp", "list", "--json", "--show-secrets", data_dir=tmp_path).stdout
    full = {e["id"]: e for e in json.loads(shown)}
    assert full["web"]["transport"]["headers"] == {"Authorization": TOKEN}
    assert full["memory"]["transport"]["env"] == {"API_KEY": ENV_KEY}
    assert full["web"]["transport"]["url"] == url
