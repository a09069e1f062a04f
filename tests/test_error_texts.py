"""Every error the gate, the built-in tools and the run policy return, read as a model would.

Each error code the gate and the built-ins can produce is driven through a
real gate (built by the assembly) twice: with every tool of the scene, and
with only the tools the case needs. The run policy's refusals are worded for
several snapshots. Each text must name only tools of the snapshot it came
from (or none), never say "invocation", and never show a host path.
"""

from __future__ import annotations

import functools
import random
import re
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import builtin_model_name
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.mcp import McpManager
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.runtime.policy import (
    after_finish_result,
    await_refusal,
    cancelled_result,
    delegation_budget_refusal,
    delegator_refusal,
    finish_refusal,
    handoff_depth_refusal,
    handoff_refusal,
    repeat_hint,
    second_handoff_result,
    task_return_refusal,
    unusable_target,
)
from tavern_agent.tools.builtin.chat import valid_floors
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot
from tests.chat.helpers import eldoria, write_chat
from tests.mcp_helpers import call as mcp_call
from tests.mcp_helpers import fast_peer, gate_for, permit, register

SRC = Path(__file__).resolve().parents[1] / "src" / "tavern_agent"
# Where the gate and the built-ins produce their errors.
SOURCES = [SRC / "tools" / "gate.py", *sorted((SRC / "tools" / "builtin").glob("*.py"))]
SOURCES += sorted((SRC / "workspace").glob("*.py"))
ROOT_NAMES = {"output", "scratch", "plan", "summaries", "persist", "tool-results", "skills"}
ROOT_NAMES |= {"chat", "work", "tmp"}
EXTERNAL = ToolId.extension("notes", "lookup")
BOOKS = (eldoria(),)


def produced_codes() -> set[ErrorCode]:
    """Every ErrorCode named in the gate's, the built-ins' and the workspace's code."""
    found: set[ErrorCode] = set()
    for path in SOURCES:
        for name in re.findall(r"ErrorCode\.([A-Z_]+)", path.read_text(encoding="utf-8")):
            found.add(ErrorCode[name])
    return found


# ---------------------------------------------------------------- the environment


@dataclass
class Env:
    """One gate over a real data root, workspace and (optionally) chat."""

    tmp: Path
    gate: ToolRequestGate
    assembly: Assembly
    extensions: InMemoryToolSource
    chat_file: Path | None
    n: int = 0

    @property
    def snapshot(self) -> ToolSnapshot:
        return self.gate.snapshot

    @property
    def root(self) -> Path:
        assert self.gate.workspace is not None
        return self.gate.workspace.root

    def write(self, path: str, text: str) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    async def __call__(self, name: str, args: Any = None, **kw: Any) -> AgentToolResult:
        self.n += 1
        call = ToolCall(f"call_{self.n}", name, kw if args is None else args)
        return (await self.gate.handle(call, round=1)).result


@dataclass(frozen=True)
class Case:
    """One way to get ``code``; ``tools`` is the least the case needs."""

    id: str
    code: ErrorCode
    tools: tuple[str, ...]
    steps: Callable[[Env], Awaitable[AgentToolResult]]
    chat: bool = True
    child: bool = False
    limits: dict[str, Any] = field(default_factory=dict)
    workspace: dict[str, Any] = field(default_factory=dict)
    lean_only: bool = False  # the error exists only when a tool is missing


