"""A model that sends the same failing call again and again gets one stronger hint, then is
stopped (``model.stuck``); driven by a scripted model on a real three-floor chat."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tavern_agent.core.calls import ToolCall
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.policy import failure_streaks, repeats
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import ScriptedGateway, call, calls
from tests.runtime.helpers import (
    COMMIT,
    FINISH,
    WRITER_TOOLS,
    Harness,
    events,
    results,
    write,
)

PAST_THE_END = ("chat_read_messages", {"floors": [{"floor": 5}]})
# The same call with its keys in another order and other spacing.
PAST_THE_END_AGAIN = ("chat_read_messages", '{ "floors" : [ { "floor" : 5 } ] }')
FLOOR_0 = ("chat_read_messages", {"floors": [{"floor": 0}]})
ERROR = "Floor 5 is not in this chat (floors 0-2). Use a floor from 0 to 2."
HINT = "Only floors 0-2 exist. Failed 3 times: do not repeat this call."


def writer(**limits: Any) -> Profile:
    data: dict[str, Any] = {"id": "writer", "name": "Writer", "tools": {"allow": WRITER_TOOLS}}
    data["limits"] = {"maxIdenticalFailures": limits.get("stuck", 5)}
    return Profile.from_json(data)


def repeated(run_events: list[dict[str, Any]]) -> list[int]:
    """The ``repeated`` counts the journal gives failed calls (from the third time)."""
    failed = [e["payload"] for e in run_events if e["type"] == "tool_call_failed"]
    return [p["repeated"] for p in failed if "repeated" in p]


def test_the_third_failure_is_a_short_hint_and_the_fifth_stops_the_run(tmp_path: Path) -> None:
    script = [call(*PAST_THE_END)] * 8
    run, result = Harness(tmp_path).drive(script, writer())
    assert result.status == "failed"
    assert result.error_code == "model.stuck"
    assert result.rounds == 5  # not the remaining rounds
    assert "chat_read_messages failed 5 times in a row" in result.message
    texts = [r["content"] for r in results(run)]
    assert texts == [ERROR, ERROR, HINT, ERROR, ERROR]
    assert len(HINT) < len(ERROR)
    assert [r["errorCode"] for r in results(run)] == ["chat.floor_not_found"] * 5
    assert repeated(events(run)) == [3, 4, 5]
    assert events(run)[-1]["type"] == "run_failed"
    assert events(run)[-1]["payload"]["errorCode"] == "model.stuck"


def test_a_stuck_run_that_committed_is_a_partial_success(tmp_path: Path) -> None:
    script = [
        calls(write("Seraphina raises the lantern."), COMMIT),
        call(*PAST_THE_END),
        call(*PAST_THE_END_AGAIN),
        call(*FINISH),
    ]
    _, result = Harness(tmp_path).drive(script, writer(stuck=2))
    assert (result.status, result.error_code, result.rounds) == (
        "partial_success",
        "model.stuck",
        3,
    )
    assert result.commits == 1


def test_a_success_of_the_call_or_another_error_starts_over(tmp_path: Path) -> None:
    other_error = ("chat_read_messages", {"floors": [{"floor": 5}], "bogus": 1})
    script = [
        call(*PAST_THE_END),
        call(*PAST_THE_END),
        calls(FLOOR_0, ("chat_search", {"query": "bridge"})),  # other calls do not break it
        call(*PAST_THE_END),  # the third: the hint
        call(*other_error),  # another call altogether
        call(*PAST_THE_END),
        calls(write("Seraphina raises the lantern."), COMMIT),
        call(*FINISH),
    ]
    run, result = Harness(tmp_path).drive(script, writer(stuck=5))
    assert result.status == "completed"
    contents = [r["content"] for r in results(run) if r["content"].startswith(("Floor 5", "Only"))]
    assert contents == [ERROR, ERROR, HINT, ERROR]
    assert repeated(events(run)) == [3, 4]


def test_a_success_of_the_same_call_resets_its_streak() -> None:
    def rc(args: str) -> RecordedCall:
        return RecordedCall(ToolCall("c", "workspace_read_file", args))

    read = '{"file_path": "output/main.md"}'
    missing = AgentToolResult.failure("c", None, ErrorCode.WORKSPACE_FILE_NOT_FOUND, "No file.")
    stale = AgentToolResult.failure("c", None, ErrorCode.WORKSPACE_WRITE_STALE_FILE, "Stale.")
    ok = AgentToolResult("c", None, "1: text")
    history = [(rc(read), missing), (rc(read), missing)]
    assert repeats(failure_streaks(history), rc(read), missing) == 3
    assert repeats(failure_streaks(history), rc(read), stale) == 1  # another error
    assert repeats(failure_streaks(history), rc('{"file_path": "notes.md"}'), missing) == 1
    assert repeats(failure_streaks([*history, (rc(read), ok)]), rc(read), missing) == 1
    assert repeats(failure_streaks(history), rc(read), ok) == 0
    # Invalid arguments are the same call only when their text is the same.
    assert repeats(failure_streaks([(rc("{oops"), missing)]), rc("{oops"), missing) == 2
    assert repeats(failure_streaks([(rc("{oops"), missing)]), rc("{oops!"), missing) == 1


def test_a_fresh_engine_counts_the_streak_from_the_journal(tmp_path: Path) -> None:
    """Each step on a new engine (as a durable worker takes them): the same hint, the same stop."""
    h = Harness(tmp_path)
    run = h.start(writer(stuck=4))
    gateway = ScriptedGateway([call(*PAST_THE_END)] * 6)
    outcome: Any = None
    while not isinstance(outcome, RunResult):
        engine = Engine(Run.open(h.assembly, run.run_dir), gateway, fsync=False)
        try:
            outcome = asyncio.run(engine.step_once())
        finally:
            engine.close()
    assert (outcome.status, outcome.error_code, outcome.rounds) == ("failed", "model.stuck", 4)
    assert [r["content"] for r in results(run)] == [ERROR, ERROR, HINT, ERROR]
