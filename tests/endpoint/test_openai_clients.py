"""The official OpenAI SDK, sync and async, streaming and not, against a real ``serve``.

Upstream is a scripted model served over HTTP on 127.0.0.1 that calls tools:
it reads the chat, drafts the reply, commits and finishes. Each request is an
agent run; the SDK gets the committed message.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tavern_agent.chat.formats import parse_chat
from tests.endpoint.helpers import MESSAGES, REPLY, TURNS, Served, serve_endpoint
from tests.runtime.openai_server import OpenAIServer
from tests.test_cli import run

MODEL = "tavern-agent/default-writer"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, OpenAIServer]]:
    data = tmp_path_factory.mktemp("endpoint") / "data"
    with (
        OpenAIServer(TURNS) as upstream,
        serve_endpoint(data, upstream.base_url, "--max-concurrent-runs", "20") as server,
    ):
        yield server, upstream


def runs(data_dir: Path) -> list[dict[str, Any]]:
    listed = run("runs", "list", "--json", data_dir=data_dir)
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    return rows


def events(data_dir: Path, run_id: str) -> list[dict[str, Any]]:
    shown = run("runs", "show", run_id, "--json", data_dir=data_dir)
    assert shown.returncode == 0, shown.stderr
    found: list[dict[str, Any]] = json.loads(shown.stdout)
    return found


def reasoning(delta: Any) -> str | None:
    extra = delta.model_extra or {}
    value = extra.get("reasoning_content")
    return value if isinstance(value, str) else None


def test_models_lists_the_profiles(served: tuple[Served, OpenAIServer]) -> None:
    server, _ = served
    client = openai.OpenAI(base_url=server.url, api_key=server.key)
    assert [m.id for m in client.models.list()] == [MODEL]


def test_the_key_is_made_once_owner_only_and_printed_once(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    key_file = server.data_dir / "endpoint" / "api-key"
    assert key_file.read_text().strip() == server.key
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert any(server.key in line and "shown once" in line for line in server.banner)


def test_sync_non_stream_gets_the_committed_message_of_a_journaled_run(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, upstream = served
    client = openai.OpenAI(base_url=server.url, api_key=server.key)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, temperature=0.9, max_tokens=300
    )
    reply = raw.parse()
    run_id = raw.headers["x-tavern-agent-run"]
    assert reply.object == "chat.completion" and reply.model == MODEL
    choice = reply.choices[0]
    assert choice.message.content == REPLY and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    # three upstream responses of 10 prompt + 5 completion tokens each
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (30, 15)
    assert reply.usage.total_tokens == 45

    row = next(r for r in runs(server.data_dir) if r["runId"] == run_id)
    assert row["status"] == "completed" and row["commits"] >= 1
    # The frontend's user and assistant messages are the run's chat, floors 0-2, and the
    # reply was committed as floor 3 of that chat, in the run's own folder.
    chat_file = Path(row["chatFile"])
    assert chat_file.is_relative_to(Path(row["runDir"]))
    chat = parse_chat(chat_file.read_bytes())
    assert [m.mes for m in chat.messages] == [
        "We reach the river at dusk.",
        "The bridge is out, she says.",
        "Then we ford it.",
        REPLY,
    ]
    assert chat.messages[0].name == "Rowan" and chat.messages[0].is_user
    # The frontend's system messages reached the agent as its context.
    first = upstream.bodies[-3]["messages"]
    prompt = "\n".join(str(m.get("content")) for m in first)
    assert "guardian of the forest of Eldoria" in prompt and "river Ald floods" in prompt
    kinds = [e["type"] for e in events(server.data_dir, run_id)]
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert kinds.count("tool_call_completed") == 4


def test_sync_stream_sends_tool_progress_as_reasoning_before_the_content(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    client = openai.OpenAI(base_url=server.url, api_key=server.key)
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    assert all(c.object == "chat.completion.chunk" and c.choices[0].index == 0 for c in chunks)
    order = []
    for c in chunks:
        delta = c.choices[0].delta
        if reasoning(delta):
            order.append(("reasoning", reasoning(delta)))
        if delta.content:
            order.append(("content", delta.content))
        assert delta.tool_calls is None
    kinds = [k for k, _ in order]
    assert kinds == ["reasoning"] * 4 + ["content"]
    progress = "".join(text for kind, text in order if kind == "reasoning")
    assert progress.splitlines() == [
        progress.splitlines()[0],
        "✓ workspace_write_file: Created output/main.md: now 66 chars, 1 lines.",
        progress.splitlines()[2],
        "✓ workspace_finish: Run finished.",
    ]
    assert progress.startswith("✓ chat_read_messages: ")
    assert progress.splitlines()[2].startswith("✓ workspace_commit: Committed output/main.md")
    assert order[-1] == ("content", REPLY)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 45


async def test_async_client_stream_and_not(served: tuple[Served, OpenAIServer]) -> None:
    server, _ = served
    async with openai.AsyncOpenAI(base_url=server.url, api_key=server.key) as client:
        whole = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert whole.choices[0].message.content == REPLY
        stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        content = ""
        progress = 0
        async for c in stream:
            delta = c.choices[0].delta
            progress += reasoning(delta) is not None
            assert not (content and reasoning(delta))  # no progress after the content began
            content += delta.content or ""
        assert content == REPLY and progress == 4


async def test_twenty_concurrent_requests_are_twenty_runs(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    async with openai.AsyncOpenAI(base_url=server.url, api_key=server.key) as client:
        raws = await asyncio.gather(
            *(
                client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
                for _ in range(20)
            )
        )
    ids = {raw.headers["x-tavern-agent-run"] for raw in raws}
    assert len(ids) == 20
    assert all(raw.parse().choices[0].message.content == REPLY for raw in raws)
    by_id = {r["runId"]: r for r in runs(server.data_dir)}
    assert {by_id[i]["status"] for i in ids} == {"completed"}
    assert len({by_id[i]["runDir"] for i in ids}) == 20  # each its own workspace