async def build(tmp: Path, case: Case, *, lean: bool) -> Env:
    extensions = InMemoryToolSource()

    async def lookup(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        return ExternalReceipt("found")

    extensions.add(ToolDescriptor(EXTERNAL, "Look up a note.", name_hint="lookup"), lookup)
    assembly = Assembly(tmp / "data", extensions=extensions)
    everything = [str(d.tool_id) for d in assembly.catalog.descriptors(Scene.CHAT)]
    allow = list(case.tools) if lean else everything
    profile = Profile.from_json(
        {
            "id": "writer",
            "name": "writer",
            "tools": {"allow": allow},
            "limits": case.limits,
            "workspace": case.workspace,
        }
    )
    snapshot = assembly.snapshot(profile, Scene.CHAT, child=case.child)
    chat_run = None
    chat_file = None
    if case.chat:
        texts = ["We rest by the river.", "The forest is quiet.", "What about the glade?"]
        chat_file = write_chat(tmp / "Seraphina - chat.jsonl", texts)
        source = ChatSource(chat_file, books=BOOKS, seed=1)
        chat_run, _, root = assembly.chat_run(
            source, tmp / "run", run_id="run_1", profile_id=profile.id
        )
    else:
        root = tmp / "run"
    workspace = assembly.workspace(root, Scene.CHAT, profile, chat_run)
    gate = assembly.gate(
        snapshot, run_id="run_1", workspace=workspace, chat=chat_run, rng=random.Random(0)
    )
    return Env(tmp, gate, assembly, extensions, chat_file)


# ---------------------------------------------------------------- the cases

DICE = "builtin:dice.roll"
LIST = "builtin:workspace.list_files"
READ = "builtin:workspace.read_file"
WRITE = "builtin:workspace.write_file"
PATCH = "builtin:workspace.apply_patch"
SEARCH = "builtin:workspace.search_files"
SHELL = "builtin:workspace.shell"
COMMIT = "builtin:workspace.commit"
CHAT_SEARCH = "builtin:chat.search"
CHAT_READ = "builtin:chat.read_messages"
WORLDINFO = "builtin:worldinfo.read_activated"
STORY = "scratch/story.md"
LONG = "".join(f"line {i}\n" for i in range(1, 3001))


def case(
    code: ErrorCode, tools: tuple[str, ...], name: str = "", **options: Any
) -> Callable[[Callable[[Env], Awaitable[AgentToolResult]]], Case]:
    def wrap(steps: Callable[[Env], Awaitable[AgentToolResult]]) -> Case:
        return Case(name or steps.__name__, code, tools, steps, **options)

    return wrap


@case(ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED, (DICE,), limits={"maxCallsPerInvocation": 1})
async def run_budget(env: Env) -> AgentToolResult:
    await env("dice_roll", formula="d6")
    return await env("dice_roll", formula="d6")


@case(ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED, (DICE,), limits={"maxCallsPerTool": {DICE: 1}})
async def tool_budget(env: Env) -> AgentToolResult:
    await env("dice_roll", formula="d6")
    return await env("dice_roll", formula="d6")


@case(ErrorCode.MODEL_UNKNOWN_TOOL_CALL, (DICE,))
async def unknown_name(env: Env) -> AgentToolResult:
    return await env("dice_rol", formula="d6")


@case(ErrorCode.MODEL_UNKNOWN_TOOL_CALL, (READ, COMMIT), child=True)
async def child_commit(env: Env) -> AgentToolResult:
    return await env("workspace_commit", reason="done")


@case(ErrorCode.MODEL_UNKNOWN_TOOL_CALL, (DICE,), lean_only=True)
async def builtin_not_offered(env: Env) -> AgentToolResult:
    return await env("workspace_list_files", {})


@case(ErrorCode.TOOL_INVALID_ARGUMENTS, (DICE,))
async def not_an_object(env: Env) -> AgentToolResult:
    return await env("dice_roll", "[1, 2]")


@case(ErrorCode.TOOL_INVALID_ARGUMENTS, (PATCH,))
async def missing_parameters(env: Env) -> AgentToolResult:
    return await env("workspace_apply_patch", {})


@case(ErrorCode.TOOL_INVALID_ARGUMENTS, (SHELL,))
async def command_too_long(env: Env) -> AgentToolResult:
    return await env("workspace_shell", command="echo " + "x" * 140_000)


@case(ErrorCode.TOOL_INVALID_ARGUMENTS, (CHAT_SEARCH,))
async def query_without_words(env: Env) -> AgentToolResult:
    return await env("chat_search", query="!!!")


@case(ErrorCode.TOOL_UNAVAILABLE, (str(EXTERNAL),))
async def removed_since_the_snapshot(env: Env) -> AgentToolResult:
    env.extensions.remove(EXTERNAL)
    return await env("lookup", {})


@case(ErrorCode.WORKSPACE_INVALID_PATH, (READ,))
async def invalid_path(env: Env) -> AgentToolResult:
    return await env("workspace_read_file", file_path="../etc/passwd")


@case(ErrorCode.WORKSPACE_INVALID_PATH, (READ,))
async def absolute_path(env: Env) -> AgentToolResult:
    return await env("workspace_read_file", file_path=str(env.tmp / "secret.txt"))


@case(ErrorCode.WORKSPACE_PATH_NOT_VISIBLE, (READ,))
async def internal_folder(env: Env) -> AgentToolResult:
    return await env("workspace_read_file", file_path="checkpoints/state.json")


@case(ErrorCode.WORKSPACE_PATH_NOT_VISIBLE, (READ, CHAT_READ))
async def floor_after_the_input(env: Env) -> AgentToolResult:
    return await env("workspace_read_file", file_path="chat/floors/000099/message.md")


@case(ErrorCode.WORKSPACE_PATH_NOT_WRITABLE, (WRITE,))
async def read_only_root(env: Env) -> AgentToolResult:
    return await env("workspace_write_file", file_path="tool-results/x.md", content="x")


@case(ErrorCode.WORKSPACE_PATH_NOT_WRITABLE, (WRITE,), workspace={"writableRoots": []})
async def nothing_writable(env: Env) -> AgentToolResult:
    return await env("workspace_write_file", file_path="output/main.md", content="x")


@case(ErrorCode.WORKSPACE_FILE_NOT_FOUND, (READ,))
async def file_not_found(env: Env) -> AgentToolResult:
    return await env("workspace_read_file", file_path="output/nope.md")


@case(ErrorCode.WORKSPACE_PATH_NOT_FOUND, (LIST,))
async def list_nothing(env: Env) -> AgentToolResult:
    return await env("workspace_list_files", path="scratch/nothing")


@case(ErrorCode.WORKSPACE_PATH_NOT_FOUND, (SEARCH,))
async def search_nothing(env: Env) -> AgentToolResult:
    return await env("workspace_search_files", pattern="x", path="scratch/nothing")


@case(ErrorCode.WORKSPACE_PATH_NOT_FOUND, (SHELL,))
async def workdir_missing(env: Env) -> AgentToolResult:
    return await env("workspace_shell", command="pwd", workdir="/scratch/nothing")


@case(ErrorCode.WORKSPACE_PATH_IS_DIRECTORY, (READ,))
async def read_a_folder(env: Env) -> AgentToolResult:
    env.write("scratch/a/b.md", "x")
    return await env("workspace_read_file", file_path="scratch/a")


@case(ErrorCode.WORKSPACE_PATH_IS_DIRECTORY, (WRITE,))
async def write_over_a_folder(env: Env) -> AgentToolResult:
    env.write("scratch/a/b.md", "x")
    return await env("workspace_write_file", file_path="scratch/a", content="x")


@case(ErrorCode.WORKSPACE_LIST_DEPTH_TOO_LARGE, (LIST,))
async def list_too_deep(env: Env) -> AgentToolResult:
    return await env("workspace_list_files", depth=9)


@case(ErrorCode.WORKSPACE_INVALID_LINE_RANGE, (READ,))
async def read_past_the_end(env: Env) -> AgentToolResult:
    env.write(STORY, "one\ntwo\nthree\n")
    return await env("workspace_read_file", file_path=STORY, offset=9)


@case(ErrorCode.WORKSPACE_WRITE_MODE_INVALID, (WRITE,))
async def write_mode(env: Env) -> AgentToolResult:
    return await env("workspace_write_file", file_path=STORY, content="x", mode="prepend")


@case(ErrorCode.WORKSPACE_WRITE_REQUIRES_READ, (WRITE,))
async def write_unread(env: Env) -> AgentToolResult:
    env.write(STORY, "old\n")
    return await env("workspace_write_file", file_path=STORY, content="new")


@case(ErrorCode.WORKSPACE_WRITE_STALE_FILE, (READ, WRITE))
async def write_stale(env: Env) -> AgentToolResult:
    env.write(STORY, "old\n")
    await env("workspace_read_file", file_path=STORY)
    env.write(STORY, "changed\n")
    return await env("workspace_write_file", file_path=STORY, content="new")


@case(ErrorCode.WORKSPACE_PATCH_EMPTY_OLD_STRING, (PATCH,))
async def patch_empty(env: Env) -> AgentToolResult:
    return await env("workspace_apply_patch", file_path=STORY, old_string="", new_string="x")


@case(ErrorCode.WORKSPACE_PATCH_NO_CHANGE, (PATCH,))
async def patch_same(env: Env) -> AgentToolResult:
    return await env("workspace_apply_patch", file_path=STORY, old_string="a", new_string="a")


@case(ErrorCode.WORKSPACE_PATCH_REQUIRES_READ, (PATCH,))
async def patch_unread(env: Env) -> AgentToolResult:
    env.write(STORY, "one two\n")
    return await env("workspace_apply_patch", file_path=STORY, old_string="one", new_string="1")


@case(ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ, (READ, PATCH))
async def patch_outside_a_partial_read(env: Env) -> AgentToolResult:
    env.write(STORY, "".join(f"line {i}\n" for i in range(1, 11)))
    await env("workspace_read_file", file_path=STORY, limit=3)
    return await env("workspace_apply_patch", file_path=STORY, old_string="line 9", new_string="x")


@case(ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ, (READ, PATCH))
async def patch_long_file(env: Env) -> AgentToolResult:
    env.write(STORY, LONG)
    await env("workspace_read_file", file_path=STORY)
    return await env(
        "workspace_apply_patch", file_path=STORY, old_string="line 2500\n", new_string="x"
    )


@case(ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ, (READ, PATCH))
async def replace_all_long_file(env: Env) -> AgentToolResult:
    env.write(STORY, LONG)
    await env("workspace_read_file", file_path=STORY)
    return await env(
        "workspace_apply_patch",
        file_path=STORY,
        old_string="line 1\n",
        new_string="x\n",
        replace_all=True,
    )


@case(ErrorCode.WORKSPACE_PATCH_STALE_FILE, (READ, PATCH))
async def patch_stale(env: Env) -> AgentToolResult:
    env.write(STORY, "one two\n")
    await env("workspace_read_file", file_path=STORY)
    env.write(STORY, "one two three\n")
    return await env("workspace_apply_patch", file_path=STORY, old_string="one", new_string="1")


@case(ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND, (READ, PATCH))
async def patch_not_found(env: Env) -> AgentToolResult:
    env.write(STORY, "one two\n")
    await env("workspace_read_file", file_path=STORY)
    return await env("workspace_apply_patch", file_path=STORY, old_string="six", new_string="6")


@case(ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND, (READ, PATCH))
async def long_file_not_found(env: Env) -> AgentToolResult:
    env.write(STORY, LONG)
    await env("workspace_read_file", file_path=STORY)
    return await env("workspace_apply_patch", file_path=STORY, old_string="nope", new_string="6")


@case(ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_UNIQUE, (READ, PATCH))
async def patch_not_unique(env: Env) -> AgentToolResult:
    env.write(STORY, "cat cat\n")
    await env("workspace_read_file", file_path=STORY)
    return await env("workspace_apply_patch", file_path=STORY, old_string="cat", new_string="c")


@case(ErrorCode.WORKSPACE_GREP_PATTERN_INVALID, (SEARCH,))
async def lookbehind(env: Env) -> AgentToolResult:
    return await env("workspace_search_files", pattern="(?<=a)b")


@case(ErrorCode.WORKSPACE_COMMIT_MODE_INVALID, (COMMIT,))
async def commit_mode(env: Env) -> AgentToolResult:
    return await env("workspace_commit", reason="r", mode="prepend")


@case(ErrorCode.WORKSPACE_COMMIT_EMPTY, (COMMIT,))
async def commit_empty(env: Env) -> AgentToolResult:
    env.write("output/main.md", "  \n")
    return await env("workspace_commit", reason="r")


@case(ErrorCode.WORKSPACE_COMMIT_UNAVAILABLE, (COMMIT,), chat=False)
async def commit_without_chat(env: Env) -> AgentToolResult:
    return await env("workspace_commit", reason="r")


@case(ErrorCode.CHAT_UNAVAILABLE, (CHAT_SEARCH,), chat=False)
async def no_chat(env: Env) -> AgentToolResult:
    return await env("chat_search", query="river")


@case(ErrorCode.CHAT_NOT_FOUND, (CHAT_READ,))
async def chat_gone(env: Env) -> AgentToolResult:
    assert env.chat_file is not None
    env.chat_file.unlink()
    return await env("chat_read_messages", floors=[{"floor": 0}])


@case(ErrorCode.CHAT_FLOOR_NOT_FOUND, (CHAT_READ,))
async def floor_not_found(env: Env) -> AgentToolResult:
    return await env("chat_read_messages", floors=[{"floor": 99}])


@case(ErrorCode.CHAT_INVALID_RANGE, (CHAT_READ,))
async def floor_offset(env: Env) -> AgentToolResult:
    return await env("chat_read_messages", floors=[{"floor": 0, "offset": 9}])


@case(ErrorCode.CHAT_INVALID_RANGE, (CHAT_SEARCH,))
async def search_range(env: Env) -> AgentToolResult:
    return await env("chat_search", query="river", start_floor=50)


@case(ErrorCode.WORLDINFO_ACTIVATION_UNAVAILABLE, (WORLDINFO,), chat=False)
async def no_activation(env: Env) -> AgentToolResult:
    return await env("worldinfo_read_activated", {})


@case(ErrorCode.WORLDINFO_ENTRY_NOT_FOUND, (WORLDINFO,))
async def entry_not_found(env: Env) -> AgentToolResult:
    return await env("worldinfo_read_activated", entries=[{"ref": "worldinfo:nope#1"}])


@case(ErrorCode.WORLDINFO_INVALID_ENTRY_RANGE, (WORLDINFO,))
async def entry_offset(env: Env) -> AgentToolResult:
    index = await env("worldinfo_read_activated", {})
    ref = index.structured["entries"][0]["ref"]
    return await env("worldinfo_read_activated", entries=[{"ref": ref, "offset": 9_999}])


@case(ErrorCode.WORKSPACE_SHELL_EXIT, (SHELL,))
async def shell_exit(env: Env) -> AgentToolResult:
    return await env("workspace_shell", command="false")


@case(ErrorCode.WORKSPACE_SHELL_TIMEOUT, (SHELL,), limits={"shell": {"timeoutSeconds": 1}})
async def shell_timeout(env: Env) -> AgentToolResult:
    return await env("workspace_shell", command="sleep 3")


@case(ErrorCode.WORKSPACE_SHELL_LIMIT, (SHELL,))
async def shell_limit(env: Env) -> AgentToolResult:
    return await env("workspace_shell", command="while true; do :; done")


@case(ErrorCode.WORKSPACE_SHELL_CANCELLED, (SHELL,))
async def shell_cancelled(env: Env) -> AgentToolResult:
    env.gate.cancelled.set()
    return await env("workspace_shell", command="echo hi")


@case(ErrorCode.WORKSPACE_SHELL_FAILED, (SHELL,))
async def shell_failed(env: Env) -> AgentToolResult:
    # The run folder is replaced by a file: the sandbox cannot mount the roots.
    shutil.rmtree(env.root)
    env.root.write_text("not a folder")
    return await env("workspace_shell", command="echo hi")


@case(ErrorCode.DICE_INVALID_FORMULA, (DICE,))
async def bad_formula(env: Env) -> AgentToolResult:
    return await env("dice_roll", formula="3d6x")


CASES = [value for value in list(globals().values()) if isinstance(value, Case)]


# ---------------------------------------------------------------- the checks

_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/([\w.-]+)(?:/[\w.-]+)*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def every_tool_name(assembly: Assembly) -> set[str]:
    names = {builtin_model_name(t.tool_id) for t in assembly.catalog.builtins}
    return names | {"lookup"}


def check_text(result: AgentToolResult, env: Env) -> None:
    check(result, env.snapshot, env.assembly, env.tmp)


def check(result: AgentToolResult, snapshot: ToolSnapshot, assembly: Assembly, tmp: Path) -> None:
    text = result.content
    if result.error_code is ErrorCode.MODEL_UNKNOWN_TOOL_CALL:
        text = text.replace(repr(result.structured["error"]["name"]), "")  # the name it sent
    assert "invocation" not in text.lower(), text
    for host in {str(tmp), str(tmp.resolve()), str(Path.home())}:
        assert host not in text, text
    for match in _ABSOLUTE.finditer(text):  # only sandbox paths like /output/main.md
        assert match.group(1) in ROOT_NAMES, f"{match.group(0)!r} in {text!r}"
    offered = set(snapshot.model_names)
    named = {w for w in _WORD.findall(text) if w in every_tool_name(assembly)}
    assert named <= offered, f"names {sorted(named - offered)} not in the snapshot: {text!r}"


VARIANTS = [
    pytest.param(c, lean, id=f"{c.id}-{'only-needed-tools' if lean else 'all-tools'}")
    for c in CASES
    for lean in (True, False)
    if lean or not c.lean_only
]


@pytest.mark.parametrize(("case", "lean"), VARIANTS)
async def test_error_text_names_only_this_snapshots_tools(
    tmp_path: Path, case: Case, lean: bool
) -> None:
    env = await build(tmp_path, case, lean=lean)
    result = await case.steps(env)
    assert result.is_error and result.error_code is case.code, result.content
    check_text(result, env)


def test_every_code_the_gate_and_builtins_produce_has_a_case() -> None:
    covered = {c.code for c in CASES}
    assert produced_codes() - covered == set()


async def test_the_checks_catch_a_missing_tool_and_a_host_path(tmp_path: Path) -> None:
    """The checks themselves fail on the texts they exist to stop."""
    env = await build(tmp_path, read_past_the_end, lean=True)
    bad = [
        "Check the name with workspace_list_files.",  # a tool this snapshot lacks
        f"Could not open {tmp_path}/x.md.",
        "All calls of this invocation are used.",
    ]
    for text in bad:
        result = AgentToolResult("c", None, text, {"error": {}}, True, ErrorCode.TOOL_UNAVAILABLE)
        with pytest.raises(AssertionError):
            check_text(result, env)


async def test_an_mcp_server_that_cannot_start_is_reported_without_host_paths(
    tmp_path: Path,
) -> None:
    async with McpManager(tmp_path / "data") as manager:
        register(manager, "peer", fast_peer(tmp_path / "calls.log"))
        await manager.discover("peer")
        permit(manager, "peer", ok="allow")
        reg = manager.store.get("peer")
        assert reg is not None
        missing = tmp_path / "gone" / "server-binary"
        moved = {"type": "stdio", "command": str(missing), "args": []}
        manager.store.save(reg.model_copy(update={"transport": type(reg.transport)(**moved)}))
        await manager.aclose()  # the discovery's connection goes; the next call starts anew
        result = await mcp_call(gate_for(manager, tmp_path / "ws"), "mcp__peer__ok")
    assert result.error_code is ErrorCode.MCP_SERVER_UNAVAILABLE, result.content
    assert "could not reach its MCP server" in result.content
    assert str(tmp_path) not in result.content and "<path>" in result.content


# ---------------------------------------------------------------- the run policy's refusals

FINISH = "builtin:workspace.finish"
HANDOFF = "builtin:agent.handoff"


def policy_cases(snapshot: ToolSnapshot) -> list[tuple[ErrorCode, AgentToolResult | None]]:
    """Each refusal of the run policy, worded for ``snapshot``."""
    finish = RecordedCall(ToolCall("c1", "workspace_finish", "{}"))
    out: list[tuple[ErrorCode, AgentToolResult | None]] = []
    for tool_id in (FINISH, HANDOFF):
        binding = snapshot.by_name(builtin_model_name(ToolId.parse(tool_id)))
        if binding is not None:
            out.append((ErrorCode.AGENT_TOOL_AFTER_FINISH, after_finish_result(finish, binding)))
            out.append((ErrorCode.AGENT_TOOL_AFTER_FINISH, second_handoff_result(finish, binding)))
    refuse = functools.partial(finish_refusal, finish, snapshot, explicit_commits=0)
    if snapshot.name_of(ToolId.builtin("task.return")):  # a delegated child's snapshot
        denied = refuse(is_child=True, foreground=True, failed_before=[])
        out.append((ErrorCode.AGENT_CHILD_FINISH_DENIED, denied))
    out.append(
        (
            ErrorCode.AGENT_FINISH_AFTER_FAILED_CALL,
            refuse(is_child=False, foreground=True, failed_before=snapshot.model_names[:1]),
        )
    )
    out.append(
        (
            ErrorCode.AGENT_FOREGROUND_COMMIT_REQUIRED,
            refuse(is_child=False, foreground=True, failed_before=[]),
        )
    )
    out.append((ErrorCode.RUN_CANCELLED, cancelled_result(finish)))
    # The stronger hint of a call that failed the same way three times keeps its code.
    floor = "Floor 9 is not in this chat (floors 0-3). Use a floor from 0 to 3."
    missing = AgentToolResult.failure(
        "c1", None, ErrorCode.CHAT_FLOOR_NOT_FOUND, floor, valid=valid_floors(4)
    )
    out.append((ErrorCode.CHAT_FLOOR_NOT_FOUND, repeat_hint(missing, 3)))
    out.append((ErrorCode.RUN_CANCELLED, repeat_hint(cancelled_result(finish), 3)))
    return out + agent_policy_cases(snapshot)


def agent_policy_cases(snapshot: ToolSnapshot) -> list[tuple[ErrorCode, AgentToolResult | None]]:
    """Each refusal of the agent tools by the run policy, worded for ``snapshot``."""
    caller = Profile.from_json({"id": "p", "name": "p"})  # a default profile: not callable
    out: list[tuple[ErrorCode, AgentToolResult | None]] = []

    def binding(name: str) -> tuple[RecordedCall, Any]:
        found = snapshot.by_name(builtin_model_name(ToolId.builtin(name)))
        return RecordedCall(ToolCall("c2", builtin_model_name(ToolId.builtin(name)), "{}")), found

    call, delegate = binding("agent.delegate")
    if delegate is not None:
        denied = ErrorCode.AGENT_DELEGATION_POLICY_DENIED
        out += [
            (denied, delegator_refusal(call, delegate, caller, is_child=True)),
            (denied, unusable_target(call, delegate, caller, "p", caller, "delegate", denied, [])),
            (
                ErrorCode.AGENT_TARGET_PROFILE_NOT_FOUND,
                unusable_target(call, delegate, caller, "ghost", None, "delegate", denied, ["p"]),
            ),
            (
                ErrorCode.AGENT_DELEGATION_BUDGET_EXHAUSTED,
                delegation_budget_refusal(call, delegate, snapshot, caller, started=8, running=0),
            ),
            (
                ErrorCode.AGENT_DELEGATION_BUDGET_EXHAUSTED,
                delegation_budget_refusal(call, delegate, snapshot, caller, started=3, running=3),
            ),
        ]
    call, waiter = binding("agent.await")
    if waiter is not None:
        mine = [("task_1", "p", "running")]
        out += [
            (ErrorCode.AGENT_NO_CHILD_TASKS, await_refusal(call, waiter, snapshot, [], None)),
            (
                ErrorCode.AGENT_AWAIT_TASK_NOT_FOUND,
                await_refusal(call, waiter, snapshot, mine, ["task_2"]),
            ),
        ]
    call, back = binding("task.return")
    if back is not None:
        out += [
            (ErrorCode.AGENT_TASK_RETURN_DENIED, task_return_refusal(call, back, None)),
            (
                ErrorCode.AGENT_TASK_ALREADY_FINISHED,
                task_return_refusal(call, back, ("task_1", "completed")),
            ),
        ]
    call, handoff = binding("agent.handoff")
    if handoff is not None:
        out += [
            (
                ErrorCode.AGENT_HANDOFF_POLICY_DENIED,
                handoff_refusal(call, handoff, snapshot, caller, is_child=True, running=[]),
            ),
            (
                ErrorCode.AGENT_HANDOFF_PENDING_TASKS,
                handoff_refusal(call, handoff, snapshot, caller, is_child=False, running=["t"]),
            ),
            (
                ErrorCode.AGENT_HANDOFF_DEPTH_EXHAUSTED,
                handoff_depth_refusal(call, handoff, caller, 8),
            ),
        ]
    return out


@pytest.mark.parametrize(
    ("allow", "child"),
    [
        pytest.param(None, False, id="all-tools"),
        pytest.param((FINISH,), False, id="finish-only"),
        pytest.param((FINISH, HANDOFF, COMMIT), False, id="no-write-tool"),
        pytest.param((READ,), True, id="child"),
    ],
)
def test_run_policy_refusals_follow_the_same_rules(
    tmp_path: Path, allow: tuple[str, ...] | None, child: bool
) -> None:
    assembly = Assembly(tmp_path / "data")
    everything = [str(d.tool_id) for d in assembly.catalog.descriptors(Scene.CHAT)]
    profile = Profile.from_json(
        {"id": "p", "name": "p", "tools": {"allow": list(allow or everything)}}
    )
    snapshot = assembly.snapshot(profile, Scene.CHAT, child=child)
    for code, result in policy_cases(snapshot):
        assert result is not None and result.error_code is code
        check(result, snapshot, assembly, tmp_path)


def test_every_refusal_of_the_run_policy_has_a_case(tmp_path: Path) -> None:
    source = (SRC / "runtime" / "policy.py").read_text(encoding="utf-8")
    produced = {ErrorCode[n] for n in re.findall(r"ErrorCode\.([A-Z_]+)", source)}
    produced.discard(ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED)  # ends the run; not a tool result
    produced.discard(ErrorCode.MODEL_TOOL_CALL_REQUIRED)  # ends the run; not a tool result
    produced.discard(ErrorCode.MODEL_STUCK)  # ends the run; not a tool result
    assembly = Assembly(tmp_path / "data")
    profile = assembly.everything(Scene.CHAT)
    covered = {
        code
        for child in (False, True)
        for code, _ in policy_cases(assembly.snapshot(profile, Scene.CHAT, child=child))
    }
    assert produced - covered == set()
