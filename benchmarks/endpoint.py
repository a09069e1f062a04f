"""What the agent endpoint adds to a run, and how concurrent requests share the machine.

A short run is recorded once with a scripted model on the example's chat and
profile (round 1 reads two floors and writes the reply, round 2 commits,
round 3 finishes); ``--recording example`` takes the example's recorded run
instead (``examples/recorded-run``: 8 rounds, 13 calls including the shell).
Every run journals with fsync, as by default. Three cases, each printed as a
row of the goal table beside its baseline from the same run:

* **added per request**: the recording replayed by ``ReplayGateway``
  in-process, as ``tavern-agent run`` does it (``Run.start`` on an
  ``Assembly`` opened once, as ``serve`` does, and ``Engine.start()``, then
  the committed message read back), interleaved with the same run through
  ``tavern-agent serve --replay`` in its own process, a streaming ``POST
  /v1/chat/completions`` with the chat's floors as messages, timed to the
  first byte of the body and to the last (the end of the chunked body).
  Added = endpoint last byte − in-process (medians), by two clients on one
  kept-alive connection each: a lean one (the request written by hand, the
  chunked body read until its end: what the endpoint adds) and httpx, whose
  own CPU per request (printed) is on the same cores and in the same wait.
  Also the CPU ``serve`` (the serving process, and its workers) spends per
  request beyond the in-process run's CPU, which the machine's load hardly
  moves.
* **20 concurrent replayed runs** against one ``serve`` (default
  ``--workers``: the number of cores), in × one request on the same server;
  baseline: the same with ``--workers 1``. Also the CPU each serve process
  spent meanwhile, and the least wall time that CPU allows on free cores (a
  busy machine's other work stretches the wall time, most for the
  multi-process server, whose every hand-over waits for a core).
* **20 concurrent runs against a model that takes 300 ms per answer**: an
  OpenAI chat server on 127.0.0.1 plays the short run's three turns (tool
  calls streamed as llama.cpp sends them), each after 300 ms; ``serve --model
  local --base-url`` it; × one request; baseline ``--workers 1``.

The data roots live on tmpfs (``/dev/shm``) when there is one (``--disk``:
under the temp folder): the fsyncs are still made, but a disk's fsync
latency (tens of ms, varying with other writers) would drown a 3 ms
difference. Run: ``python benchmarks/endpoint.py [--repeats N]
[--concurrent N] [--recording example] [--disk] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.runtime's model server

from tavern_agent.assembly import Assembly
from tavern_agent.chat.formats import parse_chat
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ReplayGateway
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, calls
from tavern_agent.runtime.summary import committed_message
from tests.runtime.openai_server import OpenAIServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECORDING = EXAMPLES / "recorded-run"
PROFILE = EXAMPLES / "profile.json"
CHAT = EXAMPLES / "chat.jsonl"
UPSTREAM_SECONDS = 0.3

TURNS: list[list[tuple[str, dict[str, Any]]]] = [
    [
        ("chat_read_messages", {"floors": [{"floor": 0}, {"floor": 1}]}),
        ("workspace_write_file", {"file_path": "output/main.md", "content": "The ford is cold."}),
    ],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {})],
]
SHORT_RUN = [calls(*turn) for turn in TURNS]


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
) -> tuple[float, float]:
    """One run as ``tavern-agent run`` drives it, on an assembly opened once (as serve does):
    its wall time and its CPU time."""
    chat = tmp / f"chat-{index}.jsonl"
    shutil.copyfile(CHAT, chat)
    start, cpu = time.perf_counter(), time.process_time()
    run = Run.start(assembly, RunSpec(profile, chat_file=chat, seed=7))
    engine = Engine(run, ReplayGateway(recording))
    try:
        result = await engine.start()
    finally:
        engine.close()
    message = committed_message(run, result)
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    assert result.status == "completed" and message, result
    return elapsed, used


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


class LeanClient:
    """Streamed requests written by hand on one kept-alive connection: next to no client CPU."""

    def __init__(self, url: str, key: str, body: dict[str, Any]) -> None:
        parts = httpx.URL(url)
        self.host, self.port = parts.host, parts.port or 80
        data = json.dumps(body).encode()
        head = (
            f"POST {parts.raw_path.decode()} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"authorization: Bearer {key}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        )
        self.request = head.encode() + data
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def __call__(self) -> tuple[float, float]:
        """Seconds to the first body byte and to the end of the body of one streamed request."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        start = time.perf_counter()
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        text = await reader.read(65536)
        first = time.perf_counter()
        while not text.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
            piece = await reader.read(65536)
            assert piece, text[-300:]
            text += piece
        last = time.perf_counter()
        assert head.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in text, text[-300:]
        assert b'"content"' in text, text[-500:]
        return first - start, last - start

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str  # .../v1/chat/completions
    key: str

    def cpu_by_process(self) -> dict[int, float]:
        """CPU seconds of serve and of each of its worker processes so far, by pid."""
        pids = [self.process.pid]
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids += [int(p) for p in children.read_text().split()]
        used = {}
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return used

    def cpu_seconds(self) -> float:
        """CPU seconds of serve and its worker processes so far."""
        return sum(self.cpu_by_process().values())


