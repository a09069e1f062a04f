"""Where workspaces live under the data root, and the skills library.

::

    <data-root>/chats/<chat-workspace-id>/runs/<run-id>/…   one chat run
    <data-root>/sessions/<session-id>/…                     a session (shared by its runs)
    <data-root>/skills/<name>/SKILL.md                      the skills library

The chat workspace id comes from the chat's stable identity (SillyTavern's
``chat_metadata.integrity``), not its file name, so renaming a chat keeps its
workspace; a copy of a chat file (same integrity) gets a workspace of its own
(:meth:`DataRoot.chat_identity`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import Profile
from tavern_agent.core.tool_ids import CHAT_TOOLS
from tavern_agent.fsutil import atomic_write
from tavern_agent.workspace.floors import FloorFiles
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def _checked_id(kind: str, value: str) -> str:
    if not _ID.fullmatch(value) or value.endswith("."):
        raise ValueError(f"bad {kind} {value!r}: letters, digits, '_', '.', '-' (max 128)")
    return value


# In a chat folder: which chat file has which stable id (copies share an integrity).
CHAT_FILES = "chat-files.json"


def chat_workspace_id(stable_chat_id: str) -> str:
    """A folder-safe id derived from the chat's stable identity."""
    if not stable_chat_id:
        raise ValueError("a chat needs a stable identity")
    return "chat_" + hashlib.sha256(stable_chat_id.encode("utf-8")).hexdigest()[:24]


def _chat_files(record: Path) -> dict[str, str]:
    """Which file has which stable id, as :meth:`DataRoot.chat_identity` recorded it."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class SkillInfo:
    """A skill folder (its path is ``skills/<folder>/``) and its front matter."""

    folder: str
    name: str
    description: str


class DataRoot:
    """The data root: opens workspaces for chat runs and sessions."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def skills_dir(self) -> Path:
        """Where the data folder's skills live (``<data>/skills``)."""
        return self.path / "skills"

    def chat_identity(self, stable_chat_id: str, chat_file: Path) -> str:
        """The stable id of the chat in ``chat_file``: one chat folder per file.

        Copies of a chat file carry the same ``chat_metadata.integrity``. The
        first file seen with it keeps the plain id (the folder it always had);
        each other file gets the id with a hash of its path. The chat folder of
        the plain id records which file has which id, so a file that moved (its
        recorded path is gone) keeps its folder.
        """
        path = str(chat_file.resolve())
        folder = self.path / "chats" / chat_workspace_id(stable_chat_id)
        folder.mkdir(parents=True, exist_ok=True)
        record = folder / CHAT_FILES
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two runs starting on copies at once
            files = _chat_files(record)
            known = next((i for i, p in files.items() if p == path), None)
            moved = next((i for i, p in files.items() if not os.path.exists(p)), None)
            if known is not None:
                return known
            if moved is not None:
                chosen = moved
            elif stable_chat_id in files:
                chosen = f"{stable_chat_id}#{hashlib.sha256(path.encode()).hexdigest()[:16]}"
            else:
                chosen = stable_chat_id
            atomic_write(record, json.dumps(files | {chosen: path}, indent=2).encode())
            return chosen
        finally:
            os.close(fd)  # closing releases the flock

    def chat_mount_dir(self, stable_chat_id: str) -> Path:
        """The chat workspace's shared chat mount (see :mod:`tavern_agent.chat.mount`)."""
        return self.path / "chats" / chat_workspace_id(stable_chat_id) / "mount"

    def chat_run_root(self, stable_chat_id: str, run_id: str) -> Path:
        """A chat run's folder, made if missing (no workspace object: :meth:`chat_run`);
        raises ``ValueError`` for a bad run id."""
        runs = self.path / "chats" / chat_workspace_id(stable_chat_id) / "runs"
        folder = runs / _checked_id("run id", run_id)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def chat_run(
        self,
        stable_chat_id: str,
        run_id: str,
        profile: Profile,
        *,
        floors: FloorFiles | None = None,
    ) -> Workspace:
        """A chat run's workspace; ``floors`` (the chat run) backs ``chat/floors/``."""
        ws = self.workspace_at(self.chat_run_root(stable_chat_id, run_id), Scene.CHAT, profile)
        ws.chat_floors = floors
        return ws

    def session(self, session_id: str, profile: Profile) -> Workspace:
        """The workspace of session ``session_id`` as ``profile`` sees it; raises
        ``ValueError`` for an id that is not a plain name (letters, digits, ``_.-``)."""
        root = self.path / "sessions" / _checked_id("session id", session_id)
        return self.workspace_at(root, Scene.SESSION, profile)

    def view(self, workspace: Workspace, scene: Scene, profile: Profile) -> Workspace:
        """The same workspace folder as another agent's ``profile`` sees it (its own roots)."""
        view = self.workspace_at(workspace.root, scene, profile)
        view.chat_floors = workspace.chat_floors
        return view

    def workspace_at(
        self, root: Path, scene: Scene, profile: Profile, *, chat: bool = True
    ) -> Workspace:
        """The workspace folder ``root`` with ``profile``'s roots and skills.

        The chat mount appears when the profile has a chat tool, unless
        ``chat`` is false (the work has no chat).
        """
        visible = frozenset(s.folder for s in self.skills(profile))
        mount = chat and allows_chat_tool(profile)
        return Workspace(
            root,
            RootPolicy.for_scene(scene, profile.workspace, chat_mount=mount),
            skills_dir=self.skills_dir,
            visible_skills=visible,
        )

    def skills(self, profile: Profile) -> list[SkillInfo]:
        """The profile's skills, from each SKILL.md front matter, for the prompt."""
        found: list[SkillInfo] = []
        if not self.skills_dir.is_dir():
            return found
        for folder in sorted(self.skills_dir.iterdir()):
            manifest = folder / "SKILL.md"
            if (
                folder.is_symlink()
                or not manifest.is_file()
                or not profile.skills.allows(folder.name)
            ):
                continue
            meta = front_matter(manifest.read_text(encoding="utf-8", errors="replace"))
            name = meta.get("name", folder.name)
            found.append(SkillInfo(folder.name, name, meta.get("description", "")))
        return found


def allows_chat_tool(profile: Profile) -> bool:
    """The chat mount appears when the profile allows a chat tool."""
    return any(t in CHAT_TOOLS for t in profile.tools.enabled())


def front_matter(text: str) -> dict[str, str]:
    """``key: value`` lines between the leading ``---`` fences (a flat YAML subset)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    meta: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            meta[key.strip()] = value.strip().strip("\"'")
    return meta
