"""What every protocol codec does, and the rules they share.

A codec encodes the snapshot's tools and a tool choice, decodes a response
(whole or streamed) into a :class:`DecodedResponse`, and encodes a repaired
transcript as that protocol's history. Arguments are replayed through
:func:`~tavern_agent.core.arguments.replay_arguments` only: a valid
object as it was, an invalid one as ``{}``; the paired error result carries the
reason and the transcript keeps the raw text.
"""

from __future__ import annotations

import copy
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tavern_agent.core.arguments import MISSING, parse_arguments, replay_arguments
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import NAME_RULES, ModelProtocol, fit_name, normalize_segment
from tavern_agent.core.results import AgentToolResult
from tavern_agent.core.schema_adapt import NotStrictCompatible, openai_strict
from tavern_agent.providers.ids import CallIdMap
from tavern_agent.providers.repair import Entry, Exchange, RepairedHistory, repair
from tavern_agent.providers.transcript import (
    AssistantMessage,
    DecodedResponse,
    FinishReason,
    RecordedCall,
    Transcript,
)
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot

ChoiceMode = Literal["auto", "none", "required", "named"]
CONTINUE_TEXT = "Continue."
"""User text put first when a history starts with the assistant (Anthropic, Gemini)."""


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Whether and which tool the model must call: auto, none, required or one named tool."""

    mode: ChoiceMode = "auto"
    name: str | None = None  # a model name or ToolId, for mode "named"

    @classmethod
    def named(cls, name: str) -> ToolChoice:
        """The model must call the tool ``name`` (a model name or a ToolId)."""
        return cls("named", name)


AUTO = ToolChoice()


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What a request sets besides its history and tools: the model, the longest answer
    in tokens, the tool choice and whether tool schemas are strict."""

    model: str
    max_tokens: int = 4096
    choice: ToolChoice = AUTO
    strict: bool = False


Messages = list[dict[str, Any]]
"""A protocol's list of history messages (or items, or contents), as JSON objects."""
HistoryFrame = tuple[dict[str, Any], Messages]
"""Body fields beside the history list, and the messages the list must start with."""


@dataclass(frozen=True, slots=True)
class EncodedHistory:
    """A protocol's history fragment of a request body, and how it was made."""

    body: dict[str, Any]
    ids: CallIdMap
    repaired: RepairedHistory


