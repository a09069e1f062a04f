"""The run policy through whole scripted runs: auto-publish, no stranded runs, finish rules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tavern_agent.assembly import ChatSource
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import Profile
from tavern_agent.extensions.python import target_of
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import call, calls
from tavern_agent.tools.context import CallContext
from tests.runtime.helpers import (
    COMMIT,
    FINISH,
    WRITER_TOOLS,
    Harness,
    events,
    profile,
    results,
    write,
)

SHELL_FAIL = ("workspace_shell", {"command": "exit 3"})


def with_shell(**limits: Any) -> Profile:
    data: dict[str, Any] = {
        "id": "writer",
        "name": "Writer",
        "tools": {"allow": [*WRITER_TOOLS, "builtin:workspace.shell"]},
    }
    if limits:
        data["limits"] = {"maxCallsPerInvocation": limits["max_calls"]}
    return Profile.from_json(data)


def confirmed(h_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["payload"] for e in h_events if e["type"] == "commit_confirmed"]


def test_budget_spent_before_a_commit_auto_publishes_the_body_and_ends_partial(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    # Two calls allowed: the draft, then a search; the commit would be the third.
    script = [
        call(*write("Seraphina raises the lantern.")),
        call("chat_search", {"query": "bridge"}),
        call(*COMMIT),
        call(*FINISH),
    ]
    run, result = h.drive(script, profile(max_calls=2))
    assert result.status == "partial_success"
    assert result.error_code == "agent.tool_budget_exhausted"
    assert result.rounds == 2  # stopped at once, not after burning its rounds
    assert [c.get("auto") for c in confirmed(events(run))] == [True]
    assert h.chat_messages()[-1]["mes"] == "Seraphina raises the lantern."
    assert h.chat_messages()[-1]["extra"]["agent"]["runId"] == run.id


def test_budget_spent_with_nothing_written_fails_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    script = [call("chat_search", {"query": "bridge"}), call(*COMMIT), call(*FINISH)]
    _, result = h.drive(script, profile(max_calls=1))
    assert result.status == "failed" and result.rounds == 1
    assert result.error_code == "agent.tool_budget_exhausted"
    assert "committed" in result.message
    assert len(h.chat_messages()) == 3  # the chat is untouched


def test_a_failed_shell_call_clears_the_candidate(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    script = [
        calls(write("Half an edit."), SHELL_FAIL),
        call(*write("The full reply.")),
        call(*COMMIT),
        call(*FINISH),
    ]
    run, result = h.drive(script, with_shell())
    assert result.status == "completed"
    got = results(run)
    assert got[1]["errorCode"] == "workspace.shell_exit"
    # round 1 published nothing (the shell failed after the edit); round 2 did
    published = confirmed(events(run))
    assert [c.get("auto", False) for c in published] == [True, False]
    candidate = [
        e["payload"]["candidate"] for e in events(run) if e["type"] == "auto_commit_candidate"
    ]
    assert candidate[:2] == [True, False]
    assert h.chat_messages()[-1]["mes"] == "The full reply."


def test_auto_publish_stops_after_the_first_explicit_commit(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    script = [
        call(*write("First draft.")),
        call(*COMMIT),
        call(*write("Second draft, not committed.")),
        call(*FINISH),
    ]
    run, result = h.drive(script)
    assert result.status == "completed"
    assert [c.get("auto", False) for c in confirmed(events(run))] == [True, False]
    assert h.chat_messages()[-1]["mes"] == "First draft."


def test_finish_after_a_failed_call_of_the_same_turn_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    script = [
        call(*write("The reply.")),
        call(*COMMIT),
        calls(("workspace_read_file", {"file_path": "output/missing.md"}), FINISH),
        call(*FINISH),
    ]
    run, result = h.drive(script)
    got = results(run)
    assert got[2]["isError"] and got[3]["errorCode"] == "agent.finish_after_failed_call"
    assert "workspace_read_file" in got[3]["content"]
    assert result.status == "completed" and result.rounds == 4
    assert h.chat_messages()[-1]["mes"] == "The reply."  # the commit stays


def test_a_finish_accepted_before_a_kill_completes_on_resume(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive([call(*write("Done.")), call(*COMMIT), call(*FINISH)])
    assert result.status == "completed"
    # Cut the journal right after finish_accepted: the fold must end the run there.
    journal = run.run_dir / "events.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"type":"finish_accepted"' in line)
    journal.write_text("".join(lines[: cut + 1]), encoding="utf-8")
    opened = Run.open(h.assembly, run.run_dir)
    engine = h.engine(opened, [])
    try:
        resumed = asyncio.run(engine.resume())
    finally:
        engine.close()
    assert resumed.status == "completed" and resumed.commits == result.commits
    assert len(h.chat_messages()) == 4


def test_an_extension_call_in_a_chat_run_names_the_chat(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    chat_run, _, _ = h.assembly.chat_run(
        ChatSource(h.chat_path), tmp_path / "run", run_id="run_x", profile_id="writer"
    )
    snapshot = h.assembly.snapshot(profile(), Scene.CHAT)
    ctx = CallContext("run_x", snapshot.id, "call_1", 1, Scene.CHAT, snapshot, chat=chat_run)
    target = target_of(ctx)
    assert target == {
        "kind": "chat",
        "runId": "run_x",
        "stableChatId": chat_run.input.stable_chat_id,
        "chatRef": "chat",
    }
    assert target["stableChatId"]
