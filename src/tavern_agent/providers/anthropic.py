"""Anthropic Messages: ``tools``/``tool_choice``, ``tool_use`` blocks, ``tool_result`` blocks.

Calls are content blocks ``{type: "tool_use", id, name, input: <object>}``;
streamed, ``input_json_delta`` fragments are joined and kept as the raw text
(only empty fragments: the input stays the ``{}`` of ``content_block_start``).
History puts every ``tool_result`` first in the next user message, with
``is_error`` on errors; ids outside ``[a-zA-Z0-9_-]`` are rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers import codec
from tavern_agent.providers.codec import CONTINUE_TEXT, Codec, HistoryFrame, Messages, ToolChoice
from tavern_agent.providers.ids import CallIdMap
from tavern_agent.providers.repair import Entry, Exchange
from tavern_agent.providers.transcript import DecodedResponse, FinishReason, RecordedCall
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot

STOP = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}
_CHOICE = {"auto": "auto", "none": "none", "required": "any"}


class AnthropicCodec(Codec):
    """The Anthropic Messages codec: ``tools``, ``tool_use`` blocks, ``tool_result`` blocks."""

    max_tokens_field = "max_tokens"
    protocol = ModelProtocol.ANTHROPIC

    def tool_fields(
        self, bindings: Sequence[ToolBinding], choice: ToolChoice, named: str | None, strict: bool
    ) -> dict[str, Any]:
        """``tools`` with ``input_schema``, and ``tool_choice`` (``strict`` is ignored)."""
        tools = [
            {
                "name": b.model_name,
                "description": b.descriptor.description,
                "input_schema": {"type": "object", **codec.wire_schema(b)},
            }
            for b in bindings
        ]
        tool_choice = {"type": "tool", "name": named} if named else {"type": _CHOICE[choice.mode]}
        return {"tools": tools, "tool_choice": tool_choice}

    def encode_entries(
        self, entries: Sequence[Entry], snapshot: ToolSnapshot, ids: CallIdMap, out: Messages
    ) -> None:
        """Append Anthropic messages for ``entries`` to ``out``: roles
        alternate (a second message of a role joins the one before),
        results are ``tool_result`` blocks of the next user message."""

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            # Anthropic wants roles to alternate: a second message of the same
            # role joins the one before (as a new dict; see encode_entries).
            if not blocks:
                return
            if out and out[-1]["role"] == role:
                out[-1] = {"role": role, "content": [*out[-1]["content"], *blocks]}
            else:
                out.append({"role": role, "content": blocks})

        for entry in entries:
            if not isinstance(entry, Exchange):
                if entry.text:
                    add("user", [{"type": "text", "text": entry.text}])
                continue
            message = entry.message
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            replayed = codec.replayed_calls(entry, snapshot, ids)
            for r in replayed:
                blocks.append(
                    {"type": "tool_use", "id": r.wire_id, "name": r.name, "input": r.arguments}
                )
            add("assistant", blocks)
            results: list[dict[str, Any]] = []
            for r in replayed:
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.wire_id}
                if r.result.content:
                    block["content"] = r.result.content
                if r.result.is_error:
                    block["is_error"] = True
                results.append(block)
            add("user", results)

    def history_frame(self, system: str | None, first: dict[str, Any] | None) -> HistoryFrame:
        """The ``system`` field, and a leading user message
        when the history would start with the assistant."""
        top = {"system": system} if system else {}
        if first is None or first["role"] == "assistant":
            return top, [{"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]}]
        return top, []

    def decode_response(self, body: Mapping[str, Any]) -> DecodedResponse:
        """A whole Messages response: its text blocks
        joined and its ``tool_use`` blocks as calls."""
        text: list[str] = []
        calls: list[RecordedCall] = []
        for block in body.get("content") or ():
            if block.get("type") == "text":
                text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                raw = block.get("input", MISSING)
                calls.append(
                    RecordedCall(ToolCall(block.get("id") or "", block.get("name", ""), raw))
                )
        return _decoded(body, "".join(text), calls, body.get("stop_reason"), body.get("usage"))

    def stream_decoder(self) -> AnthropicStream:
        """A fresh decoder for one streamed Messages response."""
        return AnthropicStream()


def _decoded(
    message: Mapping[str, Any],
    text: str,
    calls: list[RecordedCall],
    raw_finish: str | None,
    usage: Any,
) -> DecodedResponse:
    finish = STOP.get(raw_finish or "", FinishReason.OTHER)
    seed = str(message.get("id", ""))
    return codec.decoded_response(text, calls, finish, seed, raw_finish, usage or {})


@dataclass
class _Block:
    kind: str
    call_id: str = ""
    name: str = ""
    start_input: Any = MISSING
    fragments: list[str] = field(default_factory=list)

    def raw_arguments(self) -> Any:
        joined = "".join(self.fragments)
        return joined if joined.strip() else self.start_input


@dataclass
class AnthropicStream:
    """Joins Messages stream events; ``input_json_delta`` fragments per block index."""

    message: Mapping[str, Any] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one Messages stream event (block starts,
        text and JSON deltas, stop reason, usage)."""
        kind = event.get("type")
        if kind == "message_start":
            self.message = event.get("message") or {}
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            self.blocks[int(event.get("index", 0))] = _Block(
                block.get("type", ""),
                block.get("id") or "",
                block.get("name", ""),
                block.get("input", MISSING),
            )
            if block.get("type") == "text" and block.get("text"):
                self.text.append(block["text"])
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            target = self.blocks.get(int(event.get("index", 0)))
            if delta.get("type") == "text_delta":
                self.text.append(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta" and target is not None:
                target.fragments.append(delta.get("partial_json", ""))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.usage.update(event.get("usage") or {})

    def result(self) -> DecodedResponse:
        """The response the events so far make, calls in block order."""
        calls = [
            RecordedCall(ToolCall(b.call_id, b.name, b.raw_arguments()))
            for _, b in sorted(self.blocks.items())
            if b.kind == "tool_use"
        ]
        return _decoded(self.message, "".join(self.text), calls, self.stop_reason, self.usage)
