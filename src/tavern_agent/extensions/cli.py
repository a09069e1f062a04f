"""``tavern-agent serve`` (the extension host) and ``--ext`` module loading."""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from tavern_agent.extensions.host import CLIENT_PATH, DEFAULT_CALL_TIMEOUT, PAGE_PATH, ExtensionHost
from tavern_agent.extensions.remote import HostFiles


def load_modules(modules: Iterable[str]) -> None:
    """Import modules that register Python extension tools on the default registry."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise click.UsageError(f"--ext {name}: cannot import it: {exc}") from None


@click.command("serve")
@click.option("--port", type=int, default=8787, show_default=True, help="Port on 127.0.0.1.")
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    help="Another page origin allowed to connect (its own origin always is); "
    "its host name is accepted in Host headers too.",
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
@click.pass_context
def serve_command(
    ctx: click.Context,
    port: int,
    origins: tuple[str, ...],
    pages: Path | None,
    call_timeout: float,
) -> None:
    """Run the extension host: pages connect and register tools; runs call them.

    Binds 127.0.0.1 only. The token is printed once and kept owner-only in
    <data-dir>/extensions/token; pages load /ext/tavern-agent.js and call
    tavernAgent.connect(url, token).
    """
    files = HostFiles(ctx.obj["data_dir"])

    async def run() -> None:
        host = ExtensionHost(allowed_origins=origins, call_timeout=call_timeout, pages_dir=pages)
        try:
            url = await host.start(port)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc}") from None
        files.write(url, host.token)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ws = url.replace("http://", "ws://") + PAGE_PATH
        click.echo(f"extension host: {url}  (pages connect to {ws})")
        click.echo(f"client script: {url}{CLIENT_PATH}")
        click.echo(f"token: {host.token}  (also in {files.token_path})")
        sys.stdout.flush()
        try:
            await stop.wait()
        finally:
            files.clear()
            await host.aclose()

    asyncio.run(run())
