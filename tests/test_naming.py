"""Model names per protocol: rules, fixed built-in names, normalisation, collisions."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tavern_agent.core.descriptors import ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import NAME_RULES, ModelProtocol, assign_model_names

# The documented rules, written out independently of NAME_RULES.
DOCUMENTED = {
    ModelProtocol.OPENAI_CHAT: re.compile(r"^[a-zA-Z0-9_-]{1,64}$"),
    ModelProtocol.OPENAI_RESPONSES: re.compile(r"^[a-zA-Z0-9_-]{1,64}$"),
    ModelProtocol.ANTHROPIC: re.compile(r"^[a-zA-Z0-9_-]{1,64}$"),
    ModelProtocol.GEMINI: re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$"),
}


def mcp_tool(registration: str, name: str, server: str = "") -> ToolDescriptor:
    return ToolDescriptor(ToolId.mcp(registration, name), "d", label=server)


def ext_tool(extension: str, name: str) -> ToolDescriptor:
    return ToolDescriptor(ToolId.extension(extension, name), "d", name_hint=name)


@pytest.mark.parametrize("protocol", list(ModelProtocol))
def test_table_agrees_with_documented_rule(protocol: ModelProtocol) -> None:
    rule = NAME_RULES[protocol]
    for name in [
        "a",
        "A_b-c",
        "x" * 64,
        "_under",
        "read.file",
        "a:b",
        "9lives",
        "x" * 65,
        "sp ace",
    ]:
        assert rule.accepts(name) == bool(DOCUMENTED[protocol].match(name)), name


def test_builtin_names_are_fixed() -> None:
    tools = [ToolDescriptor(ToolId.builtin("workspace.read_file"), "d")]
    for protocol in ModelProtocol:
        assert assign_model_names(tools, protocol) == {tools[0].tool_id: "workspace_read_file"}


def test_mcp_names_join_server_and_tool() -> None:
    tool = mcp_tool("0f3c", "read.file", server="Files")
    assert (
        assign_model_names([tool], ModelProtocol.OPENAI_CHAT)[tool.tool_id]
        == "mcp__Files__read_file"
    )
    # Gemini allows dots, so the MCP name keeps them.
    assert assign_model_names([tool], ModelProtocol.GEMINI)[tool.tool_id] == "mcp__Files__read.file"


def test_unicode_is_folded_and_unreadable_text_hashed() -> None:
    cafe = ext_tool("e", "café_menu")
    chinese = ext_tool("e", "翻译")
    names = assign_model_names([cafe, chinese], ModelProtocol.ANTHROPIC)
    assert names[cafe.tool_id] == "cafe_menu"
    assert re.fullmatch(r"t[0-9a-f]{8}", names[chinese.tool_id])


def test_long_names_are_cut_with_a_hash_and_stay_distinct() -> None:
    a = mcp_tool("r1", "x" * 300, server="s" * 50)
    b = mcp_tool("r2", "x" * 300, server="s" * 50)
    names = assign_model_names([a, b], ModelProtocol.OPENAI_CHAT)
    assert all(len(n) <= 64 for n in names.values())
    assert names[a.tool_id] != names[b.tool_id]


def test_collisions_get_suffixes_in_tool_id_order_whatever_the_input_order() -> None:
    tools = [
        ext_tool("b", "dice_roll"),
        ext_tool("a", "dice_roll"),
        ToolDescriptor(ToolId.builtin("dice.roll"), "d"),
    ]
    forward = assign_model_names(tools, ModelProtocol.OPENAI_CHAT)
    backward = assign_model_names(list(reversed(tools)), ModelProtocol.OPENAI_CHAT)
    assert forward == backward
    assert forward[ToolId.builtin("dice.roll")] == "dice_roll"
    assert forward[ToolId.extension("a", "dice_roll")] == "dice_roll__2"
    assert forward[ToolId.extension("b", "dice_roll")] == "dice_roll__3"


def test_gemini_first_character_rule() -> None:
    tool = ext_tool("e", "3d_print")
    assert assign_model_names([tool], ModelProtocol.GEMINI)[tool.tool_id] == "_3d_print"
    assert assign_model_names([tool], ModelProtocol.OPENAI_CHAT)[tool.tool_id] == "3d_print"


printable = st.characters(exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"))
external_names = st.one_of(
    st.text(printable, min_size=1, max_size=300),
    st.text(alphabet="abc.-_:", min_size=1, max_size=12),
    st.just("x" * 300),
    st.sampled_from(["read.file", "read_file", "read-file", "翻译", "café", "dice_roll"]),
)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["mcp", "ext"]), st.sampled_from(["s1", "s2", "srv.x"]), external_names
        ),
        min_size=200,
        max_size=200,
    )
)
@settings(max_examples=25, deadline=None)
def test_200_external_names_are_valid_and_unique_for_every_protocol(
    specs: list[tuple[str, str, str]],
) -> None:
    tools = {}
    for kind, source, name in specs:
        d = mcp_tool(source, name, server=source) if kind == "mcp" else ext_tool(source, name)
        tools[d.tool_id] = d
    tools[ToolId.builtin("dice.roll")] = ToolDescriptor(ToolId.builtin("dice.roll"), "d")
    for protocol in ModelProtocol:
        names = assign_model_names(tools.values(), protocol)
        assert len(set(names.values())) == len(tools)
        for name in names.values():
            assert DOCUMENTED[protocol].match(name), (protocol, name)
