"""Requests shaped as SillyTavern sends them arrive whole: names, example dialogue, notes.

SillyTavern's prompt manager (Chat Completion, "Custom (OpenAI-compatible)")
sends its prompt as messages: the main prompt, the card's fields and the
example dialogue as ``system`` messages before the chat (example lines named
``example_user`` / ``example_assistant``), then the chat, in which the
author's note (depth 4) and ``/sys`` narrator lines are ``system`` messages
at their place. With the default "names behavior" user and assistant messages
carry no ``name``; the names are only in the expanded main prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tavern_agent.chat.formats import parse_chat
from tavern_agent.endpoint.protocol import Names, frontend_chat, parse_request
from tests.endpoint.helpers import Served, serve_endpoint
from tests.runtime.openai_server import OpenAIServer

MODEL = "tavern-agent/default-writer"
REPLY = "*Seraphina sets a cup of tea by the bed.* Drink; the wind will pass."
# The model signs its draft as the history shows the speakers; the frontend adds the name.
TURNS = [
    [("workspace_write_file", {"file_path": "output/main.md", "content": f"Seraphina: {REPLY}"})],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {})],
]
SYS_LINE = "The wind picks up outside the glade."
AUTHORS_NOTE = "[Author's note: Seraphina speaks softly and never hurries.]"
# What SillyTavern 1.19 sends for a chat with Seraphina as user Ann.
ST_119 = [
    {
        "role": "system",
        "content": "Write Seraphina's next reply in a fictional chat between Seraphina and Ann.",
    },
    {"role": "system", "content": "Seraphina is the guardian of the Glade of Eldoria."},
    {"role": "system", "content": "[Seraphina's personality: caring, patient, fierce]"},
    {"role": "system", "content": "[Circumstances and context of the dialogue: Ann woke hurt.]"},
    {"role": "system", "content": "[Example Chat]"},
    {"role": "system", "name": "example_user", "content": "What is this place?"},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "*She smiles.* The Glade, my home.",
    },
    {"role": "system", "content": "[Start a new Chat]"},
    {"role": "assistant", "content": "*You wake in a sunlit glade.* Easy now, traveler."},
    {"role": "user", "content": "Where am I?"},
    {"role": "assistant", "content": "In the Glade of Eldoria. You were hurt."},
    {"role": "system", "content": SYS_LINE},
    {"role": "user", "content": "Who are you?"},
    {"role": "system", "content": AUTHORS_NOTE},
    {"role": "assistant", "content": "I am Seraphina. Rest."},
    {"role": "user", "content": "I can't sleep."},
    {"role": "assistant", "content": "Then listen to the leaves."},
    {"role": "user", "content": "Stay with me?"},
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, OpenAIServer]]:
    data = tmp_path_factory.mktemp("st") / "data"
    names = ["--user-name", "Wren", "--character-name", "Lyra"]
    with OpenAIServer(TURNS) as upstream, serve_endpoint(data, upstream.base_url, *names) as s:
        yield s, upstream


def _send(server: Served, messages: list[dict[str, Any]], **extra: Any) -> tuple[str, Path]:
    client = openai.OpenAI(base_url=server.url, api_key=server.key)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_body=extra or None,
    )
    content = raw.parse().choices[0].message.content
    assert content is not None
    run_id = raw.headers["x-tavern-agent-run"]
    (run_dir,) = server.data_dir.glob(f"chats/*/runs/{run_id}")
    return content, run_dir


def test_a_sillytavern_119_request_arrives_whole(served: tuple[Served, OpenAIServer]) -> None:
    server, upstream = served
    asked = len(upstream.bodies)
    content, run_dir = _send(server, ST_119)
    assert content == REPLY  # no "Seraphina: " shown twice

    chat = parse_chat((run_dir / "input" / "frontend-chat.jsonl").read_bytes())
    assert (chat.user_name, chat.character_name) == ("Ann", "Seraphina")
    shown = [(m.name, m.role, m.mes) for m in chat.messages[:10]]
    assert shown == [
        ("Seraphina", "assistant", "*You wake in a sunlit glade.* Easy now, traveler."),
        ("Ann", "user", "Where am I?"),
        ("Seraphina", "assistant", "In the Glade of Eldoria. You were hurt."),
        ("System", "system", SYS_LINE),
        ("Ann", "user", "Who are you?"),
        ("System", "system", AUTHORS_NOTE),
        ("Seraphina", "assistant", "I am Seraphina. Rest."),
        ("Ann", "user", "I can't sleep."),
        ("Seraphina", "assistant", "Then listen to the leaves."),
        ("Ann", "user", "Stay with me?"),
    ]
    assert chat.messages[3].extra == {"type": "narrator"} and not chat.messages[3].hidden

    (prompt_file,) = run_dir.glob("input/invocations/*/prompt.json")
    prompt = json.dumps(json.loads(prompt_file.read_text()), ensure_ascii=False)
    first = upstream.bodies[asked]["messages"]
    assert json.dumps(first, ensure_ascii=False).count(SYS_LINE) == 1
    material = "\n".join(str(m["content"]) for m in first)
    for text in (material, prompt):
        assert "as Seraphina" in text
        # Example dialogue keeps who says what, with the chat's own names.
        assert "Ann: What is this place?" in text
        assert "Seraphina: *She smiles.* The Glade, my home." in text
        assert "example_user" not in text and "example_assistant" not in text
    # The notes stand at their place among the floors, as narrator lines.
    lines = [line for line in material.splitlines() if line.startswith("[")]
    assert lines[2:6] == [
        "[2] Seraphina: In the Glade of Eldoria. You were hurt.",
        f"[3] System: {SYS_LINE}",
        "[4] Ann: Who are you?",
        f"[5] System: {AUTHORS_NOTE}",
    ]
    context = material[material.index("## The chat frontend's context") :]
    assert SYS_LINE not in context and AUTHORS_NOTE not in context


def test_names_from_serve_defaults_and_the_request_field(
    served: tuple[Served, OpenAIServer],
) -> None:
    server, _ = served
    plain = [
        {"role": "system", "content": "A quiet inn."},
        {"role": "user", "content": "Hello?"},
    ]
    _, run_dir = _send(server, plain)
    chat = parse_chat((run_dir / "input" / "frontend-chat.jsonl").read_bytes())
    assert (chat.user_name, chat.character_name) == ("Wren", "Lyra")
    assert chat.messages[0].name == "Wren"

    content, run_dir = _send(server, ST_119, user_name="Ann B.", character_name="Seraphina")
    chat = parse_chat((run_dir / "input" / "frontend-chat.jsonl").read_bytes())
    assert (chat.user_name, chat.character_name) == ("Ann B.", "Seraphina")
    assert content == REPLY


def _request(messages: list[dict[str, Any]], **extra: Any) -> Any:
    return parse_request(json.dumps({"messages": messages, **extra}).encode())


def test_names_in_message_content_are_taken_and_removed() -> None:
    """SillyTavern's "names in message content" style prefixes every floor."""
    request = _request(
        [
            {"role": "system", "content": "A card."},
            {"role": "assistant", "content": "Seraphina: Welcome."},
            {"role": "user", "content": "Ann: Thanks: I needed that."},
            {"role": "assistant", "content": "Seraphina: Rest now."},
        ]
    )
    chat = frontend_chat(request, Names("Wren", "Lyra"))
    assert (chat.user, chat.character) == ("Ann", "Seraphina")
    assert [(f.name, f.text) for f in chat.floors] == [
        ("Seraphina", "Welcome."),
        ("Ann", "Thanks: I needed that."),
        ("Seraphina", "Rest now."),
    ]
    # One message that happens to start "Note: " names nobody.
    alone = frontend_chat(_request([{"role": "user", "content": "Note: the ford is deep."}]))
    assert alone.user == "User" and alone.floors[0].text == "Note: the ford is deep."


def test_the_name_fields_win_over_the_main_prompt() -> None:
    named = [dict(m) for m in ST_119]
    named[8]["name"] = "Sera"
    chat = frontend_chat(_request(named))
    assert (chat.user, chat.character) == ("Ann", "Sera")
    assert chat.context[6] == "Sera: *She smiles.* The Glade, my home."
    with pytest.raises(ValueError, match="'character_name' must be a string"):
        _request(ST_119, character_name=7)
