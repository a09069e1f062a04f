"""No secret is written down or printed, even when the provider echoes it back.

A fake OpenAI-compatible provider on 127.0.0.1 repeats the credentials it
received: in a 401 body, in an error event inside a 200 stream, and in the
text of a normal answer. The key must appear in no file under the data root
and in no output of ``run``, ``runs list`` and ``runs show``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.loopback import LoopbackServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "sk-test-Zq8uX4fP2mWb9LrT"
URL_PASSWORD = "pw-Hn3kV7sQ1cYd"


def _credentials(header: str | None) -> str:
    """What the client sent, decoded: a bearer token or Basic ``user:password``."""
    if not header:
        return "(none)"
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic":
        return base64.b64decode(value).decode()
    return value


class EchoProvider(LoopbackServer):
    """Answers each request by ``mode``, always repeating the credentials it got."""

    def __init__(self, modes: list[str]) -> None:
        self.modes = modes
        self.seen: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                secret = _credentials(self.headers.get("authorization"))
                server.seen.append(secret)
                mode = server.modes[min(len(server.seen), len(server.modes)) - 1]
                if mode == "401":
                    body = json.dumps({"error": {"message": f"Incorrect API key: {secret}"}})
                    self._send(401, "application/json", body.encode())
                    return
                if mode == "stream_error":
                    event = {"error": {"code": "invalid_key", "message": f"bad key {secret}"}}
                    events = [event]
                else:  # a normal answer whose text repeats the key
                    base = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
                    delta = {"role": "assistant", "content": f"My key is {secret}."}
                    events = [
                        base | {"choices": [{"index": 0, "delta": delta}]},
                        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    ]
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                self._send(200, "text/event-stream", data + b"data: [DONE]\n\n")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"TA_SECRET_KEY": KEY}
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def assert_nowhere(secret: str, data: Path, outputs: list[str]) -> None:
    for path in data.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    for text in outputs:
        assert secret not in text


@pytest.mark.parametrize(
    "modes",
    [["401"], ["stream_error"], ["text", "stream_error"]],
    ids=["401-body", "in-stream-error", "answer-text"],
)
@pytest.mark.parametrize("in_url", [False, True], ids=["key", "url-userinfo"])
def test_an_echoed_secret_is_stored_and_printed_nowhere(
    tmp_path: Path, modes: list[str], in_url: bool
) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    secret = URL_PASSWORD if in_url else KEY
    with EchoProvider(modes) as server:
        base_url = f"{server.origin}/v1"
        if in_url:
            base_url = base_url.replace("http://", f"http://reader:{URL_PASSWORD}@")
        args = ["run", str(chat), "--model", "m", "--base-url", base_url]
        args += ["--api-key-env", "TA_NO_SUCH_KEY" if in_url else "TA_SECRET_KEY"]
        plain = cli(data, *args)
        as_json = cli(data, *args, "--json")
        assert all(secret in seen for seen in server.seen)  # the provider did echo it
    assert plain.returncode == 1 and as_json.returncode == 1
    outcome = json.loads(as_json.stdout)
    assert outcome["status"] == "failed" and outcome["errorCode"] == "model.request_failed"
    assert "[redacted]" in outcome["message"]
    listed = cli(data, "runs", "list")
    shown = [cli(data, "runs", "show", outcome["runId"], *extra) for extra in ([], ["--json"])]
    outputs = [p.stdout + p.stderr for p in (plain, as_json, listed, *shown)]
    assert_nowhere(secret, data, outputs)
    if in_url:  # the record keeps where the model was, not how to log in there
        record = json.loads(next(data.glob("chats/*/runs/*/run.json")).read_text())
        assert record["model"]["baseUrl"].startswith("http://[redacted]@127.0.0.1:")


def test_resuming_a_run_whose_url_held_credentials_asks_for_the_url(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    with EchoProvider(["401"]) as server:
        base_url = f"{server.origin}/v1".replace("http://", f"http://reader:{URL_PASSWORD}@")
        first = cli(data, "run", str(chat), "--model", "m", "--base-url", base_url, "--json")
    run_dir = Path(json.loads(first.stdout)["runDir"])
    # Cut the journal back to before the failure, as if the process had been killed.
    journal = run_dir / "events.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    journal.write_text("".join(lines[:-1]), encoding="utf-8")
    again = cli(data, "run", "--resume", run_dir.name)
    assert again.returncode == 2
    assert "--base-url" in again.stderr and URL_PASSWORD not in again.stderr
