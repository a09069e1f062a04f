"""Whole runs driven by a scripted model: commit, finish, budgets, drift, turn order."""

from __future__ import annotations

import json
from pathlib import Path

from tavern_agent import run_layout
from tavern_agent.core.profile import Profile
from tavern_agent.runtime.scripted import Turn, call, calls, say
from tests.runtime.helpers import COMMIT, FINISH, Harness, events, profile, results, types, write


def test_commit_then_finish_posts_one_message_and_completes(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            calls(("chat_search", {"query": "bridge"}), write("Seraphina wades in first.")),
            call(*COMMIT),
            call(*FINISH),
        ]
    )
    # the body written in round 1 is auto-published at its end; the explicit commit
    # of round 2 revises the same message
    assert result.status == "completed" and result.commits == 2 and result.rounds == 3
    auto = [e["payload"].get("auto", False) for e in events(run) if e["type"] == "commit_confirmed"]
    assert auto == [True, False]
    messages = h.chat_messages()
    assert len(messages) == 4
    assert messages[3]["mes"] == "Seraphina wades in first."
    assert messages[3]["extra"]["agent"]["runId"] == run.id
    kinds = types(run)
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert kinds.index("commit_requested") < kinds.index("commit_confirmed")
    # every event has the journal fields, with gapless seq
    evs = events(run)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    assert all({"id", "runId", "timestamp", "level", "type", "payload"} <= e.keys() for e in evs)
    # raw arguments and results are journaled inline: no file per call
    inv = run.invocations[0].id
    requested = [e["payload"] for e in evs if e["type"] == "tool_call_requested"]
    assert len(requested) == 4 and all("argumentsRef" not in p for p in requested)
    assert json.loads(requested[0]["arguments"]["raw"]) in (
        {"query": "bridge"},
        {"file_path": "output/main.md", "content": "Seraphina wades in first."},
    )
    stored = [e["payload"] for e in evs if e["type"] == "tool_result_stored"]
    assert [p["gate"]["callsUsed"] for p in stored] == [1, 2, 3, 4]
    assert not (run.run_dir / "tool-args").exists()
    assert not (run.run_dir / "tool-results").exists()
    responses = sorted((run.run_dir / "model-responses").iterdir())
    assert [p.name for p in responses] == ["round-001.json", "round-002.json", "round-003.json"]
    assert (run.run_dir / run_layout.snapshot_file(inv)).is_file()


def test_tool_call_requested_carries_the_arguments_and_comes_before_the_gate(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    run, _ = h.drive([call(*write("x")), call(*COMMIT), call(*FINISH)])
    evs = events(run)
    first = next(e for e in evs if e["type"] == "tool_call_requested")
    assert json.loads(first["payload"]["arguments"]["raw"])["content"] == "x"
    order = [e["type"] for e in evs if e["payload"].get("callId") == first["payload"]["callId"]]
    assert order[:3] == ["tool_call_requested", "tool_call_started", "tool_result_stored"]
    assert order[3] == "tool_call_completed"


def test_finish_before_commit_is_refused_then_recovered(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [call(*FINISH), call(*write("The river is cold.")), call(*COMMIT), call(*FINISH)]
    )
    first = results(run)[0]
    assert first["errorCode"] == "agent.foreground_commit_required"
    assert "workspace_commit" in first["content"] and "output/main.md" in first["content"]
    assert result.status == "completed" and result.rounds == 4
    assert h.chat_messages()[-1]["mes"] == "The river is cold."


def test_budget_exhaustion_then_graceful_finish(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            call(*write("Draft.")),
            call(*COMMIT),
            calls(("dice_roll", {"formula": "1d20"}), ("dice_roll", {"formula": "1d6"})),
            call(*FINISH),
        ],
        profile(max_calls=3),
    )
    got = results(run)
    assert got[2]["isError"] is False  # the third call fits the budget
    assert got[3]["errorCode"] == "agent.tool_budget_exhausted"
    assert "workspace_finish" in got[3]["content"]
    assert result.status == "completed"  # finishing tools still run on a spent budget


def test_unknown_tool_then_correction(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            call("write_reply", {"text": "hi"}),
            call(*write("Corrected.")),
            call(*COMMIT),
            call(*FINISH),
        ]
    )
    first = results(run)[0]
    assert first["errorCode"] == "model.unknown_tool_call"
    assert "workspace_write_file" in first["content"]
    assert result.status == "completed" and h.chat_messages()[-1]["mes"] == "Corrected."


