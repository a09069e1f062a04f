"""Where tavern-agent keeps its files, and how a profile argument is resolved."""

from __future__ import annotations

import os
from pathlib import Path

from tavern_agent.core.profile import BUILTIN_PROFILE_IDS, Profile, ProfileError

DATA_DIR_ENV = "TAVERN_AGENT_DATA_DIR"


def default_data_dir() -> Path:
    """The data root.

    ``$TAVERN_AGENT_DATA_DIR``, else ``$XDG_DATA_HOME/tavern-agent``, else
    ``~/.local/share/tavern-agent``.
    """
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "tavern-agent"


def profiles_dir(data_dir: Path) -> Path:
    """Where the user's own profile files live under a data folder (``<data>/profiles``)."""
    return data_dir / "profiles"


def resolve_profile(spec: str, data_dir: Path) -> Profile:
    """A profile by file path, by id in the data dir, or a built-in id, in that order."""
    if spec.endswith(".json") or os.sep in spec:
        return Profile.load(Path(spec))
    stored = profiles_dir(data_dir) / f"{spec}.json"
    if stored.exists():
        return Profile.load(stored)
    if spec in BUILTIN_PROFILE_IDS:
        return Profile.builtin(spec)
    known = sorted(
        {p.stem for p in profiles_dir(data_dir).glob("*.json")} | set(BUILTIN_PROFILE_IDS)
    )
    raise ProfileError(f"no profile {spec!r} (known: {', '.join(known)}; or give a .json path)")
