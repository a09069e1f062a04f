"""A chat completion request becomes an agent run.

The request's user and assistant messages become a SillyTavern chat file
(floors 0, 1, … in order) written into the run's own folder, with the system
messages inside the chat (an author's note, a ``/sys`` line) kept at their
place as narrator lines; the system messages around the chat (the character
card, world info, example dialogue as the frontend assembled them) become the
run's task text, the frontend's context. The run is started
and driven exactly as ``tavern-agent run`` does it (``Run.start`` on the serve
process's one :class:`~tavern_agent.assembly.Assembly`, then an
:class:`~tavern_agent.runtime.loop.Engine`), so every request is a journaled
run that ``tavern-agent runs list`` shows. The reply is the committed message.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly
from tavern_agent.chat.dates import send_date
from tavern_agent.chat.formats import encode_line
from tavern_agent.config import profiles_dir, resolve_profile
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import BUILTIN_PROFILE_IDS, Profile, ProfileError
from tavern_agent.endpoint.protocol import (
    MODEL_PREFIX,
    FrontendChat,
    Names,
    RequestError,
    add_usage,
)
from tavern_agent.fsutil import atomic_write
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.endings import RunResult
from tavern_agent.runtime.journal import JournalRecord
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec, new_run_id
from tavern_agent.runtime.summary import committed_message
from tavern_agent.workspace.layout import chat_workspace_id

DEFAULT_PROFILE = "default-writer"
CONTEXT_HEADING = "## The chat frontend's context (character, world info, notes)"
AFTER_HEADING = "## The chat frontend's notes after the chat"


def profile_ids(data_dir: Path) -> list[str]:
    """The profiles a request may name: the built-ins and those saved in the data root."""
    saved = {p.stem for p in profiles_dir(data_dir).glob("*.json")}
    return sorted(saved | set(BUILTIN_PROFILE_IDS))


def profile_for(model: str | None, data_dir: Path) -> Profile:
    """The profile ``model`` names (``tavern-agent/<id>`` or ``<id>``); 404 for an unknown one."""
    wanted = (model or MODEL_PREFIX + DEFAULT_PROFILE).removeprefix(MODEL_PREFIX)
    known = profile_ids(data_dir)
    if wanted not in known:  # never a path: only the listed ids
        listed = ", ".join(MODEL_PREFIX + i for i in known)
        raise RequestError(
            404,
            f"The model '{model}' does not exist. Use one of: {listed} (GET /v1/models).",
            code="model_not_found",
        )
    try:
        return resolve_profile(wanted, data_dir)
    except (ProfileError, OSError, ValueError) as exc:  # a saved profile that does not load
        raise RequestError(500, str(exc), kind="server_error", code="profile_invalid") from None


def chat_bytes(chat: FrontendChat, integrity: str) -> bytes:
    """The request's chat as a SillyTavern chat file; its notes as SillyTavern's narrator lines."""
    date = send_date()
    header = {
        "user_name": chat.user,
        "character_name": chat.character,
        "create_date": str(date),
        "chat_metadata": {"integrity": integrity},
    }
    lines = [encode_line(header)]
    for floor in chat.floors:
        is_user = floor.kind == "user"
        record = {"name": floor.name, "is_user": is_user, "send_date": date, "mes": floor.text}
        if floor.kind == "note":
            record |= {"is_system": False, "extra": {"type": "narrator"}}
        else:
            record |= {"extra": {}}
        lines.append(encode_line(record))
    return b"\n".join(lines) + b"\n"


def task_text(chat: FrontendChat) -> str:
    """The run's task: the frontend's system messages as context, then the job."""
    parts = []
    if chat.context:
        parts.append(CONTEXT_HEADING + "\n" + "\n\n".join(chat.context))
    if chat.after:
        parts.append(AFTER_HEADING + "\n" + "\n\n".join(chat.after))
    if not parts:
        return ""
    return "\n\n".join(parts) + "\n\nWrite the next reply."


@dataclass
class RunProgress:
    """Collects what a request's answer needs from the journal as the run goes."""

    on_line: Callable[[str], None] | None = None
    usage: dict[str, int] = field(default_factory=dict)

    def __call__(self, record: JournalRecord) -> None:
        """Take one journal record: add a response's token
        usage, and report each ended call as a progress line."""
        event = record.event
        if isinstance(event, ev.ModelResponseStored):
            add_usage(self.usage, event.usage)
        elif isinstance(event, ev.ToolCallEnded) and self.on_line is not None:
            self.on_line(progress_line(event))


