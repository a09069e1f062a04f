"""Re-create ``examples/recorded-run/`` from a scripted model (no network).

No model runs on the machines this project is built on, so the example's
responses come from the script below, answered through the same run loop a
real model would drive. The recording holds each round's response
(``model-responses/round-NNN.json``) and the journal of the recording run.
Run: ``python examples/record_example.py``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.chat.cards import parse_card
from tavern_agent.chat.world_books import parse_world
from tavern_agent.core.profile import Profile
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, calls

HERE = Path(__file__).resolve().parent
DRAFT = (
    "*Seraphina raises her lantern and leads you down through the willows.* "
    '"Step where I step," *she murmurs, as the cold water climbs to your knees.* '
    '"The eels sleep this late in the year. Mostly."\n'
)
SCENE = '{"route": "willow ford", "hazards": ["eel", "moss"], "time": "before dawn"}\n'
# Bash, then jq over the read-only chat mount: who is in the chat and how long it is.
CHAT_FACTS = (
    "jq -r '\"\\(.character): \\(.floorCount) floors\"' /chat/chat.json\n"
    "jq -s -r 'map(.name) | join(\" > \")' /chat/floors/*/meta.json"
)
# jq over a file the agent wrote, then grep the draft for what it names.
HAZARDS = (
    "jq -r '.route' /scratch/scene.json\n"
    'grep -Eio "$(jq -r \'.hazards | join("|")\' /scratch/scene.json)" /output/main.md | sort -u'
)
# Python (the sandbox's subset) for the length check before committing.
WORD_COUNT = """python3 - <<'PY'
text = open('/output/main.md').read()
words = text.split()
quoted = text.count('"') // 2
print(len(words), 'words,', quoted, 'spoken lines')
PY"""
SCRIPT = [
    calls(
        ("chat_search", {"query": "bridge ford"}),
        ("worldinfo_read_activated", {}),
        ("workspace_shell", {"command": CHAT_FACTS}),
        text="First I check what was said about the crossing and what the world says of it.",
    ),
    calls(
        ("chat_read_messages", {"floors": [{"floor": 2}]}),
        ("dice_roll", {"formula": "1d20+2"}),
    ),
    calls(
        ("workspace_write_file", {"file_path": "scratch/scene.json", "content": SCENE}),
        ("workspace_write_file", {"file_path": "output/main.md", "content": DRAFT}),
        (
            "workspace_write_file",
            {"file_path": "persist/notes.md", "content": "- Rowan crossed the willow ford.\n"},
        ),
    ),
    calls(
        ("workspace_search_files", {"pattern": "(?i)lantern|eel", "path": "output"}),
        ("workspace_shell", {"command": HAZARDS}),
        ("workspace_read_file", {"file_path": "output/main.md"}),
    ),
    calls(
        (
            "workspace_apply_patch",
            {
                "file_path": "output/main.md",
                "old_string": "the cold water",
                "new_string": "the cold, moss-slick water",
            },
        )
    ),
    calls(("workspace_shell", {"command": WORD_COUNT})),
    calls(("workspace_commit", {"reason": "Seraphina leads Rowan across the ford"})),
    calls(("workspace_finish", {"reason": "the reply is posted"})),
]


def main() -> None:
    out = HERE / "recorded-run"
    with tempfile.TemporaryDirectory() as tmp:
        chat = Path(tmp) / "chat.jsonl"
        shutil.copyfile(HERE / "chat.jsonl", chat)
        spec = RunSpec(
            Profile.load(HERE / "profile.json"),
            chat_file=chat,
            books=(parse_world((HERE / "eldoria-world.json").read_bytes(), "eldoria-world"),),
            card=parse_card((HERE / "seraphina-card.json").read_bytes()),
            seed=7,
            model={"kind": "scripted", "script": "examples/record_example.py"},
        )
        run = Run.start(Assembly(Path(tmp) / "data"), spec)
        engine = Engine(run, ScriptedGateway(SCRIPT))
        result = asyncio.run(engine.start())
        engine.close()
        assert result.status == "completed", result
        failed = [
            e["payload"]
            for e in map(json.loads, (run.run_dir / "events.jsonl").read_text().splitlines())
            if e["type"] == "tool_call_completed" and e["payload"]["isError"]
        ]
        assert not failed, failed  # every scripted call, shell steps included, must succeed
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(run.run_dir / "model-responses", out / "model-responses")
        shutil.copyfile(run.run_dir / "events.jsonl", out / "events.jsonl")
    print(f"recorded {result.rounds} rounds in {out}")


if __name__ == "__main__":
    main()
