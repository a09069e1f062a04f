"""The answer's cap reaches every ``openai_chat`` server under the name it reads.

OpenAI's own API takes ``max_completion_tokens``; llama.cpp, Ollama, LM Studio
and KoboldCpp read ``max_tokens`` (llama.cpp ignores the other field and
generates until its context is full). A real server on 127.0.0.1 records each
request body.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tavern_agent.providers.choice import gateway_for
from tavern_agent.providers.openai_chat import cap_field
from tavern_agent.runtime.loop import Engine
from tests.runtime.helpers import EXAMPLES, Harness
from tests.runtime.openai_server import OpenAIServer
from tests.test_cli import run

TURNS = [
    [("workspace_write_file", {"file_path": "output/main.md", "content": "We ford the river."})],
    [("workspace_commit", {"reason": "reply"})],
    [("workspace_finish", {})],
]


@pytest.mark.parametrize(
    ("base_url", "compat", "field"),
    [
        ("https://api.openai.com/v1", "auto", "max_completion_tokens"),
        ("https://API.OpenAI.com/v1/", "auto", "max_completion_tokens"),
        ("https://my-res.openai.azure.com/openai/v1", "auto", "max_completion_tokens"),
        ("http://127.0.0.1:8080/v1", "auto", "max_tokens"),  # llama.cpp
        ("http://localhost:11434/v1", "auto", "max_tokens"),  # Ollama
        ("http://localhost:1234/v1", "auto", "max_tokens"),  # LM Studio
        ("http://localhost:5001/v1", "auto", "max_tokens"),  # KoboldCpp
        ("https://openrouter.ai/api/v1", "auto", "max_tokens"),
        ("https://api.openai.com.example.net/v1", "auto", "max_tokens"),
        ("https://proxy.example.net/v1", "openai", "max_completion_tokens"),
        ("https://api.openai.com/v1", "compatible", "max_tokens"),
    ],
)
def test_the_cap_field_follows_the_server(base_url: str, compat: str, field: str) -> None:
    assert cap_field(base_url, compat) == field


def test_an_unknown_compat_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, openai, compatible"):
        cap_field("http://127.0.0.1:8080/v1", "llama")


def _run_against(server: OpenAIServer, tmp_path: Path, *flags: str) -> dict[str, object]:
    """``tavern-agent run`` on the example chat against ``server``; the run's model record."""
    tmp_path.mkdir(exist_ok=True)
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    proc = run("run", str(chat), "--model", "local", "--base-url", server.base_url, *flags,
               data_dir=data)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_json = next(data.glob("chats/*/runs/*/run.json"))
    record: dict[str, object] = json.loads(run_json.read_text())["model"]
    return record


def test_a_compatible_server_gets_max_tokens(tmp_path: Path) -> None:
    with OpenAIServer(TURNS) as server:
        record = _run_against(server, tmp_path)
    assert server.bodies and all(
        b["max_tokens"] == 4096 and "max_completion_tokens" not in b for b in server.bodies
    )
    assert "compat" not in record  # decided again from the URL wherever the run goes on


def test_compat_openai_sends_max_completion_tokens_and_the_record_keeps_it(
    tmp_path: Path,
) -> None:
    with OpenAIServer(TURNS) as server:
        record = _run_against(server, tmp_path / "cli", "--compat", "openai")
        assert record["compat"] == "openai"
        # A resumed run and the Temporal workers build their gateway from the record.
        h = Harness(tmp_path / "resumed")
        engine = Engine(h.start(), gateway_for(record), fsync=False)

        async def main() -> str:
            try:
                return (await engine.start()).status
            finally:
                await engine.gateway.aclose()

        assert asyncio.run(main()) == "completed"
        engine.close()
    assert len(server.bodies) == 6
    assert all(b["max_completion_tokens"] == 4096 and "max_tokens" not in b for b in server.bodies)
