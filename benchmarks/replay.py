"""Replay encoding: a 500-turn transcript with 2,000 tool calls, encoded per protocol.

Measures repair + history encoding (the work done before every request of a long
run). Goal: under 50 ms per protocol. Prints the median of several runs.

Then the requests of one 100-round run (3 calls per round, 401 items at the
end), each encoded to the bytes sent: whole each round (``build_request`` and
``json.dumps``, as before) against :class:`RequestEncoder`, which encodes only
what the round added (what is left grows with the run: joining the kept
texts). Goal: at round 100, incremental costs at most a tenth of whole.

    .venv/bin/python benchmarks/replay.py
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.codec import Codec, RequestSettings
from tavern_agent.providers.incremental import RequestEncoder
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    Transcript,
    TranscriptItem,
    UserMessage,
)
from tavern_agent.tools.snapshot import ToolSnapshot

TURNS = 500
CALLS = 2000
RUNS = 15
DICE = ToolId.builtin("dice.roll")


def transcript() -> Transcript:
    """500 assistant turns, 4 calls each; every 50th argument text is invalid JSON,
    and the last turn is interrupted (no results)."""
    items: list[TranscriptItem] = []
    per_turn = CALLS // TURNS
    n = 0
    for turn in range(TURNS):
        items.append(UserMessage(f"Turn {turn}: what happens next?"))
        calls = []
        for _ in range(per_turn):
            raw = '{"formula": "2d6' if n % 50 == 0 else f'{{"formula": "{n % 6 + 1}d20+{n % 7}"}}'
            calls.append(RecordedCall(ToolCall(f"call_{n:06d}_{'x' * 40}", "dice_roll", raw)))
            n += 1
        items.append(AssistantMessage(f"Rolling {per_turn} times.", tuple(calls)))
        if turn < TURNS - 1:
            for c in calls:
                items.append(
                    ToolResultMessage(AgentToolResult(c.call_id, DICE, "Rolled 2d6: 3 + 4 = 7."))
                )
    return Transcript(tuple(items), "You narrate a tavern scene.")


ROUNDS = 100


def run_transcripts() -> list[Transcript]:
    """The transcript of each request of a 100-round run, three dice calls a round."""
    items: list[TranscriptItem] = [UserMessage("Roll for the tavern.")]
    out = [Transcript(tuple(items), "You narrate a tavern scene.")]
    for r in range(ROUNDS - 1):
        calls = tuple(
            RecordedCall(ToolCall(f"call_{r}_{i}", "dice_roll", '{"formula":"1d20"}'))
            for i in range(3)
        )
        items.append(AssistantMessage("", calls))
        items.extend(
            ToolResultMessage(AgentToolResult(c.call_id, DICE, "Rolled 1d20: 7.")) for c in calls
        )
        out.append(Transcript(tuple(items), "You narrate a tavern scene."))
    return out


def whole_bytes(codec: Codec, transcript: Transcript, snapshot: ToolSnapshot) -> bytes:
    body = codec.build_request("m", transcript, snapshot)
    body["stream"] = True
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def per_request(protocol: ModelProtocol, snapshot: ToolSnapshot) -> None:
    codec = codec_for(protocol)
    runs = run_transcripts()
    whole: list[list[float]] = [[] for _ in runs]
    incremental: list[list[float]] = [[] for _ in runs]
    for _ in range(RUNS):
        encoder = RequestEncoder(codec, {"stream": True})
        for n, transcript in enumerate(runs):
            start = time.perf_counter()
            ours = encoder.encode("run/inv", transcript, snapshot, RequestSettings("m"))
            incremental[n].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            theirs = whole_bytes(codec, transcript, snapshot)
            whole[n].append((time.perf_counter() - start) * 1000)
            assert ours == theirs
    w = [statistics.median(t) for t in whole]
    i = [statistics.median(t) for t in incremental]
    met = i[-1] <= 0.1 * w[-1]
    print(
        f"  {protocol.value:<17} whole: round 10 {w[9]:.3f}, round 100 {w[-1]:.3f}, "
        f"mean {statistics.mean(w):.3f} ms | incremental: round 10 {i[9]:.3f}, "
        f"round 100 {i[-1]:.3f}, mean {statistics.mean(i):.3f} ms | "
        f"{w[-1] / i[-1]:.1f}x at round 100, goal {'met' if met else 'missed'}"
    )


def main() -> None:
    history = transcript()
    profile = Profile.allowing([DICE], "bench")
    assembly = Assembly(Path("/nonexistent-data-root"))
    print(f"Replay encoding: {TURNS} turns, {CALLS} calls, median of {RUNS} runs")
    for protocol in ModelProtocol:
        snapshot = assembly.snapshot(profile, Scene.CHAT, protocol, "bench")
        codec = codec_for(protocol)
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            codec.encode_history(history, snapshot)
            times.append((time.perf_counter() - start) * 1000)
        print(f"  {protocol.value:<17} {statistics.median(times):6.1f} ms  (min {min(times):.1f})")
    print(f"Per-request encoding over a {ROUNDS}-round run (bytes sent), median of {RUNS} runs")
    for protocol in ModelProtocol:
        per_request(protocol, assembly.snapshot(profile, Scene.CHAT, protocol, "bench"))


if __name__ == "__main__":
    main()