class StreamDecoder(Protocol):
    """Turns the events of one streamed response into a :class:`DecodedResponse`."""

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one streamed event (a chunk) as the provider sent it, as JSON."""

    def result(self) -> DecodedResponse:
        """The response so far; call after the last event."""


class Codec(ABC):
    """One model protocol's request and response format (see the module docstring).

    A codec spells history in two parts: :meth:`encode_entries` turns repaired
    entries into the protocol's list of messages (appending, and never changing
    a message already in the list: a merge replaces the last one), and
    :meth:`history_frame` gives what goes around that list (the system text,
    messages it must start with). That split lets
    :class:`~tavern_agent.providers.incremental.RequestEncoder` encode only the
    new part of a growing transcript. Codecs name the field that caps the
    answer's length; a codec whose head is not ``{model, <cap>}`` overrides
    :meth:`request_head`. ``encode_history`` and ``build_request`` are shared.
    """

    protocol: ModelProtocol
    max_tokens_field: str = "max_tokens"
    history_key: str = "messages"
    """The body field that holds the history list."""

    @abstractmethod
    def tool_fields(
        self, bindings: Sequence[ToolBinding], choice: ToolChoice, named: str | None, strict: bool
    ) -> dict[str, Any]:
        """The tools and tool choice fields for ``bindings`` (at least one); ``named`` is
        the model name a named choice resolved to. ``strict`` is an OpenAI option."""

    @abstractmethod
    def encode_entries(
        self, entries: Sequence[Entry], snapshot: ToolSnapshot, ids: CallIdMap, out: Messages
    ) -> None:
        """Append the protocol messages for ``entries`` to ``out``.

        A message already in ``out`` is never changed in place: merging into
        the last one replaces it with a new dict.
        """

    @abstractmethod
    def history_frame(self, system: str | None, first: dict[str, Any] | None) -> HistoryFrame:
        """Body fields beside the history list, and the messages the list must
        start with, given the system text and the first encoded message."""

    @abstractmethod
    def decode_response(self, body: Mapping[str, Any]) -> DecodedResponse:
        """A whole (non-streamed) response body."""

    @abstractmethod
    def stream_decoder(self) -> StreamDecoder:
        """A fresh decoder for one streamed response."""

    def request_head(self, model: str, max_tokens: int) -> dict[str, Any]:
        """The model and length-cap fields of a request body."""
        return {"model": model, self.max_tokens_field: max_tokens}

    def capped_by(self, field: str) -> Codec:
        """This codec naming the answer's cap ``field`` in :meth:`request_head`.

        Servers of one protocol differ in the field they read (see
        :func:`~tavern_agent.providers.openai_chat.cap_field`); a cap sent
        under a name the server ignores caps nothing.
        """
        if field == self.max_tokens_field:
            return self
        other = copy.copy(self)
        other.max_tokens_field = field
        return other

    def encode_tools(
        self, snapshot: ToolSnapshot, choice: ToolChoice = AUTO, *, strict: bool = False
    ) -> dict[str, Any]:
        """The tools (and tool choice) fields of a request body; empty when the snapshot
        has no tools. The codec spells them in :meth:`tool_fields`."""
        check_protocol(snapshot, self.protocol)
        if not snapshot.bindings:
            return {}
        named = resolve_choice(snapshot, choice)
        return self.tool_fields(snapshot.bindings, choice, named, strict)

    def encode_history(self, transcript: Transcript, snapshot: ToolSnapshot) -> EncodedHistory:
        """Repair the transcript, then spell it as this protocol's history fields."""
        check_protocol(snapshot, self.protocol)
        repaired = repair(transcript)
        ids = CallIdMap(self.protocol)
        messages: list[dict[str, Any]] = []
        self.encode_entries(repaired.entries, snapshot, ids, messages)
        top, leading = self.history_frame(repaired.system, messages[0] if messages else None)
        return EncodedHistory({self.history_key: [*leading, *messages], **top}, ids, repaired)

    def build_request(
        self,
        model: str,
        transcript: Transcript,
        snapshot: ToolSnapshot,
        choice: ToolChoice = AUTO,
        *,
        strict: bool = False,
        max_tokens: int = 4096,
    ) -> dict[str, Any]:
        """A complete request body (no network)."""
        top = dict(self.encode_history(transcript, snapshot).body)
        history = top.pop(self.history_key)
        settings = RequestSettings(model, max_tokens, choice, strict)
        return self.request_body(settings, history, top, snapshot)

    def request_body(
        self,
        settings: RequestSettings,
        history: Any,
        top: Mapping[str, Any],
        snapshot: ToolSnapshot,
    ) -> dict[str, Any]:
        """A request body around ``history`` (the history list, or a stand-in for it) and
        the history's ``top`` fields (e.g. the system text): head, history, top, tools."""
        body = self.request_head(settings.model, settings.max_tokens)
        body[self.history_key] = history
        body.update(top)
        body.update(self.encode_tools(snapshot, settings.choice, strict=settings.strict))
        return body


# ---------------------------------------------------------------- shared rules


def replay_object(call: RecordedCall) -> dict[str, Any]:
    """The arguments object to send back for a call (``{}`` when they were invalid)."""
    return replay_arguments(parse_arguments(call.call.raw_arguments))


@dataclass(frozen=True, slots=True)
class ReplayedCall:
    """One recorded call as a history replays it, with its result."""

    wire_id: str  # the call's id as this protocol's history carries it
    name: str  # see replay_name
    arguments: dict[str, Any]  # see replay_object
    call: RecordedCall
    result: AgentToolResult


def replayed_calls(entry: Exchange, snapshot: ToolSnapshot, ids: CallIdMap) -> list[ReplayedCall]:
    """The calls of ``entry``, in order, as they replay in ``snapshot``'s protocol."""
    calls, results = entry.message.calls, entry.results
    wire_ids = [ids.wire(c.call_id) for c in calls]
    return [
        ReplayedCall(
            wire_id, replay_name(call, result, snapshot), replay_object(call), call, result
        )
        for call, result, wire_id in zip(calls, results, wire_ids, strict=True)
    ]


