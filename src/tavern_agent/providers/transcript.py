"""The canonical, provider-neutral transcript of an invocation.

It records what happened, never what a provider needs: assistant text, tool
calls with their wire arguments exactly as received (an invalid JSON text stays
as it was), and the :class:`AgentToolResult` of each call. Codecs turn it into
each protocol's history; :mod:`tavern_agent.providers.repair` pairs it first.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.results import AgentToolResult


class FinishReason(StrEnum):
    """Why a response ended, across protocols."""

    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"  # cut off by the output limit
    MALFORMED = "malformed"  # the provider could not form the call (Gemini)
    CONTENT_FILTER = "content_filter"
    OTHER = "other"

    @property
    def truncated(self) -> bool:
        """Calls from such a response are incomplete and must not run."""
        return self in (FinishReason.LENGTH, FinishReason.MALFORMED)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One tool call as the model emitted it.

    ``call.raw_arguments`` is the wire value as received (``MISSING`` when the
    field was absent). ``thought_signature`` is Gemini's opaque signature for the
    part, echoed back unchanged; ``item_id`` is a provider's own item id (the
    Responses ``fc_…`` id), kept for the record only.
    """

    call: ToolCall
    thought_signature: str | None = None
    item_id: str | None = None

    @property
    def call_id(self) -> str:
        """The call's id as the provider sent it."""
        return self.call.call_id

    @property
    def name(self) -> str:
        """The called name as the provider sent it."""
        return self.call.name


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user turn of the transcript (the task, a reminder)."""

    text: str


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One model answer: its text, its tool calls in order, and why it ended."""

    text: str = ""
    calls: tuple[RecordedCall, ...] = ()
    finish: FinishReason = FinishReason.STOP


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The result of one call, fed back to the model."""

    result: AgentToolResult

    @property
    def call_id(self) -> str:
        """The id of the call this result answers."""
        return self.result.call_id


TranscriptItem = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class Transcript:
    """A system prompt and the items of the conversation, in order."""

    items: tuple[TranscriptItem, ...] = ()
    system: str | None = None

    def append(self, *items: TranscriptItem) -> Transcript:
        """A new transcript with ``items`` added at the end (transcripts are immutable)."""
        return Transcript(self.items + items, self.system)

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The transcript's JSON form, as :meth:`from_json` reads it."""
        return {"system": self.system, "items": [_item_json(i) for i in self.items]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Transcript:
        """A transcript from its JSON form."""
        return cls(tuple(_item_from_json(i) for i in data["items"]), data.get("system"))


@dataclass(frozen=True, slots=True)
class DecodedResponse:
    """One model response: the assistant message and how it ended.

    ``raw_finish`` is the provider's own finish value, for the record.
    """

    message: AssistantMessage
    raw_finish: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> tuple[RecordedCall, ...]:
        """The tool calls of the response, in order."""
        return self.message.calls

    @property
    def truncated(self) -> bool:
        """Whether the answer was cut off at the output limit."""
        return self.message.finish.truncated

    def truncation_results(self) -> tuple[AgentToolResult, ...]:
        """For a cut-off response: one recoverable error result per call, none run."""
        if not self.truncated:
            return ()
        return tuple(truncated_result(c) for c in self.calls)


TRUNCATED_TEXT = (
    "Not run: your response hit the output length limit before this call was complete. "
    "Send the call again with shorter arguments, or split the work over several calls."
)
OUTCOME_UNKNOWN_TEXT = (
    "No result was recorded: the run was interrupted, so this call may or may not have "
    "taken effect. Check the current state before repeating it."
)


def truncated_result(call: RecordedCall) -> AgentToolResult:
    """The error result for a call cut off with its answer
    (its arguments are incomplete, so it is not run)."""
    return AgentToolResult.failure(
        call.call_id, None, ErrorCode.MODEL_TOOL_CALL_TRUNCATED, TRUNCATED_TEXT
    )


def outcome_unknown_result(call: RecordedCall) -> AgentToolResult:
    """The result for a call the transcript has no result for
    (the run stopped during it): its outcome is unknown."""
    return AgentToolResult.failure(
        call.call_id, None, ErrorCode.TOOL_OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_TEXT, synthesized=True
    )


# ---------------------------------------------------------------- JSON helpers


def _raw_json(raw: Any) -> dict[str, Any]:
    if raw is MISSING:
        return {}
    if isinstance(raw, bytes):
        return {"rawArgumentsBytes": base64.b64encode(raw).decode("ascii")}
    return {"rawArguments": raw}


def _item_json(item: TranscriptItem) -> dict[str, Any]:
    if isinstance(item, UserMessage):
        return {"type": "user", "text": item.text}
    if isinstance(item, ToolResultMessage):
        return {"type": "result", **item.result.to_json()}
    calls = []
    for c in item.calls:
        entry: dict[str, Any] = {
            "callId": c.call_id,
            "name": c.name,
            **_raw_json(c.call.raw_arguments),
        }
        if c.thought_signature is not None:
            entry["thoughtSignature"] = c.thought_signature
        if c.item_id is not None:
            entry["itemId"] = c.item_id
        calls.append(entry)
    return {"type": "assistant", "text": item.text, "calls": calls, "finish": item.finish.value}


def _item_from_json(data: Mapping[str, Any]) -> TranscriptItem:
    kind = data["type"]
    if kind == "user":
        return UserMessage(data["text"])
    if kind == "result":
        tool_id = data.get("toolId")
        code = data.get("errorCode")
        return ToolResultMessage(
            AgentToolResult(
                call_id=data["callId"],
                tool_id=None if tool_id is None else ToolId.parse(tool_id),
                content=data["content"],
                structured=data.get("structured"),
                is_error=bool(data.get("isError", False)),
                error_code=None if code is None else ErrorCode(code),
                resource_refs=tuple(data.get("resourceRefs", ())),
            )
        )
    if kind != "assistant":
        raise ValueError(f"unknown transcript item type {kind!r}")
    calls = []
    for c in data.get("calls", ()):
        if "rawArgumentsBytes" in c:
            raw: Any = base64.b64decode(c["rawArgumentsBytes"])
        else:
            raw = c.get("rawArguments", MISSING)
        calls.append(
            RecordedCall(
                ToolCall(c["callId"], c["name"], raw), c.get("thoughtSignature"), c.get("itemId")
            )
        )
    return AssistantMessage(
        data.get("text", ""), tuple(calls), FinishReason(data.get("finish", "stop"))
    )
