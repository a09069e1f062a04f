"""A Run: a scene (chat or session), a Profile, a frozen input, and its invocations.

On disk (chat runs: ``<data>/chats/<chat-ws>/runs/<run-id>/``, which is also
the run's workspace; session runs: ``<data>/sessions/<id>/runs/<run-id>/``,
beside the shared session workspace)::

    run.json                      what the run is: scene, profile, chat file, model, invocations
    input/chat.json               frozen chat input (floor count, activated world info)
    input/card.json               the character card fields the prompt used
    input/persist.json            the persist/ base this run started from
    input/invocations/<inv>/      tool_snapshot.json (write once), prompt.json
    events.jsonl                  the journal
    checkpoints/state.json        live state for resume
    model-responses/round-NNN.json, tool-args/<inv>/round-NNN-call_<hex>.json

All of these are internal: the model's tools cannot see them.

A :class:`Run` is this record, read or written, with its live invocations; it
reaches the process's tool sources only through its
:class:`~tavern_agent.runtime.run_tools.RunTools`. :meth:`Run.start` and
:meth:`Run.open` read and write files: async code calls :meth:`Run.astart`
and :meth:`Run.aopen`, which run them on a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat.cards import CharacterCard
from tavern_agent.chat.formats import ChatFile, ChatFormatError
from tavern_agent.chat.macros import MacroValues, substitute
from tavern_agent.chat.repository import FileChatRepository
from tavern_agent.chat.run_input import ChatRun, ChatRunInput
from tavern_agent.chat.world_books import WorldBook
from tavern_agent.core import json_input
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.fsutil import atomic_write, write_once
from tavern_agent.providers.transcript import Transcript, UserMessage
from tavern_agent.runtime.briefs import directory
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.persist import PersistBase, PersistStore
from tavern_agent.runtime.profiles import ProfileSource
from tavern_agent.runtime.prompt import CARD_FIELDS, chat_material, system_prompt
from tavern_agent.runtime.run_tools import RunTools
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot
from tavern_agent.workspace.layout import DataRoot, chat_workspace_id
from tavern_agent.workspace.store import Workspace

RUN_FILE = run_layout.RUN_FILE
SCHEMA_VERSION = 1


class RunNotFound(LookupError):
    """No run folder, or no run of that id."""


class RunDamaged(RunNotFound):
    """A run folder whose files cannot be read (the message names the folder or file)."""


def load_record(run_dir: Path) -> dict[str, Any]:
    """A run's ``run.json``; :class:`RunNotFound` / :class:`RunDamaged` say why not."""
    path = run_dir / RUN_FILE
    try:
        record = json_input.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunNotFound(f"{run_dir} is not a run folder (no {RUN_FILE})") from None
    except (OSError, json_input.JsonInputError) as exc:
        raise RunDamaged(f"{path}: {json_input.describe(exc)}") from None
    if not isinstance(record, dict) or not all(
        isinstance(record.get(key), str) for key in ("runId", "scene")
    ):
        raise RunDamaged(f"{path}: not a run record (it needs runId and scene)")
    return record


def new_run_id() -> str:
    """A new run id: the time it was made, and a random part."""
    return f"run_{datetime.now(UTC):%Y%m%dT%H%M%S}_{secrets.token_hex(3)}"


@dataclass
class RunSpec:
    """What a new run is made from."""

    profile: Profile
    protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT
    chat_file: Path | None = None
    books: tuple[WorldBook, ...] = ()
    card: CharacterCard | None = None
    session: str | None = None
    seed: int | None = None
    task: str = ""
    model: dict[str, Any] = field(default_factory=dict)  # how the model is reached, for records
    chat: ChatSource | None = None  # the whole chat source (e.g. from --st-data); wins


def _card_fields(spec: RunSpec, chat: ChatRunInput | None = None) -> dict[str, Any] | None:
    """The card's prompt fields (the chat source's card wins, as its chat does); in a chat
    run with ``{{char}}``, ``{{user}}`` and the other macros substituted, as SillyTavern
    shows them to the model."""
    card = spec.chat.card if spec.chat is not None else spec.card
    if card is None:
        return None
    data = card.data
    fields = {k: data[k] for k in CARD_FIELDS if data.get(k)}
    if chat is not None:
        texts = {k: v if isinstance(v, str) else "" for k, v in fields.items()}
        values = MacroValues(
            user=chat.user_name or "User",
            char=chat.character or card.name,
            description=texts.get("description", ""),
            personality=texts.get("personality", ""),
            scenario=texts.get("scenario", ""),
        )
        fields = {k: substitute(v, values) if isinstance(v, str) else v for k, v in fields.items()}
    return {"name": card.name, **fields}


