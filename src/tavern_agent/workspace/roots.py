"""Which top-level folders a run sees and may change, per scene."""

from __future__ import annotations

from dataclasses import dataclass

from tavern_agent import run_layout
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import WorkspaceSettings

CHAT_WRITABLE = ("output", "scratch", "plan", "summaries", "persist")
CHAT_READ_ONLY = (run_layout.RESULTS_DIR, "skills")
SESSION_WRITABLE = ("work", "tmp")
SESSION_READ_ONLY = (run_layout.RESULTS_DIR,)
CHAT_MOUNT = "chat"  # read-only chat mount, only when the profile allows a chat tool
# Run internals: never visible to the model, whatever a profile says.
INTERNAL = run_layout.INTERNAL_NAMES
MESSAGE_BODY = "output/main.md"


@dataclass(frozen=True, slots=True)
class RootPolicy:
    """The visible roots (in listing order) and the writable subset."""

    visible: tuple[str, ...]
    writable: frozenset[str]

    @classmethod
    def for_scene(
        cls, scene: Scene, settings: WorkspaceSettings | None = None, *, chat_mount: bool = False
    ) -> RootPolicy:
        """The scene's roots, narrowed (never widened) by a profile's settings.

        ``chat_mount`` adds the read-only ``chat/`` root (chat scene only).
        """
        visible: tuple[str, ...]
        if scene is Scene.CHAT:
            visible, writable = CHAT_WRITABLE + CHAT_READ_ONLY, set(CHAT_WRITABLE)
            if chat_mount:
                visible += (CHAT_MOUNT,)
        else:
            visible, writable = SESSION_WRITABLE + SESSION_READ_ONLY, set(SESSION_WRITABLE)
        if settings is not None and settings.visible_roots is not None:
            keep = {r.strip("/") for r in settings.visible_roots}
            visible = tuple(r for r in visible if r in keep)
        if settings is not None and settings.writable_roots is not None:
            writable &= {r.strip("/") for r in settings.writable_roots}
        return cls(visible, frozenset(writable) & set(visible))
