"""``tavern-agent mcp``: register, inspect and permit MCP servers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from tavern_agent.core.redact import MASK, url_without_userinfo
from tavern_agent.inputs import InputError, load_json
from tavern_agent.mcp.registrations import (
    DiscoveredCatalog,
    Permission,
    Registration,
    RegistrationError,
    RegistrationStore,
    import_mcp_servers,
    parse_registration,
)
from tavern_agent.terminal import say


def _store(ctx: click.Context) -> RegistrationStore:
    return RegistrationStore(ctx.obj["data_dir"])


def _find(store: RegistrationStore, ref: str) -> Registration:
    try:
        return store.find(ref)
    except RegistrationError as exc:
        raise click.UsageError(str(exc)) from None


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{what} must be KEY=VALUE, got {value!r}")
        found[key] = rest
    return found


@click.group("mcp")
def mcp_group() -> None:
    """Register MCP servers, discover their tools and set per-tool permissions.

    New tools start off; `allow` makes them callable, `allow --ask` asks first.
    """


@mcp_group.command("add")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--id", "reg_id", default=None, help="Registration id (default: from NAME).")
@click.option("--url", default=None, help="Streamable HTTP endpoint instead of a command.")
@click.option("--header", "headers", multiple=True, metavar="K=V", help="HTTP header.")
@click.option("--allow-remote", is_flag=True, help="Permit a non-loopback --url.")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment for a command.")
@click.option("--cwd", default=None, help="Working directory for a command.")
@click.option("--timeout", type=float, default=None, help="Seconds per call (default 60).")
@click.pass_context
def mcp_add(
    ctx: click.Context,
    name: str,
    command: tuple[str, ...],
    reg_id: str | None,
    url: str | None,
    headers: tuple[str, ...],
    allow_remote: bool,
    env: tuple[str, ...],
    cwd: str | None,
    timeout: float | None,
) -> None:
    """Register server NAME: `mcp add NAME -- COMMAND ARGS...` or `mcp add NAME --url URL`."""
    store = _store(ctx)
    transport: dict[str, Any]
    if url and command:
        raise click.UsageError("give either --url or a command, not both")
    if url:
        transport = {
            "type": "http",
            "url": url,
            "headers": _pairs(headers, "--header"),
            "allowRemote": allow_remote,
        }
    elif command:
        transport = {
            "type": "stdio",
            "command": command[0],
            "args": list(command[1:]),
            "env": _pairs(env, "--env"),
            "cwd": cwd,
        }
    else:
        raise click.UsageError("give a command after -- or --url")
    reg_id = reg_id or store.new_id(name)
    if store.get(reg_id) is not None:
        raise click.UsageError(f"{reg_id} is registered already")
    data: dict[str, Any] = {"id": reg_id, "displayName": name, "transport": transport}
    if timeout is not None:
        data["timeouts"] = {"callSeconds": timeout}
    try:
        reg = parse_registration(data)
    except RegistrationError as exc:
        raise click.UsageError(str(exc)) from None
    store.save(reg)
    click.echo(f"{reg.id}: registered; run `tavern-agent mcp discover {reg.id}` next")


@mcp_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def mcp_import(ctx: click.Context, file: Path) -> None:
    """Register every server of an `mcpServers` JSON file (as desktop MCP clients use)."""
    store = _store(ctx)
    try:
        regs = import_mcp_servers(load_json(file), store)
    except InputError as exc:  # names the file already
        raise click.UsageError(str(exc)) from None
    except (ValueError, RegistrationError) as exc:
        raise click.UsageError(f"{file}: {exc}") from None
    for reg in regs:
        store.save(reg)
        click.echo(f"{reg.id}: registered ({reg.state})")


def _catalog_lines(reg: Registration, cat: DiscoveredCatalog | None) -> list[str]:
    if cat is None:
        return ["  tools: not discovered yet"]
    lines = [f"  tools: {len(cat.tools)}, discovered {cat.age_text()}"]
    for tool in cat.tools:
        lines.append(f"    {reg.permission(tool.name):5}  {tool.name}")
    for skipped in cat.skipped:
        lines.append(f"    skip   {skipped.name}: {skipped.reason}")
    return lines


@mcp_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Registrations and catalogs as JSON.")
@click.option(
    "--show-secrets",
    is_flag=True,
    help="Print header and environment values and URL user-info as stored (masked by default).",
)
@click.pass_context
def mcp_list(ctx: click.Context, as_json: bool, show_secrets: bool) -> None:
    """Servers, their tools with permissions, and the age of each discovery."""
    store = _store(ctx)
    regs, broken = store.scan()
    if as_json:
        out: list[dict[str, Any]] = []
        for reg in regs:
            cat = store.catalog(reg.id)
            entry = reg.to_json() if show_secrets else _masked(reg.to_json())
            entry["catalog"] = None if cat is None else cat.model_dump(mode="json", by_alias=True)
            out.append(entry)
        out.extend({"id": b.id, "file": str(b.path), "problem": b.problem} for b in broken)
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    if not regs and not broken:
        say("(no MCP servers; add one with `tavern-agent mcp add`)")
    for reg in regs:
        t = reg.transport
        if t.type == "http":
            where = t.url if show_secrets else url_without_userinfo(t.url)
        else:
            where = " ".join([t.command, *t.args])
        say(f"{reg.id}  {reg.display_name!r}  {reg.state}  {t.type}: {where}")
        for line in _catalog_lines(reg, store.catalog(reg.id)):
            say(line)
    for bad in broken:
        say(f"{bad.id}  broken  {bad.path}")
        say(f"  problem: {bad.problem}")
        say(f"  skipped; fix the file or run `tavern-agent mcp remove {bad.id}`")


def _masked(entry: dict[str, Any]) -> dict[str, Any]:
    """A registration's JSON with header and environment values masked: they often hold keys."""
    transport = entry["transport"]
    for name in ("env", "headers"):
        if transport.get(name):
            transport[name] = dict.fromkeys(transport[name], MASK)
    if transport.get("url"):
        transport["url"] = url_without_userinfo(transport["url"])
    return entry


