"""Replay encoding: a 500-turn transcript with 2,000 tool calls, encoded per protocol.

Measures repair + history encoding (the work done before every request of a long
run). Goal: under 50 ms per protocol. Prints the median of several runs.

    .venv/bin/python benchmarks/replay.py
"""

from __future__ import annotations

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
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    Transcript,
    TranscriptItem,
    UserMessage,
)

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


if __name__ == "__main__":
    main()