def progress_line(outcome: ev.ToolCallEnded) -> str:
    """One tool call's name and outcome on one line."""
    name = outcome.name or "?"
    message = " ".join(outcome.message.split())
    if len(message) > 160:
        message = message[:159] + "…"
    if isinstance(outcome, ev.ToolCallFailed):
        return f"✗ {name}: {outcome.error_code}: {message}"
    return f"✓ {name}: {message}"


@dataclass(frozen=True)
class RunOutcome:
    """What a request's answer needs of its ended run (plain values: it crosses processes)."""

    run_id: str
    status: str
    error_code: str | None = None
    message: str = ""  # why it ended without a reply, when it did
    reply: str | None = None  # the committed message, as the chat file holds it
    usage: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, engine: Engine, result: RunResult, usage: dict[str, int]) -> RunOutcome:
        """The outcome of ``engine``'s ended run."""
        reply = committed_message(engine.run, result)
        return cls(result.run_id, result.status, result.error_code, result.message, reply, usage)


OnLine = Callable[[str], None]


class RunService(Protocol):
    """Starts a request's run; where the run's CPU is spent is the service's business."""

    @property
    def data_dir(self) -> Path:
        """The data folder the runs live in."""

    @property
    def names(self) -> Names:
        """``serve --user-name`` / ``--character-name``."""

    async def begin(
        self, chat: FrontendChat, profile: Profile, on_line: OnLine | None, run_id: str
    ) -> asyncio.Task[RunOutcome]:
        """Start the run; the task ends with its outcome, and cancelling it cancels the run
        (the task ends once the run has journaled that). Raises ``OSError`` or
        ``ValueError`` when the run cannot start."""


@dataclass
class AgentService:
    """Runs requests on one assembly and one upstream gateway, in this process."""

    assembly: Assembly
    gateway: ModelGateway
    model_record: dict[str, Any]
    protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT
    fsync: bool = True
    names: Names = field(default_factory=Names)  # serve --user-name / --character-name

    @property
    def data_dir(self) -> Path:
        """The data folder the service's runs live in."""
        return self.assembly.data.path

    async def start(
        self,
        chat: FrontendChat,
        profile: Profile,
        progress: RunProgress,
        run_id: str | None = None,
    ) -> Engine:
        """Write the request's chat into a new run folder, start the run; return its engine."""
        run_id = run_id or new_run_id()
        integrity = f"endpoint-{run_id}-{secrets.token_hex(4)}"
        run_root = self.data_dir / "chats" / chat_workspace_id(integrity) / "runs" / run_id
        chat_file = run_root / run_layout.FRONTEND_CHAT_FILE
        # No fsync (it was a tenth of the endpoint's own cost): Run.start freezes what
        # the run reads durably, and a commit rewrites the whole file durably.
        atomic_write(chat_file, chat_bytes(chat, integrity), durable=False)
        spec = RunSpec(
            profile,
            self.protocol,
            chat_file=chat_file,
            task=task_text(chat),
            model=self.model_record,
        )
        run = await Run.astart(self.assembly, spec, run_id)
        return Engine(run, self.gateway, listeners=(progress,), fsync=self.fsync)

    async def begin(
        self, chat: FrontendChat, profile: Profile, on_line: OnLine | None, run_id: str
    ) -> asyncio.Task[RunOutcome]:
        """Start the run on this process's event loop (see :class:`RunService`)."""
        progress = RunProgress(on_line)
        engine = await self.start(chat, profile, progress, run_id)
        task = asyncio.create_task(drive(engine, progress))
        task.add_done_callback(lambda _: engine.close())  # even if cancelled before it began
        return task


async def drive(engine: Engine, progress: RunProgress) -> RunOutcome:
    """Run ``engine`` to its end (a cancel is journaled by the loop) and read its reply."""
    result = await engine.start()
    return RunOutcome.of(engine, result, progress.usage)
