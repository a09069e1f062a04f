"""A tool call as a model emitted it, before any checking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tavern_agent.core.arguments import MISSING


@dataclass(frozen=True, slots=True)
class ToolCall:
    """``raw_arguments`` is the wire value exactly as received (``MISSING`` if absent)."""

    call_id: str
    name: str
    raw_arguments: Any = MISSING
