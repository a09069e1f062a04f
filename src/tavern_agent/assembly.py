"""One assembly: how every entry point builds what an invocation needs.

``tavern-agent call``, ``run``, ``run --resume``, delegated children, tests
and benchmarks all get their tool catalog, snapshots, gates, workspaces and
chat runs from an :class:`Assembly`, so a tool source or a rule added here
reaches every one of them. Nothing else constructs a ``ToolCatalog``, builds a
snapshot or a ``ToolRequestGate``.

::

    async with await Assembly.open(data_dir, approver=policy_approver("decline")) as asm:
        profile = asm.everything(Scene.CHAT)
        snapshot = asm.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT)
        gate = asm.gate(snapshot, workspace=asm.workspace(root, Scene.CHAT, profile))
        executed = await gate.handle(call)

The three tool sources: the built-ins; the MCP servers registered under the
data root (their cached discovery and permissions); extension tools, which
are the Python functions on the extension registry (``--ext MODULE`` imports
modules that register them) plus the tools of the pages connected to a
``tavern-agent serve`` host on the same data root, found through the host's
files without extra flags. A source that is missing is simply not there: its
tools are not offered, and a call to one recorded earlier gets an
"unavailable" result.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tavern_agent.chat.cards import CharacterCard
from tavern_agent.chat.formats import ChatFile
from tavern_agent.chat.mount import prepare_run_mount
from tavern_agent.chat.repository import FileChatRepository
from tavern_agent.chat.run_input import ChatRun, file_stamp, freeze, scan_context
from tavern_agent.chat.st_data import Participants, StSelection
from tavern_agent.chat.world_books import WorldBook
from tavern_agent.core.closing import AsyncClosing
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId, ToolKind
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.extensions.python import ExtensionRegistry, registry
from tavern_agent.extensions.remote import CombinedExtensionTools, HostFiles, RemoteExtensionTools
from tavern_agent.mcp import has_registrations
from tavern_agent.mcp.approval import Approver
from tavern_agent.tools.builtin import builtin_registry
from tavern_agent.tools.builtin.registry import BuiltinRegistry
from tavern_agent.tools.catalog import ExtensionTools, McpCatalog, ToolCatalog
from tavern_agent.tools.dispatch import Dispatcher
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.results import DirectoryResultFiles
from tavern_agent.tools.snapshot import ToolSnapshot, bind
from tavern_agent.workspace.layout import DataRoot
from tavern_agent.workspace.store import Workspace

if TYPE_CHECKING:
    from tavern_agent.chat.activation import ActivationSettings

log = logging.getLogger(__name__)
Closer = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ChatSource:
    """The chat a run or a call works on, as the user gave it.

    ``books`` are the world info files to activate; a ``card``'s embedded
    lorebook is activated too unless ``card_book`` is false (a SillyTavern
    folder uses the imported copy in ``worlds/`` instead). ``seed`` makes
    activation's random choices repeatable; ``settings`` are the world info
    settings (defaults if ``None``). ``participants`` is who the chat is
    between (persona, card file stem and tags, group members): what a
    SillyTavern folder knows (:func:`from_st_data`).
    """

    chat_file: Path
    books: tuple[WorldBook, ...] = ()
    card: CharacterCard | None = None
    seed: int | None = None
    settings: ActivationSettings | None = None
    card_book: bool = True
    participants: Participants = field(default_factory=Participants)

    @classmethod
    def from_st_data(cls, selection: StSelection, *, seed: int | None = None) -> ChatSource:
        """The chat a ``--st-data`` selection names, with its books, settings and persona."""
        return cls(
            selection.chat_file,
            selection.books,
            selection.card,
            seed,
            selection.settings,
            card_book=False,
            participants=selection.participants,
        )


class Assembly(AsyncClosing):
    """The tool sources of one data root, and the one way to build invocations on them."""

    def __init__(
        self,
        data: DataRoot | Path,
        *,
        builtins: BuiltinRegistry | None = None,
        mcp: McpCatalog | None = None,
        extensions: ExtensionTools | None = None,
        closers: tuple[Closer, ...] = (),
    ) -> None:
        self.data = data if isinstance(data, DataRoot) else DataRoot(data)
        self.catalog = ToolCatalog(builtins or builtin_registry(), mcp=mcp, extensions=extensions)
        self._closers = closers

    # ------------------------------------------------------------ sources

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        *,
        approver: Approver | None = None,
        pages: bool = True,
        python_tools: ExtensionRegistry | None = None,
    ) -> Assembly:
        """Every tool source of ``data_dir``, connected (call :meth:`aclose` when done).

        ``approver`` answers MCP tools whose permission is ``ask`` (default:
        decline at once, so nothing waits). ``pages=False`` leaves out a
        running ``serve`` host's pages. ``python_tools`` defaults to the
        process-wide extension registry that ``--ext`` modules register on.
        """
        closers: list[Closer] = []
        mcp: McpCatalog | None = None
        if has_registrations(data_dir):
            from tavern_agent.mcp.manager import McpManager  # the SDK is slow to import

            manager = McpManager(data_dir, approver=approver)
            mcp = manager
            closers.append(manager.aclose)
        remote = None
        if pages and HostFiles(data_dir).read() is not None:
            remote = await RemoteExtensionTools.from_data_dir(data_dir)
        local = python_tools if python_tools is not None else registry
        if remote is not None:
            closers.append(remote.aclose)
            extensions = CombinedExtensionTools(local, remote)
        else:
            extensions = CombinedExtensionTools(local)
        return cls(data_dir, mcp=mcp, extensions=extensions, closers=tuple(closers))

    async def aclose(self) -> None:
        """Disconnect the sources :meth:`open` connected (stdio MCP servers are stopped)."""
        closers, self._closers = self._closers, ()
        for close in reversed(closers):
            try:
                await close()
            except Exception as exc:  # closing one source must not keep the others open
                log.warning("closing a tool source failed: %s", exc)

    def origin(self, tool_id: ToolId) -> str | None:
        """Who registered an extension tool (a module or a page), for listings."""
        source = self.catalog.extensions
        if tool_id.kind is not ToolKind.EXTENSION or source is None:
            return None
        origin = getattr(source, "origin", None)
        return origin(tool_id) if callable(origin) else None

    def source_of(self, tool_id: ToolId) -> str:
        """Where a tool comes from, for the journal: built-in, an MCP server, a module or a page."""
        if tool_id.kind is ToolKind.BUILTIN:
            return "builtin"
        if tool_id.kind is ToolKind.MCP:
            return f"mcp server {tool_id.source}"
        return self.origin(tool_id) or "extension"

    # ------------------------------------------------------------ invocations

    def everything(self, scene: Scene) -> Profile:
        """A profile allowing every tool the catalog has for ``scene``."""
        return Profile.allowing([d.tool_id for d in self.catalog.descriptors(scene)])

    def snapshot(
        self,
        profile: Profile,
        scene: Scene,
        protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT,
        snapshot_id: str | None = None,
        *,
        child: bool = False,
    ) -> ToolSnapshot:
        """Freeze a new invocation's tool set; ``child``: a delegated child agent's."""
        prepared = self.catalog.prepare(profile, scene, child=child)
        return ToolSnapshot(
            id=snapshot_id or f"inv_{secrets.token_hex(6)}",
            protocol=protocol,
            scene=scene,
            profile_id=profile.id,
            bindings=bind(prepared.descriptors, profile, protocol),
            max_calls_per_invocation=profile.limits.max_calls_per_invocation,
            inline_char_limit=profile.limits.external_result_inline_char_limit,
            diagnostics=prepared.diagnostics,
            shell_limits=profile.limits.shell,
        )

    def gate(
        self,
        snapshot: ToolSnapshot,
        *,
        invocation_id: str | None = None,
        run_id: str = "",
        workspace: Workspace | None = None,
        chat: ChatRun | None = None,
        rng: random.Random | None = None,
        results_root: Path | None = None,
    ) -> ToolRequestGate:
        """The gate of one invocation (its own budget, read state and result files).

        ``invocation_id`` defaults to the snapshot's id (a root invocation's
        are equal; a revision reuses its root's snapshot under a new id).
        Spilled results go under ``results_root``, else the workspace root.
        """
        root = results_root or (workspace.root if workspace is not None else None)
        return ToolRequestGate(
            snapshot,
            Dispatcher(self.catalog),
            result_files=None if root is None else DirectoryResultFiles(root),
            run_id=run_id,
            invocation_id=invocation_id,
            rng=rng,
            workspace=workspace,
            chat=chat,
        )

    def workspace(
        self, root: Path, scene: Scene, profile: Profile, chat: ChatRun | None = None
    ) -> Workspace:
        """A workspace folder as ``profile`` sees it; with ``chat``, its chat mount too."""
        ws = self.data.workspace_at(root, scene, profile, chat=chat is not None)
        ws.chat_floors = chat  # chat/floors/ served from the chat run, from memory
        return ws

    def chat_run(
        self,
        source: ChatSource,
        run_root: Path | Callable[[str], Path],
        *,
        run_id: str,
        profile_id: str,
    ) -> tuple[ChatRun, ChatFile, Path]:
        """Freeze the chat as it is now for a run (or a call) working in ``run_root``.

        ``run_root`` may be a function of the chat's stable id (a run's folder
        lives under its chat's workspace). Loads the chat, activates world
        info, and writes the frozen input and ``chat/chat.json`` into the run
        root. No floor files are written: the file tools serve ``chat/floors/``
        from memory, and the shell's copy is synced at its first call. The
        search index is then loaded or built on a worker thread, so it is
        ready, or well on its way, when the first ``chat_search`` comes.
        Raises ``ChatFormatError`` / ``OSError`` for a chat that cannot be read.
        Returns the chat run, the chat and the run root.
        """
        repo = FileChatRepository(source.chat_file)
        stamp = file_stamp(source.chat_file)
        chat = repo.load()
        stable = chat.stable_id(str(source.chat_file.resolve()))
        if chat.integrity:  # copies of a file share it: one folder per file
            stable = self.data.chat_identity(stable, source.chat_file)
        if callable(run_root):
            run_root = run_root(stable)
        books = list(source.books)
        card = source.card
        card_book = card.book() if card is not None and source.card_book else None
        books.extend([card_book] if card_book is not None else [])
        character = (card.name if card is not None else "") or chat.speaker(user=False)
        context = scan_context(
            chat,
            character=character,
            card=card,
            participants=source.participants,
        )
        run_input = freeze(
            chat,
            stable,
            title=source.chat_file.stem,
            books=books,
            settings=source.settings,
            rng=random.Random(source.seed),
            character=character,
            context=context,
        )
        mount = self.data.chat_mount_dir(stable)
        chat_run = ChatRun(repo, run_input, run_id=run_id, profile_id=profile_id, index_dir=mount)
        chat_run.prime(chat, stamp)  # no second read of the chat at the first chat tool call
        prepare_run_mount(run_root, run_input)
        run_input.save(run_root)
        # Last: from here on the caller owns the build and settles it when it ends
        # (a failed write above leaves no thread writing into the chat's folder).
        chat_run.index_in_background()
        return chat_run, chat, run_root
