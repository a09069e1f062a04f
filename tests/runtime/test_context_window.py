"""Runs keep their requests within the model's context window, against a server that enforces it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import (
    HttpGateway,
    ModelConfig,
    ModelGateway,
    ModelReply,
    ModelRequest,
    ReplayGateway,
)
from tavern_agent.providers.window import UNKNOWN_TOKENIZER, WindowFacts
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tests.runtime.helpers import Harness, payloads
from tests.runtime.openai_server import CallSpec
from tests.runtime.window_server import GeminiWindowServer, WindowServer

ROUNDS = 80
TOOLS = (
    "builtin:workspace.read_file",
    "builtin:workspace.write_file",
    "builtin:workspace.commit",
    "builtin:workspace.finish",
)


def lean_profile(**limits: Any) -> Profile:
    return Profile.from_json(
        {
            "id": "lean",
            "name": "Lean",
            "tools": {"allow": TOOLS},
            "limits": {"maxRounds": 100, "maxCallsPerInvocation": 100, **limits},
        }
    )


def script_for(window: int) -> Any:
    """Write a file sized to the window, read it back every round, then publish and finish."""
    lines = max(window // 300, 12)
    text = "the river runs cold under the old stone bridge"
    big = "\n".join(f"line {i:04d}: {text}" for i in range(lines))

    def script(turn: int) -> list[CallSpec]:
        if turn == 0:
            return [("workspace_write_file", {"file_path": "scratch/big.txt", "content": big})]
        if turn < ROUNDS:
            read = {"file_path": "scratch/big.txt", "offset": 1 + turn % 3}
            return [("workspace_read_file", read)]
        if turn == ROUNDS:
            return [("workspace_write_file", {"file_path": "output/main.md", "content": "Done."})]
        if turn == ROUNDS + 1:
            return [("workspace_commit", {"reason": "reply"})]
        return [("workspace_finish", {})]

    return script


class Seen:
    """A gateway that keeps each request's transcript, as sent, and asks another."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[tuple[int, Any, int | None]] = []

    async def window_facts(self) -> WindowFacts | None:
        facts: WindowFacts | None = await self.inner.window_facts()
        return facts

    async def count_tokens(self, request: ModelRequest) -> int | None:
        count_of = getattr(self.inner, "count_tokens", None)
        counted: int | None = await count_of(request) if count_of is not None else None
        return counted

    async def respond(self, request: ModelRequest) -> ModelReply:
        self.requests.append((request.round, request.transcript.to_json(), request.max_tokens))
        reply: ModelReply = await self.inner.respond(request)
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()


def http(server: WindowServer, window: int) -> HttpGateway:
    config = ModelConfig(
        ModelProtocol.OPENAI_CHAT, "local", server.base_url, backoff=0.01, context_window=window
    )
    return HttpGateway(config)


def drive(engine: Engine, how: str = "start") -> str:
    async def main() -> str:
        try:
            result = await (engine.start() if how == "start" else engine.resume())
            return f"{result.status} {result.message}".strip()
        finally:
            await engine.gateway.aclose()
            engine.close()

    return asyncio.run(main())


def normalized(seen: Seen, run: Run) -> list[str]:
    """The requests as text, with the run's own ids spelled alike for any run."""
    out = []
    for round, transcript, max_tokens in seen.requests:
        text = json.dumps([round, transcript, max_tokens])
        for index, inv in enumerate(run.invocations):
            text = text.replace(inv.id, f"inv{index}")
        out.append(text.replace(run.id, "RUN"))
    return out


