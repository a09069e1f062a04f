"""``tavern-agent run`` and ``tavern-agent runs list|show|cancel``: runs from the command line."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly
from tavern_agent.chat import progress as index_progress
from tavern_agent.chat.formats import ChatFormatError
from tavern_agent.commands.options import (
    ChatFlags,
    ModelFlags,
    chat_options,
    mcp_ask_option,
    model_options,
    usage_error,
)
from tavern_agent.commands.submitter import (
    exit_after_temporal,
    patience_option,
    submitter,
    submitter_exits,
)
from tavern_agent.config import resolve_profile
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.mcp.approval import Approver, approver_for
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.engines import LocalEngine
from tavern_agent.runtime.journal import JournalRecord, read_events, read_journal
from tavern_agent.runtime.loop import Engine, ResumeRefused, RunResult
from tavern_agent.runtime.run import (
    Run,
    RunNotFound,
    RunSpec,
    all_runs,
    find_run,
)
from tavern_agent.runtime.summary import committed_message, run_summary
from tavern_agent.temporal.engine import TemporalEngine
from tavern_agent.terminal import markup
from tavern_agent.workspace.layout import DataRoot


def _short(value: Any, limit: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Progress:
    """Prints journal events as live progress lines."""

    def __init__(self, console: Console, run_dir: Path) -> None:
        self.console = console
        self.run_dir = run_dir
        self.started = time.monotonic()
        self.args: dict[str, str] = {}

    def __call__(self, record: JournalRecord) -> None:
        """Print one journal record as a progress line (the events a person follows)."""
        e = record.event
        out = self.console.print
        clock = f"[dim]{time.monotonic() - self.started:6.2f}s[/]"
        if isinstance(e, ev.RunStarted):
            what = f"{record.run_id}  scene {e.scene}  profile {e.profile_id}"
            out(f"[bold]run[/] {markup(what)}")
        elif isinstance(e, ev.RunResumed):
            unknown = ", ".join(e.outcome_unknown) or "none"
            out(f"[bold]resumed[/] after round {e.rounds}; outcome unknown: {markup(unknown)}")
        elif isinstance(e, ev.ModelResponseStored):
            text = e.message.get("text") or ""
            said = f"  [italic]{markup(_short(text, 70))}[/]" if text.strip() else ""
            out(f"{clock} [bold cyan]round {e.round}[/] {e.calls} call(s){said}")
        elif isinstance(e, ev.ToolCallRequested):
            self.args[e.call_id] = self._arguments(e)
        elif isinstance(e, ev.ToolCallEnded):
            args = markup(self.args.get(e.call_id, ""))
            name = markup(str(e.name))
            if isinstance(e, ev.ToolCallFailed):
                code = markup(str(e.error_code))
                out(f"{clock}   [red]✗ {name}[/] {args} → [red]{code}[/]: {markup(e.message)}")
            else:
                msg = markup(_short(e.message, 80))
                out(f"{clock}   [green]✓ {name}[/] {args} → {msg}")
        elif isinstance(e, ev.CommitConfirmed):
            out(f"{clock}   [magenta]⇢ chat floor {e.floor} updated[/]")
        elif isinstance(e, ev.ReminderAdded):
            out(f"{clock}   [yellow]text-only turn: reminded how to finish[/]")
        elif isinstance(e, ev.PersistOutcome):
            out(f"{clock}   persist/: {e.status}")
        elif isinstance(e, ev.RunEnded):
            style = "green" if isinstance(e, ev.RunCompleted) else "red"
            why = f": {e.error_code} {e.message}" if isinstance(e, ev.RunStopped) else ""
            out(f"{clock} [bold {style}]{e.status}[/]{markup(why)}")

    def _arguments(self, requested: ev.ToolCallRequested) -> str:
        """A call's raw arguments, short: inline in the event, or in its file when large."""
        data: Any = requested.arguments
        ref = requested.arguments_ref
        if data is None and ref:
            try:
                data = json.loads((self.run_dir / ref).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = None
        raw = data.get("raw", "") if isinstance(data, Mapping) else ""
        return _short(raw if isinstance(raw, str) else json.dumps(raw), 70)


def temporal_options(f: Any) -> Any:
    """``--temporal HOST:PORT`` and ``--task-queue Q``: where Temporal runs are."""
    f = click.option(
        "--task-queue", default=None, help="The workers' task queue (default tavern-agent)."
    )(f)
    return click.option(
        "--temporal", default=None, metavar="HOST:PORT", help="The Temporal server's address."
    )(f)


@click.command("run")
@click.argument("chat", metavar="[CHAT_FILE]", required=False)
@chat_options
@click.option("--profile", "profile_spec", default="default-writer", show_default=True)
@model_options(
    model_help="Model name on --base-url.",
    replay_help="Answer each model request from this recorded run folder (offline).",
)
@click.option("--session", default=None, help="Run in the session workspace NAME (no chat).")
@click.option("--resume", "resume_id", default=None, help="Continue the interrupted run RUN.")
@click.option("--task", default="", help="The instruction (default: write the next reply).")
@click.option("--seed", type=int, default=None, help="Seed for dice and activation.")
@mcp_ask_option
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice(["local", "temporal"]),
    default="local",
    show_default=True,
    help="Run here, or submit to the workers of a Temporal server (--temporal).",
)
@temporal_options
@patience_option
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON, no progress.")
@click.pass_context
def run_command(ctx: click.Context, /, **flags: Any) -> None:
    """Run an agent on CHAT_FILE (a SillyTavern .jsonl) until it finishes.

    With --st-data DIR (SillyTavern's data/<user>/ folder), CHAT_FILE is the
    chat's file name or 'latest' (the default) of --character NAME or
    --group NAME, and that folder's lorebooks and settings apply.

    The agent is offered the profile's tools from every source: built-ins,
    the MCP servers registered in the data dir (``tavern-agent mcp``),
    Python extension tools (``tavern-agent --ext MODULE run …``) and the
    tools of pages connected to a running ``tavern-agent serve``.
    Progress shows each round and tool call; the committed message is printed
    at the end. Ctrl-C cancels cleanly; --resume RUN continues.
    """
    given = RunFlags(**flags)
    given.check()
    data_dir: Path = ctx.obj["data_dir"]
    console = Console(highlight=False, soft_wrap=True)
    if given.resume_id is not None:
        start = _to_resume(data_dir, given.resume_id)
    else:
        start = _new_run(data_dir, given)
    with submitter_exits(given.engine_name == "temporal"):
        run, result = _execute(data_dir, given, start, console)
    _report(console, run, result, given.as_json)
    code = 0 if result.status in ("completed", "partial_success") else 1
    if given.engine_name == "temporal":
        exit_after_temporal(code)
    if code:
        sys.exit(code)


