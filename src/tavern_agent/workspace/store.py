"""The on-disk workspace: safe, atomic file operations below one root folder.

Every operation walks the path one segment at a time with ``O_NOFOLLOW`` and
directory file descriptors, so nothing outside the root is ever opened, even
if a folder is swapped for a link meanwhile. A link met on the way is refused:
one pointing outside is an escape (:class:`WorkspaceEscape`, fatal for the
run); one pointing inside is reported to the model as an invalid path.

Writes go to a temporary file in the target folder, are fsynced and renamed
over the target, so a crash leaves the old or the new file, never a mix.
Mutations hold a per-workspace lock (a thread lock plus ``flock`` on the
internal ``.lock`` file, so separate processes serialize too); reads do not.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure
from tavern_agent.fsutil import atomic_write, is_tmp_name, memory_fd
from tavern_agent.workspace import floors, paths
from tavern_agent.workspace.floors import FloorFiles
from tavern_agent.workspace.roots import CHAT_MOUNT, INTERNAL, RootPolicy

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class WorkspaceEscape(RuntimeError):
    """A path inside the store leads outside it: a storage fault that ends the run."""


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` as hex text."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Entry:
    """One listing entry: a path, ``file`` or ``dir``, and its size in bytes."""

    path: str
    kind: str  # "file" or "dir"
    size: int


class Workspace:
    """One run's (or session's) workspace folder with its root policy.

    ``skills_dir`` backs the read-only ``skills/`` root; ``visible_skills``
    (``None`` = all) filters which skill folders appear there.
    ``chat_floors`` backs ``chat/floors/``, served from memory (see
    :mod:`tavern_agent.workspace.floors`); only floors below its
    ``floor_count`` (the run's frozen input) are visible.
    """

    def __init__(
        self,
        root: Path,
        policy: RootPolicy,
        *,
        skills_dir: Path | None = None,
        visible_skills: frozenset[str] | None = None,
        chat_floors: FloorFiles | None = None,
    ) -> None:
        self.root = root
        self.policy = policy
        self.skills_dir = skills_dir
        self.visible_skills = visible_skills
        self.chat_floors = chat_floors
        root.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(root)
        with _LOCKS_GUARD:
            self._thread_lock = _LOCKS.setdefault(key, threading.Lock())

    @property
    def chat_floor_count(self) -> int:
        """How many chat floors the run sees (0 without a chat)."""
        return 0 if self.chat_floors is None else self.chat_floors.floor_count

    def _floors(self, path: str) -> FloorFiles | None:
        """The floor source when ``path`` is at or below ``chat/floors`` (served from memory)."""
        return self.chat_floors if floors.is_floor_path(path) else None

    @classmethod
    def for_scene(cls, root: Path, scene: Scene) -> Workspace:
        """A workspace at ``root`` with the scene's default visible and writable roots."""
        return cls(root, RootPolicy.for_scene(scene))

    # ------------------------------------------------------------ path checks

    def check(self, text: str, *, write: bool = False, allow_root: bool = False) -> str:
        """Normalise a model's path and check it is visible (and writable)."""
        try:
            path = paths.normalize(text, allow_root=allow_root)
        except paths.InvalidPath as exc:
            shown = paths.without_host_paths(repr(text))  # the model's own text, minus host paths
            raise ToolFailure(
                ErrorCode.WORKSPACE_INVALID_PATH, f"Invalid path {shown}: {exc}."
            ) from None
        if path == "":
            if write:
                raise ToolFailure(
                    ErrorCode.WORKSPACE_PATH_NOT_WRITABLE,
                    f"The workspace root is not a file. {self._write_hint()}",
                )
            return path
        first = paths.top(path)
        if first in INTERNAL or first not in self.policy.visible:
            roots = ", ".join(f"{r}/" for r in self.policy.visible)
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATH_NOT_VISIBLE,
                f"{path} is outside the visible roots ({roots}). Use a path under one of them.",
            )
        if first == "skills" and not self._skill_visible(path):
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATH_NOT_VISIBLE, f"{path} is not a skill of this agent."
            )
        if first == CHAT_MOUNT and not self._floor_visible(path):
            last = self.chat_floor_count - 1
            shown = f"floors 000000-{last:06d}" if last >= 0 else "no floors"
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATH_NOT_VISIBLE,
                f"{path} is not in this run's chat input ({shown}).",
            )
        if write and first not in self.policy.writable:
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATH_NOT_WRITABLE,
                f"{first}/ is read-only. {self._write_hint()}",
            )
        return path

    def _write_hint(self) -> str:
        writable = [f"{r}/" for r in self.policy.visible if r in self.policy.writable]
        if not writable:
            return "This run can write no files; go on with reads only."
        return f"Name a file under {', '.join(writable)}."

    def _skill_visible(self, path: str) -> bool:
        parts = path.split("/")
        return len(parts) == 1 or self.visible_skills is None or parts[1] in self.visible_skills

    def _floor_visible(self, path: str) -> bool:
        """Below ``chat/floors/`` only the run's floors (``NNNNNN`` < the count) show."""
        parts = path.split("/")
        if len(parts) < 3 or parts[0] != CHAT_MOUNT or parts[1] != "floors":
            return True
        return parts[2].isdigit() and int(parts[2]) < self.chat_floor_count

    def _hidden(self, path: str) -> bool:
        top = paths.top(path)
        if top == "skills":
            return not self._skill_visible(path)
        return top == CHAT_MOUNT and not self._floor_visible(path)

    # ------------------------------------------------------------ descriptors

    def _base(self, path: str) -> tuple[Path, list[str]]:
        parts = path.split("/") if path else []
        if parts and parts[0] == "skills" and self.skills_dir is not None:
            return self.skills_dir, parts[1:]
        if self._floors(path) is not None:  # never on disk: no writer may get here
            raise PermissionError(f"{path} is read-only")
        return self.root, parts

    def _link_error(self, dir_fd: int, name: str, shown: str) -> Exception:
        """A link inside the tree is the model's to avoid; one leading out is an escape."""
        target = os.readlink(name, dir_fd=dir_fd)
        folder = posixpath.dirname(shown)
        if not target.startswith("/"):
            try:
                inside = paths.normalize(posixpath.normpath(posixpath.join(folder, target)))
            except paths.InvalidPath:
                inside = None
            if inside is not None:
                return ToolFailure(
                    ErrorCode.WORKSPACE_INVALID_PATH,
                    f"{shown} is a symbolic link to {inside}; file tools do not follow links, "
                    f"use {inside}.",
                )
        return WorkspaceEscape(f"{shown} is a symbolic link leading outside the workspace")

    @contextlib.contextmanager
    def _dir(self, path: str, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the folder ``parts`` below the base of ``path``."""
        base, _ = self._base(path)
        if create:
            base.mkdir(parents=True, exist_ok=True)
        fd = os.open(base, _DIR_FLAGS)
        try:
            shown: list[str] = []
            for part in parts:
                shown.append(part)
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part):
                        raise self._link_error(fd, part, "/".join(shown)) from None
                    raise
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def _split(self, path: str) -> tuple[list[str], str]:
        _, parts = self._base(path)
        return parts[:-1], parts[-1]

    # ------------------------------------------------------------ reads

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or ``None`` for a checked path (links refused)."""
        if path == "":
            return "dir"
        if (source := self._floors(path)) is not None:
            return floors.kind(source, path)
        _, parts = self._base(path)
        if not parts:  # the skills root: always there, empty without a library
            return "dir"
        folders, name = parts[:-1], parts[-1]
        try:
            with self._dir(path, folders) as fd:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise self._link_error(fd, name, path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return "dir" if stat.S_ISDIR(st.st_mode) else "file"

    def read_bytes(self, path: str) -> bytes:
        """The whole file; ``FileNotFoundError`` / ``IsADirectoryError`` as usual."""
        if (source := self._floors(path)) is not None:
            return floors.read(source, path)
        with self.open_file(path) as fd, os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()

    @contextlib.contextmanager
    def open_file(self, path: str) -> Iterator[int]:
        """A read-only descriptor of the file (closed on exit); errors as :meth:`read_bytes`."""
        if (source := self._floors(path)) is not None:
            fd = memory_fd(floors.read(source, path), "floor")
            try:
                yield fd
            finally:
                os.close(fd)
            return
        folders, name = self._split(path)
        with self._dir(path, folders) as dfd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._link_error(dfd, name, path) from None
                raise
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise IsADirectoryError(path)
            yield fd
        finally:
            os.close(fd)

    def walk(self, path: str, max_depth: int) -> Iterator[Entry]:
        """Entries below a folder, sorted, depth-first, links skipped."""
        if path == "":
            for root in self.policy.visible:
                if self.kind_or_none(root) == "dir":  # a root replaced by a link: not listed
                    yield Entry(root, "dir", 0)
                    if max_depth > 1:
                        yield from self.walk(root, max_depth - 1)
            return
        if (source := self._floors(path)) is not None:
            yield from self._walk_floors(source, path, max_depth)
            return
        base, parts = self._base(path)
        if not parts and not base.is_dir():
            return  # no skills library
        with self._dir(path, parts) as fd:
            names = sorted(os.listdir(fd))
            stats = [(n, os.stat(n, dir_fd=fd, follow_symlinks=False)) for n in names]
        for name, st in stats:
            child = f"{path}/{name}"
            if self._hidden(child):
                continue
            if is_tmp_name(name):
                continue  # an atomic write in progress
            if stat.S_ISDIR(st.st_mode):
                yield Entry(child, "dir", 0)
                if max_depth > 1:
                    yield from self.walk(child, max_depth - 1)
            elif stat.S_ISREG(st.st_mode):
                yield Entry(child, "file", st.st_size)

    def _walk_floors(self, source: FloorFiles, path: str, max_depth: int) -> Iterator[Entry]:
        for child, data in floors.entries(source, path):
            if data is not None:
                yield Entry(child, "file", len(data))
                continue
            yield Entry(child, "dir", 0)
            if max_depth > 1:
                yield from self._walk_floors(source, child, max_depth - 1)

    def file_runs(
        self, path: str, max_depth: int, skip: Callable[[str], bool]
    ) -> Iterator[tuple[str, list[str]]]:
        """The regular files below a folder as ``(folder, names)`` runs, sorted, links skipped.

        Files come in the order of :meth:`walk`; each run is consecutive files of
        one folder, to be read with :meth:`read_files`. Nothing is read here, so
        a search can hand runs to more than one reader.
        """
        if path == "":
            for root in self.policy.visible:
                if not skip(root) and self.kind_or_none(root) == "dir":
                    yield from self.file_runs(root, max_depth - 1, skip)
            return
        if (source := self._floors(path)) is not None:
            yield from self._floor_runs(source, path, max_depth, skip)
            return
        base, parts = self._base(path)
        if not parts and not base.is_dir():
            return
        with self._dir(path, parts) as fd, os.scandir(fd) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        run: list[str] = []
        for entry in entries:
            child = f"{path}/{entry.name}"
            if skip(child) or self._hidden(child):
                continue
            if entry.is_dir(follow_symlinks=False):
                if max_depth > 1:
                    if run:
                        yield path, run
                        run = []
                    yield from self.file_runs(child, max_depth - 1, skip)
            elif entry.is_file(follow_symlinks=False) and not is_tmp_name(entry.name):
                run.append(entry.name)
        if run:
            yield path, run

    def _floor_runs(
        self, source: FloorFiles, path: str, depth: int, skip: Callable[[str], bool]
    ) -> Iterator[tuple[str, list[str]]]:
        run: list[str] = []
        for child, data in floors.entries(source, path):
            if skip(child):
                continue
            if data is not None:
                run.append(posixpath.basename(child))
            elif depth > 1:
                yield from self._floor_runs(source, child, depth - 1, skip)
        if run:
            yield path, run

    def read_files(
        self, folder: str, names: list[str], max_bytes: int
    ) -> Iterator[tuple[str, bytes]]:
        """``(path, bytes)`` of files named in one folder, read through its descriptor.

        A file larger than ``max_bytes``, or one that vanished or became a link
        since it was listed, is left out; so is the whole folder if it did.
        """
        if (source := self._floors(folder)) is not None:
            for name in names:
                try:
                    blob = floors.read(source, f"{folder}/{name}")
                except OSError:
                    continue  # the chat lost the floor since it was listed
                if len(blob) <= max_bytes:
                    yield f"{folder}/{name}", blob
            return
        with contextlib.ExitStack() as stack:
            try:
                fd = stack.enter_context(self._dir(folder, self._base(folder)[1]))
            except (OSError, WorkspaceEscape, ToolFailure):
                return  # swapped for a link or removed since it was listed: nothing read
            for name in names:
                try:
                    ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue  # vanished or swapped for a link since the scan
                try:
                    data = _read_at_most(ffd, max_bytes)
                finally:
                    os.close(ffd)
                if data is not None:
                    yield f"{folder}/{name}", data

    def kind_or_none(self, path: str) -> str | None:
        """Like :meth:`kind`, but a link is simply absent."""
        try:
            return self.kind(path)
        except (WorkspaceEscape, ToolFailure):
            return None

    # ------------------------------------------------------------ writes

    @contextlib.contextmanager
    def mutation(self) -> Iterator[None]:
        """Serialize mutations of this workspace across threads and processes."""
        with self._thread_lock:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def write_atomic(self, path: str, data: bytes, *, durable: bool = True) -> None:
        """Replace (or create) the file; call inside :meth:`mutation`.

        ``durable=False`` skips the fsync (the file survives a killed process,
        not necessarily a power loss)."""
        folders, name = self._split(path)
        with self._dir(path, folders, create=True) as dfd:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                    raise self._link_error(dfd, name, path)
            atomic_write(name, data, dir_fd=dfd, mode=0o644, durable=durable)

    def append(self, path: str, data: bytes) -> None:
        """Append natively (may apply partially on a crash; never replayed)."""
        folders, name = self._split(path)
        with self._dir(path, folders, create=True) as dfd:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._link_error(dfd, name, path) from None
                raise
            with os.fdopen(fd, "ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())


def _read_at_most(fd: int, max_bytes: int) -> bytes | None:
    """The whole file behind ``fd``, or ``None`` when it is larger than ``max_bytes``."""
    expected = os.fstat(fd).st_size
    if expected > max_bytes:
        return None
    # Ask for one byte more than stat said: a short read is the end of the file (one
    # read for the usual file), a full one means it grew, so read on.
    data = os.read(fd, expected + 1)
    if len(data) <= expected:
        return data
    chunks = [data]
    size = len(data)
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return None
    return b"".join(chunks)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
