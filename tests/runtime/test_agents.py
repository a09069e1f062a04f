"""Multi-agent runs with the scripted fake model: delegate, await, task.return, handoff."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from tavern_agent.chat.formats import parse_chat
from tavern_agent.commands.run import show_timeline
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.providers.transcript import ToolResultMessage, UserMessage
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import AgentScript, ScriptedAgents, Turn, call, calls, say
from tavern_agent.tools.catalog import ProfileValidationError
from tests.chat.helpers import write_chat
from tests.runtime.helpers import COMMIT, FINISH, TEXTS, WRITER_TOOLS, Harness, events, write
from tests.test_cli import run as run_cli

AGENT_TOOLS = ("builtin:agent.delegate", "builtin:agent.await", "builtin:agent.handoff")
HELPER_TOOLS = (
    "builtin:workspace.read_file",
    "builtin:workspace.write_file",
    "builtin:dice.roll",
    "builtin:workspace.commit",
    "builtin:workspace.finish",
)


def agent(agent_id: str, tools: Sequence[str], **delegation: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "name": agent_id.title(),
        "description": f"The {agent_id}.",
        "tools": {"allow": list(tools)},
        "delegation": delegation,
    }


def setup(tmp: Path, **root_delegation: Any) -> tuple[Harness, Profile]:
    h = Harness(tmp)
    folder = h.data.path / "profiles"
    folder.mkdir(parents=True)
    helpers = {
        "scout": agent("scout", HELPER_TOOLS, callable=True, descriptionForAgents="Finds facts."),
        "critic": agent("critic", HELPER_TOOLS, callable=True, allowAsHandoffTarget=False),
        "closer": agent("closer", WRITER_TOOLS, callable=True, allowAsSubagent=False),
        "hermit": agent("hermit", HELPER_TOOLS),  # not callable
        "picky": agent("picky", HELPER_TOOLS, callable=True, allowedCallers=["someone-else"]),
    }
    for key, data in helpers.items():
        (folder / f"{key}.json").write_text(json.dumps(data))
    root = Profile.from_json(agent("writer", WRITER_TOOLS + AGENT_TOOLS, **root_delegation))
    return h, root


def drive(
    h: Harness,
    root: Profile,
    scripts: dict[str, AgentScript],
    during: Callable[[Engine], Any] | None = None,
) -> tuple[Run, RunResult, Engine, ScriptedAgents]:
    run = h.start(root)
    gateway = ScriptedAgents(scripts)
    engine = Engine(run, gateway, fsync=False)

    async def main() -> RunResult:
        if during is None:
            return await engine.start()
        result, _ = await asyncio.gather(engine.start(), during(engine))
        return result

    try:
        result = asyncio.run(main())
    finally:
        engine.close()
    return run, result, engine, gateway


def delegate(agent_id: str, objective: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("agent_delegate", {"agentId": agent_id, "task": {"objective": objective, **extra}})


def await_(mode: str = "allCompleted", **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("agent_await", {"mode": mode, **extra})


def delegate_then_write(
    agent_id: str, objective: str, text: str, *, wait: Any = None
) -> AgentScript:
    """The writer's usual script: delegate one task, await it (or ``wait``), write
    ``text``, commit, finish."""
    waiting = call(*await_()) if wait is None else wait
    return [
        call(*delegate(agent_id, objective)),
        waiting,
        call(*write(text)),
        call(*COMMIT),
        call(*FINISH),
    ]


def returns(summary: str, **extra: Any) -> Turn:
    return call("task_return", {"summary": summary, "status": "completed", **extra})


def tool_results(request: ModelRequest) -> list[dict[str, Any]]:
    """Every tool result the model has seen so far in this request's transcript."""
    return [
        {"content": i.result.content, **{"structured": i.result.structured}}
        for i in request.transcript.items
        if isinstance(i, ToolResultMessage)
    ]


