"""The built-in tool registry: adding a tool is one :class:`BuiltinTool` value."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tavern_agent.core.descriptors import ALL_SCENES, Scene, ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import builtin_model_name
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import ToolOutcome
from tavern_agent.tools.context import CallContext

Run = Callable[[dict[str, Any], CallContext], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class Offer:
    """What a built-in's description may depend on: whom it is offered to, and with what."""

    profile: Profile
    scene: Scene
    tools: frozenset[ToolId]  # every tool of the snapshot being built

    def name(self, tool_id: ToolId) -> str | None:
        """The model name of a built-in in this offer (built-ins keep their names)."""
        return builtin_model_name(tool_id) if tool_id in self.tools else None


Describe = Callable[[Offer], str]


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    """A built-in tool: its descriptor and its ``run`` function.

    ``run`` receives a confirmed argument object that already fits the
    schema; it returns a :class:`ToolOutcome` or raises ``ToolFailure`` for a
    recoverable error. The flags are the tool's rules, read by the catalog,
    the gate and the run loop (nothing else lists built-in ids):

    - ``spills``: large output goes through the shared long-result step;
    - ``finishing``: it ends the caller's work, so it must be the last call
      of its turn, and it still runs after the call budget is spent;
    - ``child_drop``: a delegated child agent never gets it (it must not
      publish, finish the run, delegate, await or hand off);
    - ``child_only``: only a delegated child gets it (added to its snapshot;
      a profile cannot list it);
    - ``repeatable``: running it again after a power loss is harmless (it
      reads, or changes only caches, starts a child agent or returns a
      child's result, whose records are the journal's own); the run loop does
      not make its journal durable before such a call (one fsync per round,
      not per call).

    ``describe``, when set, writes the description for one snapshot (the
    profile's limits, the scene's folders, the other tools' names); the
    static ``descriptor.description`` is what listings show.
    """

    descriptor: ToolDescriptor
    run: Run
    spills: bool = False
    finishing: bool = False
    child_drop: bool = False
    child_only: bool = False
    repeatable: bool = False
    describe: Describe | None = None

    @property
    def tool_id(self) -> ToolId:
        """The tool's ToolId."""
        return self.descriptor.tool_id


def builtin_tool(
    name: str,
    *,
    description: str,
    parameters: Mapping[str, Any],
    scenes: frozenset[Scene] = ALL_SCENES,
    spills: bool = False,
    finishing: bool = False,
    child_drop: bool = False,
    child_only: bool = False,
    repeatable: bool = False,
    describe: Describe | None = None,
) -> Callable[[Run], BuiltinTool]:
    """Decorator turning an ``async def run(args, ctx)`` into a :class:`BuiltinTool`."""

    def wrap(run: Run) -> BuiltinTool:
        descriptor = ToolDescriptor(ToolId.builtin(name), description, parameters, scenes)
        return BuiltinTool(
            descriptor, run, spills, finishing, child_drop, child_only, repeatable, describe
        )

    return wrap


class BuiltinRegistry:
    """The built-in tools of one runtime, keyed by ToolId."""

    def __init__(self, tools: Iterable[BuiltinTool] = ()) -> None:
        self._tools: dict[ToolId, BuiltinTool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: BuiltinTool) -> None:
        """Add a built-in; raises ``ValueError`` if its ToolId is taken."""
        if tool.tool_id in self._tools:
            raise ValueError(f"built-in tool {tool.tool_id} is registered twice")
        self._tools[tool.tool_id] = tool
        for cached in ("finishing", "child_drops", "child_only", "repeatable", "describers"):
            self.__dict__.pop(cached, None)

    def get(self, tool_id: ToolId) -> BuiltinTool | None:
        """The built-in with ``tool_id``, if there is one."""
        return self._tools.get(tool_id)

    def descriptors(self, scene: Scene) -> list[ToolDescriptor]:
        """The built-ins offered in ``scene``, in registration order."""
        return [t.descriptor for t in self._tools.values() if t.descriptor.serves(scene)]

    @functools.cached_property
    def finishing(self) -> frozenset[ToolId]:
        """Tools that end the caller's work (see :class:`BuiltinTool`)."""
        return frozenset(t.tool_id for t in self._tools.values() if t.finishing)

    @functools.cached_property
    def describers(self) -> dict[ToolId, Describe]:
        """The tools whose description is written per snapshot (see :class:`BuiltinTool`)."""
        return {t.tool_id: t.describe for t in self._tools.values() if t.describe is not None}

    @functools.cached_property
    def child_drops(self) -> frozenset[ToolId]:
        """The built-ins a delegated child never gets (commit, finish, delegation)."""
        return frozenset(t.tool_id for t in self._tools.values() if t.child_drop)

    @functools.cached_property
    def child_only(self) -> frozenset[ToolId]:
        """The built-ins only a delegated child gets (``task.return``)."""
        return frozenset(t.tool_id for t in self._tools.values() if t.child_only)

    @functools.cached_property
    def repeatable(self) -> frozenset[ToolId]:
        """Tools whose repeat after a crash is harmless (see :class:`BuiltinTool`)."""
        return frozenset(t.tool_id for t in self._tools.values() if t.repeatable)

    def __iter__(self) -> Iterator[BuiltinTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
