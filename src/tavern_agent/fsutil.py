"""Whole-file writes: temporary file, optional fsync, rename. Nobody ever sees half a file.

This is the one place a file is written whole. Every writer picks how durable
the write must be:

- ``durable=True`` (the default) fsyncs the data and the folder, so the new
  content survives a power failure. Chats, run records, checkpoints and
  workspace files use it.
- ``durable=False`` only guarantees all-or-nothing against a killed process;
  for files that can be rebuilt (audit copies, indexes, caches).

On any failure the temporary file is removed, so a full disk or a permission
error never leaves ``.tmp`` litter behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

TMP_SUFFIX = ".tmp"


class AlreadyWritten(FileExistsError):
    """A write-once file exists already."""


class ChangedMeanwhile(RuntimeError):
    """An :func:`atomic_write` whose ``unchanged`` check failed; nothing was written."""


def tmp_name(name: str) -> str:
    """A hidden, unique temporary name beside ``name`` (see :func:`is_tmp_name`)."""
    return f".{name[:200]}.{secrets.token_hex(4)}{TMP_SUFFIX}"


def is_tmp_name(name: str) -> bool:
    """Whether ``name`` is a temporary file of an unfinished write."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def _fsync_dir(path: Path | None, dir_fd: int | None = None) -> None:
    if dir_fd is not None:
        os.fsync(dir_fd)
        return
    assert path is not None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(
    folder: Path | None, name: str, data: bytes, *, durable: bool, mode: int, dir_fd: int | None
) -> str:
    """Write ``data`` to a new temporary file in the folder; return its name (relative)."""
    tmp = tmp_name(name)
    where = tmp if dir_fd is not None else str(folder / tmp if folder else tmp)
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # exactly, not narrowed by the umask
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(where, dir_fd=dir_fd)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file
            raise OSError(exc.errno, exc.strerror, str(folder / name if folder else name)) from None
        raise
    return where


def _temp_in_new_folder(
    folder: Path | None,
    name: str,
    data: bytes,
    *,
    durable: bool,
    mode: int,
    dir_fd: int | None = None,
) -> str:
    """:func:`_write_temp`, creating the folder (and its parents) when it is missing.

    The folder is created only after a write failed for want of it: most
    writes go to folders that exist, and a ``mkdir`` per write was a third of
    the system calls of a small record.
    """
    try:
        return _write_temp(folder, name, data, durable=durable, mode=mode, dir_fd=dir_fd)
    except FileNotFoundError:
        if folder is None or dir_fd is not None:
            raise
    folder.mkdir(parents=True, exist_ok=True)
    return _write_temp(folder, name, data, durable=durable, mode=mode, dir_fd=dir_fd)


def atomic_write(
    path: Path | str,
    data: bytes,
    *,
    durable: bool = True,
    mode: int | None = None,
    dir_fd: int | None = None,
    follow_link: bool = False,
    unchanged: Callable[[], bool] | None = None,
) -> None:
    """Replace (or create) ``path`` with ``data`` atomically.

    ``mode`` sets the permission bits (default: keep the old file's, else 0644).
    With ``dir_fd``, ``path`` is a plain name inside that open folder (the
    workspace opens folders one by one so a link is never followed).
    ``follow_link`` writes through a symlink to its target instead of
    replacing the link with a regular file. ``unchanged`` is asked right
    before the rename (the last moment another program's write could be
    lost); when it answers false nothing is written and
    :class:`ChangedMeanwhile` is raised.
    """
    if dir_fd is None:
        path = Path(path)
        if follow_link and path.is_symlink():
            path = path.resolve()
        folder: Path | None = path.parent
        name = path.name
    else:
        folder, name = None, str(path)
    if mode is None:
        try:
            mode = os.stat(name if dir_fd is not None else path, dir_fd=dir_fd).st_mode & 0o777
        except OSError:
            mode = 0o644
    tmp = _temp_in_new_folder(folder, name, data, durable=durable, mode=mode, dir_fd=dir_fd)
    target = name if dir_fd is not None else str(path)
    try:
        if unchanged is not None and not unchanged():
            raise ChangedMeanwhile(f"{target} changed while it was being rewritten")
        os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if durable:
        _fsync_dir(folder, dir_fd)


def write_once(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Create ``path`` with ``data`` atomically; raise :class:`AlreadyWritten` if it exists."""
    tmp = _temp_in_new_folder(path.parent, path.name, data, durable=durable, mode=0o644)
    try:
        os.link(tmp, path)  # fails if the target exists, unlike rename
    except FileExistsError:
        raise AlreadyWritten(f"{path} exists already and is written only once") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    if durable:
        _fsync_dir(path.parent)


def memory_fd(data: bytes, name: str = "data") -> int:
    """A descriptor of an anonymous file holding ``data``, at its start: a memfd named
    ``name`` (an unlinked temporary file where there is none); nothing is left on disk."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
