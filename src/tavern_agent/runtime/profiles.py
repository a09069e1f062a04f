"""Agent profiles as a run finds them: the data dir's ``profiles/``, then the built-ins."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tavern_agent.config import profiles_dir
from tavern_agent.core.profile import BUILTIN_PROFILE_IDS, Profile, ProfileError

_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ProfileSource:
    """Agent profiles as ``resolve_profile`` finds them: the data dir, then the built-ins."""

    def __init__(self, data_dir: Path, extra: Sequence[Profile] = ()) -> None:
        self.dir = profiles_dir(data_dir)
        self.extra = {p.id: p for p in extra}
        self._cache: dict[str, Profile | None] = {}

    def get(self, agent_id: str) -> Profile | None:
        """The profile ``agent_id``, or ``None`` (no such profile, or it does not load)."""
        if agent_id in self.extra:
            return self.extra[agent_id]
        if not _AGENT_ID.fullmatch(agent_id):
            return None
        if agent_id not in self._cache:
            found: Profile | None = None
            path = self.dir / f"{agent_id}.json"
            try:
                if path.is_file():
                    found = Profile.load(path)
                elif agent_id in BUILTIN_PROFILE_IDS:
                    found = Profile.builtin(agent_id)
            except ProfileError:
                found = None
            self._cache[agent_id] = found
        return self._cache[agent_id]

    def all(self) -> list[Profile]:
        """Every profile that loads, by id."""
        ids = set(self.extra) | set(BUILTIN_PROFILE_IDS)
        if self.dir.is_dir():
            ids |= {p.stem for p in self.dir.glob("*.json")}
        found = (self.get(i) for i in sorted(ids))
        return [p for p in found if p is not None]
