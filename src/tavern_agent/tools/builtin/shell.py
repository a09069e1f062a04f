"""``workspace.shell``: a fresh Bashkit sandbox per call over the workspace roots.

Each call gets a ``BashTool`` with every visible root mounted at ``/<root>``
straight onto the workspace folder, writable roots writable and the rest
read-only, so writes land at once and the next call and the file tools see
them. Nothing else of the host is reachable: Bashkit is an interpreter with
its own virtual filesystem, no host program ever runs and the network stays
off.

Building and mounting an interpreter costs more than running a short
command, so a sandbox that finished normally is ``reset()`` (variables,
functions, aliases, working folder, its in-memory files and cancellation all
back to the start; mounts and builtins kept) and kept in :data:`POOL` for the
next call with the same mounts, limits and start folder. A call therefore
still starts from a fresh state. A sandbox that was cancelled, timed out or
failed is dropped, never reused. ``node``/``js`` start their JavaScript
engine only when a script runs them.

Output is collected with ``on_output`` while the script runs, because Bashkit
drops the stdout it buffered when a limit is breached. The labelled result
goes through the shared long-result step: above the snapshot's inline limit,
or with a stream above :data:`STREAM_INLINE_CHARS`, the full text is written
to ``tool-results/`` and the model gets a preview and the path.

The shell keeps no read state: a file it changed must be read again before the
file tools replace or patch it (their sha256 compare-and-swap notices).
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bashkit import BashTool, ExecResult, FileSystem

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import ShellLimits
from tavern_agent.core.results import ToolError, ToolFailure, ToolOutcome
from tavern_agent.core.tool_ids import WRITE_FILE
from tavern_agent.tools.builtin.registry import Offer, builtin_tool
from tavern_agent.tools.builtin.shell_jq import jq_command
from tavern_agent.tools.builtin.shell_js import JsLimits, node_command
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.results import LongResultStep
from tavern_agent.tools.texts import either, exception_text
from tavern_agent.workspace import paths
from tavern_agent.workspace.layout import allows_chat_tool
from tavern_agent.workspace.roots import CHAT_MOUNT, MESSAGE_BODY, RootPolicy
from tavern_agent.workspace.store import Workspace

MAX_COMMAND_BYTES = 128 * 1024
STREAM_INLINE_CHARS = 128 * 1024
JS_OUTPUT_CHARS = 16 * 1024 * 1024
CANCEL_GRACE_SECONDS = 5.0  # a cancelled call still waits this long for file work in flight
OUTER_GRACE_SECONDS = 5.0  # backstop above Bashkit's own timeout
_LIMIT_PREFIX = "resource limit exceeded: "
_TIMEOUT_MARK = "execution timeout"
TIMEOUT_EXIT = 124
_PYTHON_ENV = {"BASHKIT_ALLOW_INPROCESS_PYTHON": "1"}


@dataclass(frozen=True, slots=True)
class Mount:
    """A host folder the shell's sandbox shows at ``vfs_path``, writable or not."""

    vfs_path: str
    host_path: Path
    writable: bool


def plan_mounts(ws: Workspace) -> list[Mount]:
    """Each visible root at ``/<root>``; ``skills/`` from the library, only visible skills.

    A root that is a symbolic link on the host is left out: mounting it would
    follow the link. Missing root folders are created (empty) so every root
    the model is told about exists in the sandbox.
    """
    base = Path(os.path.realpath(ws.root))
    mounts: list[Mount] = []
    for root in ws.policy.visible:
        writable = root in ws.policy.writable
        if root == "skills":
            mounts.extend(_skill_mounts(ws))
            continue
        host = base / root
        if not _real_dir(host, create=True):
            continue
        mounts.append(Mount(f"/{root}", host, writable))
        if root == CHAT_MOUNT and ws.chat_floors is not None:
            # The floors live in the chat workspace's shared copy, not in the run
            # (synced at the run's first shell call). A plain mount cannot hide
            # floors added after the run started; the file tools can, so they
            # stay the exact view of the run's input.
            on_disk = ws.chat_floors.floors_on_disk()
            floors = Path(os.path.realpath(on_disk)) if on_disk is not None else None
            if floors is not None and _real_dir(floors):
                mounts.append(Mount(f"/{CHAT_MOUNT}/floors", floors, False))
    return mounts


def _skill_mounts(ws: Workspace) -> list[Mount]:
    if ws.skills_dir is None:
        return []
    library = Path(os.path.realpath(ws.skills_dir))
    if not library.is_dir():
        return []
    if ws.visible_skills is None:
        return [Mount("/skills", library, False)]
    return [
        Mount(f"/skills/{name}", library / name, False)
        for name in sorted(ws.visible_skills)
        if "/" not in name and name not in ("", ".", "..") and _real_dir(library / name)
    ]