def check_protocol(snapshot: ToolSnapshot, protocol: ModelProtocol) -> None:
    """Raise ``ValueError`` unless ``snapshot`` was built
    for ``protocol`` (its names fit that protocol only)."""
    if snapshot.protocol is not protocol:
        raise ValueError(
            f"snapshot {snapshot.id} was built for {snapshot.protocol.value}, not {protocol.value}"
        )


def wire_schema(binding: ToolBinding) -> dict[str, Any]:
    """The binding's parameter schema as the snapshot's protocol receives it, as a fresh dict.

    Without ``"additionalProperties": false``: the gate refuses unknown arguments
    anyway (naming them), and a model that reads the schema as text pays for the
    words in every request (about 6 tokens an object; a strict schema keeps them).
    """
    return _open(binding.protocol_parameters or {"type": "object"})


def _open(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: _open_value(value)
        for key, value in schema.items()
        if not (key == "additionalProperties" and value is False)
    }


def _open_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _open(value)
    if isinstance(value, list):
        return [_open_value(v) for v in value]
    return value


def strict_schema(binding: ToolBinding) -> dict[str, Any] | None:
    """OpenAI strict form of the binding's schema, or None when it cannot be strict."""
    try:
        return openai_strict(binding.parameters)
    except NotStrictCompatible:
        return None


def resolve_choice(snapshot: ToolSnapshot, choice: ToolChoice) -> str | None:
    """The model name for a named choice (given as model name or ToolId)."""
    if choice.mode != "named":
        return None
    if choice.name is None:
        raise ValueError("a named tool choice needs a name")
    if snapshot.by_name(choice.name) is not None:
        return choice.name
    try:
        found = snapshot.name_of(choice.name)
    except ValueError:
        found = None
    if found is None:
        raise ValueError(f"tool choice {choice.name!r} is not in snapshot {snapshot.id}")
    return found


def replay_name(call: RecordedCall, result: AgentToolResult, snapshot: ToolSnapshot) -> str:
    """The name to replay a call under: this snapshot's name for the tool when it
    still has it, else the recorded name when the protocol accepts it, else a
    normalised form (tools that are gone still replay)."""
    if result.tool_id is not None:
        current = snapshot.name_of(result.tool_id)
        if current is not None:
            return current
    rule = NAME_RULES[snapshot.protocol]
    name = call.name if isinstance(call.name, str) else str(call.name)
    if rule.accepts(name):
        return name
    return fit_name(normalize_segment(name, rule), rule, name)


def result_text(result: AgentToolResult) -> str:
    """A result's model text for protocols without an error flag: errors say so first."""
    return f"Error: {result.content}" if result.is_error else result.content


def decoded_response(
    text: str,
    calls: list[RecordedCall],
    finish: FinishReason,
    id_seed: str,
    raw_finish: str | None,
    usage: Any,
) -> DecodedResponse:
    """A decoded response; calls sent without an id get one from ``id_seed``
    (see :func:`fill_missing_ids`)."""
    calls = fill_missing_ids(calls, id_seed)
    return DecodedResponse(AssistantMessage(text, tuple(calls), finish), raw_finish, usage)


def fill_missing_ids(calls: list[RecordedCall], seed: str) -> list[RecordedCall]:
    """Give calls the provider sent without an id a stable one.

    The id hashes ``seed`` (a response id, or the response text), the call's
    position, name and raw arguments: decoding the same response twice gives
    the same ids, and different calls get different ones.
    """
    out = []
    for position, rc in enumerate(calls):
        if rc.call_id:
            out.append(rc)
            continue
        call = rc.call
        raw = "<missing>" if call.raw_arguments is MISSING else repr(call.raw_arguments)
        key = f"{seed}\x00{position}\x00{call.name}\x00{raw}"
        digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]
        new = ToolCall(f"call_{digest}", call.name, call.raw_arguments)
        out.append(RecordedCall(new, rc.thought_signature, rc.item_id))
    return out
