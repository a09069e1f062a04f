"""``tavern-agent serve``'s agent endpoint: options checked at start, then served until stop.

The options are built from ``serve``'s flags by :mod:`tavern_agent.commands.serve`.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from tavern_agent.assembly import Assembly
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.endpoint.app import EndpointSettings, create_app
from tavern_agent.endpoint.protocol import MODEL_PREFIX, Names
from tavern_agent.endpoint.runs import AgentService, RunService, profile_ids
from tavern_agent.endpoint.server import EndpointServer
from tavern_agent.endpoint.workers import WorkerConfig, WorkerPool
from tavern_agent.providers.gateway import ModelGateway


@dataclass
class EndpointOptions:
    """Everything the endpoint needs, checked before anything listens."""

    data_dir: Path
    gateway: ModelGateway
    model_record: dict[str, Any]
    protocol: ModelProtocol
    settings: EndpointSettings
    key_note: str  # how the key is shown at start
    server: EndpointServer
    names: Names = field(default_factory=Names)  # --user-name, --character-name
    workers: int = 1  # --workers: 1 runs in this process, more in worker processes
    gateway_flags: dict[str, Any] = field(default_factory=dict)  # to build it in a worker
    ext_modules: tuple[str, ...] = ()  # --ext, imported by each worker too


async def serve_endpoint(options: EndpointOptions, stop: asyncio.Event) -> None:
    """Serve the endpoint until ``stop`` is set: its runs on this process's one assembly,
    or (``--workers`` 2 and more) on worker processes."""
    try:
        if options.workers == 1:
            async with await Assembly.open(options.data_dir) as assembly:
                service = AgentService(
                    assembly,
                    options.gateway,
                    options.model_record,
                    options.protocol,
                    names=options.names,
                )
                await _serve(options, service, stop)
        else:
            config = WorkerConfig(
                options.data_dir,
                options.gateway_flags,
                options.protocol,
                options.names,
                options.ext_modules,
            )
            pool = WorkerPool(config, options.workers)
            await pool.start()
            try:
                await _serve(options, pool, stop)
            finally:
                await pool.aclose()
    finally:
        await options.gateway.aclose()


async def _serve(options: EndpointOptions, service: RunService, stop: asyncio.Event) -> None:
    url = await options.server.start(create_app(service, options.settings))
    models = ", ".join(MODEL_PREFIX + i for i in profile_ids(options.data_dir))
    click.echo(f"agent endpoint: {url}/v1  (models: {models})")
    click.echo(f"run page: {url}/runs  (open {url}/runs?key=KEY once)")
    if options.workers > 1:
        click.echo(f"runs: on {options.workers} worker processes")
    click.echo(f"endpoint key: {options.key_note}", nl=True)
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await options.server.aclose()
