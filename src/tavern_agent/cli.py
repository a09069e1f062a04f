"""The ``tavern-agent`` command line."""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import secrets
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat import progress as index_progress
from tavern_agent.chat.formats import ChatFormatError
from tavern_agent.chat.run_input import ChatRun
from tavern_agent.commands.mcp import mcp_group
from tavern_agent.commands.options import (
    chat_source,
    mcp_ask_option,
    world_info_options,
)
from tavern_agent.commands.run import run_command, runs_group
from tavern_agent.commands.serve import serve_command
from tavern_agent.commands.worker import worker_command
from tavern_agent.config import default_data_dir, profiles_dir, resolve_profile
from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.core.results import CommitRequested, ExecutedCall
from tavern_agent.fsutil import atomic_write
from tavern_agent.mcp.approval import approver_for
from tavern_agent.terminal import say
from tavern_agent.tools.catalog import ProfileValidationError
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot
from tavern_agent.workspace.layout import DataRoot
from tavern_agent.workspace.read_state import load_reads, save_reads
from tavern_agent.workspace.store import WorkspaceEscape

T = TypeVar("T")
PROTOCOLS = [p.value for p in ModelProtocol]
SCENES = [s.value for s in Scene]


def _profile(assembly: Assembly, profile_spec: str | None, scene: Scene) -> Profile:
    """The named profile, or one allowing every tool of the catalog."""
    try:
        if profile_spec is None:
            return assembly.everything(scene)
        return resolve_profile(profile_spec, assembly.data.path)
    except ProfileError as exc:
        raise click.UsageError(str(exc)) from None


def _listing(data_dir: Path, work: Callable[[Assembly], T]) -> T:
    """Run ``work`` on every tool source of ``data_dir`` (pages included), then close them."""

    async def run() -> T:
        async with await Assembly.open(data_dir) as assembly:
            return work(assembly)

    return asyncio.run(run())


def _profile_option(f: Any) -> Any:
    return click.option(
        "--profile",
        "profile_spec",
        metavar="P",
        help="Profile id (data dir or built-in, e.g. default-writer) or a .json path. "
        "Default: every tool in the catalog.",
    )(f)


def _scene_option(f: Any) -> Any:
    return click.option(
        "--scene", type=click.Choice(SCENES), default="chat", show_default=True, help="Run scene."
    )(f)


def _protocol_option(f: Any) -> Any:
    return click.option(
        "--protocol",
        type=click.Choice(PROTOCOLS),
        default="openai_chat",
        show_default=True,
        help="Model protocol whose naming and schema rules apply.",
    )(f)


def load_modules(modules: Iterable[str]) -> None:
    """Import modules that register Python extension tools on the default registry."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise click.UsageError(f"--ext {name}: cannot import it: {exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Data root (default: $TAVERN_AGENT_DATA_DIR or ~/.local/share/tavern-agent).",
)
@click.option(
    "--ext",
    "ext_modules",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE, which registers Python extension tools (repeatable).",
)
@click.version_option(package_name="tavern-agent")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, ext_modules: tuple[str, ...]) -> None:
    """tavern-agent: the tool layer of a roleplay chat agent.

    List the tools a profile offers a model, or send one call through the
    same gate, dispatch and result steps a real run uses.
    """
    ctx.obj = {"data_dir": data_dir or default_data_dir()}
    load_modules(ext_modules)


@cli.group()
def tools() -> None:
    """Inspect the tool catalog."""


@tools.command("list")
@_profile_option
@_scene_option
@_protocol_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print the bindings as JSON (the listing API)."
)
@click.pass_context
def tools_list(
    ctx: click.Context, profile_spec: str | None, scene: str, protocol: str, as_json: bool
) -> None:
    """Print the tools a model would be offered: name, ToolId, description, parameters."""

    def build(assembly: Assembly) -> tuple[ToolSnapshot, dict[str, str | None]]:
        profile = _profile(assembly, profile_spec, Scene(scene))
        snap = assembly.snapshot(profile, Scene(scene), ModelProtocol(protocol), "listing")
        return snap, {str(b.tool_id): assembly.origin(b.tool_id) for b in snap.bindings}

    snap, origins = _listing(ctx.obj["data_dir"], build)
    if as_json:
        listing = listing_json(snap)
        for entry in listing["tools"]:
            entry["registeredBy"] = origins[entry["toolId"]]
        click.echo(json.dumps(listing, ensure_ascii=False, indent=2))
        return
    for b in snap.bindings:
        say(f"{b.model_name}  ({b.tool_id})")
        origin = origins[str(b.tool_id)]
        if origin:
            say(f"  registered by {origin}")
        say(f"  {b.descriptor.description}")
        for line in _parameter_lines(b.parameters):
            say(f"    {line}")
    if not snap.bindings:
        say("(no tools)")
    for note in snap.diagnostics:
        say(f"note: {note}", err=True)


def listing_json(snap: ToolSnapshot) -> dict[str, Any]:
    """The tool-listing API: the snapshot's bindings as the model sees them."""
    return {
        "protocol": snap.protocol.value,
        "scene": snap.scene.value,
        "profileId": snap.profile_id,
        "maxCallsPerInvocation": snap.max_calls_per_invocation,
        "inlineCharLimit": snap.inline_char_limit,
        "tools": [
            {
                "name": b.model_name,
                "toolId": str(b.tool_id),
                "description": b.descriptor.description,
                "parameters": b.protocol_parameters,
                "scenes": sorted(s.value for s in b.descriptor.scenes),
                "maxCalls": b.max_calls,
            }
            for b in snap.bindings
        ],
        "diagnostics": list(snap.diagnostics),
    }


