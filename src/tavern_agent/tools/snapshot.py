"""Tool snapshots: the frozen tool set of one Invocation.

A snapshot is built once from catalog × scene × profile for one protocol,
written once as JSON, and loaded back unchanged for an output revision or a
continued run. It holds the bindings (descriptor, model name, budget), the
name map in both directions, and the invocation's call budget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol, assign_model_names
from tavern_agent.core.profile import Profile, ShellLimits
from tavern_agent.core.schema_adapt import adapt_parameters
from tavern_agent.fsutil import write_once

SNAPSHOT_SCHEMA_VERSION = 1


class SnapshotError(ValueError):
    """A snapshot file that cannot be loaded; the run cannot resume from it."""


@dataclass(frozen=True, slots=True)
class ToolBinding:
    """One tool as this invocation offers it to the model."""

    descriptor: ToolDescriptor
    model_name: str
    max_calls: int | None = None
    wire_parameters: Mapping[str, Any] | None = None  # set only when adapted for the protocol

    @property
    def tool_id(self) -> ToolId:
        """The bound tool's ToolId."""
        return self.descriptor.tool_id

    @property
    def parameters(self) -> Mapping[str, Any]:
        """The canonical schema the gate checks arguments against."""
        return self.descriptor.parameters

    @property
    def protocol_parameters(self) -> Mapping[str, Any]:
        """The schema to send to the model for this snapshot's protocol."""
        return self.wire_parameters if self.wire_parameters is not None else self.parameters


@dataclass(frozen=True)
class ToolSnapshot:
    """The frozen tool set of one Invocation."""

    id: str
    protocol: ModelProtocol
    scene: Scene
    profile_id: str
    bindings: tuple[ToolBinding, ...]
    max_calls_per_invocation: int
    inline_char_limit: int
    diagnostics: tuple[str, ...] = ()
    schema_version: int = SNAPSHOT_SCHEMA_VERSION
    shell_limits: ShellLimits = field(default_factory=ShellLimits)
    _by_name: dict[str, ToolBinding] = field(init=False, repr=False, compare=False)
    _by_tool: dict[ToolId, ToolBinding] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {b.model_name: b for b in self.bindings}
        by_tool = {b.tool_id: b for b in self.bindings}
        if len(by_name) != len(self.bindings) or len(by_tool) != len(self.bindings):
            raise SnapshotError(f"snapshot {self.id}: tool ids and model names must be unique")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_tool", by_tool)

    def by_name(self, name: str) -> ToolBinding | None:
        """The binding the model calls as ``name``, if any."""
        return self._by_name.get(name)

    def name_of(self, tool_id: ToolId | str) -> str | None:
        """This snapshot's model name for a tool, if it has the tool."""
        key = ToolId.parse(tool_id) if isinstance(tool_id, str) else tool_id
        binding = self._by_tool.get(key)
        return None if binding is None else binding.model_name

    @property
    def model_names(self) -> list[str]:
        """The names the model sees, in order."""
        return [b.model_name for b in self.bindings]

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The snapshot's JSON form, as a run stores it."""
        return {
            "schemaVersion": self.schema_version,
            "id": self.id,
            "protocol": self.protocol.value,
            "scene": self.scene.value,
            "profileId": self.profile_id,
            "maxCallsPerInvocation": self.max_calls_per_invocation,
            "inlineCharLimit": self.inline_char_limit,
            "diagnostics": list(self.diagnostics),
            "shellLimits": self.shell_limits.model_dump(mode="json", by_alias=True),
            "bindings": [_binding_json(b) for b in self.bindings],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolSnapshot:
        """A snapshot from its JSON form; raises ``SnapshotError``
        for another schema version or a malformed one."""
        try:
            version = data["schemaVersion"]
            if version != SNAPSHOT_SCHEMA_VERSION:
                raise SnapshotError(f"unsupported snapshot schemaVersion {version}")
            return cls(
                id=data["id"],
                protocol=ModelProtocol(data["protocol"]),
                scene=Scene(data["scene"]),
                profile_id=data["profileId"],
                bindings=tuple(_binding_from_json(b) for b in data["bindings"]),
                max_calls_per_invocation=int(data["maxCallsPerInvocation"]),
                inline_char_limit=int(data["inlineCharLimit"]),
                diagnostics=tuple(data.get("diagnostics", ())),
                shell_limits=ShellLimits.model_validate(data.get("shellLimits", {})),
            )
        except SnapshotError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"malformed snapshot: {exc!r}") from exc

    def save(self, path: Path, *, durable: bool = True) -> None:
        """Write the snapshot once; a second write to the same path is refused."""
        text = json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))
        write_once(path, text.encode("utf-8"), durable=durable)

    @classmethod
    def load(cls, path: Path) -> ToolSnapshot:
        """A snapshot from a JSON file; raises ``SnapshotError`` when it cannot be read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SnapshotError(f"{path}: cannot read snapshot: {exc}") from exc
        return cls.from_json(data)


def _binding_json(binding: ToolBinding) -> dict[str, Any]:
    d = binding.descriptor
    out: dict[str, Any] = {
        "toolId": str(d.tool_id),
        "modelName": binding.model_name,
        "description": d.description,
        "parameters": d.parameters,
        "scenes": sorted(s.value for s in d.scenes),
        "label": d.label,
        "nameHint": d.name_hint,
        "maxCalls": binding.max_calls,
    }
    if binding.wire_parameters is not None:
        out["wireParameters"] = binding.wire_parameters
    return out


def _binding_from_json(data: Mapping[str, Any]) -> ToolBinding:
    descriptor = ToolDescriptor(
        tool_id=ToolId.parse(data["toolId"]),
        description=data["description"],
        parameters=data["parameters"],
        scenes=frozenset(Scene(s) for s in data["scenes"]),
        label=data.get("label", ""),
        name_hint=data.get("nameHint"),
    )
    return ToolBinding(
        descriptor, data["modelName"], data.get("maxCalls"), data.get("wireParameters")
    )


def bind(
    descriptors: tuple[ToolDescriptor, ...], profile: Profile, protocol: ModelProtocol
) -> tuple[ToolBinding, ...]:
    """Bindings in display order, with names settled in ToolId order."""
    names = assign_model_names(descriptors, protocol)
    bindings = []
    for d in descriptors:
        wire = adapt_parameters(d.parameters, protocol)
        bindings.append(
            ToolBinding(
                d,
                names[d.tool_id],
                profile.tool_budget(d.tool_id),
                None if wire is d.parameters else wire,
            )
        )
    return tuple(bindings)
