"""An OpenAI-compatible model on 127.0.0.1 that acts on its results, as a real one would.

It writes ``output/main.md``, commits it and finishes, and redoes whatever
step last came back as an error (a result the codec sends as ``Error: …``).
So a run it drives can be interrupted anywhere, even between a call and its
result, and still be completed by ``--resume``.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.runtime.loopback import LoopbackServer
from tests.runtime.openai_server import CallSpec, stream


def next_calls(messages: list[dict[str, Any]], text: str) -> list[CallSpec]:
    names: dict[str, str] = {}
    ok: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
        if message["role"] == "tool" and not str(message.get("content")).startswith("Error:"):
            ok.add(names.get(message["tool_call_id"], ""))
    if "workspace_write_file" not in ok:  # read first: an earlier write may have landed
        first: CallSpec = ("workspace_read_file", {"file_path": "output/main.md"})
        return [first, ("workspace_write_file", {"file_path": "output/main.md", "content": text})]
    if "workspace_commit" not in ok:
        return [("workspace_commit", {"reason": "the reply"})]
    return [("workspace_finish", {})]


class WriterServer(LoopbackServer):
    def __init__(self, text: str) -> None:
        server = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                server.requests += 1
                messages = body["messages"]
                turn = sum(1 for m in messages if m["role"] == "assistant")
                chunks = stream(turn, next_calls(messages, text))
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
                data += b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"