def paired(body: dict[str, Any]) -> bool:
    """Every call of the request has exactly one result, and every result a call."""
    calls = [tc["id"] for m in body["messages"] for tc in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    return sorted(calls) == sorted(results) and len(set(calls)) == len(calls)


@pytest.mark.parametrize("window", [2_048, 8_192, 131_072])
def test_eighty_rounds_of_large_results_fit_the_window(tmp_path: Path, window: int) -> None:
    h = Harness(tmp_path / "live")
    with WindowServer(window, script_for(window)) as server:
        run = h.start(lean_profile())
        seen = Seen(http(server, window))
        assert drive(Engine(run, seen, fsync=False)) == "completed"  # type: ignore[arg-type]
    assert server.refused == [] and max(server.counts) <= window
    assert len(server.bodies) == ROUNDS + 3
    assert all(paired(body) for body in server.bodies)
    [declared] = payloads(run.run_dir, "context_window")
    assert (declared["tokens"], declared["source"]) == (window, "flag")
    compacted = payloads(run.run_dir, "context_compacted")
    assert compacted and all(c["tokensAfter"] < c["tokensBefore"] for c in compacted)
    # A compaction leaves room: requests grow on the same prefix for several rounds after it
    # (on 2k and 8k one large result is a quarter of the window or more: most rounds compact).
    assert len(compacted) < (ROUNDS if window < 32_768 else ROUNDS // 4)
    requested = payloads(run.run_dir, "model_request")
    assert all(r["promptTokens"] <= declared["budget"] for r in requested)

    # A replay of the recording makes the same requests, compactions included.
    again = Harness(tmp_path / "replay")
    replayed_run = again.start(lean_profile())
    replay = Seen(ReplayGateway(run.run_dir))
    assert drive(Engine(replayed_run, replay, fsync=False)) == "completed"  # type: ignore[arg-type]
    assert normalized(replay, replayed_run) == normalized(seen, run)


def test_a_resumed_run_makes_the_same_requests(tmp_path: Path) -> None:
    window = 2_048
    h = Harness(tmp_path / "whole")
    with WindowServer(window, script_for(window)) as server:
        run = h.start(lean_profile(), run_id="run_whole")
        whole = Seen(http(server, window))
        assert drive(Engine(run, whole, fsync=False)) == "completed"  # type: ignore[arg-type]

        cut = Harness(tmp_path / "cut")
        first = cut.start(lean_profile(), run_id="run_whole")
        before = Seen(http(server, window))
        engine = Engine(first, before, fsync=False)  # type: ignore[arg-type]

        async def some_steps() -> None:
            for _ in range(101):  # a step is a request or a turn's calls: stop mid-run
                await engine.step_once()
            await before.aclose()
            engine.close()

        asyncio.run(some_steps())
        reopened = Run.open(cut.assembly, first.run_dir)
        after = Seen(http(server, window))
        assert drive(Engine(reopened, after, fsync=False), "resume") == "completed"  # type: ignore[arg-type]
    assert 40 < len(before.requests) < ROUNDS
    resumed = normalized(before, first) + normalized(after, reopened)
    assert resumed == normalized(whole, run)


def test_an_overflow_mid_run_is_compacted_and_asked_again(tmp_path: Path) -> None:
    window = 8_192
    h = Harness(tmp_path)
    with WindowServer(window, script_for(window), refuse_at=30) as server:
        run = h.start(lean_profile())
        assert drive(Engine(run, http(server, window), fsync=False)) == "completed"
    assert len(server.refused) == 1
    overflow = [c for c in payloads(run.run_dir, "context_compacted") if c["reason"] == "overflow"]
    assert len(overflow) == 1 and overflow[0]["round"] == 31
    retried = [r for r in payloads(run.run_dir, "model_request") if r["round"] == 31]
    assert len(retried) == 2 and retried[1]["promptTokens"] < retried[0]["promptTokens"]


def test_an_answer_cut_off_by_a_full_window_is_told_so_and_compacts(tmp_path: Path) -> None:
    window = 8_192
    h = Harness(tmp_path)
    with WindowServer(window, script_for(window), full_at=20) as server:
        run = h.start(lean_profile())
        assert drive(Engine(run, http(server, window), fsync=False)) == "completed"
    [cut] = [r for r in payloads(run.run_dir, "tool_result_stored") if r["round"] == 21]
    text = cut["result"]["content"]
    assert "context window (8,192 tokens) filled up" in text and "shorter arguments" not in text
    assert "send the call again" in text
    full = [c for c in payloads(run.run_dir, "context_compacted") if c["reason"] == "window_full"]
    assert [c["round"] for c in full] == [22]


def test_a_chat_history_over_the_window_keeps_its_newest_floors(tmp_path: Path) -> None:
    window = 2_048
    floors = [f"floor {i}: " + "the lantern swings over the ford, " * 12 for i in range(30)]
    h = Harness(tmp_path, floors)
    with WindowServer(window, script_for(window)) as server:
        run = h.start(lean_profile())
        assert drive(Engine(run, http(server, window), fsync=False)) == "completed"
    assert server.refused == [] and max(server.counts) <= window
    task = server.bodies[0]["messages"][1]["content"]
    [first] = [c for c in payloads(run.run_dir, "context_compacted") if c["round"] == 1]
    assert first["floorsDropped"] > 0 and first["tokensAfter"] < first["tokensBefore"]
    hidden = int(re.search(r"\(floors 0-(\d+) are not shown\)", task).group(1))  # type: ignore[union-attr]
    assert 0 < hidden < 29 and f"[{hidden + 1}] " in task and "[29] " in task
    assert f"[{hidden}] " not in task


def test_a_gemini_run_keeps_its_window_and_recovers_from_gemini_s_overflow(
    tmp_path: Path,
) -> None:
    window = 8_192
    h = Harness(tmp_path)
    script = script_for(window)
    with GeminiWindowServer(window, script, refuse_at=30) as server:
        spec = RunSpec(lean_profile(), ModelProtocol.GEMINI, chat_file=h.chat_path, seed=7)
        run = Run.start(h.assembly, spec)
        url = f"{server.origin}/v1beta"
        config = ModelConfig(ModelProtocol.GEMINI, "gemini-test", url, context_window=window)
        assert drive(Engine(run, HttpGateway(config), fsync=False)) == "completed"
    assert len(server.refused) == 1 and max(server.counts) <= window
    reasons = [c["reason"] for c in payloads(run.run_dir, "context_compacted")]
    assert "budget" in reasons and reasons.count("overflow") == 1


def test_tools_over_the_window_fail_before_the_first_request(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with WindowServer(600, script_for(600)) as server:
        run = h.start(lean_profile())
        outcome = drive(Engine(run, http(server, 600), fsync=False))
    assert server.bodies == []
    assert outcome.startswith("failed") and "600-token window" in outcome
    assert "tokens" in outcome and "--context-window" in outcome


def test_no_window_pressure_leaves_requests_as_they_were(tmp_path: Path) -> None:
    window = 131_072
    h = Harness(tmp_path)
    short = script_for(2_048)
    with WindowServer(window, lambda turn: short(turn if turn < 3 else ROUNDS + turn - 3)) as srv:
        run = h.start(lean_profile())
        seen = Seen(http(srv, window))
        gateway: ModelGateway = seen  # type: ignore[assignment]
        assert drive(Engine(run, gateway, fsync=False)) == "completed"
    assert payloads(run.run_dir, "context_compacted") == []
    for _, transcript, _ in seen.requests:  # the transcript itself was sent
        assert all("Collapsed" not in json.dumps(item) for item in transcript["items"])


def local_chat(floors: int) -> list[str]:
    return [f"floor {i}: " + "the lantern swings over the ford, " * 12 for i in range(floors)]


def test_a_local_model_s_own_count_keeps_the_first_request_within_its_window(
    tmp_path: Path,
) -> None:
    # A local model's tokenizer makes 1.6 tokens of what OpenAI's makes one: counted as OpenAI
    # counts, the first request (chat history and all) would leave no room to answer. The
    # server counts it first (llama.cpp's /apply-template and /tokenize), and the run keeps it.
    window = 2_048
    h = Harness(tmp_path / "live", local_chat(8))
    with WindowServer(window, script_for(window), per_token=1.6, tokenize=True) as server:
        run = h.start(lean_profile())
        seen = Seen(http(server, window))
        assert drive(Engine(run, seen, fsync=False)) == "completed"  # type: ignore[arg-type]
    [counted] = payloads(run.run_dir, "context_counted")
    assert counted["round"] == 1 and counted["counted"] == server.tokenized[0]
    assert counted["counted"] > window - 256 > counted["estimated"]  # the estimate alone: no room
    assert server.refused == [] and max(server.counts) <= window - 256
    [first, *_] = payloads(run.run_dir, "model_request")
    # The run's count of the (compacted) request follows the server's, not OpenAI's.
    assert server.counts[0] * 0.98 <= first["promptTokens"] <= server.counts[0] * 1.05
    [compacted, *_] = payloads(run.run_dir, "context_compacted")
    assert compacted["round"] == 1 and compacted["floorsDropped"] > 0

    # The replay is given the recorded count and makes the same requests.
    again = Harness(tmp_path / "replay", local_chat(8))
    replayed_run = again.start(lean_profile())
    replay = Seen(ReplayGateway(run.run_dir))
    assert drive(Engine(replayed_run, replay, fsync=False)) == "completed"  # type: ignore[arg-type]
    assert normalized(replay, replayed_run) == normalized(seen, run)


def test_a_local_model_that_cannot_count_is_counted_high_until_it_reports_usage(
    tmp_path: Path,
) -> None:
    # The same, on a server that cannot count a request before it is sent: until the
    # first usage says better, the run takes a local model's tokens to be 1.3 of its estimate.
    window = 2_048
    h = Harness(tmp_path, local_chat(11))
    with WindowServer(window, script_for(window), per_token=1.25) as server:
        run = h.start(lean_profile())
        assert drive(Engine(run, http(server, window), fsync=False)) == "completed"
    [declared] = payloads(run.run_dir, "context_window")
    assert declared["scale"] == UNKNOWN_TOKENIZER and payloads(run.run_dir, "context_counted") == []
    [first, *_] = payloads(run.run_dir, "context_compacted")
    # Counted as OpenAI counts, the first request was within the budget: it would have been sent.
    assert first["round"] == 1 and first["tokensBefore"] / UNKNOWN_TOKENIZER <= declared["budget"]
    assert server.refused == [] and max(server.counts) <= window - 256
