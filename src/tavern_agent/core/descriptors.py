"""``ToolDescriptor``: what a tool is, independent of any model protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tavern_agent.core.ids import ToolId


class Scene(StrEnum):
    """The two kinds of run a tool can serve."""

    CHAT = "chat"
    SESSION = "session"


ALL_SCENES: frozenset[Scene] = frozenset(Scene)


def object_schema(
    properties: Mapping[str, Any], *required: str, extra: Any = False
) -> dict[str, Any]:
    """The JSON Schema of an object with ``properties``, the ``required`` ones needed; other
    keys are refused, or allowed as the schema ``extra`` says."""
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = extra
    return schema


EMPTY_PARAMETERS: Mapping[str, Any] = object_schema({})


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    """One tool as the catalog knows it.

    ``parameters`` is a JSON Schema whose root is an object. ``label`` is the
    human name of the source (the MCP server's display name, the extension's
    id), used to build model-facing names; ``name_hint`` is the name the
    source asked for (an extension's registered ``name``), if any.
    """

    tool_id: ToolId
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    scenes: frozenset[Scene] = ALL_SCENES
    label: str = ""
    name_hint: str | None = None

    def __post_init__(self) -> None:
        if self.parameters.get("type") != "object":
            raise ValueError(f"{self.tool_id}: parameters must be a JSON Schema with type 'object'")
        if not self.scenes:
            raise ValueError(f"{self.tool_id}: a tool must serve at least one scene")

    @property
    def property_names(self) -> frozenset[str]:
        """The names of the top-level parameters the tool's schema declares."""
        props = self.parameters.get("properties") or {}
        return frozenset(props) if isinstance(props, Mapping) else frozenset()

    def serves(self, scene: Scene) -> bool:
        """Whether the tool is offered in ``scene``."""
        return scene in self.scenes
