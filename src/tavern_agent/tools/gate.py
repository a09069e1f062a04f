"""``ToolRequestGate``: one per Invocation; checks every call, then dispatches it.

Order, each step a recoverable result when it fails (never an exception):

1. charge the invocation budget (unknown names and bad arguments are charged too);
2. resolve the model name through the snapshot, then the tool's own budget;
3. ``ToolArguments`` (the wire rules);
4. the closed-schema check;
5. availability (removed, disabled, permission);
6. dispatch by ToolId kind, then the long-result step.

Once the budget is spent only finishing tools still run, so the model can
always end its work properly.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import random
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tavern_agent.core.arguments import InvalidArguments, parse_arguments
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import InvalidToolId, ToolId
from tavern_agent.core.naming import ALIASES, builtin_model_name
from tavern_agent.core.results import AgentToolResult, ExecutedCall, ToolOutcome
from tavern_agent.core.schema_check import (
    SchemaViolation,
    check_arguments,
    drop_null_optionals,
)
from tavern_agent.tools.context import CallContext, ResultFiles
from tavern_agent.tools.dispatch import Dispatcher
from tavern_agent.tools.results import LongResultStep
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot
from tavern_agent.tools.texts import child_return_hint, count, either
from tavern_agent.workspace.paths import without_host_paths

if TYPE_CHECKING:
    from tavern_agent.chat.run_input import ChatRun
    from tavern_agent.tools.builtin.registry import BuiltinRegistry
    from tavern_agent.workspace.read_state import ReadState
    from tavern_agent.workspace.store import Workspace

_NAME_PREVIEW = 80


class ToolRequestGate:
    """Checks and runs the calls of one Invocation against its frozen snapshot."""

    def __init__(
        self,
        snapshot: ToolSnapshot,
        dispatcher: Dispatcher,
        *,
        result_files: ResultFiles | None = None,
        run_id: str = "",
        invocation_id: str | None = None,
        rng: random.Random | None = None,
        workspace: Workspace | None = None,
        chat: ChatRun | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.dispatcher = dispatcher
        self.run_id = run_id
        self.invocation_id = invocation_id or snapshot.id
        self.rng = rng or random.Random()
        self.long_results = LongResultStep(result_files)
        self.calls_used = 0
        self.calls_refused = 0
        self.per_tool: Counter[ToolId] = Counter()
        self.workspace = workspace
        self.cancelled = asyncio.Event()  # the invocation's cancel signal, unless a call brings one
        self.chat = chat
        self.reads: dict[str, ReadState] = {}  # the invocation's read state, by path
        # Tools that end the caller's work still run once the budget is spent.
        self.finishing = dispatcher.catalog.builtins.finishing

    # ------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """Counters for a checkpoint; :meth:`restore` puts them back."""
        return {
            "snapshotId": self.snapshot.id,
            "callsUsed": self.calls_used,
            "callsRefused": self.calls_refused,
            "perTool": {str(k): v for k, v in self.per_tool.items()},
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Put back counters saved by :meth:`state`;
        raises ``ValueError`` for another snapshot's."""
        if state.get("snapshotId") != self.snapshot.id:
            raise ValueError("gate state belongs to another snapshot")
        self.calls_used = int(state["callsUsed"])
        self.calls_refused = int(state.get("callsRefused", 0))
        self.per_tool = Counter({ToolId.parse(k): int(v) for k, v in state["perTool"].items()})

    # ------------------------------------------------------------ the gate

    async def handle(
        self, call: ToolCall, *, round: int = 0, cancelled: asyncio.Event | None = None
    ) -> ExecutedCall:
        """Check and run one call; every problem comes back as a result."""
        snap = self.snapshot
        binding = snap.by_name(call.name) if isinstance(call.name, str) else None
        # 1. budget
        if self.calls_used >= snap.max_calls_per_invocation:
            if binding is None or binding.tool_id not in self.finishing:
                self.calls_refused += 1
                return self._refuse(call, binding, self._budget_spent())
        else:
            self.calls_used += 1
        # 2. name, then the tool's own budget
        if binding is None:
            return self._refuse(call, None, self._unknown_name(call.name))
        limit = binding.max_calls
        if limit is not None and self.per_tool[binding.tool_id] >= limit:
            return self._refuse(call, binding, self._tool_budget_spent(binding, limit))
        self.per_tool[binding.tool_id] += 1
        # 3. wire arguments
        parsed = parse_arguments(call.raw_arguments)
        if isinstance(parsed, InvalidArguments):
            return self._refuse(call, binding, self._bad_wire(binding, parsed))
        # 4. schema (a null for an optional parameter means it was not given)
        values = drop_null_optionals(binding.parameters, parsed.values)
        violation = check_arguments(binding.parameters, values)
        if violation is not None:
            return self._refuse(call, binding, self._bad_schema(binding, violation))
        # 5. availability
        reason = self.dispatcher.availability(binding.tool_id)
        if reason is not None:
            message = (
                f"{binding.model_name} is unavailable ({without_host_paths(reason)}); "
                "no action was taken. Go on without it."
            )
            return self._refuse(
                call, binding, ToolOutcome.fail(ErrorCode.TOOL_UNAVAILABLE, message)
            )
        # 6. dispatch
        ctx = CallContext(
            run_id=self.run_id,
            invocation_id=self.invocation_id,
            call_id=call.call_id,
            round=round,
            scene=snap.scene,
            snapshot=snap,
            rng=self.rng,
            cancelled=cancelled or self.cancelled,
            workspace=self.workspace,
            reads=self.reads,
            result_files=self.long_results.files,
            chat=self.chat,
        )
        dispatched = await self.dispatcher.dispatch(binding.tool_id, values, ctx)
        outcome = dispatched.outcome
        if dispatched.spills:
            outcome = self.long_results.apply(outcome, ctx, dispatched.raw)
        return ExecutedCall(_result(call, binding, outcome), outcome.effect)

    # ------------------------------------------------------------ texts

    def _refuse(
        self, call: ToolCall, binding: ToolBinding | None, outcome: ToolOutcome
    ) -> ExecutedCall:
        return ExecutedCall(_result(call, binding, outcome))

    def _finishing_names(self) -> list[str]:
        return [b.model_name for b in self.snapshot.bindings if b.tool_id in self.finishing]

    def _budget_spent(self) -> ToolOutcome:
        limit = self.snapshot.max_calls_per_invocation
        finish = self._finishing_names()
        next_step = (
            f"Finish now with what you have: call {either(finish)}."
            if finish
            else "Finish now with what you have, without more tool calls."
        )
        used = (
            "the 1 tool call allowed here is"
            if limit == 1
            else f"all {limit:,} tool calls allowed here are"
        )
        message = f"Tool budget spent: {used} used. "
        return ToolOutcome.fail(
            ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED, message + next_step, limit=limit
        )

    def _tool_budget_spent(self, binding: ToolBinding, limit: int) -> ToolOutcome:
        message = (
            f"{binding.model_name} has no calls left (its limit here is "
            f"{count(limit, 'call')}). Go on with the other tools or finish."
        )
        return ToolOutcome.fail(ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED, message, limit=limit)

    def _unknown_name(self, name: Any) -> ToolOutcome:
        shown = name if isinstance(name, str) else repr(name)
        if len(shown) > _NAME_PREVIEW:
            shown = shown[:_NAME_PREVIEW] + "…"
        names = self.snapshot.model_names
        mapped = _source_form(name, self.snapshot) if isinstance(name, str) else None
        withheld = self._withheld(name) if isinstance(name, str) and not mapped else None
        suggestions: list[str] = []
        if mapped:
            hint = f"Call it by its name here: {mapped}."
            suggestions = [mapped]
        elif withheld:
            hint = withheld
        else:
            suggestions = _closest(name, names) if isinstance(name, str) else []
            hint = f"Did you mean {either(suggestions)}?" if suggestions else ""
        listing = (
            f"Tools: {', '.join(names)}."
            if names
            else "No tools are available here; go on without tool calls."
        )
        message = " ".join(p for p in (f"{shown!r} is not a tool here.", hint, listing) if p)
        return ToolOutcome.fail(
            ErrorCode.MODEL_UNKNOWN_TOOL_CALL, message, name=shown, suggestions=suggestions
        )

    def _withheld(self, name: str) -> str | None:
        """Why a built-in this snapshot lacks is missing, when that is the next step."""
        tool_id = _builtin_named(name, self.dispatcher.catalog.builtins)
        if tool_id is None:
            return None
        if tool_id in self.dispatcher.catalog.builtins.child_drops:
            child = child_return_hint(self.snapshot)
            if child is not None:
                return child
        return "This agent does not have it; use the tools below."

    def _bad_schema(self, binding: ToolBinding, violation: SchemaViolation) -> ToolOutcome:
        message = f"Arguments for {binding.model_name} do not fit: {violation.describe()}"
        if violation.expected == "required" and "." not in violation.path:
            message += f" Send: {_signature(binding.parameters)}."
        return ToolOutcome.fail(ErrorCode.TOOL_INVALID_ARGUMENTS, message, path=violation.path)

    def _bad_wire(self, binding: ToolBinding, parsed: InvalidArguments) -> ToolOutcome:
        echo = parsed.echo()
        message = (
            f"Arguments for {binding.model_name} are not a JSON object ({parsed.reason}). "
            f"You sent: {echo}\nSend one JSON object: {_signature(binding.parameters)}."
        )
        return ToolOutcome.fail(
            ErrorCode.TOOL_INVALID_ARGUMENTS, message, echo=echo, reason=parsed.reason
        )


