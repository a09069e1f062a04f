"""Gemini (``generateContent``, REST JSON): function declarations, ``functionCall`` and
``functionResponse`` parts.

Calls are parts ``{functionCall: {id?, name, args?}, thoughtSignature?}``: the
Developer API often sends no ``id`` (a stable one is made from the response)
and no ``args`` for a call without arguments. History echoes each
``thoughtSignature`` exactly; a call turn from another provider carries the
documented placeholder on its first call. Results follow as
``functionResponse`` parts, one per call, ``response: {output}`` or ``{error}``.
"""

from __future__ import annotations

import hashlib
import json
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

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""Google's documented placeholder for calls that have no thought signature."""

FINISH = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "MALFORMED_FUNCTION_CALL": FinishReason.MALFORMED,
    "UNEXPECTED_TOOL_CALL": FinishReason.MALFORMED,
    "TOO_MANY_TOOL_CALLS": FinishReason.MALFORMED,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
}
_MODE = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


class GeminiCodec(Codec):
    """The Gemini ``generateContent`` codec: function declarations,
    ``functionCall`` and ``functionResponse`` parts."""

    protocol = ModelProtocol.GEMINI
    history_key = "contents"

    def tool_fields(
        self, bindings: Sequence[ToolBinding], choice: ToolChoice, named: str | None, strict: bool
    ) -> dict[str, Any]:
        """``functionDeclarations`` and ``functionCallingConfig`` (``strict`` is ignored)."""
        declarations = []
        for b in bindings:
            declaration: dict[str, Any] = {
                "name": b.model_name,
                "description": b.descriptor.description,
            }
            schema = codec.wire_schema(b)
            if schema.get("properties"):  # an empty OBJECT is refused; leave it out
                declaration["parameters"] = schema
            declarations.append(declaration)
        config: dict[str, Any] = {"mode": "ANY" if named else _MODE[choice.mode]}
        if named:
            config["allowedFunctionNames"] = [named]
        return {
            "tools": [{"functionDeclarations": declarations}],
            "toolConfig": {"functionCallingConfig": config},
        }

    def encode_entries(
        self, entries: Sequence[Entry], snapshot: ToolSnapshot, ids: CallIdMap, out: Messages
    ) -> None:
        """Append Gemini contents for ``entries`` to ``out``: a model turn with its
        ``functionCall`` parts, then a user turn with one ``functionResponse`` per call."""
        for entry in entries:
            if not isinstance(entry, Exchange):
                if entry.text:
                    out.append({"role": "user", "parts": [{"text": entry.text}]})
                continue
            message = entry.message
            parts: list[dict[str, Any]] = []
            if message.text:
                parts.append({"text": message.text})
            signed = any(c.thought_signature for c in message.calls)
            responses: list[dict[str, Any]] = []
            for n, r in enumerate(codec.replayed_calls(entry, snapshot, ids)):
                part: dict[str, Any] = {
                    "functionCall": {"id": r.wire_id, "name": r.name, "args": r.arguments}
                }
                if r.call.thought_signature:
                    part["thoughtSignature"] = r.call.thought_signature
                elif not signed and n == 0:
                    part["thoughtSignature"] = SKIP_SIGNATURE
                parts.append(part)
                key = "error" if r.result.is_error else "output"
                response = {"id": r.wire_id, "name": r.name, "response": {key: r.result.content}}
                responses.append({"functionResponse": response})
            if parts:
                out.append({"role": "model", "parts": parts})
            if responses:
                out.append({"role": "user", "parts": responses})

    def history_frame(self, system: str | None, first: dict[str, Any] | None) -> HistoryFrame:
        """The ``systemInstruction`` field, and a leading user
        turn when the history would start with the model."""
        top = {"systemInstruction": {"parts": [{"text": system}]}} if system else {}
        if first is None or first["role"] == "model":
            return top, [{"role": "user", "parts": [{"text": CONTINUE_TEXT}]}]
        return top, []

    def request_head(self, model: str, max_tokens: int) -> dict[str, Any]:
        """``model`` goes in the URL of ``generateContent``, not in the body."""
        return {"generationConfig": {"maxOutputTokens": max_tokens}}

    def decode_response(self, body: Mapping[str, Any]) -> DecodedResponse:
        """A whole ``generateContent`` response (decoded as a stream of one event)."""
        stream = GeminiStream()
        stream.feed(body)
        return stream.result()

    def stream_decoder(self) -> GeminiStream:
        """A fresh decoder for one streamed ``streamGenerateContent`` response."""
        return GeminiStream()


@dataclass
class GeminiStream:
    """Joins ``generateContent`` chunks; each call arrives whole in one chunk."""

    text: list[str] = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    finish: str | None = None
    response_id: str = ""
    digest: Any = field(default_factory=hashlib.sha1)
    usage: Mapping[str, Any] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one streamed response chunk: text parts,
        ``functionCall`` parts, finish reason and usage."""
        self.response_id = self.response_id or str(event.get("responseId") or "")
        self.digest.update(json.dumps(event, sort_keys=True, default=str).encode())
        self.usage = event.get("usageMetadata") or self.usage
        candidates = event.get("candidates") or ()
        if not candidates:
            return
        candidate = candidates[0]
        for part in (candidate.get("content") or {}).get("parts") or ():
            if "functionCall" in part:
                fc = part["functionCall"] or {}
                raw = fc.get("args", MISSING)
                call = ToolCall(fc.get("id") or "", fc.get("name", ""), raw)
                self.calls.append(RecordedCall(call, part.get("thoughtSignature")))
            elif "text" in part and not part.get("thought"):
                self.text.append(part["text"])
        if candidate.get("finishReason"):
            self.finish = candidate["finishReason"]

    def result(self) -> DecodedResponse:
        """The response the chunks so far make; calls without an id get a stable one."""
        finish = FINISH.get(self.finish or "", FinishReason.OTHER)
        if finish is FinishReason.STOP and self.calls:
            finish = FinishReason.TOOL_CALLS
        seed = self.response_id or self.digest.hexdigest()
        text = "".join(self.text)
        return codec.decoded_response(text, self.calls, finish, seed, self.finish, self.usage)
