"""Profiles: which tools an agent may use, its budgets and description overrides.

Profiles are JSON files (camelCase keys). Tool settings use ToolIds, never
model-facing names. ``tools.allow`` is ordered: it is the order in
which tools are shown to the model; ``tools.deny`` wins over ``allow``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from tavern_agent.core import json_input
from tavern_agent.core.ids import InvalidToolId, ToolId

DEFAULT_MAX_CALLS = 80
DEFAULT_MAX_ROUNDS = 80
DEFAULT_INLINE_CHAR_LIMIT = 50_000
DEFAULT_MAX_IDENTICAL_FAILURES = 5
NEW_PROFILE_TOOLS = ("builtin:workspace.shell",)
BUILTIN_PROFILE_IDS = ("default-writer",)

# Profiles already made, by their file's bytes and by built-in id (see Profile.load).
_LOADED: dict[bytes, Profile] = {}
_LOADED_MAX = 64
_LOADED_LOCK = threading.Lock()
_BUILTINS: dict[str, Profile] = {}


class ProfileError(ValueError):
    """A profile file that cannot be used, with the field at fault."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _tool_id_text(value: str) -> str:
    ToolId.parse(value)  # raises InvalidToolId, which names the bad part
    return value


def _check_tool_ids(values: Iterable[str]) -> None:
    """Raise ``ValueError`` (what pydantic reports) naming the first value that is no ToolId."""
    for value in values:
        try:
            _tool_id_text(value)
        except InvalidToolId as exc:
            raise ValueError(str(exc)) from None


