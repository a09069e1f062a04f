"""Checks against the official SDKs' own types: no hand-written provider schema here.

Request bodies: OpenAI and Anthropic params are TypedDicts, validated with a
pydantic TypeAdapter; every nested iterable is drained (pydantic validates
those lazily) and the result must equal the input, so an unknown key (which a
TypedDict silently drops) fails too. Gemini bodies go through google-genai's
own request builder (``_GenerateContentParameters_to_mldev``, no network) and
must come out unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import anthropic.types as at
import openai.types.chat as oc
import openai.types.responses as orr
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google.genai import _api_client, _common, models
from google.genai import types as gt
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

from tavern_agent.core.naming import ModelProtocol

REQUEST_TYPES: dict[ModelProtocol, Any] = {
    ModelProtocol.OPENAI_CHAT: CompletionCreateParamsNonStreaming,
    ModelProtocol.OPENAI_RESPONSES: ResponseCreateParamsNonStreaming,
    ModelProtocol.ANTHROPIC: MessageCreateParamsNonStreaming,
}


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _drain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple | Iterator) or hasattr(value, "__next__"):
        return [_drain(v) for v in value]
    return value


def _upper_types(value: Any) -> Any:
    """google-genai spells schema types in capitals; compare them case-blind."""
    if isinstance(value, Mapping):
        return {
            k: (v.upper() if k == "type" and isinstance(v, str) else _upper_types(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_upper_types(v) for v in value]
    return value


def check_request(protocol: ModelProtocol, body: Mapping[str, Any]) -> None:
    """Raise unless the SDK accepts ``body`` exactly as it is."""
    if protocol is ModelProtocol.GEMINI:
        _check_gemini(body)
        return
    validated = _drain(_adapter(REQUEST_TYPES[protocol]).validate_python(body))
    expected = json.loads(json.dumps(body))
    assert validated == expected, "the SDK type dropped or changed fields"


def _check_gemini(body: Mapping[str, Any]) -> None:
    config = {k: body[k] for k in ("tools", "toolConfig", "systemInstruction") if k in body}
    if "generationConfig" in body:
        config.update(body["generationConfig"])
    params = {"model": "gemini-2.5-flash", "contents": body["contents"], "config": config}
    model = gt._GenerateContentParameters.model_validate_json(json.dumps(params))
    client = _api_client.BaseApiClient(api_key="unused-no-network")
    built = models._GenerateContentParameters_to_mldev(client, model, None, model)
    built.pop("_url", None)
    built.pop("config", None)
    built = _common.encode_unserializable_types(_common.convert_to_dict(built))
    if "generationConfig" not in body and built.get("generationConfig") == {}:
        del built["generationConfig"]
    assert _upper_types(built) == _upper_types(json.loads(json.dumps(body)))


def parse_response(protocol: ModelProtocol, body: Mapping[str, Any]) -> Any:
    """Parse a whole response with the SDK's response type (raises when it does not fit)."""
    if protocol is ModelProtocol.OPENAI_CHAT:
        return oc.ChatCompletion.model_validate(body)
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return orr.Response.model_validate(body)
    if protocol is ModelProtocol.ANTHROPIC:
        return at.Message.model_validate(body)
    return gt.GenerateContentResponse.model_validate_json(json.dumps(body))


def parse_stream_event(protocol: ModelProtocol, event: Mapping[str, Any]) -> Any:
    if protocol is ModelProtocol.OPENAI_CHAT:
        return oc.ChatCompletionChunk.model_validate(event)
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return _adapter(orr.ResponseStreamEvent).validate_python(event)
    if protocol is ModelProtocol.ANTHROPIC:
        return _adapter(at.RawMessageStreamEvent).validate_python(event)
    return gt.GenerateContentResponse.model_validate_json(json.dumps(event))
