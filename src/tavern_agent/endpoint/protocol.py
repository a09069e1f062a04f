"""The OpenAI Chat Completions shapes the agent endpoint reads and writes.

Pure values, no I/O: parsing a request body into :class:`CompletionRequest`,
and building responses, stream chunks and errors exactly as the OpenAI API
shapes them (``{"error": {"message", "type", "code"}}`` for errors). Fields a
frontend sends that the agent does not use (``temperature``, ``logit_bias``,
``tools``, its own extras) are ignored, but a known field of the wrong type
is refused: a client that sends ``"stream": "yes"`` learns it at once.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.formats import well_formed
from tavern_agent.core import json_input

MODEL_PREFIX = "tavern-agent/"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class RequestError(ValueError):
    """A request the endpoint refuses: an HTTP status and an OpenAI error body."""

    def __init__(
        self, status: int, message: str, *, kind: str = "invalid_request_error", code: str
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body for this refusal."""
        return error_body(str(self), self.kind, self.code)


def error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    """The OpenAI error shape."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def bad_request(message: str, code: str = "invalid_request") -> RequestError:
    """A 400 refusal with ``message`` and an OpenAI-style error code."""
    return RequestError(400, message, code=code)


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the request: its role, its text and an optional speaker name."""

    role: str
    content: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Names:
    """Who speaks in the chat: the user's and the character's names (``None``: not said)."""

    user: str | None = None
    character: str | None = None


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """What the agent uses of a chat completion request."""

    messages: tuple[Message, ...]
    model: str | None
    stream: bool
    include_usage: bool
    names: Names = Names()  # the request's ``user_name`` / ``character_name`` fields

    @property
    def system_texts(self) -> list[str]:
        """The frontend's context: its system (and developer) messages, in order."""
        return [m.content for m in self.messages if m.role in SYSTEM_ROLES and m.content]

    @property
    def floors(self) -> list[Message]:
        """The chat: user and assistant messages, in order."""
        return [m for m in self.messages if m.role in ("user", "assistant")]


SYSTEM_ROLES = ("system", "developer")
# SillyTavern's example dialogue: system messages under these names.
EXAMPLE_USER, EXAMPLE_CHARACTER = "example_user", "example_assistant"
# SillyTavern's default main prompt after its macros are expanded.
_MAIN_PROMPT = re.compile(
    r"Write (?P<character>[^\n]{1,100}?)'s next reply in a fictional chat between "
    r"(?:[^\n]{1,300}?) and (?P<user>[^\n]{1,100}?)\."
)
# SillyTavern's "names in message content" style: "Seraphina: text".
_NAME_PREFIX = re.compile(r"(?P<name>[^\n:]{1,64}): ")


@dataclass(frozen=True, slots=True)
class Floor:
    """One message of the chat: ``user``, ``assistant`` or ``note`` (a system line in it)."""

    kind: str
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class FrontendChat:
    """A request read as SillyTavern assembled it.

    ``context``: the system messages before the chat (card, world info,
    example dialogue with its speakers named); ``floors``: the chat, with the
    system messages inside it (an author's note, a ``/sys`` line) kept at
    their place as notes; ``after``: the system messages after the last floor.
    """

    user: str
    character: str
    context: tuple[str, ...]
    floors: tuple[Floor, ...]
    after: tuple[str, ...]


def frontend_chat(request: CompletionRequest, defaults: Names = Names()) -> FrontendChat:
    """The request's chat, context and speakers' names.

    A name comes from, in order: the request's ``user_name``/``character_name``
    fields, the messages' ``name`` fields, SillyTavern's "names in message
    content" style (every floor starts with ``Name: ``; the prefixes are
    removed), the names SillyTavern's default main prompt states, ``defaults``
    (``serve --user-name/--character-name``), else "User" and "Assistant".
    """
    messages = [m for m in request.messages if m.role in ("user", "assistant", *SYSTEM_ROLES)]
    at = [i for i, m in enumerate(messages) if m.role in ("user", "assistant")]
    first, last = (at[0], at[-1]) if at else (len(messages), len(messages))
    chat = messages[first : last + 1]
    prefixes = _content_names([m for m in chat if m.role in ("user", "assistant")])
    stated = _stated_names([m.content for m in messages[:first] if m.role in SYSTEM_ROLES])

    def side(role: str, given: str | None, default: str | None, fallback: str) -> str:
        named = next((m.name for m in chat if m.role == role and m.name), None)
        from_prefix = next((p for m, p in prefixes if m.role == role), None) if prefixes else None
        said = stated.user if role == "user" else stated.character
        return given or named or from_prefix or said or default or fallback

    user = side("user", request.names.user, defaults.user, "User")
    character = side("assistant", request.names.character, defaults.character, "Assistant")
    speakers = {EXAMPLE_USER: user, EXAMPLE_CHARACTER: character}
    floors: list[Floor] = []
    for m in chat:
        if m.role in SYSTEM_ROLES:
            if m.content:
                floors.append(Floor("note", m.name or "System", m.content))
            continue
        text, name = m.content, m.name
        if prefixes:
            prefix = next(p for n, p in prefixes if n is m)
            text, name = text[len(prefix) + 2 :], name or prefix
        floors.append(Floor(m.role, name or (user if m.role == "user" else character), text))

    def system(part: list[Message]) -> tuple[str, ...]:
        return tuple(_named(m, speakers) for m in part if m.role in SYSTEM_ROLES and m.content)

    return FrontendChat(
        user, character, system(messages[:first]), tuple(floors), system(messages[last + 1 :])
    )


