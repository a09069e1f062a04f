"""What the agent endpoint adds to a run: the same replayed run through HTTP and in-process.

A short run is recorded once with a scripted model on the example's chat and
profile (round 1 reads two floors and writes the reply, round 2 commits,
round 3 finishes); ``--recording example`` takes the example's recorded run
instead (``examples/recorded-run``: 8 rounds, 13 calls including the shell).
The recording is replayed by ``ReplayGateway`` both ways, with the journal
fsync'd as by default:

* **in-process**, as ``tavern-agent run`` does it: ``Run.start`` on an
  ``Assembly`` (opened once, as ``serve`` does) and ``Engine.start()``, then
  the committed message read back;
* **endpoint**: ``tavern-agent serve --replay`` in its own process, and a
  streaming ``POST /v1/chat/completions`` with the chat's floors as messages,
  timed to the first byte of the body and to the last (``[DONE]``).

Reported: medians and p90 of each, the endpoint's added time per request
(endpoint last byte − in-process), and 20 concurrent requests against one.
Goals: under 5 ms added per request at the median; 20 concurrent runs within
2× the time of one.
Run: ``python benchmarks/endpoint.py [--repeats N] [--concurrent N] [--recording example]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tavern_agent.assembly import Assembly
from tavern_agent.chat.formats import parse_chat
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ReplayGateway
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, calls
from tavern_agent.runtime.summary import committed_message

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECORDING = EXAMPLES / "recorded-run"
PROFILE = EXAMPLES / "profile.json"
CHAT = EXAMPLES / "chat.jsonl"


SHORT_RUN = [
    calls(
        ("chat_read_messages", {"floors": [{"floor": 0}, {"floor": 1}]}),
        ("workspace_write_file", {"file_path": "output/main.md", "content": "The ford is cold."}),
    ),
    calls(("workspace_commit", {"reason": "the reply"})),
    calls(("workspace_finish", {})),
]


def record_short_run(root: Path, profile: Profile) -> Path:
    """Record the short run with the scripted model; its folder is the recording."""
    root.mkdir(parents=True)
    chat = root / "chat.jsonl"
    shutil.copyfile(CHAT, chat)
    run = Run.start(Assembly(root / "data"), RunSpec(profile, chat_file=chat, seed=7))
    engine = Engine(run, ScriptedGateway(SHORT_RUN), fsync=False)
    result = asyncio.run(engine.start())
    engine.close()
    assert result.status == "completed", result
    return run.run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def messages() -> list[dict[str, Any]]:
    """The example chat as a frontend sends it: its floors as user/assistant messages."""
    chat = parse_chat(CHAT.read_bytes())
    out: list[dict[str, Any]] = [{"role": "system", "content": "Write Seraphina's next reply."}]
    for m in chat.messages:
        out.append({"role": "user" if m.is_user else "assistant", "content": m.mes, "name": m.name})
    return out


async def in_process(
    assembly: Assembly, recording: Path, profile: Profile, tmp: Path, index: int
) -> float:
    """One run as ``tavern-agent run`` drives it, on an assembly opened once (as serve does)."""
    chat = tmp / f"chat-{index}.jsonl"
    shutil.copyfile(CHAT, chat)
    start = time.perf_counter()
    run = Run.start(assembly, RunSpec(profile, chat_file=chat, seed=7))
    engine = Engine(run, ReplayGateway(recording))
    try:
        result = await engine.start()
    finally:
        engine.close()
    message = committed_message(run, result)
    elapsed = time.perf_counter() - start
    assert result.status == "completed" and message, result
    return elapsed


async def through_endpoint(
    client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]
) -> tuple[float, float]:
    """Seconds to the first body byte and to the last of one streamed request."""
    start = time.perf_counter()
    first = None
    text = b""
    async with client.stream(
        "POST", url, json=body, headers={"authorization": f"Bearer {key}"}
    ) as response:
        async for piece in response.aiter_raw():
            first = first or time.perf_counter()
            text += piece
    last = time.perf_counter()
    assert response.status_code == 200 and text.endswith(b"data: [DONE]\n\n"), text[-300:]
    assert b'"content"' in text, text[-500:]
    return (first or last) - start, last - start


def start_serve(data: Path, recording: Path) -> tuple[subprocess.Popen[str], str, str]:
    api_port = free_port()
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "serve"]
    command += ["--port", str(free_port()), "--api-port", str(api_port)]
    command += ["--replay", str(recording), "--max-concurrent-runs", "64"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    for line in process.stdout:
        found = re.match(r"endpoint key: (\S+)", line)
        if found:
            return process, f"http://127.0.0.1:{api_port}/v1/chat/completions", found.group(1)
    raise RuntimeError("serve did not start")


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"median {statistics.median(ms):8.1f} ms   p90 {p90:8.1f} ms"


async def main(repeats: int, concurrent: int, which: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="endpoint-bench-"))
    profile = Profile.load(PROFILE)
    if which == "example":
        recording, what = RECORDING, "the example's recorded run (8 rounds, 13 calls)"
    else:
        recording = await asyncio.to_thread(record_short_run, tmp / "recording", profile)
        what = "a short replayed run (3 rounds, 4 calls)"
    data_in = tmp / "in-process"
    data_http = tmp / "endpoint"
    (data_http / "profiles").mkdir(parents=True)
    shutil.copyfile(PROFILE, data_http / "profiles" / f"{profile.id}.json")
    body = {"model": f"tavern-agent/{profile.id}", "messages": messages(), "stream": True}
    process, url, key = start_serve(data_http, recording)
    try:
        async with httpx.AsyncClient(timeout=120) as client, await Assembly.open(data_in) as asm:
            await through_endpoint(client, url, key, body)  # warm both paths once
            await in_process(asm, recording, profile, tmp, -1)
            local: list[float] = []
            firsts: list[float] = []
            lasts: list[float] = []
            for i in range(repeats):  # interleaved, so drift hits both alike
                local.append(await in_process(asm, recording, profile, tmp, i))
                first, last = await through_endpoint(client, url, key, body)
                firsts.append(first)
                lasts.append(last)
            models = url.replace("/chat/completions", "/models")
            auth = {"authorization": f"Bearer {key}"}
            trips = []
            for _ in range(200):  # the HTTP stack alone: an authorized request, no run
                begin = time.perf_counter()
                assert (await client.get(models, headers=auth)).status_code == 200
                trips.append(time.perf_counter() - begin)
            start = time.perf_counter()
            await asyncio.gather(
                *(through_endpoint(client, url, key, body) for _ in range(concurrent))
            )
            together = time.perf_counter() - start
    finally:
        process.terminate()
        process.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)
    one = statistics.median(lasts)
    added = (statistics.median(lasts) - statistics.median(local)) * 1000
    print(f"Agent endpoint: {what}, {repeats} repeats, fsync on")
    print(f"  in-process (Run.start + Engine)   {stats(local)}")
    print(f"  endpoint, first body byte         {stats(firsts)}")
    print(f"  endpoint, last byte ([DONE])      {stats(lasts)}")
    print(f"  added by the endpoint (median)    {added:8.1f} ms   (goal < 5 ms)")
    print(f"  GET /v1/models round trip         {stats(trips)}")
    print(
        f"  {concurrent} concurrent requests        {together * 1000:8.1f} ms   "
        f"= {together / one:4.1f}× one request (goal ≤ 2×)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--recording", choices=["short", "example"], default="short")
    parser.add_argument("--quick", action="store_true", help="median of 5: what make bench runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 5
    asyncio.run(main(args.repeats, args.concurrent, args.recording))
