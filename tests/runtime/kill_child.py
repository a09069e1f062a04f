"""Child processes of the kill -9 harness: each starts a scripted chat run and drives it.

Usage: ``python -m tests.runtime.kill_child RUNS_JSON`` where the file lists
``[data_dir, chat, run_id]`` triples. This process imports the runtime once,
then forks one child per run and prints each child's pid on its own line (the
harness SIGKILLs them); it exits when every child has ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.providers.transcript import AssistantMessage, ToolResultMessage
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, Turn, call, calls
from tests.runtime.helpers import COMMIT, FINISH, profile, write

TEXT = "Seraphina steps into the ford."


def writer(request: ModelRequest) -> Turn:
    """A model that acts on what its results say: write, commit, finish, redoing what failed."""
    names: dict[str, str] = {}
    ok: set[str] = set()
    for item in request.transcript.items:
        if isinstance(item, AssistantMessage):
            names.update((c.call_id, c.name) for c in item.calls)
        elif isinstance(item, ToolResultMessage) and not item.result.is_error:
            ok.add(names.get(item.call_id, ""))
    if "workspace_write_file" not in ok:
        first = (
            ("chat_search", {"query": "river"})
            if request.round == 1
            else ("workspace_read_file", {"file_path": "output/main.md"})
        )
        return calls(first, write(TEXT))
    if "workspace_commit" not in ok:
        return calls(("dice_roll", {"formula": "1d20"}), COMMIT)
    return call(*FINISH)


def gateway(delay: float = 0.0) -> ScriptedGateway:
    return ScriptedGateway([writer] * 12, delay)


def main(data_dir: str, chat: str, run_id: str) -> None:
    spec = RunSpec(profile(), chat_file=Path(chat), seed=3)
    run = Run.start(Assembly(Path(data_dir)), spec, run_id)
    # SIGKILL keeps the page cache, so no fsync; the model's delay leaves the
    # harness time to land its kills mid-run (the loop itself is fast).
    engine = Engine(run, gateway(delay=0.05), fsync=False)
    asyncio.run(engine.start())


def fork_all(runs_json: str) -> None:
    runs = json.loads(Path(runs_json).read_text())
    children = []
    for data_dir, chat, run_id in runs:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                main(data_dir, chat, run_id)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        children.append(pid)
        print(pid, flush=True)
    for pid in children:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    fork_all(sys.argv[1])
