"""Random transcripts (calls, results, invalid arguments, interruptions, odd ids and
names) encode under every protocol with every call paired with exactly one result,
ids valid for the protocol, object arguments only, and bodies the SDKs accept."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import NAME_RULES, ModelProtocol
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
from tests.providers.conftest import DICE, snapshot_for
from tests.providers.pairing import check_pairing
from tests.providers.sdk import check_request

SNAPSHOTS = {p: snapshot_for(p) for p in ModelProtocol}
RAW = st.sampled_from(
    [
        MISSING,
        None,
        "",
        "  ",
        "{}",
        "null",
        '{"formula":"1d6"}',
        "[1,2]",
        '{"formula": "2d',
        {"formula": "d8"},
        {},
        '"{\\"formula\\": \\"d4\\"}"',
        "42",
        {"nested": {"a": [1]}},
    ]
)
IDS = st.one_of(
    st.sampled_from(["call_1", "toolu_01", "functions.Bash:0", "fc_" + "x" * 60, "", "a b/c"]),
    st.text(min_size=1, max_size=70),
)
NAMES = st.sampled_from(["dice_roll", "scene_clock", "mcp.gone:tool", "old tool", "x" * 90])
TEXT = st.text(max_size=20)


@st.composite
def transcripts(draw: Any) -> Transcript:
    items: list[TranscriptItem] = []
    pending: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "results", "orphan"]))
        if kind == "user":
            items.append(UserMessage(draw(TEXT)))
        elif kind == "assistant":
            calls = tuple(
                RecordedCall(
                    ToolCall(draw(IDS), draw(NAMES), draw(RAW)),
                    draw(st.one_of(st.none(), st.just("c2lnbmF0dXJl"))),
                )
                for _ in range(draw(st.integers(0, 3)))
            )
            items.append(AssistantMessage(draw(TEXT), calls))
            pending.extend(c.call_id for c in calls)
        elif kind == "results" and pending:
            chosen = draw(st.lists(st.sampled_from(pending), max_size=len(pending)))
            for call_id in chosen:
                items.append(
                    ToolResultMessage(
                        AgentToolResult(
                            call_id,
                            draw(st.sampled_from([None, DICE])),
                            draw(TEXT),
                            is_error=draw(st.booleans()),
                        )
                    )
                )
        else:
            items.append(ToolResultMessage(AgentToolResult(draw(IDS), None, "orphan")))
    return Transcript(tuple(items), draw(st.one_of(st.none(), st.just("Be brief."))))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts())
def test_every_protocol_pairs_every_call(transcript: Transcript) -> None:
    total_calls = sum(len(i.calls) for i in transcript.items if isinstance(i, AssistantMessage))
    for protocol in ModelProtocol:
        codec = codec_for(protocol)
        body = codec.build_request("m", transcript, SNAPSHOTS[protocol])
        assert check_pairing(protocol, body) == total_calls
        check_request(protocol, body)
        history = codec.encode_history(transcript, SNAPSHOTS[protocol])
        for wire, original in history.ids.items().items():
            assert history.ids.original(wire) == original
        names = _names(protocol, body)
        assert all(NAME_RULES[protocol].accepts(n) for n in names), names


def _names(protocol: ModelProtocol, body: dict[str, Any]) -> list[str]:
    if protocol is ModelProtocol.OPENAI_CHAT:
        return [tc["function"]["name"] for m in body["messages"] for tc in m.get("tool_calls", ())]
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return [i["name"] for i in body["input"] if i.get("type") == "function_call"]
    if protocol is ModelProtocol.ANTHROPIC:
        return [
            b["name"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"
        ]
    return [
        p["functionCall"]["name"]
        for c in body["contents"]
        for p in c["parts"]
        if "functionCall" in p
    ]
