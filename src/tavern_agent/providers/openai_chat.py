"""OpenAI Chat Completions: ``tools``/``tool_choice``, ``message.tool_calls``, ``tool`` messages.

Calls arrive as ``{id, type: "function", function: {name, arguments: <JSON text>}}``;
streamed, ``delta.tool_calls[]`` fragments are joined by ``index``. History
replays each call with its arguments re-encoded from the object (``"{}"`` when
invalid), followed by one ``{"role": "tool", tool_call_id}`` message per call.
History ids longer than 40 characters are rewritten.

The answer's cap goes by the name the server reads (:func:`cap_field`):
OpenAI's own API takes ``max_completion_tokens``, other servers of this
protocol ``max_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers import codec
from tavern_agent.providers.codec import Codec, HistoryFrame, Messages, ToolChoice
from tavern_agent.providers.ids import CallIdMap
from tavern_agent.providers.repair import Entry, Exchange
from tavern_agent.providers.transcript import DecodedResponse, FinishReason, RecordedCall
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot

FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


COMPAT_MODES = ("auto", "openai", "compatible")
"""Which server an ``openai_chat`` base URL is: ``openai`` (OpenAI's own API, Azure
OpenAI), ``compatible`` (llama.cpp, Ollama, LM Studio, KoboldCpp, vLLM and the
like), or ``auto``: decided by the URL's host."""

_OPENAI_HOSTS = ("api.openai.com",)
_OPENAI_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com")


def cap_field(base_url: str, compat: str = "auto") -> str:
    """The body field that caps the answer's length on the server at ``base_url``.

    OpenAI's own API wants ``max_completion_tokens`` (its reasoning models
    refuse ``max_tokens``); OpenAI-compatible servers read ``max_tokens``
    (llama.cpp ignores the other and generates until its context is full).
    ``compat`` (one of :data:`COMPAT_MODES`) overrides the guess from the host.
    """
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {', '.join(COMPAT_MODES)}, not {compat!r}")
    if compat == "auto":
        host = (urlsplit(base_url).hostname or "").lower()
        official = host in _OPENAI_HOSTS or host.endswith(_OPENAI_HOST_SUFFIXES)
        compat = "openai" if official else "compatible"
    return "max_completion_tokens" if compat == "openai" else "max_tokens"


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dump_arguments(values: Mapping[str, Any]) -> str:
    """Compact JSON text of an arguments object, as OpenAI history wants it."""
    return _ENCODER.encode(values)


class OpenAIChatCodec(Codec):
    """The OpenAI Chat Completions codec: function tools, ``tool_calls``, ``tool`` messages.

    Its cap field is OpenAI's; :meth:`~Codec.capped_by` gives the one other servers read.
    """

    max_tokens_field = "max_completion_tokens"
    protocol = ModelProtocol.OPENAI_CHAT

    # ------------------------------------------------------------ tools

    def tool_fields(
        self, bindings: Sequence[ToolBinding], choice: ToolChoice, named: str | None, strict: bool
    ) -> dict[str, Any]:
        """``tools`` as ``{type: "function", function: {...}}`` entries (with a ``strict``
        schema where asked for and the schema allows it), and ``tool_choice``."""
        tools = []
        for b in bindings:
            function: dict[str, Any] = {
                "name": b.model_name,
                "description": b.descriptor.description,
            }
            strict_form = codec.strict_schema(b) if strict else None
            if strict_form is not None:
                function["parameters"] = strict_form
                function["strict"] = True
            else:
                function["parameters"] = codec.wire_schema(b)
            tools.append({"type": "function", "function": function})
        tool_choice: Any = (
            {"type": "function", "function": {"name": named}} if named is not None else choice.mode
        )
        return {"tools": tools, "tool_choice": tool_choice}

    # ------------------------------------------------------------ history

    def encode_entries(
        self, entries: Sequence[Entry], snapshot: ToolSnapshot, ids: CallIdMap, out: Messages
    ) -> None:
        """Append Chat Completions messages for ``entries`` to ``out``: an assistant
        message with its ``tool_calls``, then one ``tool`` message per call."""
        for entry in entries:
            if not isinstance(entry, Exchange):
                out.append({"role": "user", "content": entry.text})
                continue
            message = entry.message
            if not message.calls:
                out.append({"role": "assistant", "content": message.text})
                continue
            replayed = codec.replayed_calls(entry, snapshot, ids)
            calls = [
                {
                    "id": r.wire_id,
                    "type": "function",
                    "function": {"name": r.name, "arguments": dump_arguments(r.arguments)},
                }
                for r in replayed
            ]
            out.append({"role": "assistant", "content": message.text or None, "tool_calls": calls})
            for r in replayed:
                text = codec.result_text(r.result)
                out.append({"role": "tool", "tool_call_id": r.wire_id, "content": text})

    def history_frame(self, system: str | None, first: dict[str, Any] | None) -> HistoryFrame:
        """A leading ``system`` message when there is a system text."""
        return {}, [{"role": "system", "content": system}] if system else []

    # ------------------------------------------------------------ responses

    def decode_response(self, body: Mapping[str, Any]) -> DecodedResponse:
        """A whole Chat Completions response: the first choice's text and tool calls."""
        choice = body["choices"][0]
        message = choice.get("message") or {}
        calls = []
        for tc in message.get("tool_calls") or ():
            function = tc.get("function") or {}
            raw = function.get("arguments", MISSING)
            calls.append(RecordedCall(ToolCall(tc.get("id") or "", function.get("name", ""), raw)))
        raw_finish = choice.get("finish_reason")
        return _decoded(message.get("content") or "", calls, raw_finish, body.get("usage"))

    def stream_decoder(self) -> OpenAIChatStream:
        """A fresh decoder for one streamed Chat Completions response."""
        return OpenAIChatStream()


@dataclass
class _Partial:
    call_id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    raw: Any = MISSING

    def raw_arguments(self) -> Any:
        if self.raw is not MISSING:
            return self.raw
        return "".join(self.fragments) if self.fragments else MISSING


@dataclass
class OpenAIChatStream:
    """Joins ``chat.completion.chunk`` deltas; tool calls by ``index``."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Partial] = field(default_factory=dict)
    finish: str | None = None
    usage: Mapping[str, Any] | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one streamed chunk: text and tool call
        deltas of the first choice, finish reason, usage."""
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                part = self.calls.setdefault(int(tc.get("index", 0)), _Partial())
                if tc.get("id"):
                    part.call_id = tc["id"]
                function = tc.get("function") or {}
                if function.get("name"):
                    part.name += function["name"]
                if "arguments" in function:
                    fragment = function["arguments"]
                    if isinstance(fragment, str):
                        part.fragments.append(fragment)
                    elif fragment is not None or not part.fragments:
                        part.raw = fragment  # an object (some local servers) or null
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def result(self) -> DecodedResponse:
        """The response the chunks so far make, calls in index order."""
        calls = [
            RecordedCall(ToolCall(p.call_id, p.name, p.raw_arguments()))
            for _, p in sorted(self.calls.items())
        ]
        return _decoded("".join(self.text), calls, self.finish, self.usage)


def _decoded(
    text: str, calls: list[RecordedCall], raw_finish: str | None, usage: Any
) -> DecodedResponse:
    finish = FINISH.get(raw_finish or "", FinishReason.OTHER)
    if finish is FinishReason.STOP and calls:
        finish = FinishReason.TOOL_CALLS
    return codec.decoded_response(text, calls, finish, raw_finish or "", raw_finish, usage or {})
