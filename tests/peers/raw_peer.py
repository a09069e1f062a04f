"""A hand-written stdio MCP server that misbehaves on purpose, one tool per fault.

It speaks newline-delimited JSON-RPC directly (no SDK), so it can send what a
well-behaved SDK server never would:

* ``server_error``: a JSON-RPC error -32000 with the message ``backend is down``;
* ``string_result``: a ``result`` that is a string, not an object;
* ``no_result``: a response with neither ``result`` nor ``error``;
* ``garbage``: a line of non-JSON on stdout, then a normal answer;
* ``flood``: 3 MB on stderr, then a normal answer;
* ``big``: a 5 MiB text result;
* ``ask``: an ``elicitation/create`` request to the client (a form asking for
  ``name`` and ``count``, with defaults), answered with what came back.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS = ["server_error", "string_result", "no_result", "garbage", "flood", "big", "ask"]
_pending: dict[int, Any] = {}  # our request id → the tools/call id waiting on it


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(req_id: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": req_id, "result": result})


def text(req_id: Any, value: str) -> None:
    answer(req_id, {"content": [{"type": "text", "text": value}]})


ASK_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Your name", "default": "Ada"},
        "count": {"type": "integer", "minimum": 1, "default": 3},
    },
    "required": ["name"],
}


def call(req_id: Any, name: str) -> None:
    if name == "server_error":
        error = {"code": -32000, "message": "backend is down"}
        send({"jsonrpc": "2.0", "id": req_id, "error": error})
    elif name == "string_result":
        answer(req_id, "just a string")
    elif name == "no_result":
        send({"jsonrpc": "2.0", "id": req_id})
    elif name == "garbage":
        sys.stdout.write("this is not JSON at all\n")
        text(req_id, "fine after garbage")
    elif name == "flood":
        line = "x" * 999 + "\n"
        for _ in range(3_000):
            sys.stderr.write(line)
        sys.stderr.flush()
        text(req_id, "flooded")
    elif name == "big":
        text(req_id, "0123456789abcdef" * (5 * 1024 * 1024 // 16))
    elif name == "ask":
        ask_id = 9000 + len(_pending)
        _pending[ask_id] = req_id
        params = {"mode": "form", "message": "Who is asking?", "requestedSchema": ASK_SCHEMA}
        send({"jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create", "params": params})
    else:
        send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32602, "message": "no tool"}})


def handle(message: dict[str, Any]) -> None:
    method = message.get("method")
    req_id = message.get("id")
    if method is None and req_id in _pending:  # the client's answer to our elicitation
        text(_pending.pop(req_id), json.dumps(message.get("result"), sort_keys=True))
    elif method == "initialize":
        answer(
            req_id,
            {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-peer", "version": "1.0.0"},
            },
        )
    elif method == "tools/list":
        schema = {"type": "object", "properties": {}}
        answer(req_id, {"tools": [{"name": t, "inputSchema": schema} for t in TOOLS]})
    elif method == "tools/call":
        call(req_id, message["params"]["name"])
    elif method == "ping":
        answer(req_id, {})
    elif req_id is not None and method is not None:
        send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": method}})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
