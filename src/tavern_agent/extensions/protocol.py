"""The extension host's channels: paths, handshake words and JSON messages.

Both channels of :mod:`tavern_agent.extensions.host` speak JSON text messages.

Page protocol (JSON text messages)::

    page → host  {"type": "register", "id": 1, "tool": {extensionId, name, description,
                  inputSchema, contexts, enabled}}
                 {"type": "set_enabled", "id": 2, "toolId": "...", "enabled": false}
                 {"type": "unregister", "id": 3, "toolId": "..."}
                 {"type": "list", "id": 4}
                 {"type": "resolve", "callId": "...", "ok": true, "result": <json>}
                 {"type": "resolve", "callId": "...", "ok": false, "error": {"message": "..."}}
                 {"type": "resolve", "callId": "...", "ok": false, "unavailable": true, ...}
    host → page  {"type": "ack", "id": 1, "ok": true, "result": ...}
                 {"type": "ack", "id": 1, "ok": false, "code": "...", "message": "..."}
                 {"type": "call", "callId": "...", "toolId": "...", "arguments": {...},
                  "context": {runId, invocationId, callId, target}}
                 {"type": "cancel", "callId": "...", "reason": "cancelled" | "timeout"}

Runtime protocol (JSON text messages)::

    host → runtime  {"type": "catalog", "tools": [<descriptor json>, ...]}
                    {"type": "receipt", "id": 1, "receipt": <receipt json>}
    runtime → host  {"type": "invoke", "id": 1, "toolId": "...", "arguments": {...},
                     "context": {runId, invocationId, callId, target, name}}
                    {"type": "cancel", "id": 1}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from websockets.typing import Subprotocol

from tavern_agent.core import json_input
from tavern_agent.core.descriptors import EMPTY_PARAMETERS, Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import InvalidToolId, ToolId
from tavern_agent.extensions.python import target_of
from tavern_agent.tools.catalog import ExternalReceipt
from tavern_agent.tools.context import CallContext

SUBPROTOCOL = Subprotocol("tavern-agent.v1")
TOKEN_PREFIX = "token."
PAGE_PATH = "/ext/ws"
RUNTIME_PATH = "/ext/runtime"
CLIENT_PATH = "/ext/tavern-agent.js"
PAGES_PREFIX = "/pages/"
MAX_MESSAGE_BYTES = 1024 * 1024
DESCRIPTION_CHARS = 2_000
UNKNOWN = "It may have run. Check the current state before repeating it."
CLOSE_MALFORMED = 1008


def descriptor_json(d: ToolDescriptor, registered_by: str, enabled: bool) -> dict[str, Any]:
    """A tool's listing entry as the page protocol spells it."""
    return {
        "id": str(d.tool_id),
        "nativeName": d.name_hint or d.tool_id.name,
        "description": d.description,
        "inputSchema": dict(d.parameters),
        "contexts": sorted(s.value for s in d.scenes),
        "enabled": enabled,
        "source": registered_by,
    }


def descriptor_from_json(data: Mapping[str, Any]) -> ToolDescriptor:
    """A tool descriptor from an entry of the host's tool listing."""
    tool_id = ToolId.parse(data["id"])
    return ToolDescriptor(
        tool_id=tool_id,
        description=data["description"],
        parameters=data["inputSchema"],
        scenes=frozenset(Scene(s) for s in data["contexts"]),
        label=tool_id.source,
        name_hint=data.get("nativeName"),
    )


def receipt_json(r: ExternalReceipt) -> dict[str, Any]:
    """A receipt as the host sends it back over the channel."""
    return {
        "content": r.content,
        "structured": r.structured,
        "isError": r.is_error,
        "errorCode": None if r.error_code is None else r.error_code.value,
        "raw": r.raw,
    }


def receipt_from_json(data: Mapping[str, Any]) -> ExternalReceipt:
    """A receipt from the host's JSON."""
    code = data.get("errorCode")
    return ExternalReceipt(
        content=str(data.get("content", "")),
        structured=data.get("structured"),
        is_error=bool(data.get("isError")),
        error_code=None if code is None else ErrorCode(code),
        raw=data.get("raw"),
    )


