"""Counting and compaction: the token estimate against o200k_base, and what compaction costs.

A scripted model drives a 200-round chat run whose rounds read project files
(docs, source, a world book, the example chat: prose, code and JSON), write
prose and roll dice; every request is kept as sent.

* **Estimate.** Each request's estimate (:func:`~tavern_agent.runtime.context.request_tokens`,
  before any calibration by a provider's count) against o200k_base on the same
  request, counted as OpenAI counts a Chat Completions prompt: each message's
  text and calls plus four tokens of framing, and the tool definitions' JSON.
  The ``bpe-openai`` package ships the ranks, so nothing is downloaded. Goal:
  within 5%, never under by more than 2%.
* **Compaction.** The same requests' transcripts through a
  :class:`~tavern_agent.runtime.context.ContextKeeper` with an 8,192-token
  window, in order, as a run makes them: the time of each request's
  ``request_view`` (counting, the decision, the stubs; a compaction's
  spill files included). Goal: < 2 ms per request at round 80.

Run: ``python benchmarks/context.py [--rounds N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import bpe_openai

from tavern_agent.assembly import Assembly
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.providers.registry import codec_for
from tavern_agent.runtime.context import ContextKeeper, Window, request_tokens
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, Turn, calls

REPO = Path(__file__).resolve().parents[1]
ENCODING = bpe_openai.get_encoding("o200k_base")
TOOLS = [
    "builtin:chat.search",
    "builtin:workspace.read_file",
    "builtin:workspace.write_file",
    "builtin:dice.roll",
    "builtin:workspace.commit",
    "builtin:workspace.finish",
]
HEADER = '{"user_name":"U","character_name":"S","chat_metadata":{"integrity":"bench"}}'
SOURCES = [
    "docs/journal.md",
    "docs/protocols.md",
    "src/tavern_agent/runtime/context.py",
    "tests/data/Eldoria.json",
    "examples/chat.jsonl",
    "README.md",
]


def script(rounds: int) -> list[Turn]:
    files = [
        (f"scratch/{i}.txt", (REPO / p).read_text(encoding="utf-8")) for i, p in enumerate(SOURCES)
    ]
    turns = [
        calls(*[("workspace_write_file", {"file_path": n, "content": t[:5_000]}) for n, t in files])
    ]
    prose = (REPO / "docs" / "protocols.md").read_text(encoding="utf-8").split("\n\n")
    for r in range(1, rounds):
        name = files[r % len(files)][0]
        turns.append(
            calls(
                ("workspace_read_file", {"file_path": name, "offset": 1 + r % 40, "limit": 60}),
                ("dice_roll", {"formula": "1d20"}),
                (
                    "workspace_write_file",
                    {"file_path": "output/main.md", "content": prose[r % len(prose)]},
                ),
                text=prose[(r * 7) % len(prose)][:400],
            )
        )
    return turns


def record(rounds: int, root: Path) -> list[ModelRequest]:
    chat = root / "chat.jsonl"
    chat.write_text(
        HEADER + "\n" + (REPO / "examples" / "chat.jsonl").read_text().split("\n", 1)[1]
    )
    profile = Profile.from_json(
        {
            "id": "bench",
            "name": "bench",
            "tools": {"allow": TOOLS},
            "limits": {"maxRounds": rounds, "maxCallsPerInvocation": rounds * 9},
        }
    )
    run = Run.start(Assembly(root / "data"), RunSpec(profile, chat_file=chat, seed=1))
    gateway = ScriptedGateway(script(rounds))
    engine = Engine(run, gateway, fsync=False)
    asyncio.run(engine.start())
    engine.close()
    return gateway.requests


def o200k(request: ModelRequest) -> int:
    """The request's prompt tokens with o200k_base, counted as Chat Completions counts them."""
    codec = codec_for(request.snapshot.protocol)
    body = codec.build_request("m", request.transcript, request.snapshot)
    total = 0
    for message in body["messages"]:
        total += 4 + len(ENCODING.encode(message.get("content") or ""))
        for tc in message.get("tool_calls") or ():
            fn = tc["function"]
            total += 8 + len(ENCODING.encode(fn["name"] + fn["arguments"]))
    return total + len(ENCODING.encode(json.dumps(body.get("tools", []))))


def estimate_table(requests: list[ModelRequest]) -> dict[str, float]:
    ratios = [request_tokens(r.transcript, r.snapshot) / o200k(r) - 1 for r in requests]
    return {
        "requests": len(ratios),
        "mean": statistics.mean(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "within5": sum(abs(x) <= 0.05 for x in ratios) / len(ratios),
        "under2": sum(x < -0.02 for x in ratios) / len(ratios),
    }


def compaction_times(
    requests: list[ModelRequest], root: Path, scratch: Path, window: int
) -> list[float]:
    """Seconds of ``request_view`` per request, in order, for one keeper."""
    keeper = ContextKeeper()
    keeper.window = Window.of(window, "bench", 1_024)
    journal = Journal(scratch / "events.jsonl", "run_bench", fsync=False)
    run = Run.open(Assembly(root / "data"), next((root / "data").rglob("run.json")).parent)
    out = []
    for request in requests:
        inv = Invocation(f"inv_{scratch.name}", request.snapshot, None, request.transcript)  # type: ignore[arg-type]
        started = time.perf_counter()
        keeper.request_view(inv, request.round, run.workspace, journal)
        out.append(time.perf_counter() - started)
    journal.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 repeats: what make bench runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 3
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        requests = record(args.rounds, root)
        table = estimate_table(requests)
        print(f"Token estimate against o200k_base, {table['requests']} requests of a scripted run")
        mean, low, high = table["mean"], table["min"], table["max"]
        print(f"  estimate / o200k - 1: mean {mean:+.1%}, min {low:+.1%}, max {high:+.1%}")
        within, under = table["within5"], table["under2"]
        print(f"  within 5%: {within:.0%} of requests; under by more than 2%: {under:.0%}")
        print("  (goal: within 5%, never under by more than 2%)")
        runs: list[list[float]] = []
        for _ in range(args.repeats):
            scratch = root / f"r{len(runs)}"
            runs.append(compaction_times(requests[:80], root, scratch, 8_192))
        at80 = statistics.median(r[79] for r in runs) * 1000
        mean = statistics.median(statistics.mean(r[60:80]) for r in runs) * 1000
        worst = statistics.median(max(r[:80]) for r in runs) * 1000
        print(f"Compaction, 8,192-token window, median of {args.repeats} runs")
        print(f"  request_view at round 80: {at80:.3f} ms; mean of rounds 61-80: {mean:.3f} ms")
        print(f"  slowest request of rounds 1-80 (a compaction): {worst:.3f} ms  (goal: < 2 ms)")


if __name__ == "__main__":
    main()