def stored(run: Run, name: str) -> list[dict[str, Any]]:
    """Journaled results of calls to the model name ``name``, in order."""
    ids = {
        e["payload"]["callId"]
        for e in events(run)
        if e["type"] == "tool_call_requested" and e["payload"]["name"] == name
    }
    return [
        e["payload"]["result"]
        for e in events(run)
        if e["type"] == "tool_result_stored" and e["payload"]["callId"] in ids
    ]


def of_type(run: Run, kind: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(run) if e["type"] == kind]


def compose(request: ModelRequest) -> Turn:
    awaited = tool_results(request)[-1]["structured"]
    summaries = sorted(t["summary"] for t in awaited["tasks"])
    return call(*write(" / ".join(summaries)))


def two_children() -> dict[str, AgentScript]:
    """The writer delegates to scout and critic, awaits both and commits their summaries."""
    return {
        "writer": [
            calls(delegate("scout", "Check the bridge."), delegate("critic", "Judge the pace.")),
            call(*await_()),
            compose,
            call(*COMMIT),
            call(*FINISH),
        ],
        "scout": [
            call(*COMMIT),  # not in a child's snapshot
            call(*write("The bridge is out; a ford lies north.", "scratch/scout.md")),
            returns(
                "The bridge is out.",
                artifacts=[{"path": "scratch/scout.md", "kind": "notes", "role": "evidence"}],
                findings=["ford to the north"],
            ),
        ],
        "critic": [returns("The pace is fine.")],
    }


def test_two_children_in_parallel_return_and_the_parent_commits_their_summaries(
    tmp_path: Path,
) -> None:
    h, root = setup(tmp_path)

    scripts = two_children()
    run, result, _, gateway = drive(h, root, scripts)
    assert result.status == "completed" and result.commits == 2
    assert h.chat_messages()[-1]["mes"] == "The bridge is out. / The pace is fine."

    started = of_type(run, "task_started")
    root_inv = run.invocations[0].id
    assert [s["agentId"] for s in started] == ["scout", "critic"]
    assert all(s["parentInvocationId"] == root_inv for s in started)
    assert [r["structured"]["status"] for r in stored(run, "agent_delegate")] == ["running"] * 2
    finished = of_type(run, "task_finished")
    assert sorted((f["agentId"], f["status"]) for f in finished) == [
        ("critic", "completed"),
        ("scout", "completed"),
    ]
    # the child's commit was refused as unknown to its snapshot
    refused = stored(run, "workspace_commit")[0]
    assert refused["errorCode"] == "model.unknown_tool_call"
    assert "task_return" in refused["content"]
    children = [i for i in run.invocations if i.kind == "child"]
    assert len(children) == 2
    for child in children:
        names = child.snapshot.model_names
        assert "task_return" in names
        assert not {"workspace_commit", "workspace_finish", "agent_delegate"} & set(names)
        assert "## Agents" not in child.transcript.system
    # the prompt lists the callable agents with their operations
    system = gateway.requests[0].transcript.system
    assert "## Agents" in system and "- scout: Finds facts. (delegate, handoff)" in system
    assert "- critic: The critic. (delegate)" in system and "hermit" not in system
    assert "picky" not in system
    # the result: a markdown summary file and the machine-readable record in the journal
    ws = run.workspace.root
    scout_md = (ws / "summaries" / "scout-result.md").read_text()
    assert "The bridge is out." in scout_md and "scratch/scout.md (notes, evidence)" in scout_md
    scout_inv = next(s["invocationId"] for s in started if s["agentId"] == "scout")
    record = next(f["result"] for f in finished if f["invocationId"] == scout_inv)
    assert record["kind"] == "tauritavern.agentTaskResult" and record["status"] == "completed"
    assert record["findings"] == ["ford to the north"]
    # a child's prompt is journaled, not written as a file
    child_start = next(
        e for e in of_type(run, "invocation_started") if e["invocationId"] == scout_inv
    )
    scout = next(c for c in children if c.id == scout_inv)
    assert child_start["prompt"] == {
        "system": scout.transcript.system,
        "user": scout.transcript.items[0].text,  # type: ignore[union-attr]
    }
    # children of one profile share one recorded snapshot while their tools are the same
    assert child_start["snapshotId"].startswith("snap_")
    assert not (run.run_dir / "input" / "invocations" / scout_inv).exists()
    awaited = stored(run, "agent_await")[0]
    assert awaited["structured"]["timedOut"] is False
    assert "summaries/scout-result.md" in awaited["content"]


