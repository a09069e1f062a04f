"""Journal events are typed values: written as the JSON lines they always were, read back
as values; what this code cannot type is kept as it was, never an error."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from tavern_agent.runtime import events as ev
from tavern_agent.runtime.journal import (
    KINDS,
    Journal,
    JournalRecord,
    JournalTail,
    decode_event,
    read_events,
    read_journal,
)
from tavern_agent.runtime.journal_doc import field_docs, journal_doc

REPO = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "node_modules"}


def journals_in_repo() -> list[Path]:
    return sorted(
        p for p in REPO.rglob("events.jsonl") if not SKIP & set(p.relative_to(REPO).parts)
    )


def test_every_journal_in_the_repo_reads_as_typed_events_and_writes_back_the_same() -> None:
    found = journals_in_repo()
    assert REPO / "examples" / "recorded-run" / "events.jsonl" in found
    for path in found:
        lines, records = read_events(path), read_journal(path)
        assert len(records) == len(lines) > 0
        for line, record in zip(lines, records, strict=True):
            assert not isinstance(record.event, ev.Opaque), (path, line)
            assert record.kind == line["type"] and record.seq == line["seq"]
            assert record.level == line["level"] == record.event.level
            # The same keys in the same order, the same values: the shape on disk holds.
            assert list(record.event.payload().items()) == list(line["payload"].items())
            assert record.to_json() == line


def test_conditional_keys_are_written_only_when_the_code_always_wrote_them() -> None:
    plain = ev.CommitConfirmed(call_id="c1", index=1, floor=3, created=True, chars=10)
    auto = ev.CommitConfirmed(call_id="c1", index=1, floor=3, created=False, chars=10, auto=True)
    reconciled = ev.CommitConfirmed(call_id="c1", index=1, floor=None, reconciled=True)
    assert plain.payload() == {"callId": "c1", "index": 1, "floor": 3, "created": True, "chars": 10}
    assert auto.payload()["auto"] is True and auto.payload()["created"] is False
    assert reconciled.payload() == {"callId": "c1", "index": 1, "floor": None, "reconciled": True}
    handoff = ev.InvocationStarted(
        invocation_id="inv_2",
        snapshot_id="snap",
        invocation_kind="handoff",
        revision_of=None,
        tools=["write_file"],
        max_calls=8,
        agent_id="closer",
        parent_invocation_id="inv_1",
        task_id=None,
    )
    assert list(handoff.payload()) == [
        "invocationId",
        "snapshotId",
        "kind",
        "revisionOf",
        "tools",
        "maxCalls",
        "agentId",
        "parentInvocationId",
        "taskId",
    ]
    assert handoff.payload()["taskId"] is None
    unknown_tool = ev.ToolCallRequested(
        round=1,
        invocation_id="inv_1",
        call_id="c1",
        tool_id=None,
        source=None,
        snapshot_id="snap",
        name="no_such_tool",
        arguments={"raw": "{}"},
    )
    assert unknown_tool.payload()["source"] is None and "argumentsRef" not in unknown_tool.payload()


def test_unknown_kinds_and_payloads_that_do_not_fit_are_kept_opaque(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    journal = Journal(path, "run_x", fsync=False)
    journal.write(ev.Opaque("sparkle_added", {"glitter": 3}))  # a newer writer's kind
    journal.write(ev.Opaque("model_request", {"round": "one"}))  # a known kind, wrong shape
    journal.write(ev.FinishAccepted(call_id="c1", invocation_id="inv_1", reason=None))
    journal.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["type"], e["payload"]) for e in lines] == [
        ("sparkle_added", {"glitter": 3}),
        ("model_request", {"round": "one"}),
        ("finish_accepted", {"callId": "c1", "invocationId": "inv_1", "reason": None}),
    ]
    records = read_journal(path)
    assert records[0].event == ev.Opaque("sparkle_added", {"glitter": 3})
    assert records[1].event == ev.Opaque("model_request", {"round": "one"})
    assert records[2].event == ev.FinishAccepted(call_id="c1", invocation_id="inv_1", reason=None)
    assert [r.seq for r in records] == [1, 2, 3]
    assert isinstance(decode_event("run_started", ["not", "an", "object"]), ev.Opaque)
    assert isinstance(JournalRecord.from_json({"type": "model_request"}).event, ev.Opaque)


def test_each_kind_has_its_level_and_the_writer_may_choose_another(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    journal = Journal(path, "run_x", fsync=False)
    seen: list[JournalRecord] = []
    journal.listeners.append(seen.append)
    failed = ev.ToolCallFailed(
        call_id="c1",
        tool_id=None,
        name="x",
        is_error=True,
        error_code="tool.not_found",
        message="No tool x.",
        elapsed_ms=0.0,
        resource_refs=[],
    )
    journal.write(failed)
    journal.write(ev.CommitNotApplied(call_id="c2", index=2), level="error")
    task = {
        "task_id": "task_1",
        "agent_id": "scout",
        "invocation_id": "inv_2",
        "parent_invocation_id": "inv_1",
        "reason": "returned",
        "summary_path": "summaries/scout-result.md",
        "result": {},
    }
    journal.write(ev.TaskFinished(status="completed", **task))
    journal.write(ev.TaskFinished(status="failed", **task))
    journal.close()
    assert [e["level"] for e in read_events(path)] == ["warn", "error", "info", "warn"]
    assert [(r.seq, r.level, r.event) for r in seen] == [
        (r.seq, r.level, r.event) for r in read_journal(path)
    ]


def test_a_follower_gets_each_record_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = JournalTail(path)
    journal = Journal(path, "run_1", fsync=False)
    journal.write(ev.CommitNotApplied(call_id="c1", index=1))
    journal.write(ev.AutoCommitCandidate(candidate=True))
    assert [r.event for r in tail.new_records()] == [
        ev.CommitNotApplied(call_id="c1", index=1),
        ev.AutoCommitCandidate(candidate=True),
    ]
    assert tail.new_records() == []
    journal.close()


def test_docs_journal_md_is_generated_from_the_event_types() -> None:
    doc = (REPO / "docs" / "journal.md").read_text(encoding="utf-8")
    assert doc == journal_doc(), "run: python -m tavern_agent.runtime.journal_doc > docs/journal.md"
    for kind, cls in KINDS.items():
        text, described = field_docs(cls)
        fields = [f.name for f in msgspec.structs.fields(cls)]
        assert text and list(described) == fields, kind
        assert f"## `{kind}`" in doc
