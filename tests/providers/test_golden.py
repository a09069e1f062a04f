"""Golden tests per protocol: real response fixtures in, request bodies out.

Each fixture is parsed by the provider's SDK response types, decoded by our
codec, run through the real gate (dice_roll with a seeded rng, and a
no-argument extension tool), and the next request is built, checked by the
SDK's request types and compared with ``golden/<protocol>/<case>.json``.
Set ``TAVERN_UPDATE_GOLDEN=1`` to rewrite the golden files after a deliberate
change, then read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.arguments import MISSING, parse_arguments
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    OUTCOME_UNKNOWN_TEXT,
    TRUNCATED_TEXT,
    DecodedResponse,
    FinishReason,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from tests.providers.conftest import gate_for, snapshot_for
from tests.providers.pairing import check_pairing
from tests.providers.sdk import check_request, parse_response, parse_stream_event

GOLDEN = Path(__file__).parent / "golden"
MODEL = {
    ModelProtocol.OPENAI_CHAT: "gpt-5-mini",
    ModelProtocol.OPENAI_RESPONSES: "gpt-5-mini",
    ModelProtocol.ANTHROPIC: "claude-sonnet-4-5",
    ModelProtocol.GEMINI: "gemini-2.5-flash",
}
SYSTEM = "You narrate a tavern scene."
ASK = "Roll for initiative, then tell me the time."


def fixtures(protocol: ModelProtocol) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / protocol.value / "responses.json").read_text())
    return data


def decode(protocol: ModelProtocol, case: str) -> DecodedResponse:
    data = fixtures(protocol)[case]
    codec = codec_for(protocol)
    if "body" in data:
        if "offSpec" in data:  # a compatible server's deviation: the SDK type must refuse it
            with pytest.raises(ValueError):
                parse_response(protocol, data["body"])
        else:
            parse_response(protocol, data["body"])
        return codec.decode_response(data["body"])
    decoder = codec.stream_decoder()
    for event in data["stream"]:
        parse_stream_event(protocol, event)
        decoder.feed(event)
    return decoder.result()


async def results_for(protocol: ModelProtocol, decoded: DecodedResponse) -> list[AgentToolResult]:
    if decoded.truncated:
        return list(decoded.truncation_results())
    gate = gate_for(protocol)
    return [(await gate.handle(c.call)).result for c in decoded.calls]


def request(protocol: ModelProtocol, transcript: Transcript) -> dict[str, Any]:
    body = codec_for(protocol).build_request(MODEL[protocol], transcript, snapshot_for(protocol))
    check_request(protocol, body)
    check_pairing(protocol, body)
    return body


def compare_golden(protocol: ModelProtocol, case: str, transcript: Transcript, body: Any) -> None:
    path = GOLDEN / protocol.value / f"{case}.json"
    actual = {"transcript": transcript.to_json(), "request": body}
    if os.environ.get("TAVERN_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n")
    assert json.loads(json.dumps(actual)) == json.loads(path.read_text())


async def run_case(protocol: ModelProtocol, case: str) -> tuple[DecodedResponse, dict[str, Any]]:
    decoded = decode(protocol, case)
    results = await results_for(protocol, decoded)
    transcript = Transcript(
        (UserMessage(ASK), decoded.message, *map(ToolResultMessage, results)), SYSTEM
    )
    body = request(protocol, transcript)
    compare_golden(protocol, case, transcript, body)
    return decoded, body


def cases(*names: str) -> list[Any]:
    out = []
    for protocol in ModelProtocol:
        for case in fixtures(protocol):
            if case.startswith(names):
                out.append(pytest.param(protocol, case, id=f"{protocol.value}-{case}"))
    return out


def calls_of(body: dict[str, Any], protocol: ModelProtocol) -> list[tuple[str, Any]]:
    """(name, arguments object) of every call in a request history."""
    if protocol is ModelProtocol.OPENAI_CHAT:
        return [
            (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for m in body["messages"]
            for tc in m.get("tool_calls", ())
        ]
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return [
            (i["name"], json.loads(i["arguments"]))
            for i in body["input"]
            if i.get("type") == "function_call"
        ]
    if protocol is ModelProtocol.ANTHROPIC:
        return [
            (b["name"], b["input"])
            for m in body["messages"]
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
    return [
        (p["functionCall"]["name"], p["functionCall"]["args"])
        for c in body["contents"]
        for p in c["parts"]
        if "functionCall" in p
    ]


def result_texts(body: dict[str, Any], protocol: ModelProtocol) -> list[str]:
    if protocol is ModelProtocol.OPENAI_CHAT:
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    if protocol is ModelProtocol.ANTHROPIC:
        return [
            b.get("content", "") + (" [is_error]" if b.get("is_error") else "")
            for m in body["messages"]
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
    return [
        json.dumps(p["functionResponse"]["response"])
        for c in body["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]


# ---------------------------------------------------------------- cases


@pytest.mark.parametrize(("protocol", "case"), cases("plain_text"))
async def test_plain_text(protocol: ModelProtocol, case: str) -> None:
    decoded, body = await run_case(protocol, case)
    assert decoded.message.text == "The innkeeper nods and pours you an ale."
    assert decoded.calls == () and decoded.message.finish is FinishReason.STOP
    assert calls_of(body, protocol) == []


@pytest.mark.parametrize(("protocol", "case"), cases("one_call"))
async def test_one_call(protocol: ModelProtocol, case: str) -> None:
    decoded, body = await run_case(protocol, case)
    assert decoded.message.finish is FinishReason.TOOL_CALLS
    [call] = decoded.calls
    assert call.name == "dice_roll" and call.call_id
    assert calls_of(body, protocol) == [("dice_roll", {"formula": "2d6"})]
    [text] = result_texts(body, protocol)
    assert "Rolled 2d6" in text


@pytest.mark.parametrize(("protocol", "case"), cases("parallel_calls"))
async def test_parallel_calls_whole_and_streamed(protocol: ModelProtocol, case: str) -> None:
    decoded, body = await run_case(protocol, case)
    assert decoded.message.text == "Rolling and checking the time."
    assert [c.name for c in decoded.calls] == ["dice_roll", "scene_clock"]
    assert len({c.call_id for c in decoded.calls}) == 2
    assert calls_of(body, protocol) == [("dice_roll", {"formula": "1d20"}), ("scene_clock", {})]
    texts = result_texts(body, protocol)
    assert "Rolled 1d20" in texts[0] and "dusk" in texts[1]


def test_stream_and_whole_decode_to_the_same_calls(protocol: ModelProtocol) -> None:
    whole = decode(protocol, "parallel_calls")
    streamed = decode(protocol, "parallel_calls_stream")
    assert streamed.message.text == whole.message.text
    assert streamed.message.finish is whole.message.finish

    def summary(d: DecodedResponse) -> list[tuple[str, str, Any]]:
        return [(c.call_id, c.name, parse_arguments(c.call.raw_arguments)) for c in d.calls]

    # Raw values may differ in form (Anthropic streams text, sends objects whole).
    assert summary(streamed) == summary(whole)


@pytest.mark.parametrize(("protocol", "case"), cases("no_args"))
async def test_call_without_arguments_in_each_spelling(protocol: ModelProtocol, case: str) -> None:
    decoded, body = await run_case(protocol, case)
    [call] = decoded.calls
    assert call.name == "scene_clock" and call.call_id
    parsed = parse_arguments(call.call.raw_arguments)
    assert parsed.values == {}  # type: ignore[union-attr]
    assert calls_of(body, protocol) == [("scene_clock", {})]
    assert "dusk" in result_texts(body, protocol)[0]


def test_spellings_kept_raw_in_the_record() -> None:
    chat = {
        c: decode(ModelProtocol.OPENAI_CHAT, c).calls[0].call.raw_arguments
        for c in ("no_args_empty_string", "no_args_null", "no_args_empty_object")
    }
    assert chat == {"no_args_empty_string": "", "no_args_null": None, "no_args_empty_object": "{}"}
    gemini = decode(ModelProtocol.GEMINI, "no_args_missing").calls[0].call.raw_arguments
    assert gemini is MISSING


def test_gemini_synthesized_ids_are_stable_and_distinct() -> None:
    first = decode(ModelProtocol.GEMINI, "parallel_calls")
    again = decode(ModelProtocol.GEMINI, "parallel_calls")
    ids = [c.call_id for c in first.calls]
    assert ids == [c.call_id for c in again.calls] and len(set(ids)) == 2
    other = decode(ModelProtocol.GEMINI, "no_args_missing").calls[0].call_id
    no_response_id = decode(ModelProtocol.GEMINI, "no_args_no_response_id").calls[0].call_id
    assert other not in ids and no_response_id not in (*ids, other)
    kept = decode(ModelProtocol.GEMINI, "no_args_empty_object").calls[0].call_id
    assert kept == "gfc_n1"


@pytest.mark.parametrize(("protocol", "case"), cases("invalid_args"))
async def test_invalid_arguments_replay_as_empty_object_with_paired_error(
    protocol: ModelProtocol, case: str
) -> None:
    decoded, body = await run_case(protocol, case)
    [call] = decoded.calls
    [text] = result_texts(body, protocol)
    assert "Arguments for dice_roll" in text
    if protocol is ModelProtocol.GEMINI:
        # Gemini sends objects only: a wrong-typed value stays as it was; the schema error pairs.
        assert call.call.raw_arguments == {"formula": 7}
        assert calls_of(body, protocol) == [("dice_roll", {"formula": 7})]
        assert '"error"' in text
    else:
        assert isinstance(call.call.raw_arguments, str)  # the raw text stays in the record
        assert calls_of(body, protocol) == [("dice_roll", {})]
        assert "not a JSON object" in text
        transcript_call = json.loads((GOLDEN / protocol.value / f"{case}.json").read_text())
        recorded = transcript_call["transcript"]["items"][1]["calls"][0]["rawArguments"]
        assert recorded == call.call.raw_arguments


@pytest.mark.parametrize(("protocol", "case"), cases("truncated", "malformed"))
async def test_truncated_response_runs_nothing_and_pairs_an_error(
    protocol: ModelProtocol, case: str
) -> None:
    decoded, body = await run_case(protocol, case)
    assert decoded.truncated
    results = decoded.truncation_results()
    assert len(results) == len(decoded.calls)
    assert all(r.error_code is ErrorCode.MODEL_TOOL_CALL_TRUNCATED for r in results)
    texts = result_texts(body, protocol)
    assert len(texts) == len(decoded.calls)
    assert all(TRUNCATED_TEXT in t for t in texts)


async def test_interrupted_transcript(protocol: ModelProtocol) -> None:
    decoded = decode(protocol, "parallel_calls")
    first, second = decoded.calls
    [answered] = await results_for(
        protocol, decoded.__class__(decoded.message.__class__("", (first,), decoded.message.finish))
    )
    orphan = AgentToolResult("call_ghost", None, "A result from nowhere.")
    transcript = Transcript(
        (
            UserMessage(ASK),
            decoded.message,
            ToolResultMessage(answered),
            UserMessage("Where was I?"),
            ToolResultMessage(orphan),
        ),
        SYSTEM,
    )
    body = request(protocol, transcript)
    compare_golden(protocol, "interrupted", transcript, body)
    encoded = codec_for(protocol).encode_history(transcript, snapshot_for(protocol))
    assert encoded.repaired.synthesized == (second.call_id,)
    assert encoded.repaired.dropped == ("call_ghost",)
    texts = result_texts(body, protocol)
    assert len(texts) == 2 and OUTCOME_UNKNOWN_TEXT in texts[1]
    assert not any("from nowhere" in t for t in texts)
