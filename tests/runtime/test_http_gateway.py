"""The real HTTP path: a local OpenAI-compatible server streams tool calls over SSE."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.gateway import (
    HttpGateway,
    ModelConfig,
    _endpoint,
    ends_stream,
    stream_error,
)
from tavern_agent.providers.openai_chat import OpenAIChatCodec
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tests.runtime.helpers import TEXTS, Harness, events, profile, types
from tests.runtime.openai_server import OpenAIServer
from tests.runtime.sse_server import (
    SIGNATURE,
    Event,
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
    # Each request (encoded incrementally) is the one before plus the round it added,
    # and the last one is exactly what a whole encoding of the run's transcript gives.
    for before, after in itertools.pairwise(server.bodies[1:]):
        grown = len(after["messages"]) - len(before["messages"])
        assert grown > 0 and after["messages"][:-grown] == before["messages"]
    inv = run.invocations[0]
    whole = OpenAIChatCodec().build_request("local", inv.transcript, inv.snapshot)
    assert last == whole["messages"][: len(last)]
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
    run = Run.start(h.assembly, spec)
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


def drive(
    tmp_path: Path, protocol: ModelProtocol, url: str, model: str
) -> tuple[Run, RunResult, list[dict[str, Any]]]:
    """A whole chat run against ``url``; also the chat's messages after it."""
    h = Harness(tmp_path)
    spec = RunSpec(profile(), protocol, chat_file=h.chat_path, seed=7)
    run = Run.start(h.assembly, spec)
    gateway = HttpGateway(ModelConfig(protocol, model, url, api_key_env="TA_TEST_KEY"))
    engine = Engine(run, gateway, fsync=False)

    async def main() -> RunResult:
        try:
            return await engine.start()
        finally:
            await gateway.aclose()

    try:
        result = asyncio.run(main())
    finally:
        engine.close()
    return run, result, h.chat_messages()


def run_over(tmp_path: Path, protocol: ModelProtocol, url: str, model: str) -> tuple[Run, str]:
    """A whole chat run that posts its message; returns the run and its final status."""
    run, result, messages = drive(tmp_path, protocol, url, model)
    assert messages[-1]["mes"] == "Über die Furt."
    return run, result.status


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
    path = GEMINI_PATH
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


# ---------------------------------------------------------------- streams that do not complete

GEMINI_PATH = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"


def _until(events: list[Event], kind: str, nth: int = 1) -> list[Event]:
    """The events before the ``nth`` one of type ``kind``."""
    seen = 0
    for i, (name, _) in enumerate(events):
        seen += name == kind
        if seen == nth:
            return events[:i]
    raise AssertionError(f"no {kind} #{nth}")


def _responses_error(turn: int, spec: Turn) -> list[Event]:
    events = _until(responses_events(turn, spec), "response.function_call_arguments.delta", 3)
    message = "The server had an error while processing your request."
    error = {"type": "error", "code": "server_error", "message": message, "param": None}
    return [*events, ("error", error | {"sequence_number": len(events)})]


def _responses_failed(turn: int, spec: Turn) -> list[Event]:
    events = _until(responses_events(turn, spec), "response.completed")
    created = dict(events[0][1]["response"])
    created |= {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}}
    failed = {"type": "response.failed", "sequence_number": len(events), "response": created}
    return [*events, ("response.failed", failed)]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        # cut in the middle of the second call's arguments
        (
            lambda t, s: _until(responses_events(t, s), "response.function_call_arguments.done", 2),
            "before the event that completes a response",
        ),
        # every call whole, but no response.completed
        (
            lambda t, s: _until(responses_events(t, s), "response.completed"),
            "before the event that completes a response",
        ),
        (_responses_error, "server_error: The server had an error while processing"),
        (_responses_failed, "rate_limit_exceeded: slow"),
    ],
    ids=["cut-mid-arguments", "no-response-completed", "error-event", "response-failed"],
)
def test_a_responses_stream_that_does_not_complete_runs_nothing(
    tmp_path: Path, events: Callable[[int, Turn], list[Event]], message: str
) -> None:
    with SseServer("/v1/responses", REPLY_TURNS, responses_turn, events) as server:
        run, result, messages = drive(
            tmp_path, ModelProtocol.OPENAI_RESPONSES, server.origin + "/v1", "gpt-test"
        )
    assert result.status == "failed" and result.error_code == "model.request_failed"
    assert message in result.message
    kinds = types(run)
    assert "tool_call_requested" not in kinds and "model_response_stored" not in kinds
    assert len(server.requests) == 1  # a body had started: never sent again
    assert [m["mes"] for m in messages] == TEXTS  # nothing posted