def _result(call: ToolCall, binding: ToolBinding | None, outcome: ToolOutcome) -> AgentToolResult:
    error = outcome.error
    return AgentToolResult(
        call_id=call.call_id,
        tool_id=None if binding is None else binding.tool_id,
        content=outcome.content,
        structured=outcome.structured,
        is_error=error is not None,
        error_code=None if error is None else error.code,
        resource_refs=outcome.resource_refs,
    )


def _source_form(name: str, snapshot: ToolSnapshot) -> str | None:
    """The model name for a ToolId, a dotted built-in name or a common alias."""
    alias = ALIASES.get(name.lower())
    if alias is not None:
        return snapshot.name_of(ToolId.builtin(alias))
    try:
        tool_id = ToolId.parse(name) if ":" in name else ToolId.builtin(name)
    except InvalidToolId:
        return None
    found = snapshot.name_of(tool_id)
    if found is None and tool_id.kind.value == "builtin":
        candidate = builtin_model_name(tool_id)
        return candidate if snapshot.by_name(candidate) else None
    return found


def _builtin_named(name: str, builtins: BuiltinRegistry) -> ToolId | None:
    """The built-in a model name, dotted name or alias stands for, if any."""
    alias = ALIASES.get(name.lower())
    candidates = [alias] if alias else [name, name.replace("_", ".", 1)]
    for text in candidates:
        try:
            tool_id = ToolId.parse(text) if ":" in text else ToolId.builtin(text)
        except InvalidToolId:
            continue
        if builtins.get(tool_id) is not None:
            return tool_id
    return None


def _closest(name: str, names: list[str]) -> list[str]:
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return [lowered[name.lower()]]
    return difflib.get_close_matches(name[:_NAME_PREVIEW], names, n=3, cutoff=0.6)


def _signature(parameters: Mapping[str, Any]) -> str:
    """A one-line shape of the expected object, e.g. {"formula": string}."""
    props = parameters.get("properties") or {}
    if not props:
        return "{}"
    required = set(parameters.get("required") or ())
    parts = []
    for key, spec in props.items():
        kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
        mark = "" if key in required else "?"
        parts.append(
            f"{json.dumps(key)}{mark}: {kind if isinstance(kind, str) else '|'.join(kind)}"
        )
    return "{" + ", ".join(parts) + "}"
