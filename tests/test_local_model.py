"""A real local model: SmolLM2-135M-Instruct on llama.cpp's ``llama-server``.

``make try-local`` builds the server and unpacks the model into ``.venv/llama/``
(tests/peers/llama_server.py); without them these tests are skipped, as in CI,
which does not build llama.cpp.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.gateway import HttpGateway, ModelConfig
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine
from tests.peers.llama_server import EXAMPLES, TRUNCATED, LlamaServer, example_command
from tests.peers.llama_server import missing as llama_missing
from tests.runtime.helpers import Harness, profile

pytestmark = [pytest.mark.local_model, pytest.mark.slow]


def _server(tmp: Path, window: int) -> Iterator[LlamaServer]:
    reason = llama_missing()
    if reason is not None:
        pytest.skip(reason)
    with LlamaServer(tmp / "llama-server.log", window) as server:
        yield server


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The server with the model's whole training window (8,192 tokens)."""
    yield from _server(tmp_path_factory.mktemp("roomy"), 8192)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The server as ``make try-local`` runs it: a 2,048-token window."""
    yield from _server(tmp_path_factory.mktemp("small"), 2048)


def test_the_answer_cap_reaches_llama_cpp(roomy: LlamaServer, tmp_path: Path) -> None:
    # llama.cpp reads max_tokens only: the same cap sent as max_completion_tokens
    # capped nothing, and a small model wrote until its window was full.
    config = ModelConfig(ModelProtocol.OPENAI_CHAT, "smollm2", roomy.base_url, max_tokens=5)
    h = Harness(tmp_path)
    run = h.start(profile(max_rounds=1))
    engine = Engine(run, HttpGateway(config), fsync=False)

    async def main() -> None:
        try:
            await engine.start()
        finally:
            await engine.gateway.aclose()

    asyncio.run(main())
    engine.close()
    recorded = json.loads((run.run_dir / "model-responses" / "round-001.json").read_text())
    assert 1 <= recorded["usage"]["completion_tokens"] <= 5


def test_the_example_runs_against_llama_cpp(small: LlamaServer, tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    proc = subprocess.run(
        example_command(data, chat, small.base_url), capture_output=True, text=True, timeout=1800
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    journal = next(data.glob("chats/*/runs/*/events.jsonl"))
    events = read_events(journal)
    ended = ("run_completed", "run_partial_success", "run_failed")
    assert events[-1]["type"] in ended, events[-1]
    requested = [e["payload"]["callId"] for e in events if e["type"] == "tool_call_requested"]
    stored = [e["payload"]["callId"] for e in events if e["type"] == "tool_result_stored"]
    assert stored == requested  # every call has its result
    # A prompt over the window is refused (the run says so) and never cut silently.
    assert TRUNCATED not in small.log_text()