def test_handoff_is_refused_while_a_child_is_live_then_accepted_after_await(
    tmp_path: Path,
) -> None:
    h, root = setup(tmp_path)
    release = asyncio.Event()

    async def slow_scout(request: ModelRequest) -> Turn:
        await release.wait()
        return returns("Scouted.")

    def release_then_await(request: ModelRequest) -> Turn:
        release.set()
        return call(*await_())

    brief = {"objective": "Write the crossing scene.", "mustPreserve": ["the ford"]}
    scripts: dict[str, AgentScript] = {
        "writer": [
            call(*delegate("scout", "Scout the river.")),
            call("agent_handoff", {"agentId": "closer", "handoff": brief}),
            release_then_await,
            call("agent_handoff", {"agentId": "critic", "handoff": brief}),
            call("agent_handoff", {"agentId": "closer", "handoff": brief}),
        ],
        "scout": [slow_scout],
        "closer": [call(*write("They cross at the ford.")), call(*COMMIT), call(*FINISH)],
    }
    run, result, _, gateway = drive(h, root, scripts)
    assert result.status == "completed" and result.commits == 2
    handoffs = stored(run, "agent_handoff")
    assert handoffs[0]["errorCode"] == "agent.handoff_pending_tasks"
    assert "agent_await" in handoffs[0]["content"]
    assert handoffs[1]["errorCode"] == "agent.handoff_policy_denied"
    assert "closer" in handoffs[1]["structured"]["error"]["candidates"]
    assert handoffs[2]["content"] == "Handoff accepted for Agent closer. Your part is complete."
    assert h.chat_messages()[-1]["mes"] == "They cross at the ford."
    target = run.invocations[-1]
    assert target.kind == "handoff" and target.profile is not None
    assert target.profile.id == "closer" and target.parent_id == run.invocations[0].id
    first = next(r for r in gateway.requests if r.invocation_id == target.id)
    brief_text = first.transcript.items[0]
    assert isinstance(brief_text, UserMessage)
    assert "Write the crossing scene." in brief_text.text and "- the ford" in brief_text.text
    assert of_type(run, "handoff_accepted")[0]["toInvocationId"] == target.id


def test_await_with_a_timeout_reports_statuses_and_finishing_cancels_the_live_child(
    tmp_path: Path,
) -> None:
    h, root = setup(tmp_path)

    async def never(request: ModelRequest) -> Turn:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write(
            "scout",
            "Scout forever.",
            "No news from the scout.",
            wait=call(*await_("allCompleted", timeoutMs=20)),
        ),
        "scout": [never],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    awaited = stored(run, "agent_await")[0]
    assert awaited["structured"]["timedOut"] is True
    assert [t["status"] for t in awaited["structured"]["tasks"]] == ["running"]
    assert "Timed out" in awaited["content"]
    finished = of_type(run, "task_finished")
    assert [(f["status"], f["reason"]) for f in finished] == [("cancelled", "run_ended")]
    kinds = [e["type"] for e in events(run)]
    assert kinds.index("task_finished") < kinds.index("run_completed")


