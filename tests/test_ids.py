from __future__ import annotations

import pytest

from tavern_agent.core.ids import InvalidToolId, ToolId, ToolKind


@pytest.mark.parametrize(
    ("text", "kind", "source", "name"),
    [
        ("builtin:workspace.read_file", ToolKind.BUILTIN, "", "workspace.read_file"),
        ("builtin:dice.roll", ToolKind.BUILTIN, "", "dice.roll"),
        ("mcp/0f3c-77:read.file", ToolKind.MCP, "0f3c-77", "read.file"),
        ("mcp/srv:ns:tool", ToolKind.MCP, "srv", "ns:tool"),
        ("extension/weather:forecast", ToolKind.EXTENSION, "weather", "forecast"),
        ("extension/third-party/st-x:do it", ToolKind.EXTENSION, "third-party/st-x", "do it"),
    ],
)
def test_parse_and_format_round_trip(text: str, kind: ToolKind, source: str, name: str) -> None:
    tool_id = ToolId.parse(text)
    assert (tool_id.kind, tool_id.source, tool_id.name) == (kind, source, name)
    assert str(tool_id) == text
    assert ToolId.parse(str(tool_id)) == tool_id


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("workspace.read_file", "missing ':'"),
        ("plugin:x", "unknown provider 'plugin'"),
        ("builtin/x:dice.roll", "builtin takes no"),
        ("mcp:tool", "needs 'mcp/<registration-id>'"),
        ("mcp/:tool", "empty registration-id"),
        ("extension/:tool", "empty extensionId"),
        ("mcp/srv:", "empty tool name"),
        ("builtin:", "bad builtin name"),
        ("builtin:Workspace.Read", "bad builtin name 'Workspace.Read'"),
        ("builtin:workspace..read", "bad builtin name"),
        ("mcp/a b:tool", "bad registration-id 'a b'"),
        ("extension/x: padded ", "surrounding whitespace"),
        ("mcp/x:a\x00b", "control characters"),
    ],
)
def test_malformed_ids_name_the_bad_part(text: str, names: str) -> None:
    with pytest.raises(InvalidToolId, match=names.replace("(", r"\(").replace(")", r"\)")):
        ToolId.parse(text)


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidToolId, match="must be a string"):
        ToolId.parse(42)  # type: ignore[arg-type]


def test_constructors_validate() -> None:
    assert str(ToolId.mcp("r1", "x.y")) == "mcp/r1:x.y"
    assert str(ToolId.extension("e", "n")) == "extension/e:n"
    with pytest.raises(InvalidToolId):
        ToolId.builtin("Has Space")