def _gemini_overloaded(turn: int, spec: Turn) -> list[Event]:
    text_chunks = gemini_events(turn, spec)[:-1]
    error = {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    return [*text_chunks, (None, {"error": error})]


def _gemini_blocked(turn: int, spec: Turn) -> list[Event]:
    feedback = {"blockReason": "PROHIBITED_CONTENT"}
    usage = {"promptTokenCount": 40, "totalTokenCount": 40}
    chunk = {"promptFeedback": feedback, "usageMetadata": usage, "modelVersion": "gemini-test"}
    return [(None, chunk)]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        # the text came, the chunk with the calls and finishReason never did
        (lambda t, s: gemini_events(t, s)[:-1], "before the event that completes a response"),
        (_gemini_overloaded, "UNAVAILABLE: The model is overloaded."),
        (_gemini_blocked, "the prompt was blocked: PROHIBITED_CONTENT"),
    ],
    ids=["no-finish-reason", "error-chunk", "prompt-blocked"],
)
def test_a_gemini_stream_that_does_not_complete_runs_nothing(
    tmp_path: Path, events: Callable[[int, Turn], list[Event]], message: str
) -> None:
    with SseServer(GEMINI_PATH, REPLY_TURNS, gemini_turn, events, crlf=True) as server:
        run, result, messages = drive(
            tmp_path, ModelProtocol.GEMINI, server.origin + "/v1beta", "gemini-test"
        )
    assert result.status == "failed" and result.error_code == "model.request_failed"
    assert message in result.message
    kinds = types(run)
    assert "tool_call_requested" not in kinds and "model_response_stored" not in kinds
    assert len(server.requests) == 1
    assert [m["mes"] for m in messages] == TEXTS


def test_stream_errors_and_ends_per_protocol() -> None:
    chat, anthropic = ModelProtocol.OPENAI_CHAT, ModelProtocol.ANTHROPIC
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    assert stream_error({"type": "error", "error": overloaded}) == "overloaded_error: Overloaded"
    vllm = {"error": {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}}
    assert stream_error(vllm) == "400: bad"
    assert stream_error({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}) is None
    assert stream_error({"choices": [{"index": 0, "delta": {"content": "error"}}]}) is None
    assert ends_stream(anthropic, {"type": "message_stop"})
    assert not ends_stream(anthropic, {"type": "content_block_stop", "index": 0})
    assert ends_stream(chat, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert not ends_stream(chat, {"choices": [{"index": 0, "delta": {"content": "x"}}]})
    assert not ends_stream(ModelProtocol.OPENAI_RESPONSES, {"type": "response.in_progress"})
    assert not ends_stream(ModelProtocol.GEMINI, {"candidates": [{"content": {"parts": []}}]})
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}}
    assert stream_error(blocked) == "the prompt was blocked: SAFETY"


def test_a_gemini_model_name_may_carry_the_models_prefix() -> None:
    for name in ("gemini-test", "models/gemini-test"):
        url, _, extra = _endpoint(ModelConfig(ModelProtocol.GEMINI, name, "http://h/v1beta/"))
        assert url == "http://h/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
        assert extra == {}
