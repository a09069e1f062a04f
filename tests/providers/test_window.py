"""The model's window: the table, what a server says, the counts, each protocol's overflow error."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.choice import gateway_for, model_gateway
from tavern_agent.providers.gateway import HttpGateway, ModelConfig, ModelRequest
from tavern_agent.providers.window import (
    DEFAULT_WINDOW,
    UNKNOWN_TOKENIZER,
    WindowFacts,
    is_overflow,
    output_tokens,
    prompt_tokens,
    server_window,
    table_window,
)
from tests.runtime.helpers import Harness, profile
from tests.runtime.loopback import LoopbackServer
from tests.runtime.window_server import WindowServer


class JsonServer(LoopbackServer):
    """Answers GET paths with fixed JSON bodies, 404 otherwise."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.asked: list[str] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                server.asked.append(self.path)
                server.auth.append(self.headers.get("authorization"))
                if self.path not in routes:
                    self.send_error(404)
                    return
                data = json.dumps(routes[self.path]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def window_of(routes: dict[str, Any], model: str = "local") -> tuple[int | None, list[str]]:
    with JsonServer(routes) as server:

        async def ask() -> int | None:
            async with httpx.AsyncClient() as client:
                return await server_window(client, f"{server.origin}/v1", model)

        return asyncio.run(ask()), server.asked


def test_llama_cpp_says_its_window_in_props() -> None:
    props = {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1}
    assert window_of({"/props": props}) == (2048, ["/props"])
    assert window_of({"/props": {"n_ctx": 4096}})[0] == 4096


def test_a_models_entry_says_it_where_props_is_missing() -> None:
    vllm = {"data": [{"id": "other", "max_model_len": 1}, {"id": "local", "max_model_len": 32768}]}
    assert window_of({"/v1/models": vllm}) == (32768, ["/props", "/v1/models"])
    studio = {"data": [{"id": "local", "max_context_length": 8192}]}
    assert window_of({"/v1/models": studio})[0] == 8192
    assert window_of({"/v1/models": {"data": [{"id": "local"}]}})[0] is None


def test_the_gateway_asks_the_server_then_the_table_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TA_WINDOW_KEY", "sk-local")
    props = {"default_generation_settings": {"n_ctx": 2048}}
    with JsonServer({"/props": props}) as server:
        url = f"{server.origin}/v1"
        config = ModelConfig(ModelProtocol.OPENAI_CHAT, "local", url, api_key_env="TA_WINDOW_KEY")
        facts = asyncio.run(HttpGateway(config).window_facts())
    # A local model: its tokenizer is not known, so the estimate is taken 1.3 times until counted.
    assert facts == WindowFacts(2048, "server", 4096, UNKNOWN_TOKENIZER)
    assert server.auth == ["Bearer sk-local"]  # a server with --api-key answers it too
    with JsonServer({}) as server:
        gpt = ModelConfig(ModelProtocol.OPENAI_CHAT, "gpt-4o-mini", f"{server.origin}/v1")
        assert asyncio.run(HttpGateway(gpt).window_facts()) == WindowFacts(128_000, "table", 4096)
        odd = ModelConfig(ModelProtocol.OPENAI_CHAT, "my-model", f"{server.origin}/v1")
        facts = asyncio.run(HttpGateway(odd).window_facts())
        assert facts == WindowFacts(DEFAULT_WINDOW, "default", 4096, UNKNOWN_TOKENIZER)
        flagged = ModelConfig(
            ModelProtocol.OPENAI_CHAT, "my-model", f"{server.origin}/v1", context_window=3000
        )
        asked = len(server.asked)
        facts = asyncio.run(HttpGateway(flagged).window_facts())
        assert facts == WindowFacts(3000, "flag", 4096, UNKNOWN_TOKENIZER)
        assert len(server.asked) == asked  # the flag is not second-guessed


@pytest.mark.parametrize(
    ("protocol", "model", "tokens"),
    [
        (ModelProtocol.ANTHROPIC, "claude-sonnet-4-5", 200_000),
        (ModelProtocol.GEMINI, "models/gemini-2.5-flash", 1_048_576),
        (ModelProtocol.OPENAI_RESPONSES, "gpt-4.1-mini", 1_047_576),
        (ModelProtocol.OPENAI_CHAT, "gpt-4", 8_192),
        (ModelProtocol.OPENAI_CHAT, "qwen2.5-7b-instruct", None),
    ],
)
def test_the_table_of_known_models(protocol: ModelProtocol, model: str, tokens: int | None) -> None:
    assert table_window(protocol, model) == tokens


@pytest.mark.parametrize(
    ("protocol", "model", "base_url", "scale"),
    [
        (ModelProtocol.OPENAI_CHAT, "gpt-4o-mini", "https://api.openai.com/v1", 1.0),
        (ModelProtocol.OPENAI_CHAT, "my-finetune", "https://api.openai.com/v1", 1.0),
        (ModelProtocol.OPENAI_CHAT, "gpt-4o-mini", "http://127.0.0.1:9/v1", 1.0),
        (ModelProtocol.OPENAI_CHAT, "SmolLM2-135M-Instruct", "http://127.0.0.1:9/v1", None),
        (ModelProtocol.OPENAI_RESPONSES, "qwen3", "http://127.0.0.1:9/v1", None),
        (ModelProtocol.ANTHROPIC, "claude-sonnet-4-5", "https://api.anthropic.com/v1", 1.0),
    ],
)
def test_a_model_whose_tokenizer_is_unknown_is_counted_high(
    protocol: ModelProtocol, model: str, base_url: str, scale: float | None
) -> None:
    config = ModelConfig(protocol, model, base_url, context_window=4096)
    facts = asyncio.run(HttpGateway(config).window_facts())  # the flag: no server asked
    assert facts.scale == (UNKNOWN_TOKENIZER if scale is None else scale)


def test_llama_cpp_counts_a_request_with_the_model_s_own_tokenizer(tmp_path: Path) -> None:
    run = Harness(tmp_path).start(profile())
    inv = run.invocations[0]
    request = ModelRequest(run.id, inv.id, 1, inv.transcript, inv.snapshot, None, 256)
    with WindowServer(8192, lambda turn: [], per_token=1.5, tokenize=True) as server:
        config = ModelConfig(ModelProtocol.OPENAI_CHAT, "local", server.base_url)
        counted = asyncio.run(HttpGateway(config).count_tokens(request))
        gateway = HttpGateway(config)
        asyncio.run(gateway.respond(request))
    assert counted is not None and counted == server.tokenized[0] == server.counts[0]
    with WindowServer(2048, lambda turn: []) as plain:  # not llama.cpp: no /tokenize
        gateway = HttpGateway(ModelConfig(ModelProtocol.OPENAI_CHAT, "local", plain.base_url))

        async def twice() -> list[int | None]:
            return [await gateway.count_tokens(request), await gateway.count_tokens(request)]

        assert asyncio.run(twice()) == [None, None]
    assert plain.paths == ["/props"]  # not llama.cpp's: asked once, and nothing posted
    assert server.paths[:3] == ["/props", "/apply-template", "/tokenize"]


def test_each_protocol_names_its_counts() -> None:
    assert prompt_tokens({"prompt_tokens": 812, "completion_tokens": 9}) == 812
    cached = {"input_tokens": 10, "cache_read_input_tokens": 700, "output_tokens": 5}
    assert (prompt_tokens(cached), output_tokens(cached)) == (710, 5)
    gemini = {"promptTokenCount": 90, "candidatesTokenCount": 12}
    assert (prompt_tokens(gemini), output_tokens(gemini)) == (90, 12)
    assert prompt_tokens({}) is None


OVERFLOWS = [
    # OpenAI (Chat Completions and Responses)
    {
        "error": {
            "message": "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 130412 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    # Anthropic
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 215332 tokens > 200000 maximum",
        },
    },
    # Gemini
    {
        "error": {
            "code": 400,
            "message": "The input token count (1203044) exceeds the maximum number of tokens "
            "allowed (1048576).",
            "status": "INVALID_ARGUMENT",
        }
    },
    # llama.cpp's server
    {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 2301,
            "n_ctx": 2048,
        }
    },
]


@pytest.mark.parametrize("body", OVERFLOWS)
def test_each_protocols_context_error_is_an_overflow(body: dict[str, Any]) -> None:
    assert is_overflow(400, json.dumps(body))


def test_other_errors_are_not() -> None:
    other = {"error": {"message": "Invalid 'messages[1].content'", "type": "invalid_request_error"}}
    assert not is_overflow(400, json.dumps(other))
    assert not is_overflow(401, json.dumps(OVERFLOWS[0]))  # an auth failure says nothing of size


def test_the_flag_is_kept_in_the_run_record_so_a_resume_keeps_the_window() -> None:
    _, record = model_gateway(
        "local", None, "http://127.0.0.1:9/v1", "openai_chat", "K", context_window=3000
    )
    assert record["contextWindow"] == 3000
    again = gateway_for(record)
    assert isinstance(again, HttpGateway) and again.config.context_window == 3000
    _, plain = model_gateway("local", None, "http://127.0.0.1:9/v1", "openai_chat", "K")
    assert "contextWindow" not in plain  # records without the flag are as before
