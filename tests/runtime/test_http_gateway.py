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


ANTHROPIC_EVENTS = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude",
            "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    },
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "dice_roll", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"formula":'},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": ' "1d20"}'},
    },
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def test_anthropic_streaming_over_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tavern_agent.providers.gateway import ModelRequest
    from tavern_agent.runtime.run import Run, RunSpec
    from tests.runtime.helpers import profile

    seen: dict[str, object] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_POST(self) -> None:
            seen["path"] = self.path
            seen["headers"] = dict(self.headers)
            seen["body"] = json.loads(self.rfile.read(int(self.headers["content-length"])))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for event in ANTHROPIC_EVENTS:
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("TA_ANTHROPIC_KEY", "ak-test")
    h = Harness(tmp_path)
    spec = RunSpec(profile(), ModelProtocol.ANTHROPIC, chat_file=h.chat_path)
    run = Run.start(h.data, h.catalog, spec)
    inv = run.invocations[0]
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    gateway = HttpGateway(
        ModelConfig(ModelProtocol.ANTHROPIC, "claude", url, api_key_env="TA_ANTHROPIC_KEY")
    )

    async def main() -> object:
        try:
            return await gateway.respond(
                ModelRequest(run.id, inv.id, 1, inv.transcript, inv.snapshot)
            )
        finally:
            await gateway.aclose()

    reply = asyncio.run(main())
    httpd.shutdown()
    httpd.server_close()
    call = reply.response.calls[0]  # type: ignore[attr-defined]
    assert call.name == "dice_roll" and json.loads(call.call.raw_arguments) == {"formula": "1d20"}
    assert seen["path"] == "/v1/messages"
    headers = {k.lower(): v for k, v in seen["headers"].items()}  # type: ignore[attr-defined]
    assert headers["x-api-key"] == "ak-test" and headers["anthropic-version"] == "2023-06-01"
    body = seen["body"]
    assert body["stream"] is True and body["model"] == "claude"  # type: ignore[index]
    assert any(t["name"] == "workspace_finish" for t in body["tools"])  # type: ignore[index]
