"""The endpoint key: made on first start and shown once, or taken from the environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai

from tests.endpoint.helpers import MESSAGES, REPLY, TURNS, serve_endpoint
from tests.runtime.openai_server import OpenAIServer


def test_the_key_is_shown_on_first_start_only_and_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with OpenAIServer(TURNS) as upstream:
        with serve_endpoint(data, upstream.base_url) as first:
            key = first.key
        with serve_endpoint(data, upstream.base_url) as second:
            assert key not in "".join(second.banner)
            assert second.key == "in"  # "endpoint key: in <data-dir>/endpoint/api-key"
            client = openai.OpenAI(base_url=second.url, api_key=key)
            assert [m.id for m in client.models.list()] == ["tavern-agent/default-writer"]


def test_a_key_from_the_environment_replaces_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"MY_ENDPOINT_KEY": "a-long-key-of-my-own"}
    with (
        OpenAIServer(TURNS) as upstream,
        serve_endpoint(
            data, upstream.base_url, "--endpoint-key-env", "MY_ENDPOINT_KEY", env=env
        ) as served,
    ):
        assert served.key == "from"  # "endpoint key: from $MY_ENDPOINT_KEY"
        client = openai.OpenAI(base_url=served.url, api_key="a-long-key-of-my-own")
        reply = client.chat.completions.create(
            model="tavern-agent/default-writer", messages=MESSAGES
        )
        assert reply.choices[0].message.content == REPLY
    assert not (data / "endpoint" / "api-key").exists()


def test_an_empty_or_placeholder_key_in_the_environment_is_refused_at_start(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(tmp_path), "serve"]
    command += ["--api-port", "0", "--port", "0", "--replay", str(tmp_path)]
    for value in ("", "undefined"):
        proc = subprocess.run(
            [*command, "--endpoint-key-env", "EMPTY_KEY"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"EMPTY_KEY": value, "PATH": "/usr/bin:/bin"},
        )
        assert proc.returncode == 2 and "$EMPTY_KEY holds no usable key" in proc.stderr
