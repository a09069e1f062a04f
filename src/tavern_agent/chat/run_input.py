"""A chat run's frozen input and the chat object its tools use.

When a run starts, :func:`freeze` records how many floors the chat had (the
run sees floors ``0 … N-1``) and which world info entries were active;
:meth:`ChatRunInput.save` / :meth:`ChatRunInput.load` keep that in the run's
``input/`` folder so a resumed run sees the same. The chat itself is not
copied: tools read the chat file, limited to the first N floors.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tavern_agent import run_layout
from tavern_agent.chat.activation import (
    ActivatedEntry,
    ActivationSettings,
    ScanContext,
    ScanMessage,
    activate,
)
from tavern_agent.chat.cards import CharacterCard
from tavern_agent.chat.formats import ChatFile, ChatFormatError
from tavern_agent.chat.index_store import FILE, Prepared, load_or_build, read_chat
from tavern_agent.chat.macros import MacroValues
from tavern_agent.chat.mount import floor_files, sync_floors
from tavern_agent.chat.progress import BuildProgress, in_background, wait
from tavern_agent.chat.repository import (
    ChatCommit,
    ChatRepository,
    CommitReceipt,
    FileChatRepository,
    prefix_digest,
)
from tavern_agent.chat.search import ChatIndex, ChatScan, Searcher
from tavern_agent.chat.st_data import Participants
from tavern_agent.chat.world_books import WorldBook
from tavern_agent.fsutil import atomic_write

if TYPE_CHECKING:
    from tavern_agent.core.results import CommitRequested
    from tavern_agent.workspace.store import Workspace

SCHEMA_VERSION = 1
SCAN_FROM = 2_000  # floors; a smaller chat's index is built in a fraction of a second


@dataclass(frozen=True, slots=True)
class ChatRunInput:
    """What a chat run was started with; ``activation`` is ``None`` when unknown."""

    stable_chat_id: str
    title: str
    character: str
    user_name: str
    floor_count: int
    prefix_sha256: str
    activation: tuple[ActivatedEntry, ...] | None = None
    activation_source: str | None = None  # "computed" or "host"

    def to_json(self) -> dict[str, Any]:
        """The frozen input's JSON form, as ``input/chat.json`` stores it."""
        return {
            "schemaVersion": SCHEMA_VERSION,
            "stableChatId": self.stable_chat_id,
            "title": self.title,
            "character": self.character,
            "userName": self.user_name,
            "floorCount": self.floor_count,
            "prefixSha256": self.prefix_sha256,
            "activation": None
            if self.activation is None
            else [a.to_json() for a in self.activation],
            "activationSource": self.activation_source,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ChatRunInput:
        """The frozen input from its JSON form; raises ``ValueError`` for another schema version."""
        if obj.get("schemaVersion") != SCHEMA_VERSION:
            raise ValueError(f"unknown chat input schema {obj.get('schemaVersion')!r}")
        activation = obj.get("activation")
        return cls(
            stable_chat_id=str(obj["stableChatId"]),
            title=str(obj.get("title", "")),
            character=str(obj.get("character", "")),
            user_name=str(obj.get("userName", "")),
            floor_count=int(obj["floorCount"]),
            prefix_sha256=str(obj.get("prefixSha256", "")),
            activation=None
            if activation is None
            else tuple(ActivatedEntry.from_json(a, i) for i, a in enumerate(activation)),
            activation_source=obj.get("activationSource"),
        )

    def save(self, run_root: Path) -> None:
        """Write ``input/chat.json`` atomically (run internals, hidden from the model)."""
        data = json.dumps(self.to_json(), ensure_ascii=False, indent=1).encode("utf-8")
        atomic_write(run_root / run_layout.CHAT_INPUT_FILE, data)

    @classmethod
    def load(cls, run_root: Path) -> ChatRunInput | None:
        """The frozen input saved in ``run_root``, or ``None`` if it has none."""
        path = run_root / run_layout.CHAT_INPUT_FILE
        if not path.is_file():
            return None
        return cls.from_json(json.loads(path.read_bytes()))


def scan_messages(chat: ChatFile, count: int) -> list[ScanMessage]:
    """The floors activation scans: visible ones (hidden floors stay out of the prompt)."""
    return [ScanMessage(m.name, m.mes) for m in chat.messages[:count] if not m.hidden]


def card_texts(card: CharacterCard | None, persona: str = "") -> dict[str, str]:
    """The texts entries with ``matchCharacterDescription`` and its siblings scan."""
    data = card.data if card is not None else {}
    ext = data.get("extensions") if isinstance(data.get("extensions"), dict) else {}
    depth = ext.get("depth_prompt") if isinstance(ext, dict) else None
    fields = {
        "matchPersonaDescription": persona,
        "matchCharacterDescription": data.get("description"),
        "matchCharacterPersonality": data.get("personality"),
        "matchCharacterDepthPrompt": depth.get("prompt") if isinstance(depth, dict) else None,
        "matchScenario": data.get("scenario"),
        "matchCreatorNotes": data.get("creator_notes") or data.get("creatorcomment"),
    }
    return {k: v for k, v in fields.items() if isinstance(v, str) and v}


def scan_context(
    chat: ChatFile,
    *,
    character: str,
    card: CharacterCard | None = None,
    participants: Participants | None = None,
) -> ScanContext:
    """What activation needs besides the messages: names for macros, card texts, the
    chat's stored timed effects, and what character filters look at."""
    participants = participants or Participants()
    data = card.data if card is not None else {}

    def text(name: str) -> str:
        value = data.get(name)
        return value if isinstance(value, str) else ""

    macros = MacroValues(
        user=participants.user_name or chat.speaker(user=True) or "User",
        char=character,
        group=participants.group_members,
        persona=participants.persona,
        description=text("description"),
        personality=text("personality"),
        scenario=text("scenario"),
    )
    return ScanContext(
        macros=macros,
        character_file=participants.character_file,
        character_tags=participants.character_tags,
        texts=card_texts(card, participants.persona),
        timed=chat.metadata.get("timedWorldInfo"),
    )


def freeze(
    chat: ChatFile,
    stable_chat_id: str,
    *,
    title: str = "",
    books: Iterable[WorldBook] = (),
    settings: ActivationSettings | None = None,
    rng: random.Random | None = None,
    precomputed: Sequence[dict[str, Any]] | None = None,
    character: str | None = None,
    context: ScanContext | None = None,
) -> ChatRunInput:
    """The run input for ``chat`` as it is now.

    ``precomputed`` is the host's activation list, used as given; otherwise
    the entries of ``books`` are activated here. With neither, activation is
    unavailable to the run. ``character`` (the card's name) is who replies;
    default the chat's own character (:meth:`ChatFile.speaker`). ``context``
    defaults to :func:`scan_context` with the chat's names.
    """
    character = character or chat.speaker(user=False)
    count = len(chat.messages)
    activation: tuple[ActivatedEntry, ...] | None
    books = list(books)
    if precomputed is not None:
        activation = tuple(ActivatedEntry.from_json(a, i) for i, a in enumerate(precomputed))
        source: str | None = "host"
    elif books:
        context = context or scan_context(chat, character=character)
        messages = scan_messages(chat, count)
        activation = tuple(activate(books, messages, settings, rng, context))
        source = "computed"
    else:
        activation, source = None, None
    return ChatRunInput(
        stable_chat_id=stable_chat_id,
        title=title,
        character=character,
        user_name=chat.speaker(user=True),
        floor_count=count,
        prefix_sha256=prefix_digest(chat, count),
        activation=activation,
        activation_source=source,
    )


def file_stamp(path: Path) -> tuple[int, int, int]:
    """What tells that a chat file changed: inode (replaced), size and modification time."""
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(slots=True)
class ChatRun:
    """The chat side of one run, as chat tools see it through ``CallContext.chat``.

    ``allow_commit`` is false for child agents. The loaded chat and its search
    index are cached and reloaded only when the file changes. With ``index_dir``
    (the chat workspace's mount folder) the search index is also saved there and
    reused by later runs on the same chat (:mod:`tavern_agent.chat.index_store`).

    The index is built on a worker thread: :meth:`index_in_background` starts
    that when the run starts, and :meth:`index` waits for it (through
    :func:`tavern_agent.chat.progress.wait`, which shows a bar in the CLI);
    :meth:`searcher` does not wait: until the index is ready it scans the chat.
    Calls on tool threads may overlap, so the caches change under a lock.
    """

    repository: ChatRepository
    input: ChatRunInput
    run_id: str = ""
    profile_id: str = ""
    allow_commit: bool = True
    index_dir: Path | None = None
    _cache: tuple[Any, ChatFile, Prepared | None] | None = field(default=None, repr=False)
    _job: tuple[Any, Future[ChatIndex], BuildProgress] | None = field(default=None, repr=False)
    _scan: tuple[Any, ChatScan] | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _on_disk: tuple[Any, Path | None] | None = field(default=None, repr=False)
    _disk_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _stamp(self) -> Any:
        path = getattr(self.repository, "path", None)
        return file_stamp(path) if isinstance(path, Path) else None

    def chat(self) -> ChatFile:
        """The chat file now (``FileNotFoundError`` if it is gone)."""
        return self._read()[1]

    def _read(self) -> tuple[Any, ChatFile, Prepared | None]:
        stamp = self._stamp()
        with self._lock:
            if self._cache is None or stamp is None or self._cache[0] != stamp:
                if self.index_dir is not None and isinstance(self.repository, FileChatRepository):
                    chat, digests, saved = read_chat(self.repository.path, self.index_dir)
                    self._cache = (stamp, chat, (digests, saved))
                else:
                    self._cache = (stamp, self.repository.load(), None)
            return self._cache

    def prime(self, chat: ChatFile, stamp: Any) -> None:
        """Use ``chat``, read when the file's :func:`file_stamp` was ``stamp``, not a new read.

        Take the stamp before reading: a file changed after it then has another
        stamp and is read again.
        """
        with self._lock:
            if self._cache is None:
                self._cache = (stamp, chat, None)

    def index_in_background(self) -> None:
        """Start reading the chat and building (or loading) its index on a worker thread."""
        self._index_job()

    def settle(self) -> None:
        """Wait for a background index build to end (the run is over).

        Its thread is a daemon; a process that exits while it writes the saved
        index would leave a temporary file behind in the chat's mount.
        """
        with self._lock:
            job = self._job
        if job is not None:
            with contextlib.suppress(Exception):  # a failed build only means no saved index
                job[1].result()

    def index(self) -> ChatIndex:
        """The search index of the chat now, waiting for a build under way."""
        future, progress = self._index_job()
        return wait(future, progress)

    def index_ready(self) -> bool:
        """Whether the index of the chat now is built (a search would not scan)."""
        stamp = self._stamp()
        with self._lock:
            job = self._job
        return job is not None and job[0] == stamp and job[1].done()

    def searcher(self) -> Searcher:
        """The search index if it is ready, else a scan of the chat in memory (no wait).

        Waited for instead, being quicker than a scan: a saved index (loaded, and
        updated for the floors that changed) and the index of a chat of fewer
        than :data:`SCAN_FROM` floors.
        """
        future, progress = self._index_job()
        if future.done():
            with self._lock:
                self._scan = None  # one made while the build was finishing
            return wait(future, progress)
        stamp, chat, _ = self._read()
        saved = self.index_dir is not None and (self.index_dir / FILE).is_file()
        if saved or len(chat.messages) < SCAN_FROM:
            return wait(future, progress)
        with self._lock:
            scan = self._scan
        if scan is None or scan[0] != stamp:
            # Outside the lock: the build takes it to hand over its result.
            scan = (stamp, ChatScan(chat.messages, progress))
            with self._lock:
                self._scan = scan
        return scan[1]

    def _index_job(self) -> tuple[Future[ChatIndex], BuildProgress]:
        stamp = self._stamp()
        with self._lock:
            job = self._job
            if job is not None and stamp is not None and job[0] == stamp:
                return job[1], job[2]
            progress = BuildProgress()
            future = in_background(lambda: self._build(progress))
            self._job = (stamp, future, progress)
            return future, progress

    def _build(self, progress: BuildProgress) -> ChatIndex:
        stamp, chat, prepared = self._read()
        index = load_or_build(chat, self.index_dir, prepared=prepared, progress=progress)
        with self._lock:  # the saved copy and digests are not needed any more
            if self._cache is not None and self._cache[0] == stamp:
                self._cache = (stamp, chat, None)
            if self._scan is not None and self._scan[0] == stamp:
                self._scan = None  # nor is the scan's copy of the text: the index answers
        return index

    @property
    def floor_count(self) -> int:
        """How many messages the chat had when the run froze it."""
        return self.input.floor_count

    def floor_files(self, index: int) -> dict[str, bytes] | None:
        """``chat/floors/NNNNNN/``'s files, from the chat file now (as ``chat_read_messages``).

        ``None`` when the chat no longer has the floor or cannot be read now.
        """
        try:
            messages = self.chat().messages
        except (OSError, ChatFormatError):
            return None
        return floor_files(index, messages[index]) if index < len(messages) else None

    def floors_on_disk(self) -> Path | None:
        """The chat workspace's floor copy for the shell, brought up to date with the chat now.

        The first call of a run (and the first after the chat file changed)
        syncs the copy (:func:`tavern_agent.chat.mount.sync_floors`): on a new
        chat of many floors that writes two files per floor, with a progress
        bar in the CLI. ``None`` without a mount folder or when that fails.
        """
        if self.index_dir is None:
            return None
        stamp = self._stamp()
        with self._disk_lock:
            if self._on_disk is None or stamp is None or self._on_disk[0] != stamp:
                self._on_disk = (stamp, self._sync_disk(self.index_dir))
            return self._on_disk[1]

    def floors_on_disk_ready(self) -> bool:
        """Whether the floor copy is in step with the chat now (one ``stat``, no lock wait)."""
        if self.index_dir is None:
            return True
        done, stamp = self._on_disk, self._stamp()
        return done is not None and stamp is not None and done[0] == stamp

    def _sync_disk(self, mount_dir: Path) -> Path | None:
        try:
            chat = self.chat()
        except (OSError, ChatFormatError):
            return None
        progress = BuildProgress(
            tool="workspace_shell", step="copying the chat floors", total=len(chat.messages)
        )

        def sync() -> None:
            sync_floors(chat, mount_dir, lambda done: setattr(progress, "done", done))

        try:
            wait(in_background(sync), progress)
        except OSError:
            return None
        return mount_dir / "floors"

    def apply_commit(self, text: str, path: str, mode: str, reason: str) -> CommitReceipt:
        """Apply a commit-requested effect to the chat (the chat adapter's job)."""
        commit = ChatCommit(
            self.run_id,
            self.profile_id,
            path,
            text,
            mode,
            reason,
            name=self.input.character or None,
            floor_count=self.input.floor_count,
            prefix_sha256=self.input.prefix_sha256,
        )
        receipt = self.repository.apply_commit(commit)
        with self._lock:
            self._cache = self._job = self._scan = None
        return receipt

    def apply_effect(self, effect: CommitRequested, workspace: Workspace) -> CommitReceipt:
        """The chat adapter: publish the committed file's current text to the chat."""
        data = workspace.read_bytes(effect.path)
        text = data.decode("utf-8", errors="replace")
        return self.apply_commit(text, effect.path, effect.mode, effect.reason or "")