@dataclass(frozen=True)
class RunFlags(ChatFlags, ModelFlags):
    """The arguments and options of one ``run`` command, as click parsed them."""

    profile_spec: str
    session: str | None
    resume_id: str | None
    task: str
    mcp_ask: str
    engine_name: str
    temporal: str | None
    task_queue: str | None
    temporal_patience: float
    as_json: bool

    def check(self) -> None:
        """The combinations of flags that cannot work, as usage errors."""
        self.check_model()
        if self.engine_name == "temporal" and self.temporal is None:
            raise click.UsageError("--engine temporal needs --temporal HOST:PORT")
        if self.engine_name == "temporal" and self.resume_id is not None:
            raise click.UsageError("a Temporal run resumes by itself; follow it with runs show")


@dataclass(frozen=True)
class Start:
    """A new run's spec and model, or the folder of the run to resume."""

    spec: RunSpec | None = None
    gateway: ModelGateway | None = None
    run_dir: Path | None = None


@dataclass
class Live:
    """The run and its local engine once they exist: Ctrl-C and the end close them."""

    run: Run | None = None
    engine: Engine | None = None


def _to_resume(data_dir: Path, resume_id: str) -> Start:
    with usage_error(RunNotFound):
        return Start(run_dir=find_run(DataRoot(data_dir), resume_id))


