"""A running ``tavern-agent serve`` with the agent endpoint, and a scripted upstream model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ext_helpers import free_port

REPLY = "Seraphina raises her lantern: the ford is shallow past the willow."
# What the scripted upstream model does, one turn per request: it reads the chat,
# drafts the reply, commits it and finishes. Turn = assistant messages so far.
TURNS = [
    [
        ("chat_read_messages", {"floors": [{"floor": 0}, {"floor": 2}]}),
        ("workspace_write_file", {"file_path": "output/main.md", "content": REPLY}),
    ],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {})],
]
MESSAGES = [
    {"role": "system", "content": "Seraphina is a guardian of the forest of Eldoria."},
    {"role": "system", "content": "[World info: the river Ald floods in spring.]"},
    {"role": "user", "content": "We reach the river at dusk.", "name": "Rowan"},
    {"role": "assistant", "content": "The bridge is out, she says."},
    {"role": "user", "content": "Then we ford it."},
]


@dataclass
class Served:
    url: str  # the endpoint's base URL, ending in /v1
    key: str
    data_dir: Path
    process: subprocess.Popen[str]
    banner: list[str]


@contextmanager
def serve_endpoint(
    data_dir: Path,
    upstream: str,
    *extra: str,
    env: dict[str, str] | None = None,
    ext: str | None = None,
) -> Iterator[Served]:
    """``tavern-agent serve --model local --base-url UPSTREAM`` on free ports; stopped after.

    ``ext`` names a module of Python extension tools to load (``--ext``).
    """
    api_port = free_port()
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data_dir)]
    command += [] if ext is None else ["--ext", ext]
    command += ["serve"]
    command += ["--port", str(free_port()), "--api-port", str(api_port)]
    command += ["--model", "local", "--base-url", upstream, *extra]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    assert process.stdout is not None
    banner: list[str] = []
    key = None
    for line in process.stdout:
        banner.append(line)
        found = re.match(r"endpoint key: (\S+)", line)
        if found:
            key = found.group(1)
            break
    if key is None:
        process.kill()
        raise RuntimeError("serve did not start:\n" + "".join(banner))
    # Keep reading its output (a full pipe would stall the server); tests may look at it.
    drain = threading.Thread(target=banner.extend, args=(process.stdout,), daemon=True)
    drain.start()
    try:
        yield Served(f"http://127.0.0.1:{api_port}/v1", key, data_dir, process, banner)
    finally:
        process.terminate()
        process.wait(15)
        drain.join(5)
        process.stdout.close()
