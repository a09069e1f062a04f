"""``tavern-agent tools list`` and ``tavern-agent call``: the tools a profile offers, one call."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat import progress as index_progress
from tavern_agent.chat.formats import ChatFormatError
from tavern_agent.chat.run_input import ChatRun
from tavern_agent.commands.options import (
    ChatFlags,
    chat_options,
    chosen_profile,
    mcp_ask_option,
    on_every_source,
    profile_option,
    protocol_option,
    scene_option,
)
from tavern_agent.core.arguments import MISSING
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.results import CommitRequested, ExecutedCall
from tavern_agent.mcp.approval import approver_for
from tavern_agent.terminal import say
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot
from tavern_agent.workspace.read_state import load_reads, save_reads
from tavern_agent.workspace.store import WorkspaceEscape


@click.group("tools")
def tools_group() -> None:
    """Inspect the tool catalog."""


@tools_group.command("list")
@profile_option
@scene_option
@protocol_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print the bindings as JSON (the listing API)."
)
@click.pass_context
def tools_list(
    ctx: click.Context, profile_spec: str | None, scene: str, protocol: str, as_json: bool
) -> None:
    """Print the tools a model would be offered: name, ToolId, description, parameters."""

    def build(assembly: Assembly) -> tuple[ToolSnapshot, dict[str, str | None]]:
        profile = chosen_profile(assembly, profile_spec, Scene(scene))
        snap = assembly.snapshot(profile, Scene(scene), ModelProtocol(protocol), "listing")
        return snap, {str(b.tool_id): assembly.origin(b.tool_id) for b in snap.bindings}

    snap, origins = on_every_source(ctx.obj["data_dir"], build)
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


@click.command("call")
@click.argument("name")
@click.argument("raw_args", required=False, default=None)
@profile_option
@click.option(
    "--workspace",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Workspace directory for long results (default: <data-dir>/cli-workspace).",
)
@scene_option
@protocol_option
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
@chat_options
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
def call_command(ctx: click.Context, /, **flags: Any) -> None:
    """Send one call NAME with RAW_ARGS (argument text exactly as a model sent it).

    Omit RAW_ARGS for a call whose arguments field was missing. Error results
    are results: they print and exit 0.
    """
    given = CallFlags(**flags)
    data_dir: Path = ctx.obj["data_dir"]
    root = given.workspace or data_dir / "cli-workspace"
    reads_file = root / run_layout.CLI_READS_FILE
    raw = MISSING if given.raw_args is None else given.raw_args
    call = ToolCall(f"call_{secrets.token_hex(8)}", given.name, raw)
    source = _call_source(given)
    run_id = given.run_id or f"cli_{secrets.token_hex(6)}"
    opened: list[ChatRun] = []  # settled on the way out, whatever happens
    try:
        try:
            with index_progress.shown():  # a bar on stderr if chat_search waits for its index
                sent = _send(data_dir, given, call, source, root, run_id, reads_file, opened)
                executed, gate, chat_run = asyncio.run(sent)
        except WorkspaceEscape as exc:
            say(f"tavern-agent: fatal: {exc}", err=True)
            sys.exit(1)
        _remember_reads(reads_file, gate)
        if isinstance(executed.effect, CommitRequested) and chat_run is not None:
            chat_file = source.chat_file if source is not None else None
            _commit(executed.effect, chat_run, gate, chat_file, run_id)
        _print_result(executed, given.as_json)
    finally:
        # The chat's index is built on a daemon thread; leaving while it writes
        # the saved index would leave a temporary file in the chat's folder.
        for chat_run in opened:
            chat_run.settle()


@dataclass(frozen=True)
class CallFlags(ChatFlags):
    """The arguments and options of one ``call`` command, as click parsed them."""

    name: str
    raw_args: str | None
    profile_spec: str | None
    workspace: Path | None
    scene: str
    protocol: str
    as_json: bool
    run_id: str | None
    mcp_ask: str


def _call_source(flags: CallFlags) -> ChatSource | None:
    """The chat side of a CLI call: from a SillyTavern folder, or from files given one by one."""
    if (
        flags.st_data is None
        and flags.chat is None
        and (flags.world_files or flags.character or flags.run_id)
    ):
        raise click.UsageError("--world, --character and --run need --chat (or --st-data)")
    return flags.chat_source()


async def _send(
    data_dir: Path,
    flags: CallFlags,
    call: ToolCall,
    source: ChatSource | None,
    root: Path,
    run_id: str,
    reads_file: Path,
    opened: list[ChatRun],
) -> tuple[ExecutedCall, ToolRequestGate, ChatRun | None]:
    """The call through the gate of a snapshot of the profile, on the workspace at ``root``."""
    async with await Assembly.open(data_dir, approver=approver_for(flags.mcp_ask)) as assembly:
        scene = Scene(flags.scene)
        profile = chosen_profile(assembly, flags.profile_spec, scene)
        chat_run = None
        if source is not None:
            try:
                chat_run, chat, _ = assembly.chat_run(
                    source, root, run_id=run_id, profile_id=profile.id
                )
            except (ChatFormatError, ValueError) as exc:
                raise click.UsageError(str(exc)) from None
            if chat.skipped:
                click.echo(chat.skipped_warning(source.chat_file), err=True)
            opened.append(chat_run)
        snap = assembly.snapshot(profile, scene, ModelProtocol(flags.protocol))
        gate = assembly.gate(
            snap,
            run_id=run_id,
            rng=random.Random(flags.seed),
            workspace=assembly.workspace(root, scene, profile, chat_run),
            chat=chat_run,
        )
        # Successive `call`s on one workspace act like calls of one invocation: what
        # was read is remembered, so write → read → patch works by hand.
        gate.reads.update(load_reads(reads_file))
        return await gate.handle(call, round=1), gate, chat_run


def _remember_reads(reads_file: Path, gate: ToolRequestGate) -> None:
    try:
        save_reads(reads_file, gate.reads)
    except OSError as exc:  # a convenience for the next call; the result still counts
        say(f"tavern-agent: note: what this call read is not remembered: {exc}", err=True)


def _commit(
    effect: CommitRequested,
    chat_run: ChatRun,
    gate: ToolRequestGate,
    chat_file: Path | None,
    run_id: str,
) -> None:
    """Write the message the call committed to the chat file, and say where it went."""
    assert gate.workspace is not None
    receipt = chat_run.apply_effect(effect, gate.workspace)
    verb = "created" if receipt.created else "updated"
    say(
        f"tavern-agent: chat floor {receipt.floor} {verb} in {chat_file} "
        f"(revise it with --run {run_id})",
        err=True,
    )
    if receipt.merged:
        say(f"tavern-agent: the chat had changed: {receipt.merged}", err=True)


def _print_result(executed: ExecutedCall, as_json: bool) -> None:
    result = executed.result
    if as_json:
        payload = result.to_json() | {"effect": type(executed.effect).__name__}
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        if result.is_error and result.error_code is not None:
            say(f"[{result.error_code}]")
        say(result.content)
