"""``persist/``: notes a chat's runs carry from one run to the next.

The chat workspace keeps a *stable layer*: immutable versions under
``<chat-workspace>/persist/versions/<version>/`` and ``HEAD.json`` naming the
current one with the sha of its tree. A run starts with a copy of the current
version in its own ``persist/`` and records the base sha. At finish the run's
tree is promoted to a new version, unless another run published since the
base (a conflict: the head stays, the run's tree is kept as a version that
HEAD does not name). Failed or cancelled runs publish nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.fsutil import atomic_write

HEAD_FILE = "HEAD.json"


def tree_sha(folder: Path) -> str:
    """A digest of the relative paths and bytes of every regular file below ``folder``."""
    digest = hashlib.sha256()
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = path.relative_to(folder).as_posix()
            digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


EMPTY_SHA = tree_sha(Path("/nonexistent-tree"))


@dataclass(frozen=True, slots=True)
class PersistBase:
    """A version of the stable layer: its name (``None`` before the first) and its tree's sha."""

    version: str | None
    sha: str

    def to_json(self) -> dict[str, str | None]:
        """The base's JSON form, as the run's persist file keeps it."""
        return {"version": self.version, "sha": self.sha}


@dataclass(frozen=True, slots=True)
class Promotion:
    """``status``: ``unchanged``, ``published`` or ``conflict``."""

    status: str
    version: str | None
    sha: str


def _copy_tree(src: Path, dest: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_symlink():
            continue
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


class PersistStore:
    """The stable layer of one chat workspace."""

    def __init__(self, chat_workspace: Path) -> None:
        self.root = chat_workspace / "persist"

    def head(self) -> PersistBase:
        """The current version, as ``HEAD.json`` names it (the empty tree before any)."""
        try:
            data = json.loads((self.root / HEAD_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return PersistBase(None, EMPTY_SHA)
        return PersistBase(data.get("version"), str(data["sha"]))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def checkout(self, dest: Path) -> PersistBase:
        """Copy the current version into ``dest`` (a run's ``persist/``); return its base."""
        with self._locked():
            base = self.head()
            dest.mkdir(parents=True, exist_ok=True)
            if base.version is not None:
                _copy_tree(self.root / "versions" / base.version, dest)
        return base

    def promote(self, src: Path, base: PersistBase, run_id: str) -> Promotion:
        """Publish ``src`` as the new version if nobody published since ``base``."""
        sha = tree_sha(src)
        with self._locked():
            head = self.head()
            if sha == head.sha:
                return Promotion("unchanged", head.version, sha)  # nothing new, or done already
            if sha == base.sha:
                return Promotion("unchanged", head.version, sha)
            version = f"{run_id}-{sha[:12]}"
            final = self.root / "versions" / version
            if not final.exists():
                staging = self.root / "versions" / f".{version}.{secrets.token_hex(4)}"
                staging.mkdir(parents=True)
                try:
                    _copy_tree(src, staging)
                    os.replace(staging, final)
                except OSError:  # a full disk: leave no half-copied version behind
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
            if head.sha != base.sha:
                return Promotion("conflict", version, sha)
            record = {"version": version, "sha": sha, "runId": run_id, "base": base.sha}
            atomic_write(self.root / HEAD_FILE, json.dumps(record).encode())
            return Promotion("published", version, sha)