def _real_dir(path: Path, *, create: bool = False) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        path.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode)


@dataclass(eq=False)
class Sandbox:
    """An interpreter with the workspace mounted; ``js`` carries the current call's deadline."""

    bash: BashTool
    js: JsLimits


def new_sandbox(
    ws: Workspace, limits: ShellLimits, cwd: str, deadline: float, mounts: list[Mount] | None = None
) -> Sandbox:
    """A new interpreter with the workspace mounted and ``node``/``js`` registered."""
    js = JsLimits(
        deadline=deadline,
        max_seconds=limits.js_timeout_seconds,
        memory_bytes=limits.js_memory_bytes,
        output_bytes=JS_OUTPUT_CHARS,
    )
    node = node_command(js)
    builtins = {"node": node, "js": node, "jq": jq_command(js)}
    bash = BashTool(
        cwd=cwd,
        env=_PYTHON_ENV,
        python=True,
        timeout_seconds=limits.timeout_seconds,
        max_commands=limits.max_commands,
        max_loop_iterations=limits.max_loop_iterations,
        max_memory=limits.max_memory_bytes,
        custom_builtins=builtins,
    )
    mounts = plan_mounts(ws) if mounts is None else mounts
    if any(m.vfs_path.startswith("/skills/") for m in mounts):  # a filtered skills library
        bash.mount("/skills", _empty_fs(), read_only=True)
    for mount in mounts:
        bash.mount(
            mount.vfs_path,
            FileSystem.real(str(mount.host_path), writable=mount.writable),
            read_only=not mount.writable,
        )
    return Sandbox(bash, js)


PoolKey = tuple[tuple[Mount, ...], ShellLimits, str]


class SandboxPool:
    """Idle sandboxes, reset, by what they were built with (mounts, limits, start folder)."""

    def __init__(self, per_key: int = 2, keys: int = 32) -> None:
        self._idle: OrderedDict[PoolKey, list[Sandbox]] = OrderedDict()
        self._per_key = per_key
        self._keys = keys
        self._lock = threading.Lock()  # calls may run on more than one event loop thread

    def take(
        self, ws: Workspace, limits: ShellLimits, cwd: str, deadline: float
    ) -> tuple[Sandbox, PoolKey]:
        """A sandbox for one call (an idle one when there is one) and its key for :meth:`give`.

        The mounts are planned on every call, so a root that became a link or
        appeared since is seen, and only a sandbox with exactly those mounts is reused.
        """
        mounts = plan_mounts(ws)
        key = (tuple(mounts), limits, cwd)
        with self._lock:
            idle = self._idle.get(key)
            sandbox = idle.pop() if idle else None
        if sandbox is None:
            return new_sandbox(ws, limits, cwd, deadline, mounts), key
        sandbox.js.deadline = deadline
        return sandbox, key

    def give(self, key: PoolKey, sandbox: Sandbox) -> None:
        """Reset a sandbox whose call ended normally and keep it for the next call."""
        sandbox.bash.reset()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            if len(idle) < self._per_key:
                idle.append(sandbox)
            while len(self._idle) > self._keys:
                self._idle.popitem(last=False)

    def clear(self) -> None:
        """Drop every idle sandbox."""
        with self._lock:
            self._idle.clear()


POOL = SandboxPool()


def _empty_fs() -> FileSystem:
    """An empty in-memory folder (a new ``FileSystem`` starts with dev/, home/ and tmp/)."""
    fs = FileSystem()
    for entry in fs.read_dir("/"):
        fs.remove("/" + str(entry["name"]), recursive=True)
    return fs


@dataclass
class Streams:
    """Everything the script printed, in arrival order per stream."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def __call__(self, stdout: str, stderr: str) -> None:
        """Take one chunk of the script's output."""
        if stdout:
            self.out.append(stdout)
        if stderr:
            self.err.append(stderr)


def describe_shell(offer: Offer) -> str:
    """The description for one snapshot: its scene's folders and its profile's time limit."""
    policy = RootPolicy.for_scene(
        offer.scene, offer.profile.workspace, chat_mount=allows_chat_tool(offer.profile)
    )
    writable = [r for r in policy.visible if r in policy.writable]
    read_only = [f"/{r}" for r in policy.visible if r not in policy.writable]
    if not writable:
        folders = "Workspace folders are at /<folder>, all read-only"
    else:
        body_root = MESSAGE_BODY.split("/", 1)[0]
        example = f"/{MESSAGE_BODY}" if body_root in writable else f"/{writable[0]}/notes.md"
        folders = f"Workspace folders are at /<folder>, e.g. {example}"
        if read_only:
            verb = "is" if len(read_only) == 1 else "are"
            folders += f"; {either(read_only, 'and')} {verb} read-only"
    seconds = offer.profile.limits.shell.timeout_seconds
    return (
        f"Run bash in a sandbox. {folders}. Files persist between calls. Has coreutils, rg, "
        "sed, awk, jq, a python3 subset (no re, collections, itertools) and QuickJS node; "
        f"no network; {seconds:g} s limit."
    )


