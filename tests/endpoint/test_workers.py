"""`serve --workers N`: runs spread over worker processes that share the data root and the limit."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.endpoint.helpers import MESSAGES, REPLY, serve_endpoint
from tests.endpoint.test_cancel_and_limits import journals, wait_for
from tests.runtime.openai_server import OpenAIServer

PROFILE = {
    "id": "holder",
    "name": "Holder",
    "tools": {
        "allow": [
            "builtin:workspace.write_file",
            "builtin:workspace.commit",
            "builtin:workspace.finish",
            "extension/hold-test:hold_in_process",
        ]
    },
}


def turns(release: Path) -> list[list[tuple[str, dict[str, Any]]]]:
    return [
        [
            ("workspace_write_file", {"file_path": "output/main.md", "content": REPLY}),
            ("hold_in_process", {"path": str(release)}),
        ],
        [("workspace_commit", {"reason": "the reply"})],
        [("workspace_finish", {})],
    ]


def holding(data: Path) -> int:
    """How many runs are inside their hold call."""
    return sum(
        any(e["type"] == "tool_call_started" and e["payload"]["callId"] == "call_0_1" for e in j)
        for j in journals(data)
    )


def pids(data: Path) -> list[int]:
    """The process each run's hold call ran in, from the results the journals stored."""
    found = []
    for journal in journals(data):
        for e in journal:
            if e["type"] == "tool_result_stored" and e["payload"]["callId"] == "call_0_1":
                text = json.dumps(e["payload"]["result"])
                found.append(int(re.search(r"released in process (\d+)", text)[1]))  # type: ignore[index]
    return found


def with_profile(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "profiles").mkdir(parents=True)
    (data / "profiles" / "holder.json").write_text(json.dumps(PROFILE))
    return data


async def test_runs_spread_over_workers_that_share_the_limit_and_the_run_page(
    tmp_path: Path,
) -> None:
    data = with_profile(tmp_path)
    release = tmp_path / "release"
    body = {"model": "tavern-agent/holder", "messages": MESSAGES}
    flags = ("--workers", "2", "--max-concurrent-runs", "2")
    with (
        OpenAIServer(turns(release)) as upstream,
        serve_endpoint(data, upstream.base_url, *flags, ext="tests.endpoint.hold_tool") as server,
    ):
        url, headers = f"{server.url}/chat/completions", {"authorization": f"Bearer {server.key}"}
        page = server.url.removesuffix("/v1")
        async with httpx.AsyncClient(timeout=60) as client:
            first = asyncio.create_task(client.post(url, json=body, headers=headers))
            await asyncio.to_thread(wait_for, lambda: holding(data) == 1)
            second = asyncio.create_task(client.post(url, json=body, headers=headers))
            await asyncio.to_thread(wait_for, lambda: holding(data) == 2)
            # Both slots are taken, each run in its own worker: the third is refused.
            refused = await client.post(url, json=body, headers=headers)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "too_many_runs"
            running = (await client.get(f"{page}/runs.json?running=1", headers=headers)).json()
            assert sorted(r["status"] for r in running) == ["running", "running"]
            release.touch()
            answers = await asyncio.gather(first, second)
            assert [a.status_code for a in answers] == [200, 200]
            assert {a.json()["choices"][0]["message"]["content"] for a in answers} == {REPLY}
            listed = (await client.get(f"{page}/runs.json", headers=headers)).json()
            run_ids = {a.headers["x-tavern-agent-run"] for a in answers}
            assert {r["runId"] for r in listed} == run_ids
            assert {r["status"] for r in listed} == {"completed"}
            for run_id in run_ids:
                shown = await client.get(f"{page}/runs/{run_id}", headers=headers)
                assert shown.status_code == 200 and run_id in shown.text
        served_by = pids(data)
    assert len(set(served_by)) == 2 and server.process.pid not in served_by


async def test_one_worker_runs_in_the_serving_process(tmp_path: Path) -> None:
    data = with_profile(tmp_path)
    release = tmp_path / "release"
    release.touch()
    body = {"model": "tavern-agent/holder", "messages": MESSAGES}
    with (
        OpenAIServer(turns(release)) as upstream,
        serve_endpoint(
            data, upstream.base_url, "--workers", "1", ext="tests.endpoint.hold_tool"
        ) as server,
    ):
        headers = {"authorization": f"Bearer {server.key}"}
        answer = await asyncio.to_thread(
            httpx.post, f"{server.url}/chat/completions", json=body, headers=headers, timeout=60
        )
        assert answer.status_code == 200
        assert not any("worker processes" in line for line in server.banner)
    assert pids(data) == [server.process.pid]


def test_help_explains_workers() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "tavern_agent", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text = " ".join(shown.split()).replace("- ", "-")  # the help's lines joined again
    assert "--workers INTEGER RANGE Processes the endpoint's runs are spread over" in text
    assert "(default: the number of cores)" in text
    assert "share the data root and --max-concurrent-runs" in text


async def test_a_worker_that_dies_fails_its_run_and_the_next_run_gets_a_new_one(
    tmp_path: Path,
) -> None:
    data = with_profile(tmp_path)
    release = tmp_path / "release"
    body = {"model": "tavern-agent/holder", "messages": MESSAGES}
    with (
        OpenAIServer(turns(release)) as upstream,
        serve_endpoint(
            data, upstream.base_url, "--workers", "2", ext="tests.endpoint.hold_tool"
        ) as server,
    ):
        url, headers = f"{server.url}/chat/completions", {"authorization": f"Bearer {server.key}"}
        pid = server.process.pid
        async with httpx.AsyncClient(timeout=60) as client:
            held = asyncio.create_task(client.post(url, json=body, headers=headers))
            await asyncio.to_thread(wait_for, lambda: holding(data) == 1)
            [worker] = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            os.kill(int(worker), signal.SIGKILL)
            failed = await held
            assert failed.status_code == 500
            error = failed.json()["error"]
            assert error["code"] == "run.worker_ended"
            assert "the worker process ended" in error["message"]
            release.touch()
            again = await client.post(url, json=body, headers=headers)
            assert again.status_code == 200
            assert again.json()["choices"][0]["message"]["content"] == REPLY
    served_by = pids(data)
    assert len(served_by) == 1 and served_by[0] not in (pid, int(worker))