@dataclass(frozen=True, slots=True)
class CallMeta:
    """The identities sent to the extension with each call."""

    run_id: str
    invocation_id: str
    call_id: str
    target: Mapping[str, str]
    name: str  # the model's name for the tool, for texts

    @classmethod
    def of(cls, tool_id: ToolId, ctx: CallContext) -> CallMeta:
        """The call's identities and target as a page receives them."""
        name = ctx.model_name(str(tool_id), tool_id.name)
        return cls(ctx.run_id, ctx.invocation_id, ctx.call_id, target_of(ctx), name)

    def to_json(self) -> dict[str, Any]:
        """The ``context`` object of an ``invoke`` message."""
        return {
            "runId": self.run_id,
            "invocationId": self.invocation_id,
            "callId": self.call_id,
            "target": dict(self.target),
        }


class MalformedMessage(ValueError):
    """A message that breaks the protocol; its connection is closed."""


class Refused(Exception):
    """A page's request the host turns down; the page gets an ``ack`` with the code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_message(raw: str | bytes) -> dict[str, Any]:
    """One channel message as a JSON object; raises ``MalformedMessage`` for anything else."""
    if not isinstance(raw, str):
        raise MalformedMessage("binary message")
    return json_input.load_object(raw, MalformedMessage, "not a JSON object")


def invoke_request(message: dict[str, Any]) -> tuple[Any, ToolId, dict[str, Any], CallMeta]:
    """The request id, ToolId, arguments and call identities of an ``invoke``
    message; raises ``MalformedMessage`` when a part is missing or malformed."""
    request_id = message.get("id")
    arguments = message.get("arguments")
    ctx = message.get("context")
    if not isinstance(arguments, dict) or not isinstance(ctx, dict):
        raise MalformedMessage("invoke needs arguments and context objects")
    try:
        tool_id = ToolId.parse(str(message.get("toolId")))
        target = {str(k): str(v) for k, v in dict(ctx["target"]).items()}
        meta = CallMeta(
            str(ctx["runId"]),
            str(ctx["invocationId"]),
            str(ctx["callId"]),
            target,
            str(ctx.get("name") or tool_id.name),
        )
    except (InvalidToolId, KeyError, TypeError, ValueError) as exc:
        raise MalformedMessage(f"bad invoke: {exc}") from None
    return request_id, tool_id, arguments, meta


def page_descriptor(tool: dict[str, Any]) -> tuple[ToolDescriptor, bool]:
    """A page's ``def`` as a descriptor; every problem is a refusal naming the field."""
    ext, name = tool.get("extensionId"), tool.get("name")
    if not isinstance(ext, str) or not isinstance(name, str):
        raise Refused(ErrorCode.TOOL_INVALID_ARGUMENTS, "extensionId and name must be strings")
    try:
        tool_id = ToolId.extension(ext, name)
    except InvalidToolId as exc:
        raise Refused(ErrorCode.TOOL_INVALID_ARGUMENTS, str(exc)) from None
    description = tool.get("description", "")
    if not isinstance(description, str):
        raise Refused(ErrorCode.TOOL_INVALID_ARGUMENTS, "description must be a string")
    schema = tool.get("inputSchema", dict(EMPTY_PARAMETERS))
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise Refused(
            ErrorCode.TOOL_INVALID_ARGUMENTS, 'inputSchema must be a JSON Schema of type "object"'
        )
    contexts = tool.get("contexts", ["chat", "session"])
    try:
        scenes = frozenset(Scene(c) for c in contexts)
    except (TypeError, ValueError):
        raise Refused(
            ErrorCode.TOOL_INVALID_ARGUMENTS, 'contexts must list "chat" and/or "session"'
        ) from None
    if not scenes:
        raise Refused(ErrorCode.TOOL_INVALID_ARGUMENTS, "contexts must not be empty")
    descriptor = ToolDescriptor(
        tool_id=tool_id,
        description=description[:DESCRIPTION_CHARS],
        parameters=schema,
        scenes=scenes,
        label=ext,
        name_hint=name,
    )
    return descriptor, tool.get("enabled", True) is not False