def _new_run(data_dir: Path, flags: RunFlags) -> Start:
    """The spec of a new run from the flags, and the gateway to its model."""
    if flags.chat is None and flags.session is None and flags.st_data is None:
        raise click.UsageError("give CHAT_FILE, --st-data DIR, --session NAME or --resume RUN")
    with usage_error(ProfileError):
        profile: Profile = resolve_profile(flags.profile_spec, data_dir)
    source = flags.chat_source()
    gateway, record = flags.model_gateway()
    spec = RunSpec(
        profile,
        ModelProtocol(flags.protocol),
        chat_file=source.chat_file if source is not None else None,
        session=flags.session,
        seed=flags.seed,
        task=flags.task,
        model=record,
        chat=source,
    )
    return Start(spec=spec, gateway=gateway)


def _execute(
    data_dir: Path, flags: RunFlags, start: Start, console: Console
) -> tuple[Run, RunResult]:
    """Drive the run to its end; Ctrl-C stops it (or stops following a Temporal run)."""
    approver = approver_for(flags.mcp_ask)
    live = Live()
    try:
        with index_progress.shown():  # a bar on stderr if chat_search waits for its index
            result = asyncio.run(_drive(data_dir, approver, flags, start, console, live))
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, before or while driving
        _interrupted(console, flags, live)
    except ResumeRefused as exc:
        if live.engine is not None:
            live.engine.close()
        raise click.ClickException(str(exc)) from None
    finally:
        if start.gateway is not None and live.engine is None:
            asyncio.run(start.gateway.aclose())
    if live.engine is not None:
        live.engine.close()
    assert live.run is not None  # set before a result exists
    return live.run, result


def _interrupted(console: Console, flags: RunFlags, live: Live) -> NoReturn:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # more Ctrl-C must not cut the note short
    if flags.engine_name == "temporal" and live.run is not None:
        run_id = live.run.id
        console.print(f"[yellow]stopped following[/]: the run goes on; runs cancel {run_id}")
        exit_after_temporal(130)
    if live.engine is not None:
        live.engine.close()
        console.print(f"[yellow]cancelled[/]: resume with --resume {live.engine.run.id}")
    sys.exit(130)


async def _drive(
    data_dir: Path,
    approver: Approver,
    flags: RunFlags,
    start: Start,
    console: Console,
    live: Live,
) -> RunResult:
    async with await Assembly.open(data_dir, approver=approver) as assembly:
        run, own = await _open_run(assembly, flags, start)
        listeners = () if flags.as_json else (Progress(console, run.run_dir),)
        live.run = run
        if flags.temporal is not None and flags.engine_name == "temporal":
            await own.aclose()  # the workers ask the model the run's record names
            try:
                remote = submitter(flags.temporal, flags.task_queue, flags.temporal_patience)
                with CtrlC():
                    return await remote.execute(run, listeners)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        try:
            engine = live.engine = Engine(run, own, listeners=listeners)
            with CtrlC():
                return await (engine.resume() if start.run_dir is not None else engine.start())
        except OSError as exc:  # before the loop took over (it ends its own failures)
            code = ErrorCode.RUN_STORAGE_FAILED.value
            return RunResult(run.id, "failed", 0, 0, code, f"{type(exc).__name__}: {exc}")
        finally:
            await own.aclose()