def _named(message: Message, speakers: Mapping[str, str]) -> str:
    """A system message's text, led by its speaker when it names one."""
    if not message.name:
        return message.content
    name = speakers.get(message.name, message.name)
    return (
        message.content if message.content.startswith(f"{name}: ") else f"{name}: {message.content}"
    )


def _content_names(floors: Sequence[Message]) -> list[tuple[Message, str]]:
    """Each floor's ``Name: `` prefix when the request uses that style throughout, else ``[]``.

    Every floor must start with one, and the user's floors with the same
    one: a single message that happens to begin "Note: " is not a name.
    """
    found = []
    for m in floors:
        match = _NAME_PREFIX.match(m.content)
        if match is None or m.name not in (None, match["name"]):
            return []
        found.append((m, match["name"]))
    users = {p for m, p in found if m.role == "user"}
    characters = {p for m, p in found if m.role == "assistant"}
    if len(found) < 2 or len(users) > 1 or users & characters:
        return []
    return found


def _stated_names(system_texts: Sequence[str]) -> Names:
    """The names SillyTavern's default main prompt states, if it is there."""
    for text in system_texts:
        match = _MAIN_PROMPT.search(text)
        if match is not None:
            return Names(match["user"].strip(), match["character"].strip())
    return Names()


def without_speaker(reply: str, name: str) -> str:
    """The reply without a leading ``Name: `` the frontend would show a second time."""
    prefix = f"{name}: "
    return reply[len(prefix) :].lstrip() if reply.startswith(prefix) else reply


def _content_text(content: Any, where: str) -> str:
    """A message's text: a string, null, or a list of content parts (text parts kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise bad_request(f"{where}.content: each part must be an object")
            if part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise bad_request(f"{where}.content: a text part needs a string 'text'")
                texts.append(text)
        return "\n".join(texts)
    raise bad_request(f"{where}.content must be a string, an array of parts or null")


def _message(raw: Any, index: int) -> Message:
    where = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise bad_request(f"{where} must be an object")
    role = raw.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise bad_request(f"{where}.name must be a string")
    # A lone surrogate (an emoji cut in half by a client) cannot be written as UTF-8.
    text = well_formed(_content_text(raw.get("content"), where))
    return Message(role, text, well_formed(name) if name else None)


def _optional(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = body.get(key)
    # bool is an int in Python: a flag of true is not a number of tokens.
    wrong_bool = isinstance(value, bool) and bool not in (
        kind if isinstance(kind, tuple) else (kind,)
    )
    if value is not None and (not isinstance(value, kind) or wrong_bool):
        raise bad_request(f"'{key}' must be {what}", "invalid_type")
    return value


def parse_request(data: bytes) -> CompletionRequest:
    """Parse and check a request body; :class:`RequestError` (400) says what is wrong."""
    try:
        body = json_input.loads(data)
    except json_input.JsonInputError as exc:
        raise bad_request(f"The body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, Mapping):
        raise bad_request("The body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("'messages' must be a non-empty array", "invalid_type")
    messages = tuple(_message(m, i) for i, m in enumerate(raw_messages))
    model = _optional(body, "model", str, "a string")
    stream = _optional(body, "stream", bool, "true or false")
    options = _optional(body, "stream_options", Mapping, "an object")
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        _optional(body, key, (int, float), "a number")
    for key in ("max_tokens", "max_completion_tokens", "n", "seed"):
        _optional(body, key, int, "an integer")
    include_usage = bool(options and options.get("include_usage") is True)
    user = _optional(body, "user_name", str, "a string")
    character = _optional(body, "character_name", str, "a string")
    names = Names(
        well_formed(user.strip()) or None if user else None,
        well_formed(character.strip()) or None if character else None,
    )
    return CompletionRequest(messages, model or None, bool(stream), include_usage, names)


# ---------------------------------------------------------------- responses


def completion_id() -> str:
    """A new ``chatcmpl-...`` id for a completion."""
    return f"chatcmpl-{secrets.token_hex(12)}"


def now() -> int:
    """The current time in whole seconds, as OpenAI's ``created`` fields give it."""
    return int(time.time())


def usage_json(usage: Mapping[str, int]) -> dict[str, int]:
    """OpenAI's ``usage`` object from token counts (the total computed)."""
    prompt = int(usage.get("prompt_tokens", 0))
    completion = int(usage.get("completion_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion(
    cid: str, created: int, model: str, content: str, usage: Mapping[str, int]
) -> dict[str, Any]:
    """A non-stream response holding the committed message."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_json(usage),
    }


def chunk(
    cid: str,
    created: int,
    model: str,
    delta: Mapping[str, Any],
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """One stream chunk; every chunk carries a ``choices`` array with index 0."""
    out: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        out["usage"] = usage_json(usage)
    return out


def model_list(ids: Sequence[str], created: int = 0, owner: str = "tavern-agent") -> dict[str, Any]:
    """The ``/v1/models`` body: one model per profile id, named with the model prefix."""
    return {
        "object": "list",
        "data": [
            {
                "id": MODEL_PREFIX + i,
                "object": "model",
                "created": created,
                "owned_by": "tavern-agent",
            }
            for i in ids
        ],
    }


def add_usage(total: dict[str, int], usage: Mapping[str, Any]) -> None:
    """Add one upstream response's usage, whatever protocol named its counts."""
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", usage.get("promptTokenCount")))
    completion = usage.get(
        "completion_tokens", usage.get("output_tokens", usage.get("candidatesTokenCount"))
    )
    for key, value in (("prompt_tokens", prompt), ("completion_tokens", completion)):
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
