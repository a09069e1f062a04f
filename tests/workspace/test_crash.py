"""A writer killed with SIGKILL mid-write leaves the old file or the new one, never a mix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = r"""
import asyncio, sys
from pathlib import Path
from tavern_agent.core.descriptors import Scene
from tests.workspace.conftest import Agent
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace

async def main() -> None:
    agent = Agent(Workspace(Path(sys.argv[1]), RootPolicy.for_scene(Scene.CHAT)))
    await agent("workspace_read_file", file_path="output/main.md")
    content = "N" * int(sys.argv[2])
    print("writing", flush=True)
    result = await agent("workspace_write_file", file_path="output/main.md", content=content)
    print(result.content, flush=True)

asyncio.run(main())
"""

SIZE = 150 * 1024 * 1024


@pytest.mark.slow
@pytest.mark.crash
def test_sigkill_mid_write_leaves_old_or_new(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    target = ws / "output" / "main.md"
    old = b"O" * (SIZE // 2)
    target.write_bytes(old)
    root = Path(__file__).resolve().parents[2]
    for pause in (0.0, 0.01, 0.03):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ws), str(SIZE)], stdout=subprocess.PIPE, cwd=root
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"writing"
        # Kill only once the temporary file exists: that is the middle of the write.
        deadline = time.monotonic() + 60
        while not [n for n in os.listdir(ws / "output") if n.endswith(".tmp")]:
            assert time.monotonic() < deadline and child.poll() is None, "the write never started"
            time.sleep(0.001)
        time.sleep(pause)
        child.send_signal(signal.SIGKILL)
        child.wait()
        leftovers = [n for n in os.listdir(ws / "output") if n.endswith(".tmp")]
        data = target.read_bytes()
        assert data == old, "the old file must survive a kill before the rename"
        assert leftovers, "the kill landed after the write finished; raise SIZE"
        for name in leftovers:
            os.unlink(ws / "output" / name)
