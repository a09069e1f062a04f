"""Generated SillyTavern chats and a gate wired to a chat run, for the chat tests."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.chat.mount import prepare_run_mount
from tavern_agent.chat.repository import FileChatRepository
from tavern_agent.chat.run_input import ChatRun, freeze
from tavern_agent.chat.world_books import WorldBook, parse_world
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult, ExecutedCall
from tavern_agent.workspace.layout import DataRoot

DATA = Path(__file__).resolve().parents[1] / "data"
ELDORIA = DATA / "Eldoria.json"
WORDS = [
    "the",
    "tavern",
    "was",
    "quiet",
    "and",
    "the",
    "rain",
    "kept",
    "falling",
    "on",
    "the",
    "roof",
    "while",
    "travellers",
    "spoke",
    "of",
    "roads",
    "bridges",
    "markets",
    "harvest",
    "songs",
    "coins",
    "swords",
    "lanterns",
    "wagons",
    "rivers",
    "mountains",
]


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def header(integrity: str = "4f1c-test-integrity", character: str = "Seraphina") -> dict[str, Any]:
    return {
        "user_name": "User",
        "character_name": character,
        "create_date": "2025-12-01@10h00m00s",
        "chat_metadata": {"integrity": integrity, "note_prompt": "", "unknown_meta": [1, 2]},
    }


def message(
    name: str, text: str, *, is_user: bool, hidden: bool = False, **more: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "is_user": is_user,
        "is_system": hidden,
        "send_date": "December 1, 2025 10:00am",
        "mes": text,
        "swipes": [text, "an older swipe"] if not is_user else None,
        "swipe_id": 0,
        "extra": {"api": "openai", "model": "gpt-x", "reasoning": ""},
        "force_avatar": "User Avatars/user.png" if is_user else None,
        **more,
    }


def write_chat(
    path: Path,
    texts: Sequence[str],
    *,
    hidden: frozenset[int] = frozenset(),
    integrity: str = "4f1c-test-integrity",
    trailing_newline: bool = False,
) -> Path:
    """A chat alternating user / character messages with SillyTavern's fields."""
    lines = [line(header(integrity))]
    for i, text in enumerate(texts):
        is_user = i % 2 == 0
        name = "User" if is_user else "Seraphina"
        lines.append(line(message(name, text, is_user=is_user, hidden=i in hidden)))
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def filler(rng: random.Random, words: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def eldoria() -> WorldBook:
    return parse_world(ELDORIA.read_bytes(), "Eldoria")


class ChatAgent:
    """A chat run on a real data root: frozen input, mount, and a gate with every tool."""

    def __init__(
        self,
        data_dir: Path,
        chat_path: Path,
        *,
        books: Sequence[WorldBook] = (),
        precomputed: list[dict[str, Any]] | None = None,
        allow: Sequence[str] | None = None,
        allow_commit: bool = True,
        scene: Scene = Scene.CHAT,
        run_id: str = "run_1",
    ) -> None:
        assembly = Assembly(data_dir)
        ids = [d.tool_id for d in assembly.catalog.descriptors(scene)]
        profile = (
            Profile.allowing(ids, "writer")
            if allow is None
            else Profile.from_json({"id": "writer", "name": "w", "tools": {"allow": list(allow)}})
        )
        snap = assembly.snapshot(profile, scene, ModelProtocol.OPENAI_CHAT, "inv_chat")
        self.repo = FileChatRepository(chat_path)
        chat = self.repo.load()
        stable = chat.stable_id(str(chat_path))
        self.input = freeze(
            chat,
            stable,
            title=chat_path.stem,
            books=books,
            rng=random.Random(1),
            precomputed=precomputed,
        )
        data = DataRoot(data_dir)
        self.mount = data.chat_mount_dir(stable)
        self.chat = ChatRun(
            self.repo,
            self.input,
            run_id=run_id,
            profile_id="writer",
            allow_commit=allow_commit,
            index_dir=self.mount,
        )
        root = data.chat_run(stable, run_id, profile).root
        self.workspace = assembly.workspace(root, scene, profile, self.chat)
        prepare_run_mount(self.workspace.root, self.input)
        self.input.save(self.workspace.root)
        self.gate = assembly.gate(
            snap, rng=random.Random(0), workspace=self.workspace, chat=self.chat
        )
        self.n = 0

    async def run(self, name: str, **args: object) -> ExecutedCall:
        self.n += 1
        return await self.gate.handle(ToolCall(f"call_{self.n}", name, args), round=1)

    async def __call__(self, name: str, **args: object) -> AgentToolResult:
        return (await self.run(name, **args)).result
