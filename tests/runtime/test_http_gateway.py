"""The real HTTP path: a local OpenAI-compatible server streams tool calls over SSE."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.gateway import HttpGateway, ModelConfig
from tavern_agent.runtime.loop import Engine
from tests.runtime.helpers import Harness, types
from tests.runtime.openai_server import OpenAIServer

TURNS = [
    [("chat_search", {"query": "bridge"})],
    [("workspace_write_file", {"file_path": "output/main.md", "content": "Über den Fluss."})],
    [("workspace_commit", {"reason": "reply"})],
    [("workspace_finish", {})],
]


def config(url: str, **more: object) -> ModelConfig:
    return ModelConfig(
        ModelProtocol.OPENAI_CHAT, "local", url, api_key_env="TA_TEST_KEY", backoff=0.01, **more
    )  # type: ignore[arg-type]


def test_a_run_over_http_commits_the_streamed_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TA_TEST_KEY", "sk-local")
    h = Harness(tmp_path)
    with OpenAIServer(TURNS, fail_first=1) as server:
        run = h.start()
        engine = Engine(run, HttpGateway(config(server.base_url)), fsync=False)

        async def main() -> str:
            try:
                return (await engine.start()).status
            finally:
                await engine.gateway.aclose()

        assert asyncio.run(main()) == "completed"
    engine.close()
    assert h.chat_messages()[-1]["mes"] == "Über den Fluss."
    assert "run_completed" in types(run)
    # 503 once, then four real requests; every body is a streamed chat completions request
    assert len(server.bodies) == 5
    assert all(b["stream"] is True and b["model"] == "local" for b in server.bodies)
    assert server.auth[-1] == "Bearer sk-local"
    last = server.bodies[-1]["messages"]
    assert last[0]["role"] == "system" and last[-1]["role"] == "tool"
    recorded = json.loads((run.run_dir / "model-responses" / "round-001.json").read_text())
    assert recorded["attempts"] == 2 and recorded["raw"]["events"]


def test_errors_that_are_not_retryable_end_the_run(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    gateway = HttpGateway(config("http://127.0.0.1:9/v1", max_retries=1))
    engine = Engine(h.start(), gateway, fsync=False)
    result = asyncio.run(engine.start())
    engine.close()
    assert result.status == "failed" and result.error_code == "model.request_failed"
    assert "cannot reach" in result.message


def test_a_4xx_answer_is_not_retried(tmp_path: Path) -> None:
    with OpenAIServer(TURNS) as server:
        gateway = HttpGateway(config(server.base_url.replace("/v1", "/v2")))
        h = Harness(tmp_path)
        engine = Engine(h.start(), gateway, fsync=False)
        result = asyncio.run(engine.start())
        engine.close()
    assert result.error_code == "model.request_failed" and "404" in result.message
    assert len(server.bodies) == 1
