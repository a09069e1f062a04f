"""A running `tavern-agent serve` and headless Chromium, for the extension host tests."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
]
PAGES = Path(__file__).parent / "ext_pages"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    url: str
    token: str
    data_dir: Path
    process: subprocess.Popen[str]

    @property
    def page_url(self) -> str:
        return f"{self.url}/pages/tools.html"

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ext/ws"


@contextmanager
def serve(data_dir: Path, *extra: str, call_timeout: float = 60) -> Iterator[Served]:
    """Start ``tavern-agent serve`` on a free port; stop it afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tavern_agent",
            "--data-dir",
            str(data_dir),
            "serve",
            "--port",
            str(port),
            "--pages",
            str(PAGES),
            "--call-timeout",
            str(call_timeout),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    banner = []
    token = None
    for line in process.stdout:
        banner.append(line)
        found = re.match(r"token: ([0-9a-f]+)", line)
        if found:
            token = found.group(1)
            break
    if token is None:
        process.kill()
        raise RuntimeError("serve did not start:\n" + "".join(banner))
    try:
        yield Served(f"http://127.0.0.1:{port}", token, data_dir, process)
    finally:
        process.terminate()
        process.wait(10)
        process.stdout.close()
