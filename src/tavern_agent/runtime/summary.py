"""What a run shows of itself: its summary row, and the chat message it committed.

Read by ``runs list``/``runs show``, by ``run`` at the end, and by the endpoint
that answers with the committed message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.chat.formats import parse_chat
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.journal import read_journal
from tavern_agent.runtime.loop import RunResult
from tavern_agent.runtime.run import Run, RunNotFound, load_record


def committed_message(run: Run, result: RunResult) -> str | None:
    """The text of the chat message the run committed, as the chat file holds it now."""
    if run.chat is None or result.floor is None:
        return None
    path = getattr(run.chat.repository, "path", None)
    if not isinstance(path, Path):
        return None
    chat = parse_chat(path.read_bytes())
    if result.floor >= len(chat.messages):
        return None
    return chat.messages[result.floor].mes


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def run_summary(run_dir: Path) -> dict[str, Any]:
    """What ``runs list`` shows of a run: id, scene, status, rounds, commits, where."""
    try:
        record = load_record(run_dir)
    except RunNotFound as exc:  # listed, not fatal: the other runs still show
        return {"runId": run_dir.name, "scene": "", "status": "damaged", "problem": str(exc)}
    status = "interrupted"
    ended: ev.RunEnded | None = None
    for journaled in reversed(read_journal(run_dir / run_layout.JOURNAL_FILE)):
        if isinstance(journaled.event, ev.RunEnded):
            ended = journaled.event
            status = ended.status
            break
        if isinstance(journaled.event, ev.RunResumed | ev.RunStarted):
            break
    return {
        "runId": record["runId"],
        "scene": record["scene"],
        "status": status,
        "rounds": None if ended is None else ended.rounds,
        "commits": None if ended is None else ended.commits,
        "createdAt": _text(record.get("createdAt")),
        "chatFile": _text(record.get("chatFile")),
        "session": _text(record.get("session")),
        "runDir": str(run_dir),
    }