@mcp_group.command("remove")
@click.argument("ref")
@click.pass_context
def mcp_remove(ctx: click.Context, ref: str) -> None:
    """Delete a registration and its cached catalog (a broken file too, by its id)."""
    store = _store(ctx)
    if any(b.id == ref for b in store.broken()):
        store.remove(ref)
        click.echo(f"{ref}: removed (it was broken)")
        return
    reg = _find(store, ref)
    store.remove(reg.id)
    click.echo(f"{reg.id}: removed")


def _set_state(ctx: click.Context, ref: str, state: str) -> None:
    store = _store(ctx)
    reg = _find(store, ref)
    store.save(reg.model_copy(update={"state": state}))
    click.echo(f"{reg.id}: {state}")


@mcp_group.command("pause")
@click.argument("ref")
@click.pass_context
def mcp_pause(ctx: click.Context, ref: str) -> None:
    """Stop offering and calling this server's tools (permissions are kept)."""
    _set_state(ctx, ref, "paused")


@mcp_group.command("resume")
@click.argument("ref")
@click.pass_context
def mcp_resume(ctx: click.Context, ref: str) -> None:
    """Make a paused server active again."""
    _set_state(ctx, ref, "active")


@mcp_group.command("discover")
@click.argument("ref")
@click.pass_context
def mcp_discover(ctx: click.Context, ref: str) -> None:
    """Connect, list every tool (all pages), validate and cache them. New tools start off."""

    async def run() -> tuple[Registration, DiscoveredCatalog]:
        from tavern_agent.mcp.manager import McpManager

        async with McpManager(ctx.obj["data_dir"]) as manager:
            cat = await manager.discover(ref)
            return manager.store.find(ref), cat

    try:
        reg, cat = asyncio.run(run())
    except RegistrationError as exc:
        raise click.ClickException(str(exc)) from None
    for line in _catalog_lines(reg, cat):
        say(line)


def _permit(ctx: click.Context, ref: str, tools: tuple[str, ...], every: bool, to: str) -> None:
    store = _store(ctx)
    reg = _find(store, ref)
    cat = store.catalog(reg.id)
    known = cat.names if cat is not None else []
    if every:
        if not known:
            raise click.UsageError(f"{reg.id}: nothing discovered yet; run `mcp discover` first")
        tools = tuple(known)
    if not tools:
        raise click.UsageError("name at least one tool, or --all")
    unknown = [t for t in tools if t not in known]
    if unknown and known:
        raise click.UsageError(
            f"{reg.id} has no tool {', '.join(unknown)} (has: {', '.join(known)})"
        )
    permission: Permission = "allow" if to == "allow" else "ask" if to == "ask" else "off"
    store.save(reg.with_permissions(dict.fromkeys(tools, permission)))
    for tool in tools:
        click.echo(f"{reg.id}: {tool} {permission}")