def _write_json(path: Path, data: Any, *, once: bool = False, durable: bool = True) -> None:
    # Compact: json's C encoder only runs without indent, and run records are
    # rewritten with every new invocation (jq shows them nicely).
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    (write_once if once else atomic_write)(path, text, durable=durable)


@dataclass
class Run:
    """A run's identity, workspace, chat side and invocations (see the module docstring)."""

    id: str
    run_dir: Path
    data: DataRoot
    tools: RunTools  # the live side: snapshots and gates of its invocations
    record: dict[str, Any]
    profile: Profile
    workspace: Workspace
    chat: ChatRun | None
    invocations: list[Invocation] = field(default_factory=list)
    persist_base: PersistBase | None = None

    @property
    def scene(self) -> Scene:
        """Chat or session."""
        return Scene(self.record["scene"])

    @property
    def protocol(self) -> ModelProtocol:
        """The model protocol the run's tools are named and shaped for."""
        return ModelProtocol(self.record["protocol"])

    @property
    def foreground(self) -> bool:
        """A chat run whose reply the user waits for (it must commit before it finishes)."""
        return self.scene is Scene.CHAT and self.profile.run.presentation == "foreground"

    @property
    def chat_workspace(self) -> Path | None:
        """The chat's own folder (its ``persist/``), for a chat run."""
        if self.chat is None:
            return None
        return self.data.path / "chats" / chat_workspace_id(self.chat.input.stable_chat_id)

    # ------------------------------------------------------------ creation

    @classmethod
    def start(cls, assembly: Assembly, spec: RunSpec, run_id: str | None = None) -> Run:
        """Freeze the input, build the root invocation's snapshot, write the run record.

        A run that cannot be written whole (a full disk) leaves no folder behind.
        """
        run_id = run_id or new_run_id()
        undo: list[Callable[[], None]] = []
        try:
            return cls._create(assembly, spec, run_id, undo)
        except (OSError, ChatFormatError):
            for step in reversed(undo):
                step()
            raise

    @classmethod
    async def astart(cls, assembly: Assembly, spec: RunSpec, run_id: str | None = None) -> Run:
        """:meth:`start` for async code: it reads and writes files, so it runs on a thread."""
        return await asyncio.to_thread(cls.start, assembly, spec, run_id)

    @classmethod
    def _create(
        cls, assembly: Assembly, spec: RunSpec, run_id: str, undo: list[Callable[[], None]]
    ) -> Run:
        """The run; ``undo`` gathers what takes back each thing made, in order."""
        profile = spec.profile
        data = assembly.data
        chat_run: ChatRun | None = None
        chat: ChatFile | None = None
        if spec.chat_file is not None:

            def root(stable: str) -> Path:
                folder = data.chat_run_root(stable, run_id)  # its workspace is made below
                undo.append(partial(shutil.rmtree, folder, ignore_errors=True))
                return folder

            source = spec.chat or ChatSource(spec.chat_file, spec.books, spec.card, spec.seed)
            chat_run, chat, run_dir = assembly.chat_run(
                source,
                root,
                run_id=run_id,
                profile_id=profile.id,
            )
            # Its index is built on a daemon thread that writes into the chat's
            # folder: undone before the folders go (undo runs in reverse).
            undo.append(chat_run.settle)
            chat.refuse_unreadable_header(spec.chat_file)
            ws = assembly.workspace(run_dir, Scene.CHAT, profile, chat_run)
            scene = Scene.CHAT
        else:
            ws = data.session(spec.session or "default", profile)
            run_dir = ws.root / "runs" / run_id
            scene = Scene.SESSION
            undo.append(partial(shutil.rmtree, run_dir, ignore_errors=True))
        run_dir.mkdir(parents=True, exist_ok=True)
        record = {
            "schemaVersion": SCHEMA_VERSION,
            "runId": run_id,
            "scene": scene.value,
            "protocol": spec.protocol.value,
            "profile": profile.to_json(),
            "chatFile": None if spec.chat_file is None else str(spec.chat_file.resolve()),
            "session": spec.session if scene is Scene.SESSION else None,
            "workspace": str(ws.root),
            "seed": spec.seed,
            "model": spec.model,
            "createdAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "invocations": [],
        }
        if chat is not None and chat.skipped:  # lines SillyTavern skips, named once
            record["skippedChatLines"] = [s.line for s in chat.skipped]
        tools = RunTools(assembly, scene, spec.protocol)
        run = cls(run_id, run_dir, data, tools, record, profile, ws, chat_run)
        card = _card_fields(spec, chat_run.input if chat_run is not None else None)
        _write_json(run_dir / run_layout.CARD_FILE, card)
        if chat_run is not None:
            store = PersistStore(run.chat_workspace or run_dir)
            run.persist_base = store.checkout(ws.root / "persist")
            _write_json(run_dir / run_layout.PERSIST_FILE, run.persist_base.to_json())
        snapshot = tools.snapshot(profile)
        snapshot.save(run_dir / run_layout.snapshot_file(snapshot.id))
        system = system_prompt(profile, snapshot, chat_run.input.character if chat_run else "")
        listing = directory(ProfileSource(data.path), profile, snapshot)
        if listing:
            system = f"{system}\n\n{listing}"
        if chat_run is not None:
            user = chat_material(
                chat=chat,
                floor_count=chat_run.floor_count,
                card=card,
                activation=chat_run.input.activation,
                skills=data.skills(profile),
                history_chars=profile.prompt.history_chars,
                history_messages=profile.prompt.initial_chat_history_messages,
                snapshot=snapshot,
                task=spec.task,
            )
        else:
            user = spec.task or "Continue the work in this session."
        run.add_invocation(snapshot.id, snapshot, system, user)
        return run

    def add_invocation(
        self,
        invocation_id: str,
        snapshot: ToolSnapshot,
        system: str,
        user: str,
        *,
        kind: str = "root",
        revision_of: str | None = None,
        profile: Profile | None = None,
        parent_id: str | None = None,
        task_id: str | None = None,
    ) -> Invocation:
        """A new invocation; ``profile`` for another agent's (a child's or a handoff's).

        A delegated child is not listed in ``run.json`` and has no prompt
        file: the journal's ``task_started`` and ``invocation_started`` events
        record it, prompt included, and the journal's fold rebuilds it
        (:meth:`~tavern_agent.runtime.agents.AgentTasks.fold`).
        """
        if kind != "child":
            _write_json(
                self.run_dir / run_layout.prompt_file(invocation_id),
                {"system": system, "user": user},
                once=True,
            )
        inv = Invocation(
            invocation_id,
            snapshot,
            self.make_gate(invocation_id, snapshot, profile, child=kind == "child"),
            Transcript((UserMessage(user),), system),
            kind,
            revision_of,
            profile,
            parent_id,
            task_id,
        )
        self.invocations.append(inv)
        if kind == "child":  # journaled with its task; run.json lists what resume rebuilds
            return inv
        # An invocation's record never changes once made: append it, don't rebuild all.
        self.record.setdefault("invocations", []).append(inv.record())
        self.save_record()
        return inv

    def revise(self, instruction: str) -> Invocation:
        """An output revision: a new invocation that reuses the root snapshot."""
        root = self.invocations[0]
        prompt = json.loads(
            (self.run_dir / run_layout.prompt_file(root.id)).read_text(encoding="utf-8")
        )
        user = f"{prompt['user']}\n\n## Revision\n{instruction}"
        inv_id = f"inv_{secrets.token_hex(6)}"
        return self.add_invocation(
            inv_id, root.snapshot, prompt["system"], user, kind="revision", revision_of=root.id
        )

    def make_gate(
        self,
        invocation_id: str,
        snapshot: ToolSnapshot,
        profile: Profile | None = None,
        *,
        child: bool = False,
    ) -> ToolRequestGate:
        """A gate; another agent's ``profile`` sees the same workspace through its own roots."""
        seed = self.record.get("seed")
        workspace, chat = self.workspace, self.chat
        if profile is not None:
            workspace = self.data.view(self.workspace, self.scene, profile)
        if child and chat is not None:
            chat = dataclasses.replace(chat, allow_commit=False, profile_id=snapshot.profile_id)
        return self.tools.gate(
            snapshot,
            invocation_id=invocation_id,
            run_id=self.id,
            rng=random.Random(seed),
            workspace=workspace,
            chat=chat,
            results_root=self.workspace.root,
        )

    def save_record(self, *, durable: bool = True) -> None:
        """Write ``run.json`` again (it lists the invocations made so far)."""
        _write_json(self.run_dir / RUN_FILE, self.record, durable=durable)

    # ------------------------------------------------------------ reopening

    @classmethod
    def open(cls, assembly: Assembly, run_dir: Path) -> Run:
        """A run as recorded; each invocation holds its first prompt, the journal the rest.

        Raises :class:`RunNotFound` (:class:`RunDamaged` for files that cannot be read).
        """
        try:
            return cls._open(assembly, run_dir)
        except (RunNotFound, ProfileError):
            raise
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            why = json_input.describe(exc) if not isinstance(exc, KeyError) else f"no {exc}"
            raise RunDamaged(f"{run_dir}: the run's files cannot be read: {why}") from None

    @classmethod
    async def aopen(cls, assembly: Assembly, run_dir: Path) -> Run:
        """:meth:`open` for async code: it reads the run's files, so it runs on a thread."""
        return await asyncio.to_thread(cls.open, assembly, run_dir)

    @classmethod
    def _open(cls, assembly: Assembly, run_dir: Path) -> Run:
        record = load_record(run_dir)
        profile = Profile.from_json(record["profile"], f"{run_dir / RUN_FILE}")
        data = assembly.data
        scene = Scene(record["scene"])
        run_id = record["runId"]
        chat_run: ChatRun | None = None
        if scene is Scene.CHAT:
            run_input = ChatRunInput.load(run_dir)
            if run_input is None or not record.get("chatFile"):
                raise RunNotFound(f"{run_dir}: the chat input is missing")
            repo = FileChatRepository(Path(record["chatFile"]))
            chat_run = ChatRun(
                repo,
                run_input,
                run_id=run_id,
                profile_id=profile.id,
                index_dir=data.chat_mount_dir(run_input.stable_chat_id),
            )
            ws = data.chat_run(run_input.stable_chat_id, run_id, profile, floors=chat_run)
        else:
            ws = data.session(record.get("session") or "default", profile)
        tools = RunTools(assembly, scene, ModelProtocol(record["protocol"]))
        run = cls(run_id, run_dir, data, tools, record, profile, ws, chat_run)
        if (run_dir / run_layout.PERSIST_FILE).exists():
            base = json.loads((run_dir / run_layout.PERSIST_FILE).read_text(encoding="utf-8"))
            run.persist_base = PersistBase(base.get("version"), base["sha"])
        for entry in record["invocations"]:
            kind = entry.get("kind", "root")
            try:
                snapshot = ToolSnapshot.load(
                    run_dir / run_layout.snapshot_file(entry["snapshotId"])
                )
                prompt = json.loads(
                    (run_dir / run_layout.prompt_file(entry["id"])).read_text(encoding="utf-8")
                )
            except (OSError, ValueError):
                if kind == "child":  # listed by older versions; the journal rebuilds children
                    continue
                raise
            own = entry.get("profile")
            agent = None if own is None else Profile.from_json(own, f"{run_dir / RUN_FILE}")
            run.invocations.append(
                Invocation(
                    entry["id"],
                    snapshot,
                    run.make_gate(entry["id"], snapshot, agent, child=kind == "child"),
                    Transcript((UserMessage(prompt["user"]),), prompt["system"]),
                    kind,
                    entry.get("revisionOf"),
                    agent,
                    entry.get("parentInvocationId"),
                    entry.get("taskId"),
                )
            )
        return run


def find_run(data: DataRoot, run_id: str) -> Path:
    """The folder of a run by id, ``last`` for the newest, or a path to a run folder."""
    if run_id == "last":
        found = all_runs(data)
        if not found:
            raise RunNotFound(f"no runs under {data.path}")
        return found[-1]
    given = Path(run_id)
    if (given / RUN_FILE).is_file():
        return given
    for pattern in (f"chats/*/runs/{run_id}", f"sessions/*/runs/{run_id}"):
        for path in data.path.glob(pattern):
            if (path / RUN_FILE).is_file():
                return path
    raise RunNotFound(f"no run {run_id!r} under {data.path}")


def all_runs(data: DataRoot) -> list[Path]:
    """The folders of every run under ``data``, oldest first."""
    found = [
        p.parent
        for pattern in ("chats/*/runs/*/run.json", "sessions/*/runs/*/run.json")
        for p in data.path.glob(pattern)
    ]
    return sorted(found, key=lambda p: p.name)
