"""Cross-protocol replay, call-id map, tool encoding (choice, strict, schemas)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.schema_adapt import NotStrictCompatible, openai_strict
from tavern_agent.providers.codec import ToolChoice
from tavern_agent.providers.ids import ID_RULES, CallIdMap
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import ToolResultMessage, Transcript, UserMessage
from tests.providers.conftest import DICE, snapshot_for
from tests.providers.pairing import check_pairing
from tests.providers.sdk import check_request
from tests.providers.test_golden import ASK, SYSTEM, decode, results_for


async def recorded(protocol: ModelProtocol) -> Transcript:
    """Several turns decoded from ``protocol``'s fixtures and run through its gate."""
    items: list[Any] = [UserMessage(ASK)]
    for case in ("parallel_calls", "invalid_args", "truncated", "one_call"):
        decoded = decode(protocol, case)
        items.append(decoded.message)
        items.extend(ToolResultMessage(r) for r in await results_for(protocol, decoded))
    items.pop()  # the last call is left unanswered: an interrupted run
    return Transcript(tuple(items), SYSTEM)


@pytest.mark.parametrize("source", list(ModelProtocol), ids=lambda p: f"from_{p.value}")
async def test_a_transcript_replays_under_every_other_protocol(
    source: ModelProtocol, protocol: ModelProtocol
) -> None:
    transcript = await recorded(source)
    body = codec_for(protocol).build_request("m", transcript, snapshot_for(protocol))
    check_request(protocol, body)
    assert check_pairing(protocol, body) == 5
    # The record is untouched: invalid raw text is still there after encoding.
    assert Transcript.from_json(transcript.to_json()) == transcript


def test_persisted_transcript_round_trips_raw_arguments() -> None:
    decoded = decode(ModelProtocol.OPENAI_CHAT, "invalid_args")
    transcript = Transcript((decoded.message,))
    again = Transcript.from_json(json.loads(json.dumps(transcript.to_json())))
    assert again.items[0].calls[0].call.raw_arguments == '{"formula": "2d6"'  # type: ignore[union-attr]


def test_call_ids_are_rewritten_only_where_forbidden_and_map_back() -> None:
    long_id = "fc_" + "a" * 50
    chat = CallIdMap(ModelProtocol.OPENAI_CHAT)
    assert chat.wire("call_ok") == "call_ok"
    rewritten = chat.wire(long_id)
    assert len(rewritten) <= 40 and rewritten.startswith("fc_aaa")
    assert chat.original(rewritten) == long_id
    anthropic = CallIdMap(ModelProtocol.ANTHROPIC)
    kimi = anthropic.wire("functions.Bash:0")
    assert ID_RULES[ModelProtocol.ANTHROPIC].accepts(kimi) and kimi.startswith("functions_Bash_0_")
    assert anthropic.original(kimi) == "functions.Bash:0"
    # Stable: a fresh map gives the same ids; a repeated id gets a distinct one.
    again = CallIdMap(ModelProtocol.ANTHROPIC)
    assert again.wire("functions.Bash:0") == kimi
    assert again.wire("functions.Bash:0") != kimi
    gemini = CallIdMap(ModelProtocol.GEMINI)
    assert gemini.wire("functions.Bash:0") == "functions.Bash:0"


def test_replayed_name_of_a_removed_tool_is_made_valid(protocol: ModelProtocol) -> None:
    transcript = Transcript(
        (
            UserMessage("go"),
            *Transcript.from_json(
                {
                    "items": [
                        {
                            "type": "assistant",
                            "text": "",
                            "calls": [
                                {"callId": "c1", "name": "mcp.old:tool", "rawArguments": "{}"}
                            ],
                        }
                    ]
                }
            ).items,
        )
    )
    body = codec_for(protocol).build_request("m", transcript, snapshot_for(protocol))
    check_request(protocol, body)
    text = json.dumps(body)
    expected = "mcp.old:tool" if protocol is ModelProtocol.GEMINI else "mcp_old_tool"
    assert f'"name": "{expected}"' in text