@builtin_tool(
    "workspace.shell",
    description=(
        "Run bash in a sandbox. Workspace folders are at /<folder>, e.g. /output/main.md; "
        "/skills and /tool-results are read-only. Files persist between calls. Has coreutils, "
        "rg, sed, awk, jq, a python3 subset (no re, collections, itertools) and QuickJS node; "
        "no network; 30 s limit."
    ),
    describe=describe_shell,
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Bash script."},
            "workdir": {"type": "string", "description": "Start folder; default /."},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    spills=True,
)
async def SHELL(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.shell``: runs a bash script in the Bashkit sandbox
    over the workspace folders; long output spills to a result file."""
    ws = ctx.require_workspace()
    command: str = args["command"]
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        writer = ctx.snapshot.name_of(WRITE_FILE)
        step = (
            f"Save the script to a file with {writer} and run it (bash /scratch/x.sh)."
            if writer
            else "Split it into smaller commands."
        )
        raise ToolFailure(
            ErrorCode.TOOL_INVALID_ARGUMENTS,
            f"command is {size:,} bytes, over the 128 KiB limit. {step}",
        )
    cwd, outside = _workdir(ws, args.get("workdir", "/"))
    if ctx.cancelled.is_set():
        return _cancelled_before()
    limits = ctx.snapshot.shell_limits
    floors = ws.chat_floors
    if floors is not None and CHAT_MOUNT in ws.policy.visible and not floors.floors_on_disk_ready():
        # The first call syncs the floor copy the sandbox mounts: a file per floor,
        # off the event loop. Later calls skip the thread hop (about 0.4 ms, a
        # third of a small call).
        await asyncio.to_thread(floors.floors_on_disk)
    deadline = time.monotonic() + limits.timeout_seconds
    try:
        sandbox, key = POOL.take(ws, limits, cwd, deadline)
    except (OSError, RuntimeError, ValueError) as exc:
        raise ToolFailure(
            ErrorCode.WORKSPACE_SHELL_FAILED,
            f"The sandbox could not start ({exception_text(exc)}). Nothing ran; "
            "go on with the other tools.",
        ) from None
    await _check_workdir(ws, sandbox, cwd, outside)
    streams = Streams()
    result, stop = await _execute(sandbox.bash, command, streams, ctx, limits)
    if stop is None and result is not None and not result.error:
        POOL.give(key, sandbox)  # ended normally: reset and keep for the next call
    outcome = shell_outcome(result, streams, stop, limits)
    spilled = LongResultStep(ctx.result_files).apply(
        outcome, ctx, limit=_spill_limit(outcome, streams)
    )
    if spilled is not outcome:  # keep the shell's own record beside the spill record
        spilled = _merge_structured(spilled, outcome.structured)
    return spilled


def _workdir(ws: Workspace, text: str) -> tuple[str, ToolFailure | None]:
    """The start folder as the sandbox names it, and why the workspace would refuse it.

    A path outside the visible roots (``/tmp``, ``/home/user``) is no error
    yet: the sandbox shows folders of its own, so it is asked once it is up.
    """
    try:
        path = ws.check(text.strip().lstrip("/") if text.strip() else "", allow_root=True)
    except ToolFailure as exc:
        if exc.code is not ErrorCode.WORKSPACE_PATH_NOT_VISIBLE:
            raise
        return "/" + paths.normalize(text.strip().lstrip("/")), exc
    return "/" + path, None


async def _check_workdir(
    ws: Workspace, sandbox: Sandbox, cwd: str, outside: ToolFailure | None
) -> None:
    """Refuse a start folder the sandbox does not show as a folder.

    Checked once the sandbox is up: mounting creates the roots a fresh
    workspace has not made yet, and those are folders like any other.
    """
    if outside is not None:
        probe = await sandbox.bash.execute('[ -d "$PWD" ]')
        if probe.exit_code != 0:
            raise outside
        return
    path = cwd.lstrip("/")
    kind = ws.kind_or_none(path)
    if kind != "dir":
        what = "a file" if kind == "file" else "not there"
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATH_NOT_FOUND, f"workdir /{path} is {what}; name a folder."
        )


async def _execute(
    bash: BashTool, command: str, streams: Streams, ctx: CallContext, limits: ShellLimits
) -> tuple[ExecResult | None, str | None]:
    """Run the script; ``stop`` is ``"cancelled"``/``"timeout"`` when we had to stop it."""
    task: asyncio.Future[ExecResult] = asyncio.ensure_future(
        bash.execute(command, on_output=streams)
    )
    watcher: asyncio.Future[Any] = asyncio.ensure_future(ctx.cancelled.wait())
    try:
        waiting: set[asyncio.Future[Any]] = {task, watcher}
        done, _ = await asyncio.wait(
            waiting,
            timeout=limits.timeout_seconds + OUTER_GRACE_SECONDS,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        watcher.cancel()
    if task in done:
        return task.result(), None
    stop = "cancelled" if watcher in done else "timeout"
    bash.cancel()
    try:  # wait for file operations already started; Bashkit's timeout bounds this
        return await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE_SECONDS), stop
    except Exception:
        task.add_done_callback(_consume)
        return None, stop


def _consume(task: asyncio.Future[ExecResult]) -> None:
    if not task.cancelled():
        task.exception()


def shell_outcome(
    result: ExecResult | None, streams: Streams, stop: str | None, limits: ShellLimits
) -> ToolOutcome:
    """The labelled result: exit status, stdout, stderr; errors by what ended the script."""
    stdout, stderr = "".join(streams.out), "".join(streams.err)
    exit_code = result.exit_code if result is not None else -1
    problem = (result.error or "") if result is not None else ""
    if problem and problem not in stderr:  # Bashkit reports limits in the result, not the stream
        stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + problem + "\n"
    truncated = bool(result is not None and result.stdout_truncated)
    # 124 is what `timeout` and the JavaScript engine exit with when their time ran out.
    stopped_by_clock = _TIMEOUT_MARK in problem or (exit_code == TIMEOUT_EXIT and not problem)
    timed_out = stop == "timeout" or stopped_by_clock
    code: ErrorCode | None
    if stop == "cancelled":
        code = ErrorCode.WORKSPACE_SHELL_CANCELLED
        note = "Cancelled: the run was stopped while the command ran; files it wrote stay."
    elif timed_out:
        code = ErrorCode.WORKSPACE_SHELL_TIMEOUT
        note = (
            f"Stopped by a time limit (a call may run {limits.timeout_seconds:g} s); the output "
            "up to then is below. Do less per call or avoid endless loops."
        )
    elif problem.startswith(_LIMIT_PREFIX):
        code = ErrorCode.WORKSPACE_SHELL_LIMIT
        which = problem.removeprefix(_LIMIT_PREFIX)
        note = (
            f"Stopped by a sandbox limit: {which}. The output up to then is below. "
            "Do less per call or avoid endless loops."
        )
    elif exit_code != 0:
        code = ErrorCode.WORKSPACE_SHELL_EXIT
        note = f"The command exited with status {exit_code}; stderr below says why."
    else:
        code, note = None, ""
    parts = [f"exit_code: {exit_code}"]
    if note:
        parts.append(note)
    parts.append(_labelled("stdout", stdout))
    if truncated:
        parts.append("[the sandbox keeps at most 1 MiB of stdout; later output was dropped]")
    parts.append(_labelled("stderr", stderr))
    structured: dict[str, Any] = {
        "exit_code": exit_code,
        "stdout_chars": len(stdout),
        "stderr_chars": len(stderr),
        "timed_out": timed_out,
    }
    if truncated:
        structured["stdout_truncated"] = True
    if code is ErrorCode.WORKSPACE_SHELL_LIMIT:
        structured["limit"] = problem.removeprefix(_LIMIT_PREFIX)
    content = "\n".join(parts)
    error = None if code is None else ToolError(code, note)
    return ToolOutcome(content, structured, error)


def _labelled(name: str, text: str) -> str:
    if not text:
        return f"{name}: (empty)"
    return f"{name}:\n{text.removesuffix(chr(10))}"


def _spill_limit(outcome: ToolOutcome, streams: Streams) -> int | None:
    longest = max(sum(map(len, streams.out)), sum(map(len, streams.err)))
    return STREAM_INLINE_CHARS if longest > STREAM_INLINE_CHARS else None


def _merge_structured(outcome: ToolOutcome, own: Any) -> ToolOutcome:
    merged = {**own, **outcome.structured} if isinstance(own, dict) else outcome.structured
    return ToolOutcome(
        outcome.content, merged, outcome.error, outcome.resource_refs, outcome.effect
    )


def _cancelled_before() -> ToolOutcome:
    note = "Cancelled before the command started; nothing ran."
    structured = {"exit_code": -1, "stdout_chars": 0, "stderr_chars": 0, "timed_out": False}
    return ToolOutcome(
        f"exit_code: -1\n{note}", structured, ToolError(ErrorCode.WORKSPACE_SHELL_CANCELLED, note)
    )