def _parameter_lines(schema: Any) -> list[str]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    lines = []
    for name, spec in props.items():
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        need = "required" if name in required else "optional"
        desc = spec.get("description", "") if isinstance(spec, dict) else ""
        lines.append(f"{name}: {kind} ({need}) {desc}".rstrip())
    return lines or ["(no parameters)"]


@cli.command("call")
@click.argument("name")
@click.argument("raw_args", required=False, default=None)
@_profile_option
@click.option(
    "--workspace",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Workspace directory for long results (default: <data-dir>/cli-workspace).",
)
@_scene_option
@_protocol_option
@click.option(
    "--seed", type=int, default=None, help="Seed the randomness (dice) for a repeatable call."
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole AgentToolResult as JSON.")
@click.option(
    "--chat",
    "chat",
    default=None,
    metavar="CHAT",
    help="A SillyTavern chat (.jsonl) for the chat tools; a commit is written to it. "
    "With --st-data: the chat's file name, or 'latest'.",
)
@click.option(
    "--world",
    "world_files",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    multiple=True,
    help="A world info (lorebook) JSON to activate against the chat; repeatable.",
)
@click.option(
    "--character",
    "character",
    default=None,
    metavar="CARD",
    help="A character card (JSON or PNG); its embedded lorebook is activated too. "
    "With --st-data: the character's name.",
)
@world_info_options
@click.option(
    "--run",
    "run_id",
    default=None,
    metavar="ID",
    help="With --chat: commit as run ID, revising the message that run committed before. "
    "Default: a new run id, so a commit appends a new message.",
)
@mcp_ask_option
@click.pass_context
def call_command(
    ctx: click.Context,
    name: str,
    raw_args: str | None,
    profile_spec: str | None,
    workspace: Path | None,
    scene: str,
    protocol: str,
    seed: int | None,
    as_json: bool,
    chat: str | None,
    world_files: tuple[Path, ...],
    character: str | None,
    st_data: Path | None,
    group: str | None,
    run_id: str | None,
    mcp_ask: str,
) -> None:
    """Send one call NAME with RAW_ARGS (argument text exactly as a model sent it).

    Omit RAW_ARGS for a call whose arguments field was missing. Error results
    are results: they print and exit 0.
    """
    data_dir: Path = ctx.obj["data_dir"]
    root = workspace or data_dir / "cli-workspace"
    reads_file = root / run_layout.CLI_READS_FILE
    call = ToolCall(f"call_{secrets.token_hex(8)}", name, MISSING if raw_args is None else raw_args)
    source = _call_source(st_data, chat, character, group, world_files, run_id, seed)
    chat_file = source.chat_file if source is not None else None
    run_id = run_id or f"cli_{secrets.token_hex(6)}"

    opened: list[ChatRun] = []  # settled on the way out, whatever happens

    async def run() -> tuple[ExecutedCall, ToolRequestGate, ChatRun | None]:
        async with await Assembly.open(data_dir, approver=approver_for(mcp_ask)) as assembly:
            profile = _profile(assembly, profile_spec, Scene(scene))
            chat_run = None
            if source is not None:
                try:
                    chat_run, _, _ = assembly.chat_run(
                        source, root, run_id=run_id, profile_id=profile.id
                    )
                except (ChatFormatError, ValueError) as exc:
                    raise click.UsageError(str(exc)) from None
                opened.append(chat_run)
            snap = assembly.snapshot(profile, Scene(scene), ModelProtocol(protocol))
            gate = assembly.gate(
                snap,
                run_id=run_id,
                rng=random.Random(seed),
                workspace=assembly.workspace(root, Scene(scene), profile, chat_run),
                chat=chat_run,
            )
            # Successive `call`s on one workspace act like calls of one invocation: what
            # was read is remembered, so write → read → patch works by hand.
            gate.reads.update(load_reads(reads_file))
            return await gate.handle(call, round=1), gate, chat_run

    try:
        try:
            with index_progress.shown():  # a bar on stderr if chat_search waits for its index
                executed, gate, chat_run = asyncio.run(run())
        except WorkspaceEscape as exc:
            say(f"tavern-agent: fatal: {exc}", err=True)
            sys.exit(1)
        try:
            save_reads(reads_file, gate.reads)
        except OSError as exc:  # a convenience for the next call; the result still counts
            say(f"tavern-agent: note: what this call read is not remembered: {exc}", err=True)
        result = executed.result
        if isinstance(executed.effect, CommitRequested) and chat_run is not None:
            assert gate.workspace is not None
            receipt = chat_run.apply_effect(executed.effect, gate.workspace)
            verb = "created" if receipt.created else "updated"
            say(
                f"tavern-agent: chat floor {receipt.floor} {verb} in {chat_file} "
                f"(revise it with --run {run_id})",
                err=True,
            )
            if receipt.merged:
                say(f"tavern-agent: the chat had changed: {receipt.merged}", err=True)
        if as_json:
            payload = result.to_json() | {"effect": type(executed.effect).__name__}
            click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
        else:
            if result.is_error and result.error_code is not None:
                say(f"[{result.error_code}]")
            say(result.content)
    finally:
        # The chat's index is built on a daemon thread; leaving while it writes
        # the saved index would leave a temporary file in the chat's folder.
        for chat_run in opened:
            chat_run.settle()


def _call_source(
    st_data: Path | None,
    chat: str | None,
    character: str | None,
    group: str | None,
    world_files: tuple[Path, ...],
    run_id: str | None,
    seed: int | None,
) -> ChatSource | None:
    """The chat side of a CLI call: from a SillyTavern folder, or from files given one by one."""
    if st_data is None and chat is None and (world_files or character or run_id):
        raise click.UsageError("--world, --character and --run need --chat (or --st-data)")
    return chat_source(
        st_data, chat, character=character, group=group, world_files=world_files, seed=seed
    )


@cli.group()
def skills() -> None:
    """The skills library (<data-dir>/skills/<name>/SKILL.md)."""


@skills.command("list")
@_profile_option
@click.pass_context
def skills_list(ctx: click.Context, profile_spec: str | None) -> None:
    """List the skills a profile sees, with their front-matter descriptions."""
    data = DataRoot(ctx.obj["data_dir"])
    if profile_spec is None:
        chosen = _listing(data.path, lambda assembly: _profile(assembly, None, Scene.CHAT))
    else:
        try:
            chosen = resolve_profile(profile_spec, data.path)
        except ProfileError as exc:
            raise click.UsageError(str(exc)) from None
    found = data.skills(chosen)
    for skill in found:
        say(f"skills/{skill.folder}/  {skill.name}: {skill.description}".rstrip(": "))
    if not found:
        say(f"(no skills in {data.skills_dir})")


@cli.group()
def profile() -> None:
    """Create and check profiles."""


@profile.command("new")
@click.argument("profile_id")
@click.option("--name", default=None, help="Display name (default: the id).")
@click.pass_context
def profile_new(ctx: click.Context, profile_id: str, name: str | None) -> None:
    """Create a profile in the data dir; like every new profile it enables the shell."""
    try:
        new = Profile.new(profile_id, name)
    except ValueError as exc:
        raise click.UsageError(
            f"bad profile id {profile_id!r}: use letters, digits, '.', '_', '-'"
        ) from exc
    path = profiles_dir(ctx.obj["data_dir"]) / f"{profile_id}.json"
    if path.exists():
        raise click.UsageError(f"profile {profile_id!r} exists already: {path}")
    atomic_write(path, (json.dumps(new.to_json(), indent=2) + "\n").encode())
    say(str(path))


@profile.command("validate")
@click.argument("profile_spec")
@click.pass_context
def profile_validate(ctx: click.Context, profile_spec: str) -> None:
    """Check a profile against the catalog: every enabled tool and override must exist."""
    try:
        loaded = resolve_profile(profile_spec, ctx.obj["data_dir"])
        _listing(ctx.obj["data_dir"], lambda assembly: assembly.catalog.validate_profile(loaded))
    except (ProfileError, ProfileValidationError) as exc:
        problems = exc.problems if isinstance(exc, ProfileValidationError) else [str(exc)]
        for problem in problems:
            say(f"error: {problem}", err=True)
        sys.exit(1)
    say(f"{loaded.id}: ok")


cli.add_command(mcp_group)
cli.add_command(serve_command)
cli.add_command(run_command)
cli.add_command(runs_group)
cli.add_command(worker_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: usage errors print one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="tavern-agent", standalone_mode=False)
    except click.UsageError as exc:
        say(f"tavern-agent: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        say(f"tavern-agent: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except OSError as exc:  # a full or failing disk: one line naming the file, not a traceback
        say(f"tavern-agent: error: storage failed: {exc}", err=True)
        sys.exit(1)
