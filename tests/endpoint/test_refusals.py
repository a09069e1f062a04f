"""What the endpoint refuses, with OpenAI error bodies and the right status, starting no run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.endpoint.helpers import MESSAGES, REPLY, TURNS, Served, serve_endpoint
from tests.runtime.openai_server import OpenAIServer

FRONTEND = "http://frontend.test:8000"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, OpenAIServer]]:
    data = tmp_path_factory.mktemp("refusals") / "data"
    with (
        OpenAIServer(TURNS) as upstream,
        serve_endpoint(data, upstream.base_url, "--allow-origin", FRONTEND) as server,
    ):
        yield server, upstream


def run_count(server: Served) -> int:
    return len(list(server.data_dir.glob("chats/*/runs/*/run.json")))


def post(server: Served, body: bytes | dict[str, Any], **headers: str) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"authorization": f"Bearer {server.key}", "content-type": "application/json"}
    return httpx.post(f"{server.url}/chat/completions", content=data, headers=sent | headers)


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert {"message", "type", "code"} <= set(error) and error["message"]
    return error


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer undefined", "Bearer ta-wrong", "Basic abc"],
)
def test_a_missing_empty_or_wrong_key_gets_401_and_starts_nothing(
    served: tuple[Served, OpenAIServer], authorization: str | None
) -> None:
    server, upstream = served
    before, requests = run_count(server), len(upstream.bodies)
    headers = {} if authorization is None else {"authorization": authorization}
    completions = httpx.post(
        f"{server.url}/chat/completions", json={"messages": MESSAGES}, headers=headers
    )
    models = httpx.get(f"{server.url}/models", headers=headers)
    for response in (completions, models):
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"
    assert run_count(server) == before and len(upstream.bodies) == requests


def test_the_sdk_sees_a_wrong_key_as_an_authentication_error(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    client = openai.OpenAI(base_url=server.url, api_key="sk-not-this-one", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="tavern-agent/default-writer", messages=MESSAGES)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),
        (b"[]", "must be a JSON object"),
        ({"model": "tavern-agent/default-writer"}, "'messages'"),
        ({"messages": []}, "'messages'"),
        ({"messages": "hello"}, "'messages'"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [7]}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x", "name": 3}]}, "messages[0].name"),
        ({"messages": MESSAGES, "stream": "yes"}, "'stream'"),
        ({"messages": MESSAGES, "model": 4}, "'model'"),
        ({"messages": MESSAGES, "temperature": "hot"}, "'temperature'"),
        ({"messages": MESSAGES, "max_tokens": True}, "'max_tokens'"),
        ({"messages": MESSAGES, "stream_options": []}, "'stream_options'"),
    ],
)
def test_malformed_bodies_get_400_and_start_no_run(
    served: tuple[Served, OpenAIServer], body: bytes | dict[str, Any], says: str
) -> None:
    server, upstream = served
    before, requests = run_count(server), len(upstream.bodies)
    response = post(server, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error" and says in error["message"]
    assert run_count(server) == before and len(upstream.bodies) == requests


def test_a_body_over_the_limit_gets_400(served: tuple[Served, OpenAIServer]) -> None:
    server, _ = served
    before = run_count(server)
    huge = {"messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]}
    response = post(server, huge)
    assert response.status_code == 400 and error_of(response)["code"] == "request_too_large"
    assert run_count(server) == before


def test_an_unknown_model_gets_404_naming_the_known_ones(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    before = run_count(server)
    response = post(server, {"messages": MESSAGES, "model": "gpt-4o"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "model_not_found" and "tavern-agent/default-writer" in error["message"]
    # a path is never a model name
    response = post(server, {"messages": MESSAGES, "model": "../../profiles/x.json"})
    assert response.status_code == 404
    assert run_count(server) == before


def test_what_sillytavern_sends_is_answered_at_its_doubled_slash_path(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    # SillyTavern 1.12's body for a Custom source: unused fields, several system
    # messages, names and repeated roles; its base URL typed with a trailing slash.
    body = {
        "messages": [
            {"role": "system", "content": "Write Seraphina's next reply."},
            {"role": "system", "content": "[Seraphina's personality: kind]"},
            {"role": "user", "content": "We reach the river at dusk.", "name": "Rowan"},
            {"role": "user", "content": "It is cold."},
            {"role": "assistant", "content": [{"type": "text", "text": "The bridge is out."}]},
            {"role": "system", "content": "[Author's note: keep it short]", "name": "example"},
            {"role": "user", "content": "Then we ford it."},
        ],
        "model": "tavern-agent/default-writer",
        "temperature": 1,
        "max_tokens": 300,
        "stream": False,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "top_p": 1,
        "logit_bias": {},
        "stop": ["\nRowan:"],
        "seed": -1,
        "n": 1,
        "tools": [{"type": "function", "function": {"name": "st_tool"}}],
        "include_reasoning": True,
        "custom_user_field": {"anything": [1, 2]},
    }
    response = httpx.post(
        server.url + "//chat/completions",
        json=body,
        headers={"authorization": f"Bearer {server.key}", "accept": "*/*"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["content"] == REPLY and "tool_calls" not in message
    without_v1 = server.url.removesuffix("/v1") + "//models"
    listed = httpx.get(without_v1, headers={"authorization": f"Bearer {server.key}"})
    assert listed.status_code == 200 and listed.json()["object"] == "list"


def test_unknown_paths_and_methods_get_openai_shaped_errors(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    auth = {"authorization": f"Bearer {server.key}"}
    missing = httpx.get(f"{server.url}/embeddings", headers=auth)
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong = httpx.get(f"{server.url}/chat/completions", headers=auth)
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"


def test_cors_allows_the_listed_origin_and_refuses_others(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    before = run_count(server)
    preflight = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    allowed = httpx.options(
        f"{server.url}/chat/completions", headers={"origin": FRONTEND} | preflight
    )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == FRONTEND
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    for method in ("OPTIONS", "POST"):
        refused = httpx.request(
            method,
            f"{server.url}/chat/completions",
            headers={"origin": "http://evil.test"} | preflight,
            json={"messages": MESSAGES},
        )
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
        assert error_of(refused)["code"] == "origin_not_allowed"
    assert run_count(server) == before


def test_a_request_naming_another_host_is_refused(served: tuple[Served, OpenAIServer]) -> None:
    """A site that rebinds its DNS name to 127.0.0.1 still sends its own name as Host."""
    server, _ = served
    before = run_count(server)
    auth = {"authorization": f"Bearer {server.key}"}
    rebound = post(server, {"messages": MESSAGES}, host="attacker.example:8788")
    assert rebound.status_code == 403 and error_of(rebound)["code"] == "host_not_allowed"
    listed = httpx.get(f"{server.url}/models", headers=auth | {"host": "localhost:1"})
    assert listed.status_code == 200
    assert run_count(server) == before


def test_a_request_with_only_system_messages_is_an_empty_chat(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    body = {"messages": [{"role": "system", "content": "Greet the traveller as Seraphina."}]}
    response = post(server, body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == REPLY


def test_a_lone_surrogate_in_a_message_is_kept_as_a_replacement_character(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    message = b'{"role": "user", "content": "half an emoji: \\ud83d", "name": "R\\udc00"}'
    text = b'{"messages": [' + message + b"]}"
    response = post(server, text)
    assert response.status_code == 200, response.text
    run_id = response.headers["x-tavern-agent-run"]
    [chat_file] = server.data_dir.glob(f"chats/*/runs/{run_id}/input/frontend-chat.jsonl")
    assert "half an emoji: \ufffd" in chat_file.read_text(encoding="utf-8")
