"""Approval of ``ask`` tools and of servers' requests for input (elicitation).

One approver answers both: a callback asks the person, or a policy answers at
once. Non-interactive runs never hang: the default policy declines immediately.
For an elicitation, ``arguments`` holds the proposed answer (the schema's
defaults); an approver may change it in place before saying yes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

AskPolicy = Literal["decline", "allow"]
PREVIEW_CHARS = 400


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One call waiting for a yes or no."""

    registration_id: str
    server: str
    tool: str
    model_name: str
    arguments: dict[str, Any]
    kind: Literal["call", "elicitation"] = "call"
    message: str = ""
    schema: dict[str, Any] | None = None

    @property
    def preview(self) -> str:
        """The call's arguments as short JSON text, for a person to judge."""
        return preview_arguments(self.arguments)


Approver = Callable[[ApprovalRequest], Awaitable[bool]]


def preview_arguments(arguments: dict[str, Any], limit: int = PREVIEW_CHARS) -> str:
    """``arguments`` as compact JSON, cut to ``limit`` characters with the full length noted."""
    text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def policy_approver(policy: AskPolicy = "decline") -> Approver:
    """An approver for runs nobody watches: answers at once, never waits."""
    answer = policy == "allow"

    async def decide(request: ApprovalRequest) -> bool:
        return answer

    return decide


def terminal_approver(fallback: AskPolicy = "decline") -> Approver:
    """Ask on the terminal when stdin is one; otherwise follow ``fallback``."""
    quiet = policy_approver(fallback)

    async def decide(request: ApprovalRequest) -> bool:
        if not sys.stdin.isatty():
            return await quiet(request)
        import click

        if request.kind == "elicitation":
            return await asyncio.to_thread(_ask_for_input, request)

        def ask() -> bool:
            click.echo(
                f"MCP tool {request.tool} on {request.server} wants to run with:\n"
                f"  {request.preview}",
                err=True,
            )
            return bool(click.confirm("Allow this call?", default=False, err=True))

        return await asyncio.to_thread(ask)

    return decide


def _ask_for_input(request: ApprovalRequest) -> bool:
    """Show the server's message, prompt each field (its default offered), confirm."""
    import click

    click.echo(f"MCP server {request.server} asks: {request.message}", err=True)
    properties = (request.schema or {}).get("properties") or {}
    if not click.confirm("Answer it?", default=False, err=True):
        return False
    kinds = {"integer": int, "number": float, "boolean": bool, "string": str}
    for key, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        label = spec.get("title") or spec.get("description") or key
        kind = (
            click.Choice(spec["enum"]) if "enum" in spec else kinds.get(str(spec.get("type")), str)
        )
        current = request.arguments.get(key)
        request.arguments[key] = click.prompt(
            label, default=current, type=kind, show_default=current is not None, err=True
        )
    return True


AskMode = Literal["prompt", "decline", "allow"]
ASK_MODES: tuple[AskMode, ...] = ("prompt", "decline", "allow")


def approver_for(mode: str) -> Approver:
    """The approver for ``--mcp-ask``: ``prompt`` asks on a terminal (declines without one)."""
    if mode == "prompt":
        return terminal_approver()
    if mode in ("decline", "allow"):
        return policy_approver("allow" if mode == "allow" else "decline")
    raise ValueError(f"unknown MCP ask mode {mode!r} (use {', '.join(ASK_MODES)})")


def schema_defaults(schema: dict[str, Any] | None) -> dict[str, Any]:
    """The ``default`` of each top-level property of a requested schema."""
    properties = (schema or {}).get("properties") or {}
    return {
        key: spec["default"]
        for key, spec in properties.items()
        if isinstance(spec, dict) and "default" in spec
    }
