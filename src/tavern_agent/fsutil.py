"""Durable file writes: temporary file, fsync, rename. Nobody ever sees half a file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


class AlreadyWritten(FileExistsError):
    """A write-once file exists already."""


def _write_temp(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    tmp = _write_temp(path, data)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_once(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` atomically; raise :class:`AlreadyWritten` if it exists."""
    tmp = _write_temp(path, data)
    try:
        os.link(tmp, path)  # fails if the target exists, unlike rename
    except FileExistsError:
        raise AlreadyWritten(f"{path} exists already and is written only once") from None
    finally:
        os.unlink(tmp)
    _fsync_dir(path.parent)
