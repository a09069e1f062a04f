"""``chat/floors/``: the run's chat floors as read-only files served from memory.

A chat of 100,000 floors would be 100,000 folders and 200,000 files on disk;
creating them took about a minute on a slow filesystem before the model's first
request. The file tools therefore never touch a disk copy: a floor's files are
made from the parsed chat when a tool looks at them. Only the shell, whose
sandbox can only mount host folders, asks for a copy on disk
(:meth:`FloorFiles.floors_on_disk`), the first time it runs.

::

    chat/floors/NNNNNN/message.md   the raw ``mes``
    chat/floors/NNNNNN/meta.json    {index, name, role, hidden, send_date, swipe_id, swipe_count}

Nothing here is on the host filesystem, so there are no links to follow and
nothing to escape through; the ``chat/`` root is read-only, so nothing here is
ever written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

FLOORS = "chat/floors"
FILES = ("message.md", "meta.json")  # every floor has exactly these, in listing order


class FloorFiles(Protocol):
    """Where ``chat/floors/`` comes from: the chat run (see ``ChatRun``)."""

    @property
    def floor_count(self) -> int:
        """Floors ``0 … floor_count-1`` are the run's; later ones are not shown."""
        ...

    def floor_files(self, index: int) -> Mapping[str, bytes] | None:
        """The floor's files by name (:data:`FILES`), ``None`` once the chat no longer has it."""
        ...

    def floors_on_disk(self) -> Path | None:
        """A host folder holding the floors in the same layout (for the shell), or ``None``."""
        ...

    def floors_on_disk_ready(self) -> bool:
        """Whether :meth:`floors_on_disk` would answer at once (no copy to write)."""
        ...


def floor_name(index: int) -> str:
    """The folder name of chat floor ``index``: zero-padded to six digits so names sort."""
    return f"{index:06d}"


def is_floor_path(path: str) -> bool:
    """``chat/floors`` or anything below it."""
    return path == FLOORS or path.startswith(FLOORS + "/")


def floor_index(name: str, count: int) -> int | None:
    """The floor a folder name stands for: only the canonical ``NNNNNN`` below ``count``."""
    if not name.isdigit():
        return None
    index = int(name)
    return index if index < count and floor_name(index) == name else None


def kind(source: FloorFiles, path: str) -> str | None:
    """``"file"``, ``"dir"`` or ``None`` for a path at or below ``chat/floors``."""
    rest = path.split("/")[2:]
    if not rest:
        return "dir"
    index = floor_index(rest[0], source.floor_count)
    files = None if index is None else source.floor_files(index)
    if files is None:
        return None
    if len(rest) == 1:
        return "dir"
    return "file" if len(rest) == 2 and rest[1] in files else None


def read(source: FloorFiles, path: str) -> bytes:
    """A floor file's bytes; ``FileNotFoundError`` / ``IsADirectoryError`` as for a real file."""
    rest = path.split("/")[2:]
    index = floor_index(rest[0], source.floor_count) if rest else None
    files = None if index is None else source.floor_files(index)
    if not rest or (files is not None and len(rest) == 1):
        raise IsADirectoryError(path)
    if files is None or len(rest) != 2 or rest[1] not in files:
        raise FileNotFoundError(path)
    return files[rest[1]]


def entries(source: FloorFiles, path: str) -> Iterator[tuple[str, bytes | None]]:
    """A folder's children at or below ``chat/floors``: ``(path, bytes)``, ``None`` for a folder.

    Floors come in order; a floor the chat no longer has is left out.
    """
    rest = path.split("/")[2:]
    if not rest:
        for index in range(source.floor_count):
            if source.floor_files(index) is not None:
                yield f"{path}/{floor_name(index)}", None
        return
    found = floor_index(rest[0], source.floor_count)
    files = None if found is None or len(rest) != 1 else source.floor_files(found)
    if files is None:
        raise NotADirectoryError(path) if kind(source, path) == "file" else FileNotFoundError(path)
    for name in FILES:
        if name in files:
            yield f"{path}/{name}", files[name]