class CtrlC:
    """While a run is driven, Ctrl-C cancels it once; more Ctrl-C wait for its end.

    Python's own handling raises KeyboardInterrupt at the second Ctrl-C in whatever
    code runs then, which can cut the run's last journal writes (the cancel's record,
    the pairing of open calls). A handler on the event loop runs between steps instead.
    Outside this block (opening and closing the sources), Ctrl-C works as usual.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._count = 0

    def __enter__(self) -> None:
        self._loop.add_signal_handler(signal.SIGINT, self._interrupt)

    def __exit__(self, *exc: object) -> None:
        self._loop.remove_signal_handler(signal.SIGINT)  # back to KeyboardInterrupt

    def _interrupt(self) -> None:
        self._count += 1
        if self._count == 1 and self._task is not None:
            self._task.cancel()
        else:
            print("cancelling: the run's end is being recorded", file=sys.stderr, flush=True)


async def _open_run(assembly: Assembly, flags: RunFlags, start: Start) -> tuple[Run, ModelGateway]:
    """The run to drive (resumed or started) and the gateway to its model."""
    if start.run_dir is not None:
        try:
            run = await Run.aopen(assembly, start.run_dir)
        except (RunNotFound, ProfileError) as exc:
            raise click.UsageError(str(exc)) from None
        own, _ = flags.model_gateway(run.record.get("model"))
        return run, own
    assert start.spec is not None and start.gateway is not None
    try:
        run = await Run.astart(assembly, start.spec)
    except OSError as exc:
        raise click.ClickException(
            f"{ErrorCode.RUN_STORAGE_FAILED}: cannot create the run: {exc}"
        ) from None
    except (ChatFormatError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if run.chat is not None and run.record.get("skippedChatLines"):
        click.echo(run.chat.chat().skipped_warning(run.record["chatFile"]), err=True)
    return run, start.gateway


def _report(console: Console, run: Run, result: RunResult, as_json: bool) -> None:
    """The outcome: JSON, or the committed message (or final text) and the run folder."""
    message = committed_message(run, result)
    if as_json:
        out = {
            "runId": result.run_id,
            "status": result.status,
            "rounds": result.rounds,
            "commits": result.commits,
            "errorCode": result.error_code,
            "message": result.message,
            "floor": result.floor,
            "committedMessage": message,
            "finalText": result.final_text,
            "runDir": str(run.run_dir),
        }
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    if message is not None:
        console.print(f"\n[bold]Committed message (floor {result.floor}):[/]")
        console.print(markup(message))
    elif result.final_text:
        console.print(markup(result.final_text))
    if result.error_code == ErrorCode.RUN_STORAGE_FAILED:
        console.print(f"[red]{ErrorCode.RUN_STORAGE_FAILED}[/]: {markup(result.message)}")
        console.print(f"free space, then continue with: tavern-agent run --resume {run.id}")
    console.print(f"[dim]run folder: {markup(str(run.run_dir))}[/]")


@click.group("runs")
def runs_group() -> None:
    """List and inspect recorded runs."""


@runs_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runs_list(ctx: click.Context, as_json: bool) -> None:
    """Every run under the data root, oldest first."""
    rows = [run_summary(p) for p in all_runs(DataRoot(ctx.obj["data_dir"]))]
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    table = Table("run", "scene", "status", "rounds", "commits", "created", "chat / session")
    for r in rows:
        where = Path(r["chatFile"]).name if r.get("chatFile") else (r.get("session") or "")
        style = "" if r["status"] == "completed" else "red"
        table.add_row(
            markup(r["runId"]),
            markup(r["scene"]),
            f"[{style}]{r['status']}[/]" if style else r["status"],
            str(r.get("rounds") or ""),
            str(r.get("commits") or ""),
            markup(r.get("createdAt") or ""),
            markup(where),
        )
    Console(highlight=False).print(table if rows else "(no runs)")


@runs_group.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the journal events as JSON.")
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """The timeline of RUN: events, tool calls with arguments and results, errors in red."""
    with usage_error(RunNotFound):
        run_dir = find_run(DataRoot(ctx.obj["data_dir"]), run_id)
    path = run_dir / run_layout.JOURNAL_FILE
    if as_json:  # the lines as they are written
        click.echo(json.dumps(read_events(path), ensure_ascii=False, indent=2))
        return
    show_timeline(Console(highlight=False, soft_wrap=True), run_dir, read_journal(path))


def _owner(event: ev.Event, call_inv: Mapping[str, str]) -> str:
    """The invocation an event belongs to (a call's result and outcome: its call's)."""
    if isinstance(event, ev.TaskStarted):
        return event.parent_invocation_id
    inv_id: str | None = getattr(event, "invocation_id", None)
    call_id: str | None = getattr(event, "call_id", None)
    return inv_id or call_inv.get(call_id or "") or ""


def _detail(e: ev.Event, run_dir: Path, console: Console) -> str:
    """The timeline's text for one event after its kind."""
    if isinstance(e, ev.ToolCallRequested):
        return f"{e.name} {Progress(console, run_dir)._arguments(e)}"
    if isinstance(e, ev.ToolResultStored):
        code = f"[{e.result['errorCode']}] " if e.result.get("isError") else ""
        return code + _short(e.result["content"], 100)
    if isinstance(e, ev.ModelResponseStored):
        return f"round {e.round}, {e.calls} call(s) {_short(e.message['text'], 60)}"
    if isinstance(e, ev.CommitConfirmed):
        return f"floor {e.floor} ".strip()
    if isinstance(e, ev.CommitRequested):
        return f"floor  {e.path}".strip()
    if isinstance(e, ev.RunEnded | ev.ReminderAdded):
        return _short({k: v for k, v in e.payload().items() if k != "text"}, 120)
    if isinstance(e, ev.TaskStarted):
        return f"{e.task_id} {e.agent_id} → {e.invocation_id} "
    if isinstance(e, ev.TaskFinished):
        return f"{e.task_id} {e.agent_id} → {e.invocation_id} {e.status}"
    if isinstance(e, ev.HandoffAccepted):
        return f"to {e.agent_id} ({e.to_invocation_id}, depth {e.depth})"
    return ""


