"""A tiny OpenAI-compatible chat completions server on 127.0.0.1 that streams tool calls.

It answers ``POST /v1/chat/completions`` with server-sent events. Which turn it
plays is the number of assistant messages in the request's history, so the
answer follows the conversation, as a real server's would. ``fail_first``
makes the first N requests answer 503 (to exercise retries); ``pause_once_at``
holds the first request for one turn unanswered (to kill the client mid-run); ``delay``
seconds pass before each answer (a model that thinks); ``gather`` holds the first
requests (for the first turn) until that many are held at once, then answers them all
(``gathered`` is set) and holds none after. Every request body is kept in ``bodies``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.runtime.loopback import LoopbackServer

CallSpec = tuple[str, dict[str, Any]]


class OpenAIServer(LoopbackServer):
    def __init__(
        self,
        turns: Sequence[Sequence[CallSpec]],
        *,
        fail_first: int = 0,
        hang: bool = False,
        pause_once_at: int | None = None,
        delay: float = 0.0,
        gather: int = 0,
        gather_limit: float = 600,
    ) -> None:
        self.turns = list(turns)
        self.delay = delay
        self.hang = hang
        # The first request for turn `pause_once_at` sets `paused` and gets no answer
        # (until the server closes): a test kills its client meanwhile.
        self.pause_once_at = pause_once_at
        self.paused = threading.Event()
        self.release = threading.Event()
        self.fail_left = fail_first
        self.gather, self.gather_limit = gather, gather_limit
        self.gathered = threading.Event()
        self._opened = threading.Event()  # gathered, or the server closes
        self._held = 0
        self._lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                server.bodies.append(body)
                server.auth.append(self.headers.get("authorization"))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                if server.fail_left > 0:
                    server.fail_left -= 1
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.send_header("retry-after", "0")
                    self.end_headers()
                    return
                if server.hang:  # a model that never answers
                    server.release.wait(30)
                    return
                turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
                if turn == 0:
                    server.hold_until_gathered()
                if turn == server.pause_once_at and not server.paused.is_set():
                    server.paused.set()
                    server.release.wait(60)
                    self.close_connection = True
                    return
                if server.delay:
                    time.sleep(server.delay)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in stream(turn, server.turns[turn]):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        super().__init__(Handler)

    def hold_until_gathered(self) -> None:
        """Hold a first request until ``gather`` are held (none once they were, or after
        ``gather_limit`` seconds: the test then finds ``gathered`` unset)."""
        with self._lock:
            if self._held >= self.gather:
                return
            self._held += 1
            if self._held == self.gather:
                self.gathered.set()
                self._opened.set()
        self._opened.wait(self.gather_limit)
        with self._lock:
            self._held = self.gather  # held no longer, whether gathered or not

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._opened.set()
        super().__exit__(*exc)


def stream(turn: int, calls: Sequence[CallSpec]) -> list[dict[str, Any]]:
    """Chunks as llama.cpp / vLLM send them: id and name first, arguments in fragments."""
    base = {"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "model": "local"}
    chunks: list[dict[str, Any]] = [
        base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
    ]
    for index, (name, args) in enumerate(calls):
        text = json.dumps(args)
        head = {"index": index, "id": f"call_{turn}_{index}", "type": "function"}
        head["function"] = {"name": name, "arguments": ""}
        chunks.append(base | {"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for start in range(0, len(text), 7):
            piece = {"index": index, "function": {"arguments": text[start : start + 7]}}
            chunks.append(base | {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append(base | {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    return chunks
