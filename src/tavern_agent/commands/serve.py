"""``tavern-agent serve``: the extension host and, with a model, the agent endpoint."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tavern_agent.commands.options import ModelFlags, model_options
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.extensions.host import DEFAULT_CALL_TIMEOUT, LOOPBACK_HOSTS, ExtensionHost
from tavern_agent.extensions.protocol import CLIENT_PATH, PAGE_PATH
from tavern_agent.extensions.remote import HostFiles

if TYPE_CHECKING:
    from tavern_agent.endpoint.serve import EndpointOptions


def endpoint_options(
    data_dir: Path, flags: ServeFlags, ext_modules: tuple[str, ...] = ()
) -> EndpointOptions:
    """The agent endpoint's options from ``serve``'s flags, checked before anything listens."""
    # Starlette only when the endpoint is served
    from tavern_agent.endpoint.app import EndpointSettings
    from tavern_agent.endpoint.keys import EndpointKeyError, key_from_env, key_path, load_or_create
    from tavern_agent.endpoint.protocol import Names
    from tavern_agent.endpoint.serve import EndpointOptions
    from tavern_agent.endpoint.server import EndpointServer
    from tavern_agent.endpoint.workers import default_workers

    flags.check_model()
    key_env, host, port = flags.endpoint_key_env, flags.host, flags.api_port
    try:
        if key_env is not None:
            key, note = key_from_env(key_env), f"from ${key_env}"
        else:
            key, created = load_or_create(data_dir)
            where = key_path(data_dir)
            note = f"{key}  (shown once; kept in {where})" if created else f"in {where}"
    except EndpointKeyError as exc:
        raise click.UsageError(str(exc)) from None
    gateway, record = flags.model_gateway()
    try:
        server = EndpointServer(host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    settings = EndpointSettings(
        key,
        max_concurrent_runs=flags.max_concurrent_runs,
        allowed_origins=flags.origins,
        loopback_only=host in LOOPBACK_HOSTS,
        heartbeat_seconds=flags.heartbeat,
    )
    names = (flags.user_name, flags.character_name)
    user, character = (name.strip() or None if name else None for name in names)
    return EndpointOptions(
        data_dir,
        gateway,
        record,
        ModelProtocol(flags.protocol),
        settings,
        note,
        server,
        Names(user, character),
        workers=flags.workers or default_workers(),
        gateway_flags=flags.model_flags(),
        ext_modules=ext_modules,
    )


@click.command("serve")
@click.option("--port", type=int, default=8787, show_default=True, help="Port on 127.0.0.1.")
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    help="Another page origin allowed to connect (its own origin always is); "
    "its host name is accepted in Host headers too. Pages of it may call the agent "
    "endpoint (CORS).",
)
@click.option(
    "--pages",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="Folder served at /pages/ (same origin as the host).",
)
@click.option(
    "--call-timeout",
    type=float,
    default=DEFAULT_CALL_TIMEOUT,
    show_default=True,
    help="Seconds to wait for a page's receipt.",
)
@model_options(
    model_help="Upstream model the agent endpoint's runs call (with --base-url); "
    "enables the endpoint.",
    replay_help="Answer the endpoint's model requests from this recorded run folder (offline).",
)
@click.option(
    "--api-port",
    type=int,
    default=8788,
    show_default=True,
    help="Port of the agent endpoint (/v1/chat/completions); 0 picks a free one.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address the agent endpoint binds; anything else exposes it beyond this machine.",
)
@click.option(
    "--endpoint-key-env",
    default=None,
    metavar="NAME",
    help="Take the endpoint's bearer key from $NAME instead of <data-dir>/endpoint/api-key.",
)
@click.option(
    "--max-concurrent-runs",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Endpoint runs at once; more get 503 with Retry-After.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes the endpoint's runs are spread over (default: the number of cores); "
    "they share the data root and --max-concurrent-runs. 1 runs them in the serving "
    "process.",
)
@click.option(
    "--user-name",
    default=None,
    help="The user's name in endpoint chats when a request does not say it.",
)
@click.option(
    "--character-name",
    default=None,
    help="The character's name in endpoint chats when a request does not say it.",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(min=0.05),
    default=10.0,
    show_default=True,
    help="Seconds between keep-alive comments on an endpoint stream while the run is quiet.",
)
@click.pass_context
def serve_command(ctx: click.Context, /, **flags: Any) -> None:
    """Run the extension host and, with --model or --replay, the agent endpoint.

    The extension host: pages connect and register tools; runs call them. It
    binds 127.0.0.1 only. Its token is printed once and kept owner-only in
    <data-dir>/extensions/token; pages load /ext/tavern-agent.js and call
    tavernAgent.connect(url, token).

    The agent endpoint (http://127.0.0.1:8788/v1) speaks the OpenAI Chat
    Completions API: point SillyTavern or any OpenAI client at it, and each
    request is answered by an agent run with tools. Its bearer key is created
    on first start, printed once and kept owner-only in
    <data-dir>/endpoint/api-key. --allow-origin also lets browser pages of
    that origin call it.
    """
    given = ServeFlags(**flags)
    data_dir: Path = ctx.obj["data_dir"]
    try:
        lock = ServeLock.take(data_dir)
    except ServeRunning as exc:  # one line, exit 2
        raise click.UsageError(str(exc)) from None
    files = HostFiles(data_dir)
    options: EndpointOptions | None = None
    if given.model is not None or given.replay is not None:
        options = endpoint_options(data_dir, given, ctx.obj.get("ext_modules", ()))
    asyncio.run(_serve(files, given, options, lock))


@dataclass(frozen=True)
class ServeFlags(ModelFlags):
    """The options of one ``serve`` command, as click parsed them."""

    port: int
    origins: tuple[str, ...]
    pages: Path | None
    call_timeout: float
    api_port: int
    host: str
    endpoint_key_env: str | None
    max_concurrent_runs: int
    workers: int | None
    user_name: str | None
    character_name: str | None
    heartbeat: float


async def _serve(
    files: HostFiles, flags: ServeFlags, options: EndpointOptions | None, lock: ServeLock
) -> None:
    """The extension host (and the endpoint, given its options) until SIGINT or SIGTERM."""
    ext = ExtensionHost(
        allowed_origins=flags.origins, call_timeout=flags.call_timeout, pages_dir=flags.pages
    )
    try:
        url = await ext.start(flags.port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{flags.port}: {exc}") from None
    lock.announce(ext.port, None if options is None else options.server.port)
    files.write(url, ext.token)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ws = url.replace("http://", "ws://") + PAGE_PATH
    click.echo(f"extension host: {url}  (pages connect to {ws})")
    click.echo(f"client script: {url}{CLIENT_PATH}")
    click.echo(f"token: {ext.token}  (also in {files.token_path})")
    sys.stdout.flush()
    try:
        if options is None:
            await stop.wait()
        else:
            from tavern_agent.endpoint.serve import serve_endpoint

            await serve_endpoint(options, stop)
    finally:
        files.clear()
        await ext.aclose()


class ServeRunning(Exception):
    """Another ``serve`` holds the data dir; the message names it."""


class ServeLock:
    """``<data-dir>/serve.lock``, held by the one ``serve`` of that data dir.

    Two hosts on one data dir would overwrite each other's token and URL files.
    The lock is an ``flock``, which the kernel lets go when its process ends however
    it ends: a crashed ``serve`` leaves a file behind but never a lock. The file
    names its holder (pid, ports) for the one that is refused.
    """

    FILE = "serve.lock"

    def __init__(self, fd: int) -> None:
        self._fd = fd  # open for the process's life; not inherited by its children

    @classmethod
    def take(cls, data_dir: Path) -> ServeLock:
        """Hold the data dir's lock, or raise :class:`ServeRunning` naming its holder."""
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(data_dir / cls.FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096)
            os.close(fd)
            raise ServeRunning(
                f"tavern-agent serve is already running on {data_dir} ({_holder(holder)}); "
                "stop it or give another --data-dir"
            ) from None
        lock = cls(fd)
        lock.announce(None, None)
        return lock

    def announce(self, host_port: int | None, endpoint_port: int | None) -> None:
        """Write this process's pid and ports into the held file."""
        info = {"pid": os.getpid(), "hostPort": host_port, "endpointPort": endpoint_port}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(info).encode() + b"\n", 0)


def _holder(data: bytes) -> str:
    """The lock holder's pid and ports as a reader sees them."""
    try:
        info = json.loads(data)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return "pid unknown"
    parts = [f"pid {info.get('pid')}"]
    if info.get("hostPort") is not None:
        parts.append(f"extension host port {info['hostPort']}")
    if info.get("endpointPort") is not None:
        parts.append(f"endpoint port {info['endpointPort']}")
    return ", ".join(parts)
