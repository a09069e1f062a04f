"""The agent endpoint's bearer key: made once, kept owner-only under the data root."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tavern_agent.fsutil import atomic_write

KEY_FILE = Path("endpoint") / "api-key"
KEY_PREFIX = "ta-"
# What a client sends when its user set no key; never accepted, even if configured.
REFUSED_KEYS = frozenset({"", "undefined", "null"})


class EndpointKeyError(ValueError):
    """A configured key that cannot be used."""


def key_path(data_dir: Path) -> Path:
    """Where the endpoint's stored API key lives under a data folder."""
    return data_dir / KEY_FILE


def key_from_env(name: str) -> str:
    """The key in environment variable ``name``; refused when unset or a placeholder."""
    value = os.environ.get(name, "").strip()
    if value in REFUSED_KEYS:
        raise EndpointKeyError(f"${name} holds no usable key (set it to a long random string)")
    return value


def load_or_create(data_dir: Path) -> tuple[str, bool]:
    """The stored key, or a new one written with mode 0600; ``True`` when just created."""
    path = key_path(data_dir)
    try:
        stored = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        stored = ""
    if stored and stored not in REFUSED_KEYS:
        if path.stat().st_mode & 0o077:  # a key written by hand, readable by others
            path.chmod(0o600)
        return stored, False
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (key + "\n").encode("ascii"), mode=0o600)
    return key, True