class ToolSelection(_Model):
    """Which tools a profile enables: the ToolIds in ``allow``,
    in the order the model sees them, minus ``deny``."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @field_validator("allow", "deny")
    @classmethod
    def _valid_ids(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        _check_tool_ids(values)
        return values

    def enabled(self) -> list[ToolId]:
        """Allowed and not denied, in allow order, without repeats."""
        return list(self._enabled)

    @cached_property
    def _enabled(self) -> tuple[ToolId, ...]:
        # Parsed once per (frozen) profile: snapshots are built from it again and again.
        denied = set(self.deny)
        seen: set[str] = set()
        result: list[ToolId] = []
        for text in self.allow:
            if text not in denied and text not in seen:
                seen.add(text)
                result.append(ToolId.parse(text))
        return tuple(result)


class ShellLimits(_Model):
    """Limits of one ``workspace.shell`` call (Bashkit and its JavaScript engine)."""

    timeout_seconds: float = Field(30.0, gt=0, le=600)
    max_commands: int = Field(100_000, ge=100, le=100_000)  # Bashkit caps a session at 100k
    max_loop_iterations: int = Field(1_000_000, ge=100, le=100_000_000)
    max_memory_bytes: int = Field(64 * 1024 * 1024, ge=1024 * 1024, le=1024 * 1024 * 1024)
    js_timeout_seconds: float = Field(30.0, gt=0, le=600)
    js_memory_bytes: int = Field(64 * 1024 * 1024, ge=4 * 1024 * 1024, le=1024 * 1024 * 1024)


class Limits(_Model):
    """A profile's budgets: rounds, calls per invocation and per tool, inline result size, shell.

    ``max_identical_failures``: the run stops (``model.stuck``) once one call, same
    name and arguments, has failed this many times in a row with the same error, or
    the model has answered this many chat turns in a row without a call.
    """

    max_rounds: int = Field(DEFAULT_MAX_ROUNDS, ge=1, le=10_000)
    max_identical_failures: int = Field(DEFAULT_MAX_IDENTICAL_FAILURES, ge=1, le=10_000)
    max_calls_per_invocation: int = Field(DEFAULT_MAX_CALLS, ge=1, le=100_000)
    max_calls_per_tool: dict[str, int] = Field(default_factory=dict)
    external_result_inline_char_limit: int = Field(DEFAULT_INLINE_CHAR_LIMIT, ge=1_000)
    # The model's context window in tokens, when the server does not say (or says wrong);
    # the --context-window flag wins over it.
    context_window: int | None = Field(None, ge=256, le=100_000_000)
    shell: ShellLimits = ShellLimits()

    @field_validator("max_calls_per_tool")
    @classmethod
    def _valid_tool_budgets(cls, values: dict[str, int]) -> dict[str, int]:
        for key, count in values.items():
            try:
                _tool_id_text(key)
            except InvalidToolId as exc:
                raise ValueError(str(exc)) from None
            if count < 1:
                raise ValueError(f"budget for {key} must be at least 1, got {count}")
        return values


class DescriptionOverride(_Model):
    """A profile's own wording for one tool's description and parameter descriptions."""

    description: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)


class WorkspaceSettings(_Model):
    """The workspace roots a profile sees and may write (``None``: the scene's defaults)."""

    visible_roots: tuple[str, ...] | None = None
    writable_roots: tuple[str, ...] | None = None


class SkillSettings(_Model):
    """Which skills a profile sees: the ``visible`` names (``*``: all) minus ``deny``."""

    visible: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()

    def allows(self, name: str) -> bool:
        """Whether the profile sees the skill named ``name``."""
        return name not in self.deny and ("*" in self.visible or name in self.visible)


class RunSettings(_Model):
    """``presentation``: a foreground run must commit its reply before it may finish."""

    presentation: Literal["foreground", "background"] = "foreground"


class PromptSettings(_Model):
    """The run prompt: ``system`` replaces the default duties text; the chat history it carries.

    ``initial_chat_history_messages`` is how many floors the first prompt shows
    (SillyTavern's ``initialChatHistoryMessages``): -1 all that fit
    ``history_chars``, 0 none, N the newest N that fit. The model reads the
    rest with the chat tools.
    """

    system: str = ""
    history_chars: int = Field(12_000, ge=0, le=2_000_000)
    initial_chat_history_messages: int = Field(-1, ge=-1, le=1_000_000)


class DelegationSettings(_Model):
    """How this agent works with others.

    ``can_delegate``/``can_handoff``: may this agent use the delegate/handoff tools
    (its tool list must also enable them). ``callable``: may other agents call it at
    all; ``allow_as_subagent``/``allow_as_handoff_target`` narrow that per operation,
    and ``allowed_callers`` (ids or ``*``) by caller. Limits bind the caller.
    """

    can_delegate: bool = True
    can_handoff: bool = True
    callable: bool = False
    allow_as_subagent: bool = True
    allow_as_handoff_target: bool = True
    allowed_callers: tuple[str, ...] = ("*",)
    description_for_agents: str = ""
    max_concurrent_invocations: int = Field(3, ge=1, le=64)
    max_invocations_per_run: int = Field(8, ge=1, le=1_000)
    result_budget_tokens: int = Field(8_000, ge=100, le=200_000)
    max_handoff_depth: int = Field(8, ge=0, le=64)

    def allows_caller(self, caller_id: str) -> bool:
        """Whether the agent with profile ``caller_id`` may call this one."""
        return "*" in self.allowed_callers or caller_id in self.allowed_callers


class Profile(_Model):
    """An agent profile. Load with :meth:`load`, create with :meth:`new`."""

    schema_version: int = 1
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    name: str
    description: str = ""
    tools: ToolSelection = ToolSelection()
    limits: Limits = Limits()
    tool_descriptions: dict[str, DescriptionOverride] = Field(default_factory=dict)
    workspace: WorkspaceSettings = WorkspaceSettings()
    skills: SkillSettings = SkillSettings()
    run: RunSettings = RunSettings()
    prompt: PromptSettings = PromptSettings()
    delegation: DelegationSettings = DelegationSettings()

    @field_validator("tool_descriptions")
    @classmethod
    def _valid_override_ids(
        cls, values: dict[str, DescriptionOverride]
    ) -> dict[str, DescriptionOverride]:
        _check_tool_ids(values)
        return values

    @classmethod
    def new(cls, profile_id: str, name: str | None = None) -> Profile:
        """A fresh profile; like every new profile it enables the shell."""
        return cls(
            id=profile_id, name=name or profile_id, tools=ToolSelection(allow=NEW_PROFILE_TOOLS)
        )

    @classmethod
    def allowing(cls, tool_ids: list[ToolId], profile_id: str = "catalog") -> Profile:
        """A profile that enables exactly ``tool_ids`` (the whole catalog, for listings)."""
        allow = tuple(str(t) for t in tool_ids)
        return cls(id=profile_id, name="All catalog tools", tools=ToolSelection(allow=allow))

    @classmethod
    def from_json(cls, data: Any, origin: str = "profile") -> Profile:
        """A profile from its JSON form; raises ``ProfileError`` naming
        the first bad field (``origin`` says where the data came from)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(root)"
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise ProfileError(f"{origin}: {where}: {first['msg']}{more}") from None

    @classmethod
    def load(cls, path: Path) -> Profile:
        """A profile from a JSON file; raises ``ProfileError``
        for a missing, unreadable or invalid file.

        The file is read every time; a text read before gives the profile made
        from it then (profiles are frozen), so listing the data root's profiles
        for every run does not validate them again."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ProfileError(f"{path}: no such profile file") from None
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read profile: {exc.strerror or exc}") from None
        known = _LOADED.get(raw)
        if known is not None:
            return known
        try:
            data = json_input.loads(raw)
        except json_input.JsonInputError as exc:
            raise ProfileError(f"{path}: cannot read profile: {exc}") from None
        profile = cls.from_json(data, str(path))
        with _LOADED_LOCK:
            while len(_LOADED) >= _LOADED_MAX:  # the oldest first
                del _LOADED[next(iter(_LOADED))]
            _LOADED[raw] = profile
        return profile

    @classmethod
    def builtin(cls, profile_id: str) -> Profile:
        """One of the profiles shipped with the package (:data:`BUILTIN_PROFILE_IDS`)."""
        if profile_id not in BUILTIN_PROFILE_IDS:
            raise ProfileError(f"no built-in profile {profile_id!r}")
        known = _BUILTINS.get(profile_id)
        if known is None:  # the package's files do not change while it runs
            text = resources.files("tavern_agent.profiles").joinpath(f"{profile_id}.json")
            data = json.loads(text.read_text())
            known = _BUILTINS[profile_id] = cls.from_json(data, f"built-in profile {profile_id}")
        return known

    def to_json(self) -> dict[str, Any]:
        """The JSON form, as :meth:`from_json` reads it (camelCase keys, every field)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=False)

    def tool_budget(self, tool_id: ToolId) -> int | None:
        """The profile's own call limit for ``tool_id`` per invocation, if it sets one."""
        return self.limits.max_calls_per_tool.get(str(tool_id))
