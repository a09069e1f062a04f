"""A chat run on a real data root, driven by a scripted model."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly
from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.world_books import WorldBook
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import Script, ScriptedGateway
from tavern_agent.workspace.layout import DataRoot
from tests.chat.helpers import write_chat

WRITER_TOOLS = (
    "builtin:chat.search",
    "builtin:chat.read_messages",
    "builtin:worldinfo.read_activated",
    "builtin:workspace.list_files",
    "builtin:workspace.read_file",
    "builtin:workspace.write_file",
    "builtin:workspace.apply_patch",
    "builtin:workspace.search_files",
    "builtin:dice.roll",
    "builtin:workspace.commit",
    "builtin:workspace.finish",
)
TEXTS = [
    "We reach the gate of Eldoria at dusk.",
    "Seraphina lifts her lantern. 'The bridge is out,' she says.",
    "Then we ford the river. Roll for it!",
]


def profile(**limits: Any) -> Profile:
    data: dict[str, Any] = {"id": "writer", "name": "Writer", "tools": {"allow": WRITER_TOOLS}}
    if limits:
        data["limits"] = {
            {"max_rounds": "maxRounds", "max_calls": "maxCallsPerInvocation"}[k]: v
            for k, v in limits.items()
        }
    return Profile.from_json(data)


class Harness:
    """A data root, a chat file and a catalog; starts and resumes runs."""

    def __init__(self, tmp: Path, texts: Sequence[str] = TEXTS) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.data = DataRoot(tmp / "data")
        self.chat_path = write_chat(tmp / "chat.jsonl", texts)
        self.assembly = Assembly(self.data)

    def start(
        self,
        prof: Profile | None = None,
        books: Sequence[WorldBook] = (),
        run_id: str | None = None,
    ) -> Run:
        spec = RunSpec(prof or profile(), chat_file=self.chat_path, books=tuple(books), seed=7)
        return Run.start(self.assembly, spec, run_id)

    def engine(self, run: Run, gateway: ModelGateway | Script) -> Engine:
        gw = gateway if hasattr(gateway, "respond") else ScriptedGateway(gateway)  # type: ignore[arg-type]
        return Engine(run, gw, fsync=False)  # type: ignore[arg-type]

    def drive(self, script: Script, prof: Profile | None = None) -> tuple[Run, RunResult]:
        run = self.start(prof)
        engine = self.engine(run, script)
        try:
            result = asyncio.run(engine.start())
        finally:
            engine.close()
        return run, result

    def chat_messages(self) -> list[dict[str, Any]]:
        return [m.raw for m in parse_chat(self.chat_path.read_bytes()).messages]


def kinds(run_dir: Path) -> list[str]:
    """The event types of the journal in ``run_dir``, in order."""
    return [e["type"] for e in read_events(run_dir / run_layout.JOURNAL_FILE)]


def payloads(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """The payloads of the journal's ``kind`` events in ``run_dir``, in order."""
    return [
        e["payload"] for e in read_events(run_dir / run_layout.JOURNAL_FILE) if e["type"] == kind
    ]


def events(run: Run) -> list[dict[str, Any]]:
    return read_events(run.run_dir / "events.jsonl")


def types(run: Run) -> list[str]:
    return [e["type"] for e in events(run)]


def results(run: Run) -> list[dict[str, Any]]:
    """The stored results, in order, as journaled."""
    return [e["payload"]["result"] for e in events(run) if e["type"] == "tool_result_stored"]


def write(text: str, path: str = "output/main.md") -> tuple[str, dict[str, Any]]:
    return ("workspace_write_file", {"file_path": path, "content": text})


COMMIT = ("workspace_commit", {"reason": "the reply"})
FINISH = ("workspace_finish", {})


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_run_args(tmp: Path, name: str = "chat") -> list[str]:
    """`run` arguments replaying the shipped example on a copy of its chat, `tmp/<name>.jsonl`."""
    chat = tmp / f"{name}.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    return [
        "run",
        str(chat),
        "--character",
        str(EXAMPLES / "seraphina-card.json"),
        "--world",
        str(EXAMPLES / "eldoria-world.json"),
        "--profile",
        str(EXAMPLES / "profile.json"),
        "--replay",
        str(EXAMPLES / "recorded-run"),
        "--seed",
        "7",
    ]