@contextmanager
def serve(data: Path, *model: str) -> Iterator[Served]:
    """``tavern-agent serve`` on free ports with the model flags given; stopped after."""
    api_port = free_port()
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "serve"]
    command += ["--port", str(free_port()), "--api-port", str(api_port)]
    command += [*model, "--max-concurrent-runs", "64"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            found = re.match(r"endpoint key: (\S+)", line)
            if found:
                url = f"http://127.0.0.1:{api_port}/v1/chat/completions"
                yield Served(process, url, found.group(1))
                return
        raise RuntimeError("serve did not start")
    finally:
        process.terminate()
        process.wait(30)


def stats(values: Sequence[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"median {statistics.median(ms):8.1f} ms   p90 {p90:8.1f} ms"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Setup:
    tmp: Path
    profile: Profile
    recording: Path
    body: dict[str, Any]

    def data(self, name: str) -> Path:
        """A fresh data root with the example's profile saved in it."""
        data = self.tmp / name
        (data / "profiles").mkdir(parents=True)
        shutil.copyfile(PROFILE, data / "profiles" / f"{self.profile.id}.json")
        return data


async def added(setup: Setup, repeats: int) -> dict[str, Any]:
    """In-process and through the endpoint (a lean client, then httpx), interleaved."""
    got: dict[str, list[float]] = {
        k: [] for k in ("local", "local_cpu", "firsts", "lasts", "httpx", "lean_cpu", "httpx_cpu")
    }
    with serve(setup.data("endpoint"), "--replay", str(setup.recording)) as served:
        lean = LeanClient(served.url, served.key, setup.body)
        async with (
            httpx.AsyncClient(timeout=120) as client,
            await Assembly.open(setup.tmp / "in-process") as assembly,
        ):
            args = (assembly, setup.recording, setup.profile, setup.tmp)
            for _ in range(2):  # warm all three
                await through_endpoint(client, served.url, served.key, setup.body)
                await lean()
            await in_process(*args, -1)
            cpu_before = served.cpu_by_process()
            for i in range(repeats):  # interleaved, so drift hits all alike
                wall, cpu = await in_process(*args, i)
                got["local"].append(wall)
                got["local_cpu"].append(cpu)
                used = time.process_time()
                first, last = await lean()
                got["lean_cpu"].append(time.process_time() - used)
                got["firsts"].append(first)
                got["lasts"].append(last)
                used = time.process_time()
                got["httpx"].append(
                    (await through_endpoint(client, served.url, served.key, setup.body))[1]
                )
                got["httpx_cpu"].append(time.process_time() - used)
            after = served.cpu_by_process()
            lean.close()
            by_process = [(t - cpu_before.get(p, 0.0)) / (2 * repeats) for p, t in after.items()]
            models = served.url.replace("/chat/completions", "/models")
            auth = {"authorization": f"Bearer {served.key}"}
            trips = []
            for _ in range(50):  # the HTTP stack alone: an authorized request, no run
                begin = time.perf_counter()
                assert (await client.get(models, headers=auth)).status_code == 200
                trips.append(time.perf_counter() - begin)
    local_cpu = statistics.mean(got["local_cpu"])
    return got | {
        "trips": trips,
        "cpu_added": sum(by_process) - local_cpu,
        "serving_cpu": by_process[0],  # the serving process alone (HTTP, hand-over)
        "local_cpu": local_cpu,
    }


@dataclass
class Together:
    one: float  # seconds for one request (median)
    together: float  # seconds for all at once
    cpu: list[float]  # CPU seconds of each serve process meanwhile (serve first)

    def times(self) -> float:
        return self.together / self.one

    def bound(self, cores: int) -> float:
        """The least wall time serve's CPU alone allows on ``cores`` free cores."""
        return max(max(self.cpu), sum(self.cpu) / cores)


async def concurrent(
    data: Path, model: Sequence[str], body: dict[str, Any], count: int, ones: int
) -> Together:
    """One request (median of ``ones``) and ``count`` at once against one serve."""
    with serve(data, *model) as served:
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=200)) as c:
            # Warm up with a few at once: every worker the server will use is started.
            await asyncio.gather(
                *(through_endpoint(c, served.url, served.key, body) for _ in range(4))
            )
            one = []
            for _ in range(ones):
                one.append((await through_endpoint(c, served.url, served.key, body))[1])
            before = served.cpu_by_process()
            start = time.perf_counter()
            await asyncio.gather(
                *(through_endpoint(c, served.url, served.key, body) for _ in range(count))
            )
            together = time.perf_counter() - start
            cpu = [t - before.get(pid, 0.0) for pid, t in served.cpu_by_process().items()]
    return Together(statistics.median(one), together, cpu)


@contextmanager
def upstream_process() -> Iterator[str]:
    """The model server in its own process, as a real one is: its base URL."""
    command = [sys.executable, __file__, "--upstream"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdin is not None
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()  # it serves until its stdin ends
        process.wait(10)


def upstream() -> None:
    """``--upstream``: serve the short run's turns, each answer after 300 ms, until stdin ends."""
    with OpenAIServer(TURNS, delay=UPSTREAM_SECONDS) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


def row(what: str, measured: str, baseline: str, goal: str) -> None:
    print(f"  {what:<44} {measured:>12}   {baseline:<34} {goal}")


async def main(repeats: int, count: int, which: str, on_disk: bool, quick: bool) -> None:
    shm = Path("/dev/shm")
    where = None if on_disk or not shm.is_dir() else shm
    tmp = Path(tempfile.mkdtemp(prefix="endpoint-bench-", dir=where))
    profile = Profile.load(PROFILE)
    if which == "example":
        recording, what = RECORDING, "the example's recorded run (8 rounds, 13 calls)"
    else:
        recording = await asyncio.to_thread(record_short_run, tmp / "recording", profile)
        what = "a short replayed run (3 rounds, 4 calls)"
    body = {"model": f"tavern-agent/{profile.id}", "messages": messages(), "stream": True}
    setup = Setup(tmp, profile, recording, body)
    cores = len(os.sched_getaffinity(0))
    ones = 3 if quick else 5  # one request with the slow model: about a second each
    try:
        print(f"Agent endpoint: {what}, fsync on, data roots in {tmp.parent}; {cores} cores")
        print(f"  at the start: {load()}")
        a = await added(setup, repeats)
        replay = ["--replay", str(recording)]
        by_workers: dict[str, Together] = {}
        for label, flags in (("default", []), ("1", ["--workers", "1"])):
            by_workers[label] = await concurrent(
                setup.data(f"replay-{label}"), replay + flags, body, count, repeats
            )
        slow: dict[str, Together] = {}
        with upstream_process() as base_url:
            model = ["--model", "local", "--base-url", base_url]
            for label, flags in (("default", []), ("1", ["--workers", "1"])):
                slow[label] = await concurrent(
                    setup.data(f"upstream-{label}"), model + flags, body, count, ones
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    local, lasts = statistics.median(a["local"]), statistics.median(a["lasts"])
    with_httpx = statistics.median(a["httpx"])
    print(f"  at the end:   {load()}")
    print(f"  in-process (Run.start + Engine)   {stats(a['local'])}")
    print(f"  endpoint, first body byte         {stats(a['firsts'])}")
    print(f"  endpoint, last byte, lean client  {stats(a['lasts'])}")
    print(f"  endpoint, last byte, httpx        {stats(a['httpx'])}")
    print(f"  GET /v1/models round trip (httpx) {stats(a['trips'])}")
    print(
        f"  CPU per request: in-process run {a['local_cpu'] * 1000:.2f} ms; "
        f"serve and its workers {a['cpu_added'] * 1000:+.2f} ms beyond it "
        f"(the serving process {a['serving_cpu'] * 1000:.2f} ms); the client's own: "
        f"lean {statistics.mean(a['lean_cpu']) * 1000:.2f} ms, "
        f"httpx {statistics.mean(a['httpx_cpu']) * 1000:.2f} ms"
    )

    for what, pairs in (("replayed", by_workers), ("model 300 ms", slow)):
        for label in ("default", "1"):
            t = pairs[label]
            workers = cores if label == "default" else 1
            cpu = " + ".join(f"{c * 1000:,.0f}" for c in t.cpu)
            # With no model to wait for, serve's CPU alone bounds the wall time on free cores.
            bound = t.bound(cores)
            floor = (
                f", on free cores ≥ {bound * 1000:,.0f} ms = {bound / t.one:.1f}× one"
                if pairs is by_workers
                else ""
            )
            print(
                f"  {count} concurrent, {what:<13} --workers {workers}: {t.times():.1f}× "
                f"({t.together * 1000:,.0f} / {t.one * 1000:,.0f} ms); serve's CPU {cpu} ms"
                f"{floor}"
            )
    print()
    row("row", "measured", "baseline, same run", "goal")
    row(
        "endpoint, added per request (median)",
        f"{(lasts - local) * 1000:.1f} ms",
        f"in-process run {local * 1000:.1f} ms",
        "< 3 ms",
    )
    row(
        "  the same through httpx (its CPU included)",
        f"{(with_httpx - local) * 1000:.1f} ms",
        f"httpx's own CPU {statistics.mean(a['httpx_cpu']) * 1000:.1f} ms",
        "",
    )
    row(
        "endpoint, first body byte (median)",
        f"{statistics.median(a['firsts']) * 1000:.1f} ms",
        f"last byte {lasts * 1000:.1f} ms",
        "< 5 ms",
    )

    row(
        f"endpoint, {count} concurrent replayed runs",
        f"{by_workers['default'].times():.1f}× one",
        f"--workers 1: {by_workers['1'].times():.1f}× one",
        f"≤ 11× on 2 cores ({cores} here)",
    )
    row(
        f"endpoint, {count} concurrent, model 300 ms/answer",
        f"{slow['default'].times():.2f}× one",
        f"--workers 1: {slow['1'].times():.2f}× one",
        "≤ 1.3×",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--recording", choices=["short", "example"], default="short")
    parser.add_argument("--disk", action="store_true", help="data roots on disk, not tmpfs")
    parser.add_argument("--quick", action="store_true", help="median of 5: what make bench runs")
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        upstream()
        sys.exit()
    if args.quick:
        args.repeats = 5
    asyncio.run(main(args.repeats, args.concurrent, args.recording, args.disk, args.quick))