def show_timeline(
    console: Console, run_dir: Path, events: Sequence[JournalRecord | Mapping[str, Any]]
) -> None:
    """Print a run's journal as a timeline (lines as :func:`read_events` reads them too)."""
    records = [r if isinstance(r, JournalRecord) else JournalRecord.from_json(r) for r in events]
    summary = run_summary(run_dir)
    head = markup(f"{summary['runId']}  {summary['scene']}  {summary['status']}")
    head += "\n" + markup(f"chat file: {summary['chatFile']}") if summary.get("chatFile") else ""
    if "problem" in summary:
        head += f"\n{markup(summary['problem'])}"
    console.print(f"[bold]{head}[/]")
    depth: dict[str, int] = {}  # child invocations, nested under their parents
    agent_of: dict[str, str] = {}
    call_inv: dict[str, str] = {}
    for record in records:
        e = record.event
        if isinstance(e, ev.InvocationStarted) and e.invocation_kind == "child":
            depth[e.invocation_id] = depth.get(e.parent_invocation_id or "", 0) + 1
            agent_of[e.invocation_id] = e.agent_id or ""
        if isinstance(e, ev.ToolCallRequested):
            call_inv[e.call_id] = e.invocation_id
        owner = _owner(e, call_inv)
        nest = depth.get(owner, 0)
        tag = "    " * nest + (f"[{agent_of[owner]}] " if nest else "")
        style = {"error": "bold red", "warn": "yellow"}.get(record.level, "")
        if isinstance(e, ev.ToolResultStored) and e.result.get("isError"):
            style = "red"
        head = f"{record.seq:>4} {record.timestamp[11:23]} {tag}{record.kind}"
        line = markup(f"{head}  {_detail(e, run_dir, console)}".rstrip())
        console.print(f"[{style}]{line}[/]" if style else line)


@runs_group.command("cancel")
@click.argument("run_id")
@temporal_options
@click.pass_context
def runs_cancel(
    ctx: click.Context, run_id: str, temporal: str | None, task_queue: str | None
) -> None:
    """Cancel RUN: its open calls are paired and the run ends cancelled.

    With --temporal, the run's workflow is cancelled (the step under way stops,
    wherever it runs). Without, the run must not be running (Ctrl-C stops a
    live local run); an interrupted run is ended so that it is not resumed.
    """
    data_dir: Path = ctx.obj["data_dir"]
    with usage_error(RunNotFound):
        run_dir = find_run(DataRoot(data_dir), run_id)

    async def cancel() -> RunResult:
        async with await Assembly.open(data_dir, pages=False) as assembly:
            run = await Run.aopen(assembly, run_dir)
            if temporal is not None:
                return await TemporalEngine(temporal, task_queue=task_queue).cancel(run)
            return await LocalEngine().cancel(run)

    try:
        result = asyncio.run(cancel())
    except (ValueError, ResumeRefused) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{result.run_id}: {result.status}")
    if temporal is not None:
        exit_after_temporal(0)
