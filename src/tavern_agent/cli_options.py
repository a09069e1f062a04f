"""Command-line options shared by several commands (one definition each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from tavern_agent.mcp.approval import ASK_MODES

F = TypeVar("F", bound=Callable[..., Any])


def mcp_ask_option(f: F) -> F:
    """``--mcp-ask``: how MCP tools whose permission is ``ask`` are answered."""
    option = click.option(
        "--mcp-ask",
        type=click.Choice(ASK_MODES),
        default="prompt",
        show_default=True,
        help="MCP tools set to 'ask': prompt on a terminal (decline without one), "
        "or answer every such call at once.",
    )
    return option(f)
