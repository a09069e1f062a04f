"""The read-only chat mount: the chat as files the workspace tools and the shell can read.

::

    chat/chat.json                  {title, stableChatId, character, floorCount}
    chat/floors/NNNNNN/message.md   the raw ``mes`` (no macros, no regex)
    chat/floors/NNNNNN/meta.json    {index, name, role, hidden, send_date, swipe_id, swipe_count}

``chat/chat.json`` is written into each run's folder when the run starts.
The file tools see the floors from memory (:func:`floor_files`, see
:mod:`tavern_agent.workspace.floors`); nothing is written for them, so a run
on a chat of any length starts without creating a file per floor.

The shell can only mount host folders, so the first shell call of a run
brings a shared copy up to date (:func:`sync_floors`):
``<data-root>/chats/<id>/mount/floors``, one per chat workspace, updated
incrementally: a floor is rewritten only when its line changed, floors past
the end are removed. The copy is derived data: files are renamed into place
but not fsynced, and a lost ``state.json`` makes the next sync rewrite
everything. Each run's view shows only floors before its frozen count, and
its own ``chat/chat.json`` says what that count is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from tavern_agent.chat.formats import ChatFile, ChatMessage
from tavern_agent.fsutil import atomic_write
from tavern_agent.workspace.floors import floor_name

ROOT = "chat"
STATE = "state.json"


class MountedChat(Protocol):
    """What ``chat/chat.json`` tells about a run's chat (a run's frozen chat input)."""

    @property
    def title(self) -> str:
        """The chat's title (its file name without the extension)."""

    @property
    def stable_chat_id(self) -> str:
        """The chat's id that survives renaming its file."""

    @property
    def character(self) -> str:
        """The character the chat is with."""

    @property
    def floor_count(self) -> int:
        """How many messages the chat had when the run froze it."""


def floor_path(index: int) -> str:
    """The mount path of chat message ``index``'s text (``chat/floors/<index>/message.md``)."""
    return f"{ROOT}/floors/{floor_name(index)}/message.md"


def meta(index: int, message: ChatMessage) -> dict[str, Any]:
    """The ``meta.json`` of one chat message as the mount shows it: index, name, role, swipes."""
    return {
        "index": index,
        "name": message.name,
        "role": message.role,
        "hidden": message.hidden,
        "send_date": message.raw.get("send_date"),
        "swipe_id": message.swipe_id,
        "swipe_count": message.swipe_count,
    }


def floor_files(index: int, message: ChatMessage) -> dict[str, bytes]:
    """A floor's files by name, as the file tools and the shell's copy show them."""
    body = json.dumps(meta(index, message), ensure_ascii=False, indent=1)
    return {
        "message.md": message.mes.encode("utf-8", "surrogatepass"),
        "meta.json": body.encode("utf-8", "surrogatepass"),
    }


def chat_info(run_input: MountedChat) -> dict[str, Any]:
    """The ``chat/chat.json`` of a run: its chat's title, stable id, character and floor count."""
    return {
        "title": run_input.title,
        "stableChatId": run_input.stable_chat_id,
        "character": run_input.character,
        "floorCount": run_input.floor_count,
    }


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _put(path: Path, data: bytes) -> None:
    # The mount is rebuilt from the chat whenever it is stale: no fsync needed.
    atomic_write(path, data, durable=False)


def _create(path: Path, data: bytes) -> None:
    """A file in a floor folder this sync just made: written in place, not renamed.

    Half the file system operations of :func:`_put` (no temporary file, no
    rename), which is most of the copy's time on a new long chat. Safe because
    the folder is new: no run's shell read this floor from the copy before
    (each run syncs before its first shell call, under the same lock), and
    after a crash the folder exists, so the next sync rewrites it with
    :func:`_put` (``state.json`` is written last).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def sync_floors(
    chat: ChatFile, mount_dir: Path, on_floor: Callable[[int], None] | None = None
) -> int:
    """Bring ``mount_dir/floors`` up to date with ``chat``; returns floors rewritten.

    ``on_floor(n)`` is told every 1,000 floors how many were checked (for a progress bar).
    """
    floors = mount_dir / "floors"
    floors.mkdir(parents=True, exist_ok=True)
    with _lock(mount_dir):
        state_path = mount_dir / STATE
        try:
            old: list[str] = json.loads(state_path.read_bytes())["floors"]
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            old = []
        new: list[str] = []
        written = 0
        for index, message in enumerate(chat.messages):
            if on_floor is not None and index % 1000 == 0:
                on_floor(index)
            digest = hashlib.sha1(message.encoded()).hexdigest()
            new.append(digest)
            if index < len(old) and old[index] == digest:
                continue
            folder = floors / floor_name(index)
            try:
                folder.mkdir()
                write = _create
            except FileExistsError:
                write = _put
            for name, data in floor_files(index, message).items():
                write(folder / name, data)
            written += 1
        for index in range(len(chat.messages), max(len(old), _highest(floors) + 1)):
            shutil.rmtree(floors / floor_name(index), ignore_errors=True)
        _put(state_path, json.dumps({"floors": new}).encode("utf-8"))
    return written


def _highest(floors: Path) -> int:
    names = [int(n) for n in os.listdir(floors) if n.isdigit()]
    return max(names, default=-1)


def prepare_run_mount(run_root: Path, run_input: MountedChat) -> None:
    """The run's own ``chat/chat.json`` and the ``chat/floors`` entry point."""
    folder = run_root / ROOT
    (folder / "floors").mkdir(parents=True, exist_ok=True)
    data = json.dumps(chat_info(run_input), ensure_ascii=False, indent=1).encode("utf-8")
    _put(folder / "chat.json", data)