CHOICES: dict[ModelProtocol, list[Any]] = {
    ModelProtocol.OPENAI_CHAT: [
        ("tool_choice", "auto"),
        ("tool_choice", "none"),
        ("tool_choice", "required"),
        ("tool_choice", {"type": "function", "function": {"name": "dice_roll"}}),
    ],
    ModelProtocol.OPENAI_RESPONSES: [
        ("tool_choice", "auto"),
        ("tool_choice", "none"),
        ("tool_choice", "required"),
        ("tool_choice", {"type": "function", "name": "dice_roll"}),
    ],
    ModelProtocol.ANTHROPIC: [
        ("tool_choice", {"type": "auto"}),
        ("tool_choice", {"type": "none"}),
        ("tool_choice", {"type": "any"}),
        ("tool_choice", {"type": "tool", "name": "dice_roll"}),
    ],
    ModelProtocol.GEMINI: [
        ("toolConfig", {"functionCallingConfig": {"mode": "AUTO"}}),
        ("toolConfig", {"functionCallingConfig": {"mode": "NONE"}}),
        ("toolConfig", {"functionCallingConfig": {"mode": "ANY"}}),
        (
            "toolConfig",
            {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["dice_roll"]}},
        ),
    ],
}


def test_tool_choice_per_protocol(protocol: ModelProtocol) -> None:
    codec = codec_for(protocol)
    snapshot = snapshot_for(protocol)
    choices = [ToolChoice("auto"), ToolChoice("none"), ToolChoice("required")]
    choices += [ToolChoice.named(str(DICE))]  # a ToolId resolves to this snapshot's name
    for choice, (key, expected) in zip(choices, CHOICES[protocol], strict=True):
        fields = codec.encode_tools(snapshot, choice)
        assert fields[key] == expected
        check_request(protocol, {**_minimal(protocol), **fields})


def _minimal(protocol: ModelProtocol) -> dict[str, Any]:
    if protocol is ModelProtocol.OPENAI_CHAT:
        return {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return {"model": "m", "input": "hi"}
    if protocol is ModelProtocol.ANTHROPIC:
        return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.mark.parametrize("protocol", [ModelProtocol.OPENAI_CHAT, ModelProtocol.OPENAI_RESPONSES])
def test_openai_strict_mode(protocol: ModelProtocol) -> None:
    fields = codec_for(protocol).encode_tools(snapshot_for(protocol), strict=True)
    tools = fields["tools"]
    fns = [t["function"] for t in tools] if protocol is ModelProtocol.OPENAI_CHAT else tools
    assert all(f["strict"] is True for f in fns)
    dice = fns[0]["parameters"]
    assert dice["additionalProperties"] is False and dice["required"] == ["formula"]
    check_request(protocol, {**_minimal(protocol), **fields})
    plain = codec_for(ModelProtocol.OPENAI_RESPONSES).encode_tools(
        snapshot_for(ModelProtocol.OPENAI_RESPONSES)
    )
    assert all(t["strict"] is False for t in plain["tools"])  # Responses defaults to strict


def test_strict_schema_rewrite() -> None:
    schema = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "limit": {"type": "integer", "default": 100},
            "mode": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {}}}},
        },
        "required": ["file_path"],
    }
    strict = openai_strict(schema)
    assert strict["required"] == ["file_path", "limit", "mode", "tags"]
    assert strict["properties"]["limit"] == {"type": ["integer", "null"]}
    assert strict["properties"]["mode"] == {
        "anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]
    }
    item = strict["properties"]["tags"]["type"][0] and strict["properties"]["tags"]["items"]
    assert item["additionalProperties"] is False and item["required"] == ["k"]
    assert "default" not in json.dumps(strict)
    for bad in (
        {"anyOf": [{"type": "object"}]},
        {"type": "object", "additionalProperties": True},
        {"type": "object", "properties": {"xs": {"type": "array"}}},
    ):
        with pytest.raises(NotStrictCompatible):
            openai_strict(bad)


def test_gemini_declarations_leave_out_empty_parameters() -> None:
    fields = codec_for(ModelProtocol.GEMINI).encode_tools(snapshot_for(ModelProtocol.GEMINI))
    dice, clock = fields["tools"][0]["functionDeclarations"]
    assert "additionalProperties" not in json.dumps(dice) and "parameters" in dice
    assert "parameters" not in clock
