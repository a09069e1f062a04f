"""A client that leaves cancels its run; beyond the run limit, 503 with Retry-After."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx

from tests.endpoint.helpers import MESSAGES, TURNS, serve_endpoint
from tests.runtime.openai_server import OpenAIServer


def journals(data_dir: Path) -> list[list[dict[str, Any]]]:
    found = []
    for path in sorted(data_dir.glob("chats/*/runs/*/events.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        found.append([json.loads(line) for line in lines if line.strip()])
    return found


def wait_for(check: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def cancelled(data_dir: Path, count: int) -> bool:
    ends = [j[-1]["type"] for j in journals(data_dir) if j]
    return ends.count("run_cancelled") == count


def started(data_dir: Path, call_id: str) -> bool:
    return any(
        e["type"] == "tool_call_started" and e["payload"]["callId"] == call_id
        for journal in journals(data_dir)
        for e in journal
    )


def stream_body() -> dict[str, Any]:
    return {"model": "tavern-agent/default-writer", "messages": MESSAGES, "stream": True}


async def test_a_disconnect_mid_stream_cancels_the_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # The upstream model answers turn 0 (two tool calls), then holds turn 1 unanswered.
    with (
        OpenAIServer(TURNS, pause_once_at=1) as upstream,
        serve_endpoint(data, upstream.base_url, "--heartbeat", "0.1") as server,
    ):
        headers = {"authorization": f"Bearer {server.key}"}
        progress: list[str] = []
        heartbeats = 0
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream(
                "POST", f"{server.url}/chat/completions", json=stream_body(), headers=headers
            ) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if "reasoning_content" in delta:
                        progress.append(delta["reasoning_content"])
                heartbeats += line == ": keep-alive"
                if len(progress) == 2 and heartbeats >= 2:
                    break  # leave while the run waits for its next model response
        assert await asyncio.to_thread(upstream.paused.wait, 10)
        await asyncio.to_thread(wait_for, lambda: cancelled(data, 1))
    [journal] = journals(data)
    kinds = [e["type"] for e in journal]
    assert kinds[-1] == "run_cancelled"
    assert journal[-1]["payload"]["errorCode"] == "run.cancelled"
    assert kinds.count("tool_call_completed") == 2 and "model_response_stored" in kinds
    assert progress[1].startswith("✓ workspace_write_file")
    assert heartbeats >= 2  # the quiet stream carried keep-alive comments


async def test_a_disconnect_during_a_tool_call_pairs_the_pending_calls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "profiles").mkdir(parents=True)
    allow = ["builtin:workspace.write_file", "builtin:workspace.finish", "extension/slow-test:wait"]
    profile = {"id": "waiter", "name": "Waiter", "tools": {"allow": allow}}
    (data / "profiles" / "waiter.json").write_text(json.dumps(profile))
    draft = ("workspace_write_file", {"file_path": "output/main.md", "content": "draft"})
    turns = [[draft, ("wait", {"seconds": 60}), ("workspace_finish", {})]]
    body = stream_body() | {"model": "tavern-agent/waiter"}
    with (
        OpenAIServer(turns) as upstream,
        serve_endpoint(data, upstream.base_url, ext="tests.endpoint.slow_tool") as server,
    ):
        headers = {"authorization": f"Bearer {server.key}"}
        url = f"{server.url}/chat/completions"
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream("POST", url, json=body, headers=headers) as response,
        ):
            async for line in response.aiter_lines():
                if "reasoning_content" in line:
                    break  # the draft is written; the run is inside the wait call
            await asyncio.to_thread(wait_for, lambda: started(data, "call_0_1"))
        await asyncio.to_thread(wait_for, lambda: cancelled(data, 1))
    [journal] = journals(data)
    assert journal[-1]["type"] == "run_cancelled"
    stored = [e["payload"] for e in journal if e["type"] == "tool_result_stored"]
    assert [s["callId"] for s in stored] == ["call_0_0", "call_0_1", "call_0_2"]
    waited, finish = stored[1]["result"], stored[2]["result"]
    assert waited["isError"] and "check" in waited["content"].lower()  # outcome unknown
    assert finish["isError"] and finish["errorCode"] == "run.cancelled"


async def test_beyond_the_run_limit_a_request_gets_503_with_retry_after(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with (
        OpenAIServer([], hang=True) as upstream,
        serve_endpoint(data, upstream.base_url, "--max-concurrent-runs", "20") as server,
    ):
        url, headers = f"{server.url}/chat/completions", {"authorization": f"Bearer {server.key}"}
        async with httpx.AsyncClient(timeout=None) as client, AsyncExitStack() as streams:
            opened = [
                streams.enter_async_context(
                    client.stream("POST", url, json=stream_body(), headers=headers)
                )
                for _ in range(20)
            ]
            responses = await asyncio.gather(*opened)
            assert [r.status_code for r in responses] == [200] * 20
            # all twenty runs are waiting for the model
            await asyncio.to_thread(wait_for, lambda: len(upstream.bodies) == 20)
            refused = await client.post(url, json=stream_body(), headers=headers)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            assert refused.json()["error"]["code"] == "too_many_runs"
            assert len(journals(data)) == 20
        # the twenty clients left: their runs are cancelled and the slots are free again
        await asyncio.to_thread(wait_for, lambda: cancelled(data, 20))
        upstream.hang = False
        upstream.turns = TURNS
        again = await asyncio.to_thread(
            httpx.post, url, json={"messages": MESSAGES}, headers=headers, timeout=60
        )
        assert again.status_code == 200
