"""``tavern-agent serve``'s agent endpoint: options checked at start, then served until stop."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tavern_agent.assembly import Assembly
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.endpoint.app import EndpointSettings, create_app
from tavern_agent.endpoint.keys import EndpointKeyError, key_from_env, key_path, load_or_create
from tavern_agent.endpoint.protocol import MODEL_PREFIX
from tavern_agent.endpoint.runs import AgentService, profile_ids
from tavern_agent.endpoint.server import EndpointServer
from tavern_agent.extensions.host import LOOPBACK_HOSTS
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime.cli import model_gateway


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

    @classmethod
    def from_cli(
        cls,
        data_dir: Path,
        *,
        model: str | None,
        replay: Path | None,
        base_url: str | None,
        protocol: str,
        api_key_env: str,
        host: str,
        port: int,
        key_env: str | None,
        origins: Sequence[str],
        max_concurrent_runs: int,
        heartbeat: float = 10.0,
    ) -> EndpointOptions:
        if model is not None and replay is not None:
            raise click.UsageError("--model and --replay exclude each other")
        try:
            if key_env is not None:
                key, note = key_from_env(key_env), f"from ${key_env}"
            else:
                key, created = load_or_create(data_dir)
                where = key_path(data_dir)
                note = f"{key}  (shown once; kept in {where})" if created else f"in {where}"
        except EndpointKeyError as exc:
            raise click.UsageError(str(exc)) from None
        gateway, record = model_gateway(model, replay, base_url, protocol, api_key_env)
        try:
            server = EndpointServer(host, port)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        settings = EndpointSettings(
            key,
            max_concurrent_runs=max_concurrent_runs,
            allowed_origins=tuple(origins),
            loopback_only=host in LOOPBACK_HOSTS,
            heartbeat_seconds=heartbeat,
        )
        return cls(data_dir, gateway, record, ModelProtocol(protocol), settings, note, server)


async def serve_endpoint(options: EndpointOptions, stop: asyncio.Event) -> None:
    """Serve the endpoint on the process's one assembly until ``stop`` is set."""
    try:
        async with await Assembly.open(options.data_dir) as assembly:
            service = AgentService(
                assembly, options.gateway, options.model_record, options.protocol
            )
            url = await options.server.start(create_app(service, options.settings))
            models = ", ".join(MODEL_PREFIX + i for i in profile_ids(options.data_dir))
            click.echo(f"agent endpoint: {url}/v1  (models: {models})")
            click.echo(f"endpoint key: {options.key_note}", nl=True)
            sys.stdout.flush()
            try:
                await stop.wait()
            finally:
                await options.server.aclose()
    finally:
        await options.gateway.aclose()
