"""The real HTTP path: a local OpenAI-compatible server streams tool calls over SSE."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.gateway import HttpGateway, ModelConfig
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tests.runtime.helpers import Harness, events, profile, types
from tests.runtime.openai_server import OpenAIServer
from tests.runtime.sse_server import (
    SIGNATURE,
    SseServer,
    Turn,
    gemini_events,
    gemini_turn,
    responses_events,
    responses_turn,
)

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


# ---------------------------------------------------------------- Responses and Gemini runs

REPLY_TURNS: list[Turn] = [
    (
        "Checking the chat first.",
        [("chat_search", {"query": "bridge"}), ("dice_roll", {"formula": "1d20+2"})],
    ),
    ("", [("workspace_write_file", {"file_path": "output/main.md", "content": "Über die Furt."})]),
    ("", [("workspace_commit", {"reason": "reply"})]),
    ("", [("workspace_finish", {})]),
]


def run_over(tmp_path: Path, protocol: ModelProtocol, url: str, model: str) -> tuple[Run, str]:
    """A whole chat run against ``url``; returns the run and its final status."""
    h = Harness(tmp_path)
    spec = RunSpec(profile(), protocol, chat_file=h.chat_path, seed=7)
    run = Run.start(h.data, h.catalog, spec)
    gateway = HttpGateway(ModelConfig(protocol, model, url, api_key_env="TA_TEST_KEY"))
    engine = Engine(run, gateway, fsync=False)

    async def main() -> str:
        try:
            return (await engine.start()).status
        finally:
            await gateway.aclose()

    try:
        status = asyncio.run(main())
    finally:
        engine.close()
    assert h.chat_messages()[-1]["mes"] == "Über die Furt."
    return run, status


def completed_calls(run: Run) -> list[tuple[str, str, bool]]:
    return [
        (e["payload"]["callId"], e["payload"]["name"], e["payload"]["isError"])
        for e in events(run)
        if e["type"] == "tool_call_completed"
    ]


def test_openai_responses_streaming_run_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TA_TEST_KEY", "sk-resp")
    with SseServer("/v1/responses", REPLY_TURNS, responses_turn, responses_events) as server:
        run, status = run_over(
            tmp_path, ModelProtocol.OPENAI_RESPONSES, server.origin + "/v1", "gpt-test"
        )
    assert status == "completed"
    assert "commit_confirmed" in types(run) and types(run)[-1] == "run_completed"
    # the streamed calls ran under the call_id the server gave, in output order
    assert completed_calls(run) == [
        ("call_0_0", "chat_search", False),
        ("call_0_1", "dice_roll", False),
        ("call_1_0", "workspace_write_file", False),
        ("call_2_0", "workspace_commit", False),
        ("call_3_0", "workspace_finish", False),
    ]
    seen = server.requests
    assert len(seen) == 4 and all(r.path == "/v1/responses" for r in seen)
    assert all(r.headers["authorization"] == "Bearer sk-resp" for r in seen)
    assert all(r.headers["accept"] == "text/event-stream" for r in seen)
    body = seen[-1].body
    assert body["stream"] is True and body["model"] == "gpt-test" and body["instructions"]
    assert any(t["name"] == "workspace_finish" for t in body["tools"])
    items = body["input"]
    assert {"role": "assistant", "content": "Checking the chat first."} in items
    # every streamed call comes back by call_id, followed by its output
    calls = [i for i in items if i.get("type") == "function_call"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == ["call_0_0", "call_0_1", "call_1_0", "call_2_0"]
    assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
    assert json.loads(calls[1]["arguments"]) == {"formula": "1d20+2"}
    assert all("id" not in c for c in calls)  # fc_ item ids are not replayed
    assert "Rolled 1d20+2" in outputs[1]["output"]
    recorded = json.loads((run.run_dir / "model-responses" / "round-001.json").read_text())
    assert recorded["protocol"] == "openai_responses"
    assert recorded["message"]["text"] == "Checking the chat first."
    assert recorded["usage"]["total_tokens"] == 52
    assert recorded["raw"]["events"][-1]["type"] == "response.completed"


def test_gemini_streaming_run_over_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TA_TEST_KEY", "g-key")
    path = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    with SseServer(path, REPLY_TURNS, gemini_turn, gemini_events, crlf=True) as server:
        run, status = run_over(
            tmp_path, ModelProtocol.GEMINI, server.origin + "/v1beta", "gemini-test"
        )
    assert status == "completed"
    assert "commit_confirmed" in types(run) and types(run)[-1] == "run_completed"
    done = completed_calls(run)
    assert [(name, error) for _, name, error in done] == [
        ("chat_search", False),
        ("dice_roll", False),
        ("workspace_write_file", False),
        ("workspace_commit", False),
        ("workspace_finish", False),
    ]
    ids = [call_id for call_id, _, _ in done]
    assert len(set(ids)) == len(ids) and all(ids)  # Gemini sent none; each got its own
    seen = server.requests
    assert len(seen) == 4 and all(r.path == path for r in seen)
    assert all(r.headers["x-goog-api-key"] == "g-key" for r in seen)
    assert all("authorization" not in r.headers for r in seen)
    body = seen[-1].body
    assert "stream" not in body and "model" not in body  # the model is in the URL
    assert body["systemInstruction"]["parts"][0]["text"]
    assert body["generationConfig"] == {"maxOutputTokens": 4096}
    names = [d["name"] for d in body["tools"][0]["functionDeclarations"]]
    assert "workspace_finish" in names
    model_turns = [c for c in body["contents"] if c["role"] == "model"]
    first = model_turns[0]["parts"]
    assert first[0] == {"text": "Checking the chat first."}
    assert first[1]["thoughtSignature"] == SIGNATURE  # echoed exactly
    assert first[2]["functionCall"]["args"] == {"formula": "1d20+2"}
    # each call is answered by a functionResponse with its id and name
    sent = [p["functionCall"] for t in model_turns for p in t["parts"] if "functionCall" in p]
    answers = [
        p["functionResponse"]
        for c in body["contents"]
        if c["role"] == "user"
        for p in c["parts"]
        if "functionResponse" in p
    ]
    assert [(c["id"], c["name"]) for c in sent] == [(a["id"], a["name"]) for a in answers]
    assert [c["id"] for c in sent] == ids[:4]
    assert "Rolled 1d20+2" in answers[1]["response"]["output"]
    recorded = json.loads((run.run_dir / "model-responses" / "round-001.json").read_text())
    assert recorded["protocol"] == "gemini" and recorded["usage"]["totalTokenCount"] == 52
    assert recorded["message"]["text"] == "Checking the chat first."