def test_a_child_killed_mid_run_is_reported_failed_to_the_parent(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    entered = asyncio.Event()

    async def hang(request: ModelRequest) -> Turn:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def killer(engine: Engine) -> None:
        await entered.wait()
        (task_id,) = engine.agents.tasks
        assert engine.cancel_task(task_id)

    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("scout", "Roll and report.", "The scout was lost."),
        "scout": [call("dice_roll", {"formula": "1d20"}), hang],
    }
    run, result, _, _ = drive(h, root, scripts, killer)
    assert result.status == "completed"
    task = stored(run, "agent_await")[0]["structured"]["tasks"][0]
    assert task["status"] == "failed" and "stopped" in task["summary"]
    assert of_type(run, "task_finished")[0]["reason"] == "cancelled"


def test_ten_delegations_at_once_respect_the_concurrency_and_run_limits(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    ten = calls(*(delegate("scout", f"Job {n}.") for n in range(10)))
    scripts: dict[str, AgentScript] = {
        "writer": [
            ten,
            call(*await_()),
            ten,
            call(*await_()),
            ten,
            call(*await_()),
            call(*write("Done.")),
            call(*COMMIT),
            call(*FINISH),
        ],
        "scout": [returns("ok")],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    answers = stored(run, "agent_delegate")
    codes = [a["errorCode"] for a in answers]
    assert len(codes) == 30
    assert codes[:10] == [None] * 3 + ["agent.delegation_budget_exhausted"] * 7
    assert codes[10:20] == [None] * 3 + ["agent.delegation_budget_exhausted"] * 7
    assert codes[20:] == [None] * 2 + ["agent.delegation_budget_exhausted"] * 8
    assert "limit 3" in answers[3]["content"] and "all 8 tasks" in answers[22]["content"]
    live = peak = 0
    for e in events(run):
        if e["type"] == "task_started":
            live += 1
            peak = max(peak, live)
        elif e["type"] == "task_finished":
            live -= 1
    assert peak == 3 and live == 0
    assert len(of_type(run, "task_started")) == 8
    keys = {p.name for p in (run.workspace.root / "summaries").iterdir()}
    assert keys == {"scout-result.md"} | {f"scout-{n:03d}-result.md" for n in range(2, 9)}


def test_bad_targets_name_the_reason_and_the_valid_candidates(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": [
            call(*delegate("nobody", "x")),
            call(*delegate("hermit", "x")),
            call(*delegate("picky", "x")),
            call(*delegate("closer", "x")),
            call(*await_()),
            call("agent_await", {"mode": "statusOnly", "taskIds": ["task_nope"]}),
            call(*write("x")),
            call(*COMMIT),
            call(*FINISH),
        ],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    answers = stored(run, "agent_delegate")
    assert [a["errorCode"] for a in answers] == [
        "agent.target_profile_not_found",
        "agent.delegation_policy_denied",
        "agent.delegation_policy_denied",
        "agent.delegation_policy_denied",
    ]
    assert "not callable" in answers[1]["content"]
    assert "does not accept calls from writer" in answers[2]["content"]
    assert "does not take delegated tasks" in answers[3]["content"]
    for a in answers:
        assert a["structured"]["error"]["candidates"] == ["critic", "scout"]
        assert "Agents you can delegate to: critic, scout." in a["content"]
    awaits = stored(run, "agent_await")
    assert awaits[0]["errorCode"] == "agent.no_child_tasks"
    assert awaits[1]["errorCode"] == "agent.no_child_tasks"


def test_policy_and_limits_of_the_caller(tmp_path: Path) -> None:
    h, root = setup(tmp_path, canDelegate=False, canHandoff=False)
    brief = {"objective": "x"}
    scripts: dict[str, AgentScript] = {
        "writer": [
            call(*delegate("scout", "x")),
            call("agent_handoff", {"agentId": "closer", "handoff": brief}),
            call(*write("x")),
            call(*COMMIT),
            call(*FINISH),
        ],
    }
    run, result, _, gateway = drive(h, root, scripts)
    assert result.status == "completed"
    assert stored(run, "agent_delegate")[0]["errorCode"] == "agent.delegation_policy_denied"
    assert stored(run, "agent_handoff")[0]["errorCode"] == "agent.handoff_policy_denied"
    assert "## Agents" not in gateway.requests[0].transcript.system
    # depth: a root allowed no handoffs at all
    h2, root2 = setup(tmp_path / "depth", maxHandoffDepth=0)
    scripts2: dict[str, AgentScript] = {
        "writer": [
            call("agent_handoff", {"agentId": "closer", "handoff": brief}),
            call(*write("x")),
            call(*COMMIT),
            call(*FINISH),
        ],
    }
    run2, _, _, _ = drive(h2, root2, scripts2)
    assert stored(run2, "agent_handoff")[0]["errorCode"] == "agent.handoff_depth_exhausted"


def test_await_and_injection_deliver_each_result_once(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    seen_ids: list[str] = []

    def first_task(request: ModelRequest) -> Turn:
        started = [r["structured"]["taskId"] for r in tool_results(request)]
        seen_ids.extend(started)
        return call(*await_("nextCompleted", taskIds=[started[0]]))

    scripts: dict[str, AgentScript] = {
        "writer": [
            calls(delegate("scout", "a"), delegate("critic", "b")),
            first_task,
            call("dice_roll", {"formula": "d6"}),
            call(*await_("statusOnly")),
            call(*write("x")),
            call(*COMMIT),
            call(*FINISH),
        ],
        "scout": [returns("scout says hi")],
        "critic": [returns("critic says hi")],
    }
    run, result, _, gateway = drive(h, root, scripts)
    assert result.status == "completed"
    injected = of_type(run, "task_results_injected")
    assert [i["taskIds"] for i in injected] == [[seen_ids[1]]]
    assert "critic says hi" in injected[0]["text"]
    root_requests = [r for r in gateway.requests if r.snapshot.profile_id == "writer"]
    texts = [
        [i.text for i in r.transcript.items if isinstance(i, UserMessage)] for r in root_requests
    ]
    assert sum("critic says hi" in t for t in texts[-1]) == 1  # in the transcript exactly once
    status = stored(run, "agent_await")[1]["structured"]
    assert [t["status"] for t in status["tasks"]] == ["completed", "completed"]


def test_a_child_that_stops_without_returning_is_reminded_then_fails(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("scout", "Look.", "x"),
        "scout": [say("I think the bridge is out."), say("Really, it is out.")],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    reminders = of_type(run, "reminder_added")
    assert len(reminders) == 1 and "task_return" in reminders[0]["text"]
    task = stored(run, "agent_await")[0]["structured"]["tasks"][0]
    assert task["status"] == "failed" and "Really, it is out." in task["summary"]
    text = (run.workspace.root / "summaries" / "scout-result.md").read_text()
    assert "Really, it is out." in text


def test_task_return_cannot_be_listed_by_a_profile(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    listed = Profile.from_json(agent("sneaky", ("builtin:task.return", "builtin:dice.roll")))
    try:
        h.assembly.catalog.validate_profile(listed)
    except ProfileValidationError as exc:
        assert "builtin:task.return cannot be listed" in str(exc)
    else:
        raise AssertionError("task.return was accepted in a profile")
    prepared = h.assembly.catalog.prepare(listed, Scene.CHAT)
    assert [str(d.tool_id) for d in prepared.descriptors] == ["builtin:dice.roll"]
    assert any("task.return skipped" in n for n in prepared.diagnostics)


def test_runs_show_nests_child_events_under_their_parent(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("scout", "Look.", "x"),
        "scout": [call("dice_roll", {"formula": "d4"}), returns("Seen.")],
    }
    run, _, _, _ = drive(h, root, scripts)
    console = Console(file=io.StringIO(), width=200, highlight=False)
    show_timeline(console, run.run_dir, events(run))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    child = run.invocations[1].id
    assert any("task_started" in line and child in line for line in lines)
    nested = [line for line in lines if "    [scout] " in line]
    assert any("tool_call_requested" in line and "dice_roll" in line for line in nested)
    assert any("task_finished" in line for line in nested)
    assert not any("[scout]" in line and "agent_await" in line for line in lines)


def test_a_second_handoff_in_one_turn_is_refused_and_the_first_stands(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    brief = {"objective": "Write the crossing scene."}
    scripts: dict[str, AgentScript] = {
        "writer": [
            calls(
                ("agent_handoff", {"agentId": "closer", "handoff": brief}),
                ("agent_handoff", {"agentId": "critic", "handoff": brief}),
            ),
        ],
        "closer": [call(*write("They cross at the ford.")), call(*COMMIT), call(*FINISH)],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    first, second = stored(run, "agent_handoff")
    assert first["content"] == "Handoff accepted for Agent closer. Your part is complete."
    assert second["errorCode"] == "agent.tool_after_finish"
    assert "Only one agent_handoff per turn" in second["content"]
    assert [e["toInvocationId"] for e in of_type(run, "handoff_accepted")] == [
        run.invocations[-1].id
    ]
    assert run.invocations[-1].profile is not None
    assert run.invocations[-1].profile.id == "closer"
    assert h.chat_messages()[-1]["mes"] == "They cross at the ford."


def test_a_recorded_run_with_two_children_replays_offline(tmp_path: Path) -> None:
    h, root = setup(tmp_path / "recorded")
    recorded, result, _, _ = drive(h, root, two_children())
    assert result.status == "completed"
    data = tmp_path / "replay" / "data"
    shutil.copytree(h.data.path / "profiles", data / "profiles")
    chat = write_chat(tmp_path / "replay" / "chat.jsonl", TEXTS)
    root_file = tmp_path / "writer.json"
    root_file.write_text(json.dumps(root.to_json()))
    args = ["run", str(chat), "--profile", str(root_file), "--replay", str(recorded.run_dir)]
    proc = run_cli(*args, "--json", data_dir=data)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "completed" and outcome["commits"] == result.commits == 2
    assert outcome["committedMessage"] == "The bridge is out. / The pace is fine."
    assert [m.mes for m in parse_chat(chat.read_bytes()).messages] == [
        m["mes"] for m in h.chat_messages()
    ]

    def child_results(run_dir: Path) -> dict[str, dict[str, Any]]:
        found = {}
        for event in read_events(run_dir / "events.jsonl"):
            if event["type"] != "task_finished":
                continue
            record = event["payload"]["result"]
            keep = ("status", "summary", "findings", "artifacts", "summaryPath")
            found[record["agentId"]] = {k: record.get(k) for k in keep}
        return found

    replayed = child_results(Path(outcome["runDir"]))
    assert replayed == child_results(recorded.run_dir)
    assert replayed["scout"]["findings"] == ["ford to the north"]
    assert replayed["critic"]["summary"] == "The pace is fine."


def test_an_agent_without_await_is_told_how_results_reach_it(tmp_path: Path) -> None:
    h, _ = setup(tmp_path)
    root = Profile.from_json(
        agent("writer", (*WRITER_TOOLS, "builtin:agent.delegate"), canDelegate=True)
    )
    task = {"objective": "Find the ford."}
    scripts: dict[str, AgentScript] = {
        "writer": [
            call("agent_delegate", {"agentId": "scout", "task": task}),
            call("workspace_write_file", {"file_path": "output/main.md", "content": "On."}),
            call("workspace_commit", {"reason": "the reply"}),
            call("workspace_finish", {}),
        ],
        "scout": [call("task_return", {"summary": "Upstream.", "status": "completed"})],
    }
    run, result, _, _ = drive(h, root, scripts)
    assert result.status == "completed"
    started = next(
        e["payload"]["result"]["content"]
        for e in events(run)
        if e["type"] == "tool_result_stored" and "Started" in e["payload"]["result"]["content"]
    )
    assert "agent_await" not in started
    assert "added to your next turn" in started
