"""The tool catalog: built-in, MCP and extension tools behind one lookup.

External sources plug in through two small ports with the same shape,
:class:`McpCatalog` and :class:`ExtensionTools`. The catalog answers which
tools exist for a scene, validates a profile that newly enables tools, and
prepares the ordered, overridden descriptors a snapshot is built from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId, ToolKind
from tavern_agent.core.profile import Profile
from tavern_agent.tools.builtin.registry import BuiltinRegistry, Offer
from tavern_agent.tools.context import CallContext


@dataclass(frozen=True, slots=True)
class ExternalReceipt:
    """What an MCP server or extension function answered.

    ``raw`` is the reply as received (JSON data, or a pydantic model such as an MCP
    result, written in its wire form), kept for the audit file; ``resource_refs``
    are workspace paths of files the source's reply was saved to.
    """

    content: str
    structured: Any = None
    is_error: bool = False
    error_code: ErrorCode | None = None
    raw: Any = None
    resource_refs: tuple[str, ...] = ()

    @classmethod
    def failure(
        cls,
        code: ErrorCode,
        message: str,
        raw: Any = None,
        *,
        structured: Any = None,
        resource_refs: tuple[str, ...] = (),
    ) -> ExternalReceipt:
        """An error receipt: ``message`` for the model, ``code`` for the run's records."""
        return cls(message, structured, True, code, raw, resource_refs)


class ExternalToolSource(Protocol):
    """A source of tools that live outside this process's built-ins."""

    def catalog(self, scene: Scene) -> Sequence[ToolDescriptor]:
        """The tools this source offers for ``scene`` right now."""
        ...

    def availability(self, tool_id: ToolId) -> str | None:
        """``None`` when ``tool_id`` may be called now, else why not (for the model)."""
        ...

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Run the tool; raise only for storage or transport failures that end the run."""
        ...


class McpCatalog(ExternalToolSource, Protocol):
    """Discovered MCP tools whose server is active and permission is allow or ask."""


class ExtensionTools(ExternalToolSource, Protocol):
    """Functions registered by extensions, looked up by ToolId at call time."""


class Registered(Protocol):
    """A registered external tool: its descriptor, whether it is switched on, who added it."""

    descriptor: ToolDescriptor
    enabled: bool

    @property
    def origin(self) -> str:
        """Who registered the tool, for listings (a page, a module…)."""
        ...


GONE = "it is no longer registered"
DISABLED = "it has been disabled"

R = TypeVar("R", bound=Registered)


class RegisteredTools(Generic[R]):
    """The lookups of an external tool port whose tools are a table of registrations.

    A subclass keeps ``tools`` current and adds ``invoke``.
    """

    tools: dict[ToolId, R]

    def catalog(self, scene: Scene) -> Sequence[ToolDescriptor]:
        """The descriptors of the enabled tools that serve ``scene``."""
        return [
            e.descriptor for e in self.tools.values() if e.enabled and e.descriptor.serves(scene)
        ]

    def availability(self, tool_id: ToolId) -> str | None:
        """``None`` when ``tool_id`` is registered and enabled, else why not."""
        entry = self.tools.get(tool_id)
        if entry is None:
            return GONE
        return None if entry.enabled else DISABLED

    def origin(self, tool_id: ToolId) -> str | None:
        """Who registered ``tool_id`` (for listings), or ``None``."""
        found = self.tools.get(tool_id)
        return None if found is None else found.origin


Handler = Callable[[dict[str, Any], CallContext], Awaitable[ExternalReceipt]]


@dataclass
class InMemoryToolSource:
    """A plain in-process :class:`ExternalToolSource`: register descriptors and handlers.

    Used by tests and by embedders who want a few Python-side tools before the
    extension registry exists.
    """

    tools: dict[ToolId, tuple[ToolDescriptor, Handler]] = field(default_factory=dict)
    disabled: set[ToolId] = field(default_factory=set)

    def add(self, descriptor: ToolDescriptor, handler: Handler) -> None:
        """Register a tool and its handler (replacing one with the same ToolId)."""
        self.tools[descriptor.tool_id] = (descriptor, handler)

    def remove(self, tool_id: ToolId) -> None:
        """Forget a tool; a later call to it is answered as gone."""
        self.tools.pop(tool_id, None)

    def catalog(self, scene: Scene) -> Sequence[ToolDescriptor]:
        """The enabled tools offered in ``scene``."""
        return [d for t, (d, _) in self.tools.items() if t not in self.disabled and d.serves(scene)]

    def availability(self, tool_id: ToolId) -> str | None:
        """Why the tool cannot be called (gone, disabled), or ``None``."""
        if tool_id not in self.tools:
            return GONE
        return DISABLED if tool_id in self.disabled else None

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Run the tool's handler."""
        _, handler = self.tools[tool_id]
        return await handler(arguments, context)


