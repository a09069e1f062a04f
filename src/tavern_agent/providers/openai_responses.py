"""OpenAI Responses: function tools, ``function_call`` items, ``function_call_output`` items.

Calls are output items ``{type: "function_call", id: "fc_…", call_id, name,
arguments: <JSON text>}``, paired by ``call_id``; streamed, argument deltas
arrive per item and ``.done`` carries the whole text. History replays calls
without their ``fc_`` item id (which would demand the reasoning item it came
with) and follows each with a ``function_call_output``. ``strict`` is always
sent, since the API makes a tool strict when it is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers import codec
from tavern_agent.providers.codec import Codec, HistoryFrame, Messages, ToolChoice
from tavern_agent.providers.ids import CallIdMap
from tavern_agent.providers.openai_chat import dump_arguments
from tavern_agent.providers.repair import Entry, Exchange
from tavern_agent.providers.transcript import DecodedResponse, FinishReason, RecordedCall
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot

INCOMPLETE = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


class OpenAIResponsesCodec(Codec):
    """The OpenAI Responses codec: function tools,
    ``function_call`` and ``function_call_output`` items."""

    max_tokens_field = "max_output_tokens"
    history_key = "input"
    protocol = ModelProtocol.OPENAI_RESPONSES

    def tool_fields(
        self, bindings: Sequence[ToolBinding], choice: ToolChoice, named: str | None, strict: bool
    ) -> dict[str, Any]:
        """``tools`` as flat ``{type: "function", name, …}`` items (with a ``strict`` schema
        where asked for and the schema allows it), and ``tool_choice``."""
        tools = []
        for b in bindings:
            strict_form = codec.strict_schema(b) if strict else None
            tools.append(
                {
                    "type": "function",
                    "name": b.model_name,
                    "description": b.descriptor.description,
                    "parameters": strict_form or codec.wire_schema(b),
                    "strict": strict_form is not None,
                }
            )
        tool_choice: Any = {"type": "function", "name": named} if named else choice.mode
        return {"tools": tools, "tool_choice": tool_choice}

    def encode_entries(
        self, entries: Sequence[Entry], snapshot: ToolSnapshot, ids: CallIdMap, out: Messages
    ) -> None:
        """Append Responses input items for ``entries`` to ``out``: the assistant
        text, each ``function_call`` followed by its ``function_call_output``."""
        for entry in entries:
            if not isinstance(entry, Exchange):
                out.append({"role": "user", "content": entry.text})
                continue
            message = entry.message
            if message.text or not message.calls:
                out.append({"role": "assistant", "content": message.text})
            replayed = codec.replayed_calls(entry, snapshot, ids)
            for r in replayed:
                out.append(
                    {
                        "type": "function_call",
                        "call_id": r.wire_id,
                        "name": r.name,
                        "arguments": dump_arguments(r.arguments),
                    }
                )
            for r in replayed:
                output = codec.result_text(r.result)
                out.append({"type": "function_call_output", "call_id": r.wire_id, "output": output})

    def history_frame(self, system: str | None, first: dict[str, Any] | None) -> HistoryFrame:
        """The ``instructions`` field when there is a system text."""
        return ({"instructions": system} if system else {}), []

    def decode_response(self, body: Mapping[str, Any]) -> DecodedResponse:
        """A whole Responses body: its ``output_text`` parts and ``function_call`` items."""
        text: list[str] = []
        calls: list[RecordedCall] = []
        for item in body.get("output") or ():
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if part.get("type") == "output_text":
                        text.append(part.get("text", ""))
            elif kind == "function_call":
                calls.append(_call(item))
        return _decoded(body, "".join(text), calls)

    def stream_decoder(self) -> OpenAIResponsesStream:
        """A fresh decoder for one streamed Responses response."""
        return OpenAIResponsesStream()


def _call(item: Mapping[str, Any]) -> RecordedCall:
    raw = item.get("arguments", MISSING)
    return RecordedCall(
        ToolCall(item.get("call_id") or "", item.get("name", ""), raw), item_id=item.get("id")
    )


def _decoded(response: Mapping[str, Any], text: str, calls: list[RecordedCall]) -> DecodedResponse:
    status = response.get("status")
    reason = (response.get("incomplete_details") or {}).get("reason")
    if status == "incomplete":
        finish = INCOMPLETE.get(reason or "", FinishReason.OTHER)
    elif status in ("failed", "cancelled"):
        finish = FinishReason.OTHER
    else:
        finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    seed = str(response.get("id", ""))
    usage = response.get("usage") or {}
    return codec.decoded_response(text, calls, finish, seed, reason or status, usage)


@dataclass
class _Partial:
    call_id: str
    name: str
    item_id: str | None
    fragments: list[str] = field(default_factory=list)
    final: Any = MISSING

    def recorded(self) -> RecordedCall:
        raw = self.final if self.final is not MISSING else "".join(self.fragments)
        return RecordedCall(ToolCall(self.call_id, self.name, raw), item_id=self.item_id)


@dataclass
class OpenAIResponsesStream:
    """Joins Responses stream events; calls keyed by item, reported by ``call_id``."""

    text: list[str] = field(default_factory=list)
    calls: dict[str, _Partial] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    response: Mapping[str, Any] = field(default_factory=dict)

    def _partial(self, item: Mapping[str, Any], index: int) -> _Partial:
        key = item.get("id") or item.get("call_id") or f"#{index}"
        part = self.calls.get(key)
        if part is None:
            part = self.calls[key] = _Partial(
                item.get("call_id") or "", item.get("name", ""), item.get("id")
            )
            self.order[key] = index
        return part

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one Responses stream event: text deltas, function call
        items and their argument deltas, the completed response."""
        kind = event.get("type")
        if kind == "response.output_text.delta":
            self.text.append(event.get("delta", ""))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                part = self._partial(item, int(event.get("output_index", len(self.calls))))
                if kind == "response.output_item.done" and "arguments" in item:
                    part.final = item["arguments"]
        elif kind == "response.function_call_arguments.delta":
            pending = self.calls.get(event.get("item_id", ""))
            if pending is not None:
                pending.fragments.append(event.get("delta", ""))
        elif kind == "response.function_call_arguments.done":
            pending = self.calls.get(event.get("item_id", ""))
            if pending is not None and "arguments" in event:
                pending.final = event["arguments"]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.response = event.get("response") or {}

    def result(self) -> DecodedResponse:
        """The response the events so far make, calls in output order."""
        keys = sorted(self.calls, key=lambda k: self.order[k])
        return _decoded(self.response, "".join(self.text), [self.calls[k].recorded() for k in keys])
