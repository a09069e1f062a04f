"""Which model a run asks: from the flags of ``run`` and ``serve``, or from a run's record.

The record is what ``run.json`` keeps of the model (never a key): replayed
responses from a folder, or an HTTP model by protocol, name and base URL. A
resumed run and the Temporal workers build the same gateway from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.redact import MASK
from tavern_agent.providers.gateway import HttpGateway, ModelConfig, ModelGateway, ReplayGateway

BASE_URL_ENV = "TAVERN_AGENT_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"


class ModelChoiceError(Exception):
    """The flags or the record name no model that can be asked; the message says what to give."""


def model_gateway(
    model: str | None,
    replay: Path | None,
    base_url: str | None,
    protocol: str,
    api_key_env: str,
    record: dict[str, Any] | None = None,
    compat: str | None = None,
    context_window: int | None = None,
) -> tuple[ModelGateway, dict[str, Any]]:
    """The model a run talks to, from the CLI's flags (``run``, ``serve``), and its record.

    ``record`` is a resumed run's stored model record, used where no flag is
    given. ``compat`` is ``--compat`` (which kind of ``openai_chat`` server
    the base URL is; ``None``: the record's, else decided by the URL). The
    second value is what ``run.json`` keeps (never a key; ``--context-window`` too).
    Raises :class:`ModelChoiceError`.
    """
    if replay is None and model is None and record:
        if record.get("kind") == "replay":
            replay = Path(record["dir"])
        elif record.get("kind") == "http":
            model, base_url = record["model"], base_url or record["baseUrl"]
            protocol, api_key_env = record["protocol"], record.get("apiKeyEnv") or api_key_env
            compat = compat or record.get("compat")
            context_window = context_window or record.get("contextWindow")
            if f"{MASK}@" in base_url:
                raise ModelChoiceError(
                    "the run's base URL held credentials, which are never stored: "
                    "resume with --base-url URL"
                )
    if replay is not None:
        try:
            gateway = ReplayGateway(replay)
        except ValueError as exc:
            raise ModelChoiceError(str(exc)) from None
        return gateway, {"kind": "replay", "dir": str(replay.resolve())}
    if model is None:
        raise ModelChoiceError("give --model NAME (with --base-url) or --replay RUN_DIR")
    config = ModelConfig(
        ModelProtocol(protocol),
        model,
        base_url or os.environ.get(BASE_URL_ENV, DEFAULT_BASE_URL),
        api_key_env=api_key_env,
        compat=compat or "auto",
        context_window=context_window,
    )
    return HttpGateway(config), {"kind": "http", **config.to_json()}


def gateway_for(record: dict[str, Any] | None) -> ModelGateway:
    """The model gateway a run's record names (replayed responses, or an HTTP model)."""
    if record is None:
        raise ValueError("the run records no model to ask")
    gateway, _ = model_gateway(None, None, None, str(record.get("protocol", "")), "", record)
    return gateway
