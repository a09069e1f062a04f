"""Invocations, revision, cancellation, persist/ and resume without killing a process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.chat import index_store
from tavern_agent.core.descriptors import ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.persist import PersistStore
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import ScriptedGateway, call, calls
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext
from tests.chat.test_index_store import Builds
from tests.runtime.helpers import COMMIT, FINISH, Harness, events, profile, results, types, write


def test_revision_reuses_the_snapshot_and_counts_on_its_own(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run = h.start(profile(max_calls=4))
    script = [
        call(*write("First.")),
        call(*COMMIT),
        call(*FINISH),
        call("workspace_read_file", {"file_path": "output/main.md"}),
        call(*write("Second.")),
        call(*COMMIT),
        call(*FINISH),
    ]
    engine = h.engine(run, script)
    assert asyncio.run(engine.start()).status == "completed"
    result = asyncio.run(engine.revise("Make it shorter."))
    engine.close()
    assert result.status == "completed"
    root, revision = run.invocations
    assert revision.snapshot is root.snapshot and revision.kind == "revision"
    assert root.gate.calls_used == 3 and revision.gate.calls_used == 4  # each its own budget
    messages = h.chat_messages()
    assert len(messages) == 4 and messages[-1]["mes"] == "Second."
    started = [e for e in events(run) if e["type"] == "invocation_started"]
    assert [e["payload"]["snapshotId"] for e in started] == [root.id, root.id]


def test_persist_is_published_at_finish_and_seen_by_the_next_run(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            calls(write("Seraphina fears rivers.\n", "persist/notes.md"), write("Reply.")),
            call(*COMMIT),
            call(*FINISH),
        ]
    )
    assert result.status == "completed"
    assert "persist_published" in types(run)
    second = h.start(run_id="run_second")
    assert (second.workspace.root / "persist" / "notes.md").read_text() == (
        "Seraphina fears rivers.\n"
    )
    assert second.persist_base is not None and second.persist_base.version is not None


def test_a_failed_run_publishes_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive([call(*write("note", "persist/n.md"))], profile(max_rounds=1))
    assert result.status == "failed"
    assert run.chat_workspace is not None
    assert PersistStore(run.chat_workspace).head().version is None


def test_concurrent_persist_publication_is_a_conflict(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    first = h.start(run_id="run_a")
    second = h.start(run_id="run_b")
    script_a = [
        call(*write("A\n", "persist/n.md")),
        call(*write("a")),
        call(*COMMIT),
        call(*FINISH),
    ]
    script_b = [
        call(*write("B\n", "persist/n.md")),
        call(*write("b")),
        call(*COMMIT),
        call(*FINISH),
    ]
    for run, script in ((first, script_a), (second, script_b)):
        engine = h.engine(run, script)
        asyncio.run(engine.start())
        engine.close()
    assert "persist_published" in types(first) and "persist_conflict" in types(second)
    assert first.chat_workspace is not None
    head = PersistStore(first.chat_workspace).head()
    assert head.version is not None and head.version.startswith("run_a")


def test_cancel_pairs_the_pending_calls_and_journals_the_cancel(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def wait_forever(args: dict[str, object], ctx: CallContext) -> ExternalReceipt:
        started.set()
        await asyncio.sleep(3600)
        return ExternalReceipt("never")

    source = InMemoryToolSource()
    source.add(ToolDescriptor(ToolId.extension("e", "slow"), "Waits.", label="e"), wait_forever)
    h = Harness(tmp_path)
    h.assembly = Assembly(h.data, extensions=source)
    prof = profile().model_copy(
        update={"tools": profile().tools.model_copy(update={"allow": ("extension/e:slow",)})}
    )
    run = h.start(prof)
    engine = Engine(run, ScriptedGateway([calls(("slow", {}), ("slow", {}))]), fsync=False)

    async def main() -> None:
        task = asyncio.create_task(engine.start())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    engine.close()
    kinds = types(run)
    assert kinds[-1] == "run_cancelled"
    got = results(run)
    assert [r["errorCode"] for r in got] == ["tool.outcome_unknown", "run.cancelled"]
    assert "check the current state" in got[0]["content"].lower()


def test_resume_after_an_interrupted_turn_pairs_unknown_calls(tmp_path: Path) -> None:
    """Simulate a process that stopped mid-turn by cutting the journal, then resume."""
    h = Harness(tmp_path)
    run, _ = h.drive([calls(write("Draft."), COMMIT), call(*FINISH)])
    journal = run.run_dir / "events.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"commit_requested"' in line)
    journal.write_bytes(b"".join(lines[: cut + 1]) + b'{"torn')
    reopened = Run.open(h.assembly, run.run_dir)
    engine = h.engine(reopened, [calls(write("Draft."), COMMIT), call(*FINISH)])
    result = asyncio.run(engine.resume())
    engine.close()
    assert result.status == "completed" and result.commits == 1
    evs = events(reopened)
    reconciled = [e for e in evs if e["type"] == "commit_confirmed"]
    assert reconciled[-1]["payload"].get("reconciled") is True
    assert len(h.chat_messages()) == 4  # one committed message, not two
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))


def test_a_session_run_ends_with_its_text_answer(tmp_path: Path) -> None:
    from tavern_agent.runtime.run import RunSpec
    from tavern_agent.runtime.scripted import say

    h = Harness(tmp_path)
    spec = RunSpec(profile(), session="notes", task="Write a packing list to work/list.md.")
    run = Run.start(h.assembly, spec)
    engine = h.engine(
        run,
        [
            call("workspace_write_file", {"file_path": "work/list.md", "content": "- rope\n"}),
            say("The list is in work/list.md."),
        ],
    )
    result = asyncio.run(engine.start())
    engine.close()
    assert result.status == "completed" and result.final_text == "The list is in work/list.md."
    assert (run.workspace.root / "work" / "list.md").read_text() == "- rope\n"
    assert run.run_dir == run.workspace.root / "runs" / run.id  # records beside the workspace
    assert "workspace_finish" not in run.invocations[0].snapshot.model_names
    assert len(h.chat_messages()) == 3  # the chat is untouched


def test_a_run_reuses_the_saved_chat_search_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path)
    script = [
        call("chat_search", {"query": "river lantern"}),
        calls(write("A reply."), COMMIT),
        call(*FINISH),
    ]
    h.drive(script)  # builds and saves the index
    (saved,) = h.data.path.glob(f"chats/*/mount/{index_store.FILE}")
    builds = Builds(monkeypatch)
    second, result = h.drive(script)
    assert result.status == "completed"
    # The second run's search read the saved index (brought up to date with the
    # first run's reply) instead of building one.
    assert builds.count == 0
    found = results(second)[0]["content"]
    assert "floor 1" in found and "lantern" in found
    assert saved.is_file()
    # A resumed run opens the chat with the same saved index.
    assert Run.open(h.assembly, second.run_dir).chat.index_dir == saved.parent  # type: ignore[union-attr]


def test_a_source_gone_at_resume_gives_an_unavailable_result(tmp_path: Path) -> None:
    async def here(args: dict[str, object], ctx: CallContext) -> ExternalReceipt:
        return ExternalReceipt("here")

    source = InMemoryToolSource()
    source.add(ToolDescriptor(ToolId.extension("e", "here"), "Answers.", label="e"), here)
    h = Harness(tmp_path)
    h.assembly = Assembly(h.data, extensions=source)
    allow = ("extension/e:here", *profile().tools.allow)
    prof = profile().model_copy(
        update={"tools": profile().tools.model_copy(update={"allow": allow})}
    )
    script = [call("here", {}), calls(write("Draft."), COMMIT), call(*FINISH)]
    run = h.start(prof)
    engine = h.engine(run, script)
    asyncio.run(engine.start())
    engine.close()
    # Cut the journal back to the stored first response: the call had not run yet.
    journal = run.run_dir / "events.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"model_response_stored"' in line)
    journal.write_bytes(b"".join(lines[: cut + 1]))
    # Resumed in a process where the extension is not loaded any more.
    reopened = Run.open(Assembly(h.data), run.run_dir)
    engine = h.engine(reopened, script)
    result = asyncio.run(engine.resume())
    engine.close()
    assert result.status == "completed"
    first = results(reopened)[0]
    assert first["errorCode"] == "tool.unavailable"
    assert "here is unavailable" in first["content"] and "no action was taken" in first["content"]