@mcp_group.command("allow")
@click.argument("ref")
@click.argument("tools", nargs=-1)
@click.option("--ask", is_flag=True, help="Ask the person before each call.")
@click.option("--all", "every", is_flag=True, help="Every discovered tool.")
@click.pass_context
def mcp_allow(ctx: click.Context, ref: str, tools: tuple[str, ...], ask: bool, every: bool) -> None:
    """Let the agent call TOOLS of server REF (or ask first, with --ask)."""
    _permit(ctx, ref, tools, every, "ask" if ask else "allow")


@mcp_group.command("deny")
@click.argument("ref")
@click.argument("tools", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every discovered tool.")
@click.pass_context
def mcp_deny(ctx: click.Context, ref: str, tools: tuple[str, ...], every: bool) -> None:
    """Switch TOOLS of server REF off: not offered, and refused if called."""
    _permit(ctx, ref, tools, every, "off")


def _http_registration(ctx: click.Context, ref: str) -> Registration:
    reg = _find(_store(ctx), ref)
    if reg.transport.type != "http":
        raise click.UsageError(f"{reg.id} is a stdio server; OAuth logins are for HTTP servers")
    return reg


@mcp_group.command("login")
@click.argument("ref")
@click.option("--no-browser", is_flag=True, help="Print the login URL instead of opening it.")
@click.option("--client-id", default=None, help="A client id registered beforehand.")
@click.option("--client-secret", default=None, help="Its secret, if it has one.")
@click.option(
    "--client-metadata-url", default=None, help="HTTPS URL of a client ID metadata document."
)
@click.pass_context
def mcp_login(
    ctx: click.Context,
    ref: str,
    no_browser: bool,
    client_id: str | None,
    client_secret: str | None,
    client_metadata_url: str | None,
) -> None:
    """Log in to HTTP server REF with OAuth (opens the browser; tokens are kept, mode 0600).

    The client registers itself where the server allows it; otherwise give
    --client-id (and --client-secret) of a client registered beforehand.
    """
    from tavern_agent.mcp.logs import capture_sdk_logs
    from tavern_agent.mcp.oauth import ClientChoice, FileTokenStorage, login

    capture_sdk_logs(_store(ctx).logs_dir / "sdk.log")

    if client_secret and not client_id:
        raise click.UsageError("--client-secret needs --client-id")
    choice = ClientChoice(client_id, client_secret, client_metadata_url)

    reg = _http_registration(ctx, ref)
    assert reg.transport.type == "http"
    storage = FileTokenStorage(_store(ctx).oauth_path(reg.id))

    async def show(url: str) -> None:
        say(f"Log in to {reg.display_name} at:\n  {url}", err=True)
        if not no_browser:
            import webbrowser

            opened = await asyncio.to_thread(webbrowser.open, url)
            if not opened:
                click.echo("(no browser found: open the URL above yourself)", err=True)
        click.echo("Waiting for the login to finish…", err=True)

    try:
        got = asyncio.run(
            login(
                reg.transport.url,
                dict(reg.transport.headers),
                storage,
                show,
                reg.timeouts.connect_seconds,
                choice,
            )
        )
    except Exception as exc:  # a failed login is a message, not a traceback
        from tavern_agent.mcp.connections import describe_error

        detail = describe_error(exc).splitlines()[0]
        raise click.ClickException(f"{reg.id}: login failed: {detail}") from None
    if not got:
        click.echo(f"{reg.id}: the server did not ask for a login; nothing stored")
        return
    click.echo(f"{reg.id}: logged in; run `tavern-agent mcp discover {reg.id}` next if needed")


@mcp_group.command("logout")
@click.argument("ref")
@click.pass_context
def mcp_logout(ctx: click.Context, ref: str) -> None:
    """Forget the OAuth tokens and client registration of HTTP server REF."""
    from tavern_agent.mcp.oauth import FileTokenStorage

    reg = _http_registration(ctx, ref)
    removed = FileTokenStorage(_store(ctx).oauth_path(reg.id)).remove()
    click.echo(f"{reg.id}: logged out" if removed else f"{reg.id}: was not logged in")
