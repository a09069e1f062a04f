"""The user's own SillyTavern folder (``data/<user>/``): card, chat, lorebooks, settings.

``--st-data DIR`` points at the folder SillyTavern keeps one user's files in::

    characters/<card>.png             character cards (the file stem is the avatar id)
    chats/<card stem>/<chat>.jsonl    each character's chats
    groups/<id>.json                  groups: name, members (card files), chats, chat_id
    group chats/<chat id>.jsonl       group chats
    worlds/<name>.json                lorebooks
    settings.json                     world info settings and selection, persona, tags

:func:`open_st_data` picks the character by name, the chat by file name or
``latest`` (a group's chat by the group's name), and the lorebooks SillyTavern
would scan for it (``getSortedEntries``): the chat's bound book
(``chat_metadata.world_info``), the persona's book, the character's own book
(the card's ``extensions.world`` plus its extra books in
``world_info.charLore``; in a group, the replying member's only) and the
global selection (``world_info.globalSelect``), each book once. A card's embedded
lorebook counts only once imported into ``worlds/`` (as in SillyTavern).
Everything is read only; commits go to the chat file itself, through a
symlink to the real file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tavern_agent.chat.activation import ActivationSettings
from tavern_agent.chat.cards import CharacterCard, parse_card
from tavern_agent.chat.formats import ChatFormatError, parse_chat
from tavern_agent.chat.world_books import WorldBook, parse_world
from tavern_agent.core import json_input

LATEST = "latest"

# settings.json world_info_settings key → ActivationSettings field.
_SETTINGS = {
    "world_info_depth": "scan_depth",
    "world_info_case_sensitive": "case_sensitive",
    "world_info_match_whole_words": "match_whole_words",
    "world_info_include_names": "include_names",
    "world_info_recursive": "recursive",
    "world_info_max_recursion_steps": "max_recursion_steps",
    "world_info_min_activations": "min_activations",
    "world_info_min_activations_depth_max": "min_activations_depth_max",
    "world_info_budget": "budget_percent",
    "world_info_budget_cap": "budget_cap",
    "world_info_use_group_scoring": "use_group_scoring",
    "world_info_character_strategy": "character_strategy",
}


class StDataError(ValueError):
    """The SillyTavern folder lacks what was asked for (the message says what exists)."""


@dataclass(frozen=True, slots=True)
class Participants:
    """Who a chat is between, as macros and character filters see them.

    ``user_name`` and ``persona`` are ``{{user}}`` and its description (the
    chat's own user name when ``None``); ``character_file`` and
    ``character_tags`` are the card's file stem and tags (characterFilter);
    ``group_members`` are a group chat's member names (``{{group}}``).
    """

    user_name: str | None = None
    persona: str = ""
    character_file: str = ""
    character_tags: frozenset[str] | None = None
    group_members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StSelection:
    """What ``--st-data`` chose: the chat, its card, lorebooks, settings and who takes part."""

    chat_file: Path
    card: CharacterCard | None
    books: tuple[WorldBook, ...]
    settings: ActivationSettings
    participants: Participants = field(default_factory=Participants)
    group: str | None = None
    notes: tuple[str, ...] = field(default=())  # books named but missing, and the like


def read_settings(root: Path) -> dict[str, Any]:
    """``settings.json`` as an object (empty when missing)."""
    path = root / "settings.json"
    if not path.is_file():
        return {}
    try:
        data = json_input.loads(path.read_bytes())
    except (json_input.JsonInputError, OSError) as exc:
        raise StDataError(f"{path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def activation_settings(settings: dict[str, Any]) -> ActivationSettings:
    """SillyTavern's world info settings, and the model context the budget is a share of."""
    wi = settings.get("world_info_settings")
    wi = wi if isinstance(wi, dict) else {}
    values: dict[str, Any] = {}
    defaults = ActivationSettings()
    for key, name in _SETTINGS.items():
        value = wi.get(key)
        kind = type(getattr(defaults, name))
        if isinstance(value, bool) and kind is bool:
            values[name] = value
        elif isinstance(value, int | float) and not isinstance(value, bool) and kind is not bool:
            values[name] = kind(value)
    context = _max_context(settings)
    if context:
        values["max_context"] = context
    return replace(defaults, **values)


def _max_context(settings: dict[str, Any]) -> int | None:
    """The context size SillyTavern gives world info: the chat-completion model's, or the
    text-completion context minus the response length."""
    oai = settings.get("oai_settings")
    if settings.get("main_api") == "openai" and isinstance(oai, dict):
        value = oai.get("openai_max_context")
        return int(value) if isinstance(value, int | float) else None
    context, response = settings.get("max_context"), settings.get("amount_gen")
    if isinstance(context, int | float):
        return int(context) - (int(response) if isinstance(response, int | float) else 0)
    return None


def _world_info(settings: dict[str, Any]) -> dict[str, Any]:
    wi = settings.get("world_info_settings")
    inner = wi.get("world_info") if isinstance(wi, dict) else None
    return inner if isinstance(inner, dict) else {}


def _cards(root: Path) -> list[tuple[Path, CharacterCard]]:
    found = []
    for path in sorted((root / "characters").glob("*.png")):
        try:
            found.append((path, parse_card(path.read_bytes())))
        except (ChatFormatError, OSError):
            continue  # SillyTavern lists only the cards it can read
    return found


def find_character(root: Path, name: str) -> tuple[Path, CharacterCard]:
    """The card named ``name`` (its name, or its file name), case-insensitively."""
    cards = _cards(root)
    wanted = name.casefold().removesuffix(".png")
    matches = [(p, c) for p, c in cards if wanted in (c.name.casefold(), p.stem.casefold())]
    exact = [(p, c) for p, c in matches if c.name == name or p.stem == name]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    names = ", ".join(sorted({f"{c.name} ({p.name})" for p, c in cards})) or "none"
    if matches:
        files = ", ".join(p.name for p, _ in matches)
        raise StDataError(f"several cards are named {name!r}: {files}; give the file name")
    raise StDataError(f"no character {name!r} in {root / 'characters'}; there are: {names}")


def _pick_chat(folder: Path, chat: str, current: str | None, what: str) -> Path:
    chats = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not chats:
        raise StDataError(f"{what} has no chats in {folder}")
    if chat == LATEST:
        if current and (folder / f"{current}.jsonl").is_file():
            return folder / f"{current}.jsonl"  # the chat SillyTavern opens
        return max(chats, key=lambda p: p.stat().st_mtime_ns)
    wanted = chat.removesuffix(".jsonl")
    for path in chats:
        if path.stem == wanted:
            return path
    names = ", ".join(p.stem for p in chats[:20])
    raise StDataError(f"{what} has no chat {chat!r}; its chats: {names}")


def _group(root: Path, name: str) -> dict[str, Any]:
    groups = []
    for path in sorted((root / "groups").glob("*.json")):
        try:
            data = json_input.loads(path.read_bytes())
        except (json_input.JsonInputError, OSError):
            continue  # SillyTavern lists only the groups it can read
        if isinstance(data, dict):
            groups.append(data)
    for data in groups:
        if str(data.get("name", "")).casefold() == name.casefold() or data.get("id") == name:
            return data
    names = ", ".join(str(g.get("name")) for g in groups) or "none"
    raise StDataError(f"no group {name!r} in {root / 'groups'}; there are: {names}")


def _book(root: Path, name: str, source: str) -> WorldBook | None:
    path = root / "worlds" / f"{name}.json"
    if not path.is_file():
        return None
    try:
        book = parse_world(path.read_bytes(), name)
    except (ChatFormatError, OSError) as exc:
        raise StDataError(f"{path}: {exc}") from None
    book.source = source
    return book


def _character_books(card: CharacterCard, stem: str, settings: dict[str, Any]) -> list[str]:
    ext = card.data.get("extensions")
    names = []
    if isinstance(ext, dict) and isinstance(ext.get("world"), str) and ext["world"]:
        names.append(ext["world"])
    lore = _world_info(settings).get("charLore")
    for item in lore if isinstance(lore, list) else []:
        if isinstance(item, dict) and item.get("name") == stem:
            extra = item.get("extraBooks")
            if isinstance(extra, list):
                names.extend(b for b in extra if isinstance(b, str))
    return names


def _persona(settings: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """The current persona: name, description and bound lorebook."""
    power = settings.get("power_user")
    power = power if isinstance(power, dict) else {}
    avatar = settings.get("user_avatar")
    personas = power.get("personas")
    name = personas.get(avatar) if isinstance(personas, dict) else None
    name = name if isinstance(name, str) and name else settings.get("username")
    description = power.get("persona_description")
    book = power.get("persona_description_lorebook")
    return (
        name if isinstance(name, str) and name else None,
        description if isinstance(description, str) else "",
        book if isinstance(book, str) and book else None,
    )


def user_folder(root: Path) -> Path:
    """``root`` if it is a ``data/<user>/`` folder; for SillyTavern's own folder or its
    ``data/``, the ``default-user`` inside."""
    for candidate in (root, root / "default-user", root / "data" / "default-user"):
        if (candidate / "characters").is_dir():
            return candidate
    raise StDataError(
        f"{root} is not a SillyTavern user folder (no characters/ in it); "
        "give SillyTavern/data/<user>/"
    )


def open_st_data(
    root: Path, *, character: str | None = None, chat: str = LATEST, group: str | None = None
) -> StSelection:
    """Choose the chat, card and lorebooks in a SillyTavern ``data/<user>/`` folder
    (SillyTavern's own folder or its ``data/`` mean ``data/default-user/``)."""
    root = user_folder(root)
    settings = read_settings(root)
    members: tuple[str, ...] = ()
    cards: list[tuple[Path, CharacterCard]] = []
    if group is not None:
        data = _group(root, group)
        member_files = [m for m in data.get("members", []) if isinstance(m, str)]
        by_file = {p.name: (p, c) for p, c in _cards(root)}
        cards = [by_file[m] for m in member_files if m in by_file]
        members = tuple(c.name for _, c in cards)
        current = data.get("chat_id") if isinstance(data.get("chat_id"), str) else None
        chat_file = _pick_chat(root / "group chats", chat, current, f"group {data.get('name')!r}")
        listed = data.get("chats")
        if chat == LATEST and current is None and isinstance(listed, list):
            mine = [root / "group chats" / f"{c}.jsonl" for c in listed if isinstance(c, str)]
            mine = [p for p in mine if p.is_file()]
            chat_file = max(mine, key=lambda p: p.stat().st_mtime_ns) if mine else chat_file
        card_path, card = _speaker(root, cards, character, chat_file)
        cards = [(card_path, card)]  # SillyTavern scans the replying member's books only
    else:
        if character is None:
            raise StDataError("--st-data needs --character NAME or --group NAME")
        card_path, card = find_character(root, character)
        current = card.raw.get("chat") if isinstance(card.raw.get("chat"), str) else None
        chat_file = _pick_chat(root / "chats" / card_path.stem, chat, current, card.name)
        cards = [(card_path, card)]
    return _selection(root, settings, chat_file, card_path, card, cards, group, members)


def _speaker(
    root: Path, cards: list[tuple[Path, CharacterCard]], character: str | None, chat_file: Path
) -> tuple[Path, CharacterCard]:
    """The group member who replies: the one named, else the newest to speak, else the first."""
    if not cards:
        raise StDataError("the group has no member cards in characters/")
    if character is not None:
        wanted = character.casefold()
        for path, card in cards:
            if wanted in (card.name.casefold(), path.stem.casefold()):
                return path, card
        names = ", ".join(c.name for _, c in cards)
        raise StDataError(f"{character!r} is not in the group; its members: {names}")
    try:
        chat = parse_chat(chat_file.read_bytes())
    except (ChatFormatError, OSError):
        return cards[0]
    speaker = chat.speaker(user=False)
    return next(((p, c) for p, c in cards if c.name == speaker), cards[0])


def _selection(
    root: Path,
    settings: dict[str, Any],
    chat_file: Path,
    card_path: Path,
    card: CharacterCard,
    cards: list[tuple[Path, CharacterCard]],
    group: str | None,
    members: tuple[str, ...],
) -> StSelection:
    try:
        chat = parse_chat(chat_file.read_bytes())
    except (ChatFormatError, OSError) as exc:
        raise StDataError(f"{chat_file}: {exc}") from None
    user, persona, persona_book = _persona(settings)
    selected = [n for n in _world_info(settings).get("globalSelect", []) if isinstance(n, str)]
    bound = chat.metadata.get("world_info")
    chat_book = bound if isinstance(bound, str) and bound and bound not in selected else None
    wanted: list[tuple[str, str]] = []  # (book, source), first claim wins
    if chat_book:
        wanted.append((chat_book, "chat"))
    if persona_book and persona_book != chat_book and persona_book not in selected:
        wanted.append((persona_book, "persona"))
    for path, member in cards:
        for name in _character_books(member, path.stem, settings):
            if name not in selected and name != chat_book:
                wanted.append((name, "character"))
    wanted.extend((name, "global") for name in selected)
    books: list[WorldBook] = []
    notes: list[str] = []
    seen: set[str] = set()
    for name, source in wanted:
        if name in seen:
            continue
        seen.add(name)
        book = _book(root, name, source)
        if book is None:
            notes.append(f"lorebook {name!r} ({source}) is not in {root / 'worlds'}")
        else:
            books.append(book)
    tag_map = settings.get("tag_map")
    tags = tag_map.get(card_path.name) if isinstance(tag_map, dict) else None
    return StSelection(
        chat_file=chat_file,
        card=card,
        books=tuple(books),
        settings=activation_settings(settings),
        participants=Participants(
            user_name=user,
            persona=persona,
            character_file=card_path.stem,
            character_tags=frozenset(t for t in tags if isinstance(t, str))
            if isinstance(tags, list)
            else None,
            group_members=members,
        ),
        group=group,
        notes=tuple(notes),
    )
