"""One ``serve`` per data dir: a second is refused by name; a crashed one blocks nothing."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import openai

from tests.endpoint.helpers import serve_endpoint
from tests.ext_helpers import free_port

UPSTREAM = "http://127.0.0.1:9/v1"  # never asked: no request reaches the endpoint's model


def serve(data: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "serve"]
    return [*command, "--port", str(free_port()), *extra]


def test_a_second_serve_on_the_data_dir_is_refused_naming_the_first(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_endpoint(data, UPSTREAM) as first:
        token = (data / "extensions" / "token").read_text()
        host_port = re.search(r"extension host: http://127.0.0.1:(\d+)", "".join(first.banner))
        assert host_port is not None
        api_port = first.url.split(":")[-1].removesuffix("/v1")
        second = subprocess.run(serve(data), capture_output=True, text=True, timeout=30)
        assert second.returncode == 2 and second.stdout == ""
        [line] = second.stderr.splitlines()
        assert f"pid {first.process.pid}," in line
        assert f"extension host port {host_port.group(1)}" in line
        assert f"endpoint port {api_port}" in line
        assert (data / "extensions" / "token").read_text() == token  # the first's, kept
        client = openai.OpenAI(base_url=first.url, api_key=first.key)
        assert [m.id for m in client.models.list()] == ["tavern-agent/default-writer"]


def test_a_killed_serve_does_not_block_the_next(tmp_path: Path) -> None:
    data = tmp_path / "data"
    crashed = subprocess.Popen(serve(data), stdout=subprocess.PIPE, text=True)
    assert crashed.stdout is not None
    for line in crashed.stdout:
        if line.startswith("token:"):
            break
    crashed.send_signal(signal.SIGKILL)
    crashed.wait(15)
    crashed.stdout.close()
    assert (data / "serve.lock").exists()  # left behind, but no longer held
    with serve_endpoint(data, UPSTREAM) as after:
        client = openai.OpenAI(base_url=after.url, api_key=after.key)
        assert [m.id for m in client.models.list()] == ["tavern-agent/default-writer"]
        refused = subprocess.run(serve(data), capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and f"pid {after.process.pid}," in refused.stderr
