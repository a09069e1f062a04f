"""The model gateway: one port, HTTP clients for the four protocols, and a replay.

:class:`ModelGateway` answers a :class:`ModelRequest` (the invocation's
transcript and frozen snapshot) with a :class:`ModelReply` (the decoded
response and the raw wire data, for the audit file). The request body is the
codec's :meth:`~tavern_agent.providers.codec.Codec.build_request`, encoded
incrementally per invocation (:mod:`tavern_agent.providers.incremental`); the answer
is decoded with the codec's stream decoder, so the runtime never sees a
provider format.

:class:`HttpGateway` streams over SSE with ``httpx``. It retries 429, 5xx and
connection failures with exponential backoff (``Retry-After`` is honoured),
but only until the first byte of a response body arrived: a generation that
started is never sent twice. Cancelling the awaiting task closes the stream.
A stream is used only when it ends with the event that completes a response
of its protocol (:func:`ends_stream`); one cut off before it, or carrying an
error event (:func:`stream_error`), fails the request instead of passing a
partial answer on as if it were whole.
Any OpenAI-compatible server (llama.cpp, vLLM, Ollama) works with
``openai_chat``; the answer's cap is sent under the name that server reads
(:func:`~tavern_agent.providers.openai_chat.cap_field`, ``ModelConfig.compat``).

:class:`ReplayGateway` answers from ``model-responses/round-NNN.json`` files
a previous run recorded, so a run reproduces offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from tavern_agent import run_layout
from tavern_agent.core import json_input
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.redact import Redactor, url_secrets, url_without_userinfo
from tavern_agent.providers.codec import Codec, RequestSettings
from tavern_agent.providers.incremental import RequestEncoder
from tavern_agent.providers.openai_chat import cap_field
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    AssistantMessage,
    DecodedResponse,
    Transcript,
)
from tavern_agent.providers.window import (
    DEFAULT_WINDOW,
    WindowFacts,
    is_llama_cpp,
    is_overflow,
    server_count,
    server_window,
    table_window,
    tokenizer_scale,
)
from tavern_agent.tools.snapshot import ToolSnapshot


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model step.

    ``round`` counts the requests of the run's main line from 1 (root,
    revisions, handoffs); a delegated child counts its own. ``child`` is the
    0-based order in which the run started that child, ``None`` on the main
    line: a recording is replayed per invocation by it.
    """

    run_id: str
    invocation_id: str
    round: int
    transcript: Transcript
    snapshot: ToolSnapshot
    child: int | None = None
    max_tokens: int | None = None  # the answer's room when the window leaves less than usual


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The decoded response; ``raw`` is what came over the wire (events or a body)."""

    response: DecodedResponse
    raw: Any = None
    attempts: int = 1


class ModelError(Exception):
    """The model could not answer; ends the run (``model.request_failed``)."""

    def __init__(self, message: str, *, status: int | None = None, overflow: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.overflow = overflow  # the provider said the request was over the model's window


class ModelGateway(Protocol):
    """Answers model requests; ``aclose`` frees connections."""

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The model's answer to ``request``; raises ``ModelError`` when there is none."""

    async def aclose(self) -> None:
        """Free the gateway's connections."""


# ---------------------------------------------------------------- recordings


def reply_to_json(request: ModelRequest, reply: ModelReply) -> dict[str, Any]:
    """The audit record of one response; :func:`reply_from_json` reads it back."""
    decoded = reply.response
    return {
        "round": request.round,
        "invocationId": request.invocation_id,
        "protocol": request.snapshot.protocol.value,
        "message": Transcript((decoded.message,)).to_json()["items"][0],
        "rawFinish": decoded.raw_finish,
        "usage": dict(decoded.usage),
        "attempts": reply.attempts,
        "raw": reply.raw,
    }


def reply_from_json(data: Mapping[str, Any]) -> ModelReply:
    """A recorded response file (``model-responses/round-NNN.json``) as
    a reply; raises ``ValueError`` if it holds no assistant message."""
    item = Transcript.from_json({"items": [data["message"]]}).items[0]
    if not isinstance(item, AssistantMessage):
        raise ValueError("a recorded response must hold an assistant message")
    decoded = DecodedResponse(item, data.get("rawFinish"), data.get("usage") or {})
    return ModelReply(decoded, data.get("raw"), int(data.get("attempts", 1)))