def test_text_only_turn_is_saved_and_the_model_reminded(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    gateway_turns = [
        say("Seraphina smiles and wades in."),
        call(*write("Seraphina smiles and wades in.")),
        call(*COMMIT),
        call(*FINISH),
    ]
    run, result = h.drive(gateway_turns)
    assert result.status == "completed"
    saved = run.workspace.root / "scratch" / "turn-001.md"
    assert saved.read_text() == "Seraphina smiles and wades in."
    reminder = next(e for e in events(run) if e["type"] == "reminder_added")["payload"]["text"]
    assert "scratch/turn-001.md" in reminder
    assert "workspace_commit" in reminder and "workspace_finish" in reminder


def test_rounds_run_out_as_tool_call_required(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive([say("hmm"), say("still thinking")], profile(max_rounds=2))
    assert result.status == "failed"
    assert result.error_code == "model.tool_call_required"
    assert types(run)[-1] == "run_failed"
    assert len(h.chat_messages()) == 3


def test_rounds_run_out_after_a_commit_is_partial_success(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _, result = h.drive([call(*write("A")), call(*COMMIT)], profile(max_rounds=2))
    assert result.status == "partial_success" and result.commits == 2  # auto, then explicit
    assert h.chat_messages()[-1]["mes"] == "A"


def test_finish_not_last_in_its_turn_is_refused_and_the_rest_runs(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            call(*write("Draft.")),
            calls(FINISH, COMMIT),
            call(*FINISH),
        ]
    )
    got = results(run)
    assert got[1]["errorCode"] == "agent.tool_after_finish"
    assert "last call" in got[1]["content"]
    assert got[2]["isError"] is False  # the commit after it ran
    assert result.status == "completed" and result.rounds == 3


def test_calls_of_a_turn_run_in_order_and_see_earlier_effects(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            calls(
                write("first line\n"),
                ("workspace_read_file", {"file_path": "output/main.md"}),
                COMMIT,
            ),
            call(*FINISH),
        ]
    )
    got = results(run)
    assert "first line" in got[1]["content"]
    assert result.status == "completed" and h.chat_messages()[-1]["mes"] == "first line\n"


def test_truncated_response_runs_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run, result = h.drive(
        [
            Turn(calls=(write("half"),), truncated=True),
            call(*write("Whole.")),
            call(*COMMIT),
            call(*FINISH),
        ]
    )
    assert results(run)[0]["errorCode"] == "model.tool_call_truncated"
    assert (run.workspace.root / "output" / "main.md").read_text() == "Whole."
    assert result.status == "completed"


def test_each_request_carries_the_previous_results(tmp_path: Path) -> None:
    from tavern_agent.runtime.scripted import ScriptedGateway

    h = Harness(tmp_path)
    run = h.start()
    gateway = ScriptedGateway(
        [call("dice_roll", {"formula": "2d6"}), call(*write("x")), call(*COMMIT), call(*FINISH)]
    )
    import asyncio

    engine = h.engine(run, gateway)
    asyncio.run(engine.start())
    second = gateway.requests[1].transcript
    assert second.system and "workspace_finish" in second.system
    last = second.items[-1]
    assert last.result.call_id == "call_r1_0"
    first_prompt = gateway.requests[0].transcript.items[0]
    assert "The bridge is out" in first_prompt.text


def test_large_arguments_go_to_a_file_named_in_the_journal(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    chapter = "The ford is cold. " * 400  # over the inline limit
    run, result = h.drive([call(*write(chapter)), call(*COMMIT), call(*FINISH)])
    assert result.status == "completed"
    first = next(e["payload"] for e in events(run) if e["type"] == "tool_call_requested")
    assert "arguments" not in first
    record = json.loads((run.run_dir / first["argumentsRef"]).read_text())
    assert json.loads(record["raw"])["content"] == chapter


def test_a_model_that_keeps_answering_without_a_call_is_stuck(tmp_path: Path) -> None:
    # A small local model told how to finish after each text-only turn, and writing text
    # again each time, would spend every round of the run on it.
    h = Harness(tmp_path)
    prof = Profile.from_json(
        {**profile().to_json(), "limits": {"maxRounds": 20, "maxIdenticalFailures": 3}}
    )
    run, result = h.drive([say(f"Seraphina waits ({n}).") for n in range(20)], prof)
    assert result.status == "failed" and result.error_code == "model.stuck"
    assert result.rounds == 3
    assert [e["type"] for e in events(run)].count("reminder_added") == 2
    assert "3 times in a row without a tool call" in (result.message or "")
