"""The ToolRequestGate: order of checks, budgets, and the texts a model reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Limits, Profile, ToolSelection
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.gate import ToolRequestGate

from .conftest import make_gate

DICE = "builtin:dice.roll"


def profile(*allow: str, max_calls: int = 80, per_tool: dict[str, int] | None = None) -> Profile:
    return Profile(
        id="p",
        name="p",
        tools=ToolSelection(allow=allow),
        limits=Limits(max_calls_per_invocation=max_calls, max_calls_per_tool=per_tool or {}),
    )


async def call(gate: ToolRequestGate, name: str, raw: Any = '{"formula":"d20"}', cid: str = "c1"):
    return (await gate.handle(ToolCall(cid, name, raw), round=1)).result


async def test_dice_roll_through_the_gate(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE))
    result = await call(gate, "dice_roll", '{"formula":"3d6+4"}')
    assert not result.is_error
    assert result.tool_id == ToolId.builtin("dice.roll")
    assert 7 <= result.structured["total"] <= 22
    rolls = result.structured["rolls"]
    assert (
        result.content
        == f"Rolled 3d6+4: {rolls[0]} + {rolls[1]} + {rolls[2]} + 4 = {sum(rolls) + 4}."
    )


async def test_string_encoded_arguments_give_the_same_result(assembly: Assembly) -> None:
    plain = await call(
        make_gate(assembly, profile(DICE), seed=3), "dice_roll", '{"formula":"3d6+4"}'
    )
    encoded = await call(
        make_gate(assembly, profile(DICE), seed=3), "dice_roll", json.dumps('{"formula":"3d6+4"}')
    )
    assert plain.content == encoded.content
    assert plain.structured == encoded.structured


async def test_array_arguments_are_refused_with_an_echo(assembly: Assembly) -> None:
    result = await call(make_gate(assembly, profile(DICE)), "dice_roll", "[1,2]")
    assert result.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "You sent: [1,2]" in result.content
    assert '{"formula": string}' in result.content
    assert result.structured["error"]["echo"] == "[1,2]"


async def test_truncated_json_reports_the_position(assembly: Assembly) -> None:
    result = await call(make_gate(assembly, profile(DICE)), "dice_roll", '{"formula": "3d6')
    assert result.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "char 12" in result.content
    assert 'You sent: {"formula": "3d6' in result.content


async def test_unknown_name_suggests_the_closest(assembly: Assembly) -> None:
    result = await call(make_gate(assembly, profile(DICE)), "dice_rol")
    assert result.error_code is ErrorCode.MODEL_UNKNOWN_TOOL_CALL
    assert result.tool_id is None
    assert "Did you mean dice_roll?" in result.content
    assert "Tools: dice_roll." in result.content


async def test_source_form_names_map_to_model_names(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE))
    for source_form in ("dice.roll", "builtin:dice.roll"):
        result = await call(gate, source_form)
        assert result.error_code is ErrorCode.MODEL_UNKNOWN_TOOL_CALL
        assert "Call it by its name here: dice_roll." in result.content


async def test_schema_violation_names_path_and_rename(
    assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "floors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"floor": {"type": "integer"}},
                    "required": ["floor"],
                    "additionalProperties": False,
                },
            }
        },
        "additionalProperties": False,
    }

    async def never(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        raise AssertionError("must not run")

    extensions.add(
        ToolDescriptor(ToolId.extension("x", "chat_read"), "d", schema, name_hint="chat_read"),
        never,
    )
    gate = make_gate(assembly, profile("extension/x:chat_read"))
    renamed = await call(gate, "chat_read", {"floors": [{"floor": 1}, {"index": 2}]})
    assert renamed.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "`floors[1].index` is not a parameter. Use `floors[1].floor`." in renamed.content
    wrong_type = await call(gate, "chat_read", {"floors": [{"floor": "one"}]})
    assert "`floors[0].floor` must be an integer, got a string" in wrong_type.content


async def test_the_81st_call_is_refused_and_unknown_and_invalid_calls_count(
    assembly: Assembly,
) -> None:
    gate = make_gate(assembly, profile(DICE))
    kinds = ["dice_roll", "nope", "dice_roll:bad"]
    for i in range(80):
        kind = kinds[i % 3]
        if kind == "dice_roll:bad":
            result = await call(gate, "dice_roll", "[oops", cid=f"c{i}")
            assert result.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
        else:
            result = await call(gate, kind, cid=f"c{i}")
            assert result.error_code is not ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED
    assert gate.calls_used == 80
    refused = await call(gate, "dice_roll", cid="c80")
    assert refused.error_code is ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED
    assert "all 80 tool calls" in refused.content
    assert "Finish now" in refused.content


async def test_per_tool_budget(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE, per_tool={DICE: 2}))
    assert not (await call(gate, "dice_roll", cid="a")).is_error
    assert not (await call(gate, "dice_roll", cid="b")).is_error
    third = await call(gate, "dice_roll", cid="c")
    assert third.error_code is ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED
    assert "dice_roll has no calls left (its limit here is 2 calls)." in third.content


async def test_budgets_are_per_invocation(assembly: Assembly) -> None:
    first = make_gate(assembly, profile(DICE, max_calls=1))
    second = make_gate(assembly, profile(DICE, max_calls=1))
    assert not (await call(first, "dice_roll")).is_error
    assert (await call(first, "dice_roll")).error_code is ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED
    assert not (await call(second, "dice_roll")).is_error


async def test_gate_state_survives_a_checkpoint(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE, max_calls=2))
    await call(gate, "dice_roll")
    restored = make_gate(assembly, profile(DICE, max_calls=2))
    restored.restore(gate.state())
    assert not (await call(restored, "dice_roll")).is_error
    assert (await call(restored, "dice_roll")).error_code is ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED


async def test_disabled_external_tool_is_unavailable_without_running(
    assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    ran: list[str] = []

    async def run(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        ran.append(ctx.call_id)
        return ExternalReceipt("ok")

    tool = ToolDescriptor(ToolId.extension("w", "forecast"), "d", name_hint="forecast")
    extensions.add(tool, run)
    gate = make_gate(assembly, profile("extension/w:forecast"))
    assert (await call(gate, "forecast", None, cid="one")).content == "ok"
    extensions.disabled.add(tool.tool_id)
    refused = await call(gate, "forecast", None, cid="two")
    assert refused.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "no action was taken" in refused.content
    extensions.remove(tool.tool_id)
    gone = await call(gate, "forecast", None, cid="three")
    assert gone.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert ran == ["one"]


async def test_dispatch_goes_by_tool_id_kind_never_by_name(
    assembly: Assembly, mcp: InMemoryToolSource
) -> None:
    seen: list[str] = []

    async def impostor(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        seen.append(str(args))
        return ExternalReceipt("mcp finish ran")

    tool = ToolDescriptor(ToolId.mcp("x", "workspace.finish"), "d", label="x")
    mcp.add(tool, impostor)
    gate = make_gate(assembly, profile("mcp/x:workspace.finish"))
    (name,) = gate.snapshot.model_names
    assert name == "mcp__x__workspace_finish"
    executed = await gate.handle(ToolCall("c", name, "{}"))
    assert executed.result.content == "mcp finish ran"
    assert executed.result.tool_id == ToolId.mcp("x", "workspace.finish")
    assert type(executed.effect).__name__ == "NoEffect"
    assert seen == ["{}"]


async def test_external_error_receipt_becomes_an_error_result(
    assembly: Assembly, mcp: InMemoryToolSource
) -> None:
    async def failing(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        return ExternalReceipt("disk quota exceeded", is_error=True)

    mcp.add(ToolDescriptor(ToolId.mcp("s", "save"), "d", label="s"), failing)
    result = await call(make_gate(assembly, profile("mcp/s:save")), "mcp__s__save", "{}")
    assert result.is_error
    assert result.error_code is ErrorCode.MCP_TOOL_ERROR
    assert result.content == "disk quota exceeded"


async def test_empty_snapshot_says_so(assembly: Assembly) -> None:
    result = await call(make_gate(assembly, profile()), "anything")
    assert "No tools are available here; go on without tool calls." in result.content


@st.composite
def wire_arguments(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            st.none(),
            st.text(max_size=200),
            st.binary(max_size=64),
            st.from_regex(r'\{"formula": ?"[0-9dD+\-]{0,12}"\}', fullmatch=True),
            st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=30), max_size=3),
            st.lists(st.integers(), max_size=3),
            st.integers(),
        )
    )


GATE_FOR_FUZZ = make_gate(
    Assembly(Path("/nonexistent-data-root")), profile(DICE, max_calls=100_000), seed=1
)


names = st.one_of(st.text(max_size=80), st.sampled_from(["dice_roll", "dice.roll", "DICE_ROLL"]))


# 100 examples of 100 calls each: 10,000 arbitrary calls, at a fraction of the
# per-example cost of Hypothesis.
@given(st.lists(st.tuples(names, wire_arguments()), min_size=100, max_size=100))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_no_exception_escapes_the_gate(calls: list[tuple[str, Any]]) -> None:
    for name, raw in calls:
        executed = await GATE_FOR_FUZZ.handle(ToolCall("fuzz", name, raw))
        result = executed.result
        assert isinstance(result.content, str) and result.content
        assert result.is_error == (result.error_code is not None)


async def test_strict_mode_nulls_for_optional_parameters_are_dropped(assembly: Assembly) -> None:
    seen: list[dict[str, Any]] = []

    async def record(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        seen.append(args)
        return ExternalReceipt("ok")

    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["q"],
        "additionalProperties": False,
    }
    extensions = assembly.catalog.extensions
    assert isinstance(extensions, InMemoryToolSource)
    extensions.add(
        ToolDescriptor(ToolId.extension("s", "find"), "d", schema, name_hint="find"), record
    )
    gate = make_gate(assembly, profile("extension/s:find"))
    result = await call(gate, "find", '{"q": "dragon", "limit": null}')
    assert not result.is_error
    assert seen == [{"q": "dragon"}]


async def test_common_aliases_point_to_this_snapshots_name(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE))
    result = await call(gate, "Roll")
    assert result.error_code is ErrorCode.MODEL_UNKNOWN_TOOL_CALL
    assert "Call it by its name here: dice_roll." in result.content
    # An alias for a tool this snapshot lacks suggests nothing false.
    assert "Call it by its name" not in (await call(gate, "grep")).content


async def test_a_child_calling_commit_is_told_to_return_with_task_return(
    assembly: Assembly,
) -> None:
    writer = profile("builtin:workspace.read_file", "builtin:workspace.commit")
    snapshot = assembly.snapshot(writer, Scene.CHAT, child=True)
    result = await call(assembly.gate(snapshot), "workspace_commit", {"reason": "done"})
    assert result.error_code is ErrorCode.MODEL_UNKNOWN_TOOL_CALL
    assert "Delegated agents return their result with task_return instead." in result.content
    assert "Did you mean" not in result.content


async def test_a_builtin_the_profile_lacks_is_named_as_missing(assembly: Assembly) -> None:
    result = await call(make_gate(assembly, profile(DICE)), "workspace_shell", {"command": "ls"})
    assert "This agent does not have it; use the tools below. Tools: dice_roll." in result.content


async def test_every_missing_parameter_is_named_with_the_shape(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile("builtin:workspace.apply_patch"))
    result = await call(gate, "workspace_apply_patch", {})
    assert result.content == (
        "Arguments for workspace_apply_patch do not fit: Missing required parameters "
        '`file_path`, `old_string`, `new_string`. Send: {"file_path": string, '
        '"old_string": string, "new_string": string, "replace_all"?: boolean}.'
    )


async def test_budget_texts_speak_plainly(assembly: Assembly) -> None:
    gate = make_gate(assembly, profile(DICE, max_calls=1, per_tool={DICE: 1}))
    await call(gate, "dice_roll", cid="a")
    spent = await call(gate, "dice_roll", cid="b")
    assert spent.content == (
        "Tool budget spent: the 1 tool call allowed here is used. "
        "Finish now with what you have, without more tool calls."
    )
    gate = make_gate(assembly, profile(DICE, per_tool={DICE: 1}))
    await call(gate, "dice_roll", cid="a")
    used = await call(gate, "dice_roll", cid="b")
    assert used.content.startswith("dice_roll has no calls left (its limit here is 1 call).")
