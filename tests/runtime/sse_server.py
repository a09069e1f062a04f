"""A tiny provider server on 127.0.0.1 that streams OpenAI Responses or Gemini SSE events.

Like :mod:`tests.runtime.openai_server`, it picks the turn to play from the
request's history (the number of assistant turns in it), so the answer follows
the conversation as a real server's would. ``events(turn, calls)`` gives the
events of one turn as ``(event name or None, payload)``; names become
``event:`` lines (the Responses API sends them, Gemini does not). ``crlf``
ends lines with CR LF, as Google's front end does. The stream ends by closing
the connection: neither protocol sends ``[DONE]``. Requests are kept in
``requests`` (path, lower-cased headers, JSON body).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.runtime.loopback import LoopbackServer

CallSpec = tuple[str, dict[str, Any]]
Turn = tuple[str, Sequence[CallSpec]]  # assistant text, calls
Event = tuple[str | None, dict[str, Any]]


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class SseServer(LoopbackServer):
    def __init__(
        self,
        path: str,
        turns: Sequence[Turn],
        turn_of: Callable[[dict[str, Any]], int],
        events: Callable[[int, Turn], list[Event]],
        *,
        crlf: bool = False,
    ) -> None:
        self.requests: list[Seen] = []
        newline = b"\r\n" if crlf else b"\n"
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append(Seen(self.path, headers, body))
                if self.path != path:
                    self.send_error(404)
                    return
                turn = turn_of(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for name, payload in events(turn, turns[turn]):
                    lines = [] if name is None else [b"event: " + name.encode()]
                    lines.append(b"data: " + json.dumps(payload).encode())
                    self.wfile.write(newline.join(lines) + newline + newline)
                    self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)


# ---------------------------------------------------------------- OpenAI Responses


def responses_turn(body: dict[str, Any]) -> int:
    """Assistant turns in a Responses ``input``: each starts a run of ``function_call`` items."""
    turns, before = 0, None
    for item in body["input"]:
        kind = item.get("type")
        if kind == "function_call" and before != "function_call":
            turns += 1
        before = kind
    return turns


def responses_events(turn: int, spec: Turn) -> list[Event]:
    """The Responses API's stream for one turn: a message item, then function_call items.

    Item ids (``msg_…``, ``fc_…``) differ from the ``call_id`` the call is
    answered by; arguments arrive as deltas and whole in ``.done``; the final
    ``response.completed`` repeats the output.
    """
    text, calls = spec
    rid = f"resp_{turn}"
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        usage = {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
        return {
            "id": rid,
            "object": "response",
            "created_at": 1764600000,
            "status": status,
            "model": "gpt-test",
            "output": output,
            "usage": usage if status == "completed" else None,
        }

    emit("response.created", response=response("in_progress", []))
    emit("response.in_progress", response=response("in_progress", []))
    output: list[dict[str, Any]] = []
    if text:
        mid = f"msg_{turn}"
        item = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant"}
        emit("response.output_item.added", output_index=0, item=item | {"content": []})
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {"item_id": mid, "output_index": 0, "content_index": 0}
        emit("response.content_part.added", **at, part=part)
        for start in range(0, len(text), 6):
            emit("response.output_text.delta", **at, delta=text[start : start + 6])
        emit("response.output_text.done", **at, text=text)
        emit("response.content_part.done", **at, part=part | {"text": text})
        done = item | {"status": "completed", "content": [part | {"text": text}]}
        emit("response.output_item.done", output_index=0, item=done)
        output.append(done)
    for n, (name, args) in enumerate(calls):
        index, arguments = len(output), json.dumps(args)
        fc = {
            "id": f"fc_{turn}_{n}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": f"call_{turn}_{n}",
            "name": name,
        }
        emit("response.output_item.added", output_index=index, item=fc)
        at = {"item_id": fc["id"], "output_index": index}
        for start in range(0, len(arguments), 5):
            emit("response.function_call_arguments.delta", **at, delta=arguments[start : start + 5])
        emit("response.function_call_arguments.done", **at, arguments=arguments)
        done = fc | {"status": "completed", "arguments": arguments}
        emit("response.output_item.done", output_index=index, item=done)
        output.append(done)
    emit("response.completed", response=response("completed", output))
    return events


# ---------------------------------------------------------------- Gemini


def gemini_turn(body: dict[str, Any]) -> int:
    return sum(1 for c in body["contents"] if c["role"] == "model")


SIGNATURE = "c2lnbmF0dXJlLW9mLXR1cm4tMA=="


def gemini_events(turn: int, spec: Turn) -> list[Event]:
    """``streamGenerateContent?alt=sse`` chunks: text in pieces, then the calls whole.

    Function calls carry no ``id`` (the Developer API leaves it out) and no
    ``args`` when there are none; the first call of turn 0 has a thought
    signature, which must come back in the next request.
    """
    text, calls = spec
    common = {"modelVersion": "gemini-test", "responseId": f"gem-resp-{turn}"}
    usage = {"promptTokenCount": 40, "candidatesTokenCount": 12, "totalTokenCount": 52}
    chunks: list[Event] = []
    for start in range(0, len(text), 8):
        content = {"role": "model", "parts": [{"text": text[start : start + 8]}]}
        chunks.append((None, {"candidates": [{"content": content, "index": 0}], **common}))
    parts: list[dict[str, Any]] = []
    for n, (name, args) in enumerate(calls):
        call: dict[str, Any] = {"name": name}
        if args:
            call["args"] = args
        part: dict[str, Any] = {"functionCall": call}
        if turn == 0 and n == 0:
            part["thoughtSignature"] = SIGNATURE
        parts.append(part)
    last = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    chunks.append((None, {"candidates": [last], "usageMetadata": usage, **common}))
    return chunks
