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
from tavern_agent.endpoint.runs import AgentService, profile_ids
from tavern_agent.endpoint.server import EndpointServer
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


async def serve_endpoint(options: EndpointOptions, stop: asyncio.Event) -> None:
    """Serve the endpoint on the process's one assembly until ``stop`` is set."""
    try:
        async with await Assembly.open(options.data_dir) as assembly:
            service = AgentService(
                assembly,
                options.gateway,
                options.model_record,
                options.protocol,
                names=options.names,
            )
            url = await options.server.start(create_app(service, options.settings))
            models = ", ".join(MODEL_PREFIX + i for i in profile_ids(options.data_dir))
            click.echo(f"agent endpoint: {url}/v1  (models: {models})")
            click.echo(f"run page: {url}/runs  (open {url}/runs?key=KEY once)")
            click.echo(f"endpoint key: {options.key_note}", nl=True)
            sys.stdout.flush()
            try:
                await stop.wait()
            finally:
                await options.server.aclose()
    finally:
        await options.gateway.aclose()
