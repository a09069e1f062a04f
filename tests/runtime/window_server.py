"""An OpenAI-compatible server on 127.0.0.1 whose model has a context window, as a real one does.

Each request's prompt is counted with o200k_base (the messages' texts and
calls, four tokens of framing per message, the tool definitions as JSON). Over
``window`` the server answers 400 with OpenAI's own ``context_length_exceeded``
error, as the API does; otherwise it streams the next turn of its script and
reports the count as ``usage.prompt_tokens``. The turn it plays follows from
the last assistant call id in the history (``call_<turn>_<i>``), so a request
whose older rounds were left out still gets the next turn. ``refuse_at`` makes
the first request for that turn refused as too long whatever its size (a
server whose window is smaller than the run thinks); ``full_at`` cuts that
turn's answer off where the window is full (``length``, prompt + answer =
window). Every request body and count is kept.

``per_token`` makes its model's tokenizer count that many tokens per o200k
token (a local model's smaller vocabulary makes more of the same text);
``tokenize`` makes it llama.cpp's (``GET /props``) with ``POST /apply-template`` (the request
rendered as one prompt, here its JSON text) and ``POST /tokenize`` (that
prompt's tokens), so a client can have a request counted before sending it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

import bpe_openai

from tests.runtime.loopback import LoopbackServer
from tests.runtime.openai_server import CallSpec, stream
from tests.runtime.sse_server import gemini_events

ENCODING = bpe_openai.get_encoding("o200k_base")
_TURN = re.compile(r"call_(\d+)_\d+")


_ID = re.compile(r"_[0-9a-f]{6,}")


def _tokens(text: str) -> int:
    """o200k_base tokens of ``text``, its random ids (``inv_…``, ``call_…``) counted as one
    word: two runs of one script (a whole one and a resumed one) count alike."""
    return len(ENCODING.encode(_ID.sub("_id", text)))


def count_tokens(body: dict[str, Any]) -> int:
    """The request's prompt tokens, counted as the server's model would."""
    total = 0
    for message in body["messages"]:
        total += 4 + _tokens(message.get("content") or "")
        for tc in message.get("tool_calls") or ():
            fn = tc["function"]
            total += 8 + _tokens(fn["name"] + fn["arguments"])
    if body.get("tools"):
        total += len(ENCODING.encode(json.dumps(body["tools"])))
    return total


def turn_of(body: dict[str, Any]) -> int:
    """The turn to play: one after the newest call in the history."""
    for message in reversed(body["messages"]):
        for tc in message.get("tool_calls") or ():
            found = _TURN.fullmatch(tc["id"])
            if found:
                return int(found.group(1)) + 1
    return 0


class WindowServer(LoopbackServer):
    def __init__(
        self,
        window: int,
        script: Callable[[int], Sequence[CallSpec]],
        *,
        refuse_at: int | None = None,
        full_at: int | None = None,
        per_token: float = 1.0,
        tokenize: bool = False,
    ) -> None:
        self.window = window
        self.per_token = per_token
        self.tokenize = tokenize
        self.tokenized: list[int] = []  # the counts /tokenize answered
        self.paths: list[str] = []  # every request's path
        self.script = script
        self.refuse_at = refuse_at
        self.full_at = full_at
        self.bodies: list[dict[str, Any]] = []
        self.counts: list[int] = []
        self.refused: list[int] = []  # the counts of the requests refused
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # no window in /props or /models: the run's flag says it
                server.paths.append(self.path)
                if self.path == "/props" and server.tokenize:  # llama.cpp's, so it can count
                    self.answer(200, {"default_generation_settings": {}})
                    return
                self.send_error(404)

            def answer(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                server.paths.append(self.path)
                if self.path in ("/apply-template", "/tokenize") and server.tokenize:
                    if self.path == "/apply-template":
                        self.answer(200, {"prompt": json.dumps(body)})
                        return
                    tokens = server.count(json.loads(body["content"]))
                    server.tokenized.append(tokens)
                    self.answer(200, {"tokens": list(range(tokens))})
                    return
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                tokens = server.count(body)
                turn = turn_of(body)
                server.bodies.append(body)
                server.counts.append(tokens)
                refuse = turn == server.refuse_at
                if refuse:
                    server.refuse_at = None
                if tokens > server.window or refuse:
                    server.refused.append(tokens)
                    error = {
                        "message": f"This model's maximum context length is {server.window} "
                        f"tokens. However, your messages resulted in {tokens} tokens.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                    self.answer(400, {"error": error})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                chunks = stream(turn, server.script(turn))
                chunks[-1]["usage"] = {"prompt_tokens": tokens, "completion_tokens": 20}
                if turn == server.full_at:  # the window fills during the answer
                    server.full_at = None
                    chunks[-2]["choices"][0]["finish_reason"] = "length"
                    chunks[-1]["usage"]["completion_tokens"] = server.window - tokens
                for chunk in chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        super().__init__(Handler)

    def count(self, body: dict[str, Any]) -> int:
        """The request's prompt tokens as this server's model counts them."""
        return round(count_tokens(body) * self.per_token)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"


GEMINI_PATH = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
_SAID = re.compile(r"turn (\d+)")


def gemini_count(body: dict[str, Any]) -> int:
    """A Gemini request's prompt tokens (o200k_base standing in for Gemini's tokenizer)."""
    total = 0
    system = body.get("systemInstruction") or {}
    for content in [system, *body["contents"]]:
        total += 4
        for part in content.get("parts") or ():
            text = part.get("text") or json.dumps(
                part.get("functionCall") or part.get("functionResponse") or {}
            )
            total += len(ENCODING.encode(text))
    if body.get("tools"):
        total += len(ENCODING.encode(json.dumps(body["tools"])))
    return total


def gemini_turn_of(body: dict[str, Any]) -> int:
    """One after the turn the newest model content says it was ("turn N")."""
    for content in reversed(body["contents"]):
        for part in content.get("parts") or ():
            said = _SAID.fullmatch(part.get("text") or "")
            if content["role"] == "model" and said:
                return int(said.group(1)) + 1
    return 0


class GeminiWindowServer(LoopbackServer):
    """:class:`WindowServer` in Gemini's shape: the token-limit error, ``usageMetadata``."""

    def __init__(
        self, window: int, script: Callable[[int], Sequence[CallSpec]], *, refuse_at: int
    ) -> None:
        self.window = window
        self.refuse_at: int | None = refuse_at
        self.counts: list[int] = []
        self.refused: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                tokens, turn = gemini_count(body), gemini_turn_of(body)
                server.counts.append(tokens)
                refuse = turn == server.refuse_at
                if tokens > server.window or refuse:
                    server.refuse_at = None
                    server.refused.append(tokens)
                    message = (
                        f"The input token count ({tokens}) exceeds the maximum number of "
                        f"tokens allowed ({server.window})."
                    )
                    error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
                    data = json.dumps({"error": error}).encode()
                    self.send_response(400)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                events = gemini_events(turn, (f"turn {turn}", list(script(turn))))
                events[-1][1]["usageMetadata"] = {
                    "promptTokenCount": tokens,
                    "candidatesTokenCount": 20,
                }
                for _, payload in events:
                    self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\r\n\r\n")
                self.close_connection = True

        super().__init__(Handler)