class ReplayGateway:
    """Answers each request with the response a previous run recorded for it.

    The main line's round N gets the recorded round N; the run's k-th delegated
    child gets the recorded k-th child's own round N (children are matched in
    the order the recording's journal started them).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        if not (run_dir / run_layout.RESPONSES_DIR).is_dir():
            raise ValueError(f"{run_dir} holds no {run_layout.RESPONSES_DIR}/ to replay")
        try:
            lines = (run_dir / run_layout.JOURNAL_FILE).read_bytes().splitlines()
        except FileNotFoundError:
            lines = []
        self.children = _recorded_children(lines)
        self.window = _recorded_window(lines)
        self.counts = _recorded_counts(lines)

    async def window_facts(self) -> WindowFacts | None:
        """The recorded run's window, so the replay sends the requests it sent."""
        return self.window

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The server's counts the recorded run was given, in their order (then ``None``)."""
        return self.counts.pop(0) if self.counts else None

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The recorded response for the request's round (or a delegated
        child's round); raises ``ModelError`` when the recording has none."""
        if request.child is None:
            ref = run_layout.model_response(request.round)
            what = f"round {request.round}"
        elif request.child < len(self.children):
            ref = run_layout.model_response(request.round, self.children[request.child])
            what = f"round {request.round} of delegated child {request.child + 1}"
        else:
            raise ModelError(f"the recording started only {len(self.children)} delegated children")
        path = self.run_dir / ref
        try:
            return reply_from_json(json_input.loads(path.read_bytes()))
        except FileNotFoundError:
            raise ModelError(f"the recording has no response for {what}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why = json_input.describe(exc)
            raise ModelError(f"{path}: not a recorded response: {why}") from None

    async def aclose(self) -> None:
        """Nothing to free: a recording holds no connection."""
        return None


def _payloads(lines: list[bytes], kind: str) -> Iterator[Any]:
    """The payloads of the recorded journal's ``kind`` lines, in order."""
    marker = f'"{kind}"'.encode()
    for line in lines:
        if marker in line:
            try:
                yield json.loads(line)["payload"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line


def _recorded_window(lines: list[bytes]) -> WindowFacts | None:
    """The window the recorded run kept its requests within, if it journaled one."""
    for payload in _payloads(lines, "context_window"):
        try:
            tokens, cap = int(payload["tokens"]), int(payload["maxTokens"])
            return WindowFacts(tokens, "recording", cap, float(payload.get("scale") or 1.0))
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _recorded_counts(lines: list[bytes]) -> list[int]:
    """The server's counts of requests (``context_counted``) the recorded run journaled."""
    found: list[int] = []
    for payload in _payloads(lines, "context_counted"):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            found.append(int(payload["counted"]))
    return found


def _recorded_children(lines: list[bytes]) -> list[str]:
    """Invocation ids of the recording's delegated children, in the order they started."""
    started = _payloads(lines, "invocation_started")
    return [p["invocationId"] for p in started if p.get("kind") == "child"]


# ---------------------------------------------------------------- HTTP


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Where and how to reach a model. The API key is read from ``api_key_env``.

    ``compat`` says which kind of ``openai_chat`` server ``base_url`` is (see
    :data:`~tavern_agent.providers.openai_chat.COMPAT_MODES`); other protocols ignore it.
    """

    protocol: ModelProtocol
    model: str
    base_url: str
    api_key_env: str | None = None
    timeout: float = 300.0
    connect_timeout: float = 10.0
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 20.0
    max_tokens: int = 4096
    headers: Mapping[str, str] = field(default_factory=dict)
    compat: str = "auto"
    context_window: int | None = None  # the --context-window flag: the model's window

    def api_key(self) -> str | None:
        """The API key from the ``api_key_env`` environment variable, if set."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def redactor(self) -> Redactor:
        """Masks the API key and the base URL's user-info wherever they appear."""
        return Redactor([self.api_key(), *url_secrets(self.base_url)])

    def to_json(self) -> dict[str, Any]:
        """The record of how the model was reached: no key, no URL user-info
        (``compat`` only when it was set: ``auto`` decides from the URL again)."""
        record: dict[str, Any] = {
            "protocol": self.protocol.value,
            "model": self.model,
            "baseUrl": url_without_userinfo(self.base_url),
            "apiKeyEnv": self.api_key_env,
        }
        if self.compat != "auto":
            record["compat"] = self.compat
        if self.context_window is not None:
            record["contextWindow"] = self.context_window
        return record

    def codec(self) -> Codec:
        """The protocol's codec, sending the answer's cap under the name this server reads."""
        codec = codec_for(self.protocol)
        if self.protocol is ModelProtocol.OPENAI_CHAT:
            return codec.capped_by(cap_field(self.base_url, self.compat))
        return codec


def _endpoint(config: ModelConfig) -> tuple[str, dict[str, str], dict[str, Any]]:
    """URL, headers and extra body fields that ask for a stream."""
    base = config.base_url.rstrip("/")
    key = config.api_key()
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    protocol = config.protocol
    if protocol is ModelProtocol.OPENAI_CHAT:
        extra: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
        url = f"{base}/chat/completions"
    elif protocol is ModelProtocol.OPENAI_RESPONSES:
        extra, url = {"stream": True}, f"{base}/responses"
    elif protocol is ModelProtocol.ANTHROPIC:
        extra, url = {"stream": True}, f"{base}/messages"
        headers["anthropic-version"] = "2023-06-01"
        if key:
            headers["x-api-key"] = key
    else:
        model = config.model.removeprefix("models/")  # the API's own spelling of a model name
        extra, url = {}, f"{base}/models/{model}:streamGenerateContent?alt=sse"
        if key:
            headers["x-goog-api-key"] = key
    if key and protocol in (ModelProtocol.OPENAI_CHAT, ModelProtocol.OPENAI_RESPONSES):
        headers["authorization"] = f"Bearer {key}"
    headers.update(config.headers)
    return url, headers, extra


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data:`` payloads of a server-sent event stream, as text (``[DONE]`` included)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line.strip() or not data:
            continue  # event:, id:, comments; or a blank line with nothing pending
        text, data = "\n".join(data), []
        yield text
    if data:
        yield "\n".join(data)


def stream_error(event: Mapping[str, Any]) -> str | None:
    """The error a provider reported inside a stream that started with 200, else ``None``.

    Responses and Anthropic send an ``error`` event (Responses also
    ``response.failed``); OpenAI-compatible servers and Gemini send a chunk
    holding only ``{"error": {...}}``; Gemini answers a blocked prompt with
    ``promptFeedback.blockReason`` and no candidates.
    """
    kind = event.get("type")
    if kind == "response.failed":
        response = event.get("response") or {}
        return _describe(response.get("error")) or "the response failed"
    if kind == "error":
        nested = event.get("error")
        return _describe(nested if isinstance(nested, Mapping) else event) or "error"
    if "error" in event and not event.get("choices") and not event.get("candidates"):
        return _describe(event["error"]) or "error"
    blocked = (event.get("promptFeedback") or {}).get("blockReason")
    if blocked and not event.get("candidates"):  # Gemini refused the prompt: no answer follows
        return f"the prompt was blocked: {blocked}"
    return None


def _describe(error: Any) -> str:
    if isinstance(error, str):
        return error
    if not isinstance(error, Mapping):
        return ""
    label = error.get("status") or error.get("code") or error.get("type") or ""
    message = str(error.get("message") or "")
    return f"{label}: {message}" if label and message else str(label or message)


def ends_stream(protocol: ModelProtocol, event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is the one a complete response of ``protocol`` ends with.

    A stream that closes without it was cut off, and what it held is not a
    whole answer: its calls may be incomplete, or missing.
    """
    if protocol is ModelProtocol.OPENAI_CHAT:
        return any(c.get("finish_reason") for c in event.get("choices") or ())
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return event.get("type") in ("response.completed", "response.incomplete")
    if protocol is ModelProtocol.ANTHROPIC:
        return event.get("type") == "message_stop"
    return any(c.get("finishReason") for c in event.get("candidates") or ())


_NOT_ASKED = ("content-type", "accept")  # the stream's headers, not the server's questions


def _openai_host(config: ModelConfig) -> bool:
    """Whether ``config`` reaches OpenAI's own API (which wants ``max_completion_tokens``)."""
    return cap_field(config.base_url, config.compat) == "max_completion_tokens"


class HttpGateway:
    """Streams responses from a provider or any OpenAI-compatible server."""

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self.codec = config.codec()
        timeout = httpx.Timeout(config.timeout, connect=config.connect_timeout)
        self.client = client or httpx.AsyncClient(timeout=timeout)
        self.requests = RequestEncoder(self.codec, _endpoint(config)[2])
        self._window: WindowFacts | None = None
        # Whether the server counts requests before they are sent: asked once, of a
        # Chat Completions server other than OpenAI's own API.
        local = config.protocol is ModelProtocol.OPENAI_CHAT
        self._counts: bool | None = None if local and not _openai_host(config) else False

    async def window_facts(self) -> WindowFacts:
        """The model's window: the flag, what the server says, the table, or the default;
        and the estimate's scale for its tokenizer.

        The server is asked once per gateway.
        """
        if self._window is None:
            config = self.config
            tokens, source = config.context_window, "flag"
            if tokens is None and config.protocol in (
                ModelProtocol.OPENAI_CHAT,
                ModelProtocol.OPENAI_RESPONSES,
            ):
                headers = _endpoint(config)[1]  # the key, for a server that wants it
                asked = {k: v for k, v in headers.items() if k not in _NOT_ASKED}
                tokens = await server_window(self.client, config.base_url, config.model, asked)
                source = "server"
            if tokens is None:
                tokens, source = table_window(config.protocol, config.model), "table"
            if tokens is None:
                tokens, source = DEFAULT_WINDOW, "default"
            scale = tokenizer_scale(config.protocol, config.model, _openai_host(config))
            self._window = WindowFacts(tokens, source, config.max_tokens, scale)
        return self._window

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The request's prompt tokens as the server's own tokenizer counts them, before it
        is sent: llama.cpp's server says (:func:`server_count`); ``None`` for any other.
        A server that cannot is not asked again."""
        config = self.config
        headers = {k: v for k, v in _endpoint(config)[1].items() if k not in _NOT_ASKED}
        if self._counts is None:
            self._counts = await is_llama_cpp(self.client, config.base_url, headers)
        if not self._counts:
            return None
        body = self.codec.build_request(
            config.model,
            request.transcript,
            request.snapshot,
            max_tokens=request.max_tokens or config.max_tokens,
        )
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        counted = await server_count(self.client, config.base_url, data, headers)
        self._counts = counted is not None
        return counted

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The model's reply, or :class:`ModelError`; neither carries the key or URL user-info.

        Providers echo what they were sent (a 401 body, an error event), so
        everything leaving the gateway is redacted before anyone stores or prints it.
        """
        redactor = self.config.redactor()
        try:
            reply = await self._respond(request)
        except ModelError as exc:
            raise ModelError(
                redactor.text(str(exc)), status=exc.status, overflow=exc.overflow
            ) from None
        return _redacted_reply(reply, redactor)

    async def _respond(self, request: ModelRequest) -> ModelReply:
        config = self.config
        url, headers, _ = _endpoint(config)
        body = self.requests.encode(
            f"{request.run_id}/{request.invocation_id}",
            request.transcript,
            request.snapshot,
            RequestSettings(config.model, request.max_tokens or config.max_tokens),
        )
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                stream = self.client.stream("POST", url, content=body, headers=headers)
                async with stream as response:
                    if response.status_code == 429 or response.status_code >= 500:
                        retry_after = _retry_after(response)
                        await response.aread()
                        failure = ModelError(
                            f"{url} answered {response.status_code}", status=response.status_code
                        )
                    elif response.status_code >= 400:
                        text = (await response.aread()).decode("utf-8", "replace")[:500]
                        raise ModelError(
                            f"{url} answered {response.status_code}: {text}",
                            status=response.status_code,
                            overflow=is_overflow(response.status_code, text),
                        )
                    else:
                        return await self._read(response, attempt)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                failure = ModelError(f"cannot reach {url}: {exc!r}")
            if attempt > config.max_retries:
                raise failure
            delay = min(config.backoff * 2 ** (attempt - 1), config.max_backoff)
            await asyncio.sleep(min(retry_after, config.max_backoff) if retry_after else delay)

    async def _read(self, response: httpx.Response, attempt: int) -> ModelReply:
        """Decode the stream; any failure from here on is final (the body started)."""
        decoder = self.codec.stream_decoder()
        protocol = self.config.protocol
        events: list[dict[str, Any]] = []
        ended = False
        try:
            async for text in sse_data(response):
                if text.strip() == "[DONE]":
                    ended = ended or protocol is ModelProtocol.OPENAI_CHAT
                    break
                event = json.loads(text)
                if not isinstance(event, dict):
                    raise ValueError(f"an event is not a JSON object: {text[:200]}")
                events.append(event)
                problem = stream_error(event)
                if problem is not None:
                    raise ModelError(
                        f"the model reported an error in its stream: {problem}",
                        overflow=is_overflow(None, problem),
                    )
                decoder.feed(event)
                ended = ended or ends_stream(protocol, event)
        except (httpx.HTTPError, ValueError) as exc:
            broke = f"the response stream broke after {len(events)} events: {exc!r}"
            raise ModelError(broke) from exc
        if not events:
            raise ModelError("the response stream held no events")
        if not ended:
            raise ModelError(
                f"the response stream ended after {len(events)} events, before the event "
                "that completes a response; nothing of it is used"
            )
        return ModelReply(decoder.result(), {"events": events}, attempt)

    async def aclose(self) -> None:
        """Close the HTTP client and its connections."""
        await self.client.aclose()


def _redacted_reply(reply: ModelReply, redactor: Redactor) -> ModelReply:
    message = Transcript((reply.response.message,)).to_json()["items"][0]
    decoded = reply.response
    record = [message, decoded.raw_finish, dict(decoded.usage), reply.raw]
    if not redactor.holds_secret(record):
        return reply
    message, raw_finish, usage, raw = redactor.value(record)
    item = Transcript.from_json({"items": [message]}).items[0]
    assert isinstance(item, AssistantMessage)
    return ModelReply(DecodedResponse(item, raw_finish, usage), raw, reply.attempts)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None