class ProfileValidationError(ValueError):
    """A profile change the catalog refuses; ``problems`` lists each reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class PreparedTools:
    """Descriptors for a snapshot, in display order, with what was skipped and why."""

    descriptors: tuple[ToolDescriptor, ...]
    diagnostics: tuple[str, ...]


@dataclass(eq=False)
class ToolCatalog:
    """Every tool that exists, from all three sources."""

    builtins: BuiltinRegistry
    mcp: McpCatalog | None = None
    extensions: ExtensionTools | None = None

    def source_for(self, kind: ToolKind) -> ExternalToolSource | None:
        """The external source of ``kind``'s tools (MCP or extensions), if any."""
        if kind is ToolKind.MCP:
            return self.mcp
        if kind is ToolKind.EXTENSION:
            return self.extensions
        return None

    def descriptors(self, scene: Scene) -> list[ToolDescriptor]:
        """All tools available for ``scene``: built-ins first, then MCP, then extensions."""
        found = list(self.builtins.descriptors(scene))
        for source in (self.mcp, self.extensions):
            if source is not None:
                found.extend(source.catalog(scene))
        return found

    def index(self, scene: Scene) -> dict[ToolId, ToolDescriptor]:
        """The tools offered in ``scene``, by ToolId."""
        return {d.tool_id: d for d in self.descriptors(scene)}

    def validate_profile(self, profile: Profile, previous: Profile | None = None) -> None:
        """Refuse a profile that newly enables a tool the catalog does not have.

        Tools enabled already in ``previous`` are let through even if missing
        now (they are skipped at run time). Description overrides must name a
        known tool and only its parameters.
        """
        known = {d.tool_id: d for scene in Scene for d in self.descriptors(scene)}
        before = {str(t) for t in previous.tools.enabled()} if previous else set()
        problems: list[str] = []
        for tool_id in profile.tools.enabled():
            if tool_id in self.builtins.child_only:
                problems.append(
                    f"tools.allow: {tool_id} cannot be listed; delegated children get it"
                )
            elif str(tool_id) not in before and tool_id not in known:
                problems.append(f"tools.allow: {tool_id} is not a registered tool")
        for key, override in profile.tool_descriptions.items():
            descriptor = known.get(ToolId.parse(key))
            if descriptor is None:
                if key not in before:
                    problems.append(f"toolDescriptions: {key} is not a registered tool")
                continue
            unknown = sorted(set(override.properties) - descriptor.property_names)
            if unknown:
                has = ", ".join(sorted(descriptor.property_names)) or "no parameters"
                problems.append(
                    f"toolDescriptions.{key}.properties: {', '.join(unknown)} "
                    f"not a parameter of {key} (has: {has})"
                )
        if problems:
            raise ProfileValidationError(problems)

    def prepare(self, profile: Profile, scene: Scene, *, child: bool = False) -> PreparedTools:
        """The profile's tools for ``scene`` in allow order, overrides applied.

        Missing, disabled or out-of-scene tools are skipped with a diagnostic.
        Built-ins flagged ``child_only`` are added only for a delegated
        ``child``, which in turn loses those flagged ``child_drop``.
        """
        available = self.index(scene)
        chosen: list[ToolDescriptor] = []
        notes: list[str] = []
        only_children = self.builtins.child_only
        enabled = profile.tools.enabled()
        notes.extend(
            f"{t} skipped: only delegated child agents get it"
            for t in enabled
            if t in only_children
        )
        enabled = [t for t in enabled if t not in only_children]
        if child:
            drops = self.builtins.child_drops
            enabled = [t for t in enabled if t not in drops] + sorted(only_children, key=str)
        describers = self.builtins.describers
        offer: Offer | None = None
        for tool_id in enabled:
            descriptor = available.get(tool_id)
            if descriptor is None:
                why = self._why_missing(tool_id, scene)
                notes.append(f"{tool_id} skipped: {why}")
                continue
            describe = describers.get(tool_id) if tool_id.kind is ToolKind.BUILTIN else None
            if describe is not None:
                if offer is None:  # built once, only for a snapshot that needs it
                    offer = Offer(profile, scene, frozenset(t for t in enabled if t in available))
                descriptor = replace(descriptor, description=describe(offer))
            override = profile.tool_descriptions.get(str(tool_id))
            if override is not None:
                descriptor, override_notes = _apply_override(
                    descriptor, override.description, override.properties
                )
                notes.extend(override_notes)
            chosen.append(descriptor)
        return PreparedTools(tuple(chosen), tuple(notes))

    def _why_missing(self, tool_id: ToolId, scene: Scene) -> str:
        for other in Scene:
            if other is not scene and tool_id in self.index(other):
                return f"not offered in {scene} runs"
        return "not registered or not enabled"


def _apply_override(
    descriptor: ToolDescriptor, description: str | None, properties: Mapping[str, str]
) -> tuple[ToolDescriptor, list[str]]:
    notes: list[str] = []
    params: Mapping[str, Any] = descriptor.parameters
    if properties:
        props = dict(params.get("properties") or {})
        for name, text in properties.items():
            if name not in props:
                notes.append(f"{descriptor.tool_id}: override for unknown parameter {name} ignored")
                continue
            props[name] = {**props[name], "description": text}
        params = {**params, "properties": props}
    return replace(
        descriptor, description=description or descriptor.description, parameters=params
    ), notes


def tool_ids(descriptors: Iterable[ToolDescriptor]) -> list[ToolId]:
    """The ToolIds of ``descriptors``, in order."""
    return [d.tool_id for d in descriptors]
