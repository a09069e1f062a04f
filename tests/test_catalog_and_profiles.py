"""Profiles, the catalog's validation, preparation and snapshots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.config import resolve_profile
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.fsutil import AlreadyWritten
from tavern_agent.tools.catalog import (
    ExternalReceipt,
    InMemoryToolSource,
    ProfileValidationError,
)
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.snapshot import SnapshotError, ToolSnapshot


async def ok(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
    return ExternalReceipt("ok")


def test_new_profile_enables_the_shell() -> None:
    assert Profile.new("mine").tools.allow == ("builtin:workspace.shell",)


def test_default_writer_ships_and_loads() -> None:
    writer = Profile.builtin("default-writer")
    assert writer.tools.allow[0] == "builtin:chat.search"
    assert "builtin:workspace.shell" in writer.tools.allow
    assert writer.limits.max_calls_per_invocation == 80
    assert writer.limits.external_result_inline_char_limit == 50_000


def test_deny_wins_and_allow_order_is_kept() -> None:
    p = Profile.from_json(
        {
            "id": "p",
            "name": "p",
            "tools": {
                "allow": ["builtin:b.x", "builtin:a.y", "builtin:b.x"],
                "deny": ["builtin:b.x"],
            },
        }
    )
    assert [str(t) for t in p.tools.enabled()] == ["builtin:a.y"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"id": "p", "name": "p", "tools": {"allow": ["workspace.read"]}},
            "tools.allow: Value error, invalid ToolId",
        ),
        (
            {"id": "p", "name": "p", "limits": {"maxCallsPerInvocation": 0}},
            "limits.maxCallsPerInvocation",
        ),
        (
            {"id": "p", "name": "p", "limits": {"maxCallsPerTool": {"builtin:dice.roll": 0}}},
            "at least 1",
        ),
        ({"id": "p", "name": "p", "toolz": {}}, "toolz: Extra inputs are not permitted"),
        ({"id": "../evil", "name": "p"}, "id: String should match pattern"),
    ],
)
def test_bad_profiles_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace(".", r"\.").replace("(", r"\(")):
        Profile.from_json(data, "p.json")


def test_profile_files_resolve_by_path_id_and_builtin(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.json").write_text(json.dumps(Profile.new("mine").to_json()))
    assert resolve_profile("mine", tmp_path).id == "mine"
    assert resolve_profile(str(tmp_path / "profiles" / "mine.json"), tmp_path).id == "mine"
    assert resolve_profile("default-writer", tmp_path).id == "default-writer"
    with pytest.raises(ProfileError, match="known: default-writer, mine"):
        resolve_profile("other", tmp_path)
    (tmp_path / "broken.json").write_text("{nope")
    with pytest.raises(ProfileError, match="cannot read profile"):
        resolve_profile(str(tmp_path / "broken.json"), tmp_path)


def test_a_profile_file_rewritten_loads_as_it_is_now(tmp_path: Path) -> None:
    # Loads reuse the profile made from the same text; a changed file, even of the
    # same size and at once, is read as it is now, and a broken one is refused again.
    path = tmp_path / "p.json"
    path.write_text(json.dumps(Profile.new("aaaa").to_json()))
    first = Profile.load(path)
    assert Profile.load(path) == first
    path.write_text(json.dumps(Profile.new("bbbb").to_json()))
    assert Profile.load(path).id == "bbbb"
    path.write_text(json.dumps(Profile.new("aaaa").to_json())[:-1])
    for _ in range(2):
        with pytest.raises(ProfileError, match="cannot read profile"):
            Profile.load(path)


def test_validation_refuses_newly_enabled_unknown_tools(
    assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    extensions.add(ToolDescriptor(ToolId.extension("e", "known"), "d"), ok)
    good = Profile.from_json(
        {"id": "p", "name": "p", "tools": {"allow": ["builtin:dice.roll", "extension/e:known"]}}
    )
    assembly.catalog.validate_profile(good)
    bad = Profile.from_json(
        {"id": "p", "name": "p", "tools": {"allow": ["extension/e:known", "extension/e:ghost"]}}
    )
    with pytest.raises(ProfileValidationError) as info:
        assembly.catalog.validate_profile(bad)
    assert info.value.problems == ["tools.allow: extension/e:ghost is not a registered tool"]
    # Already enabled before: kept, and skipped at run time instead.
    assembly.catalog.validate_profile(bad, previous=bad)


def test_override_for_unknown_parameter_is_an_error(assembly: Assembly) -> None:
    p = Profile.from_json(
        {
            "id": "p",
            "name": "p",
            "tools": {"allow": ["builtin:dice.roll"]},
            "toolDescriptions": {"builtin:dice.roll": {"properties": {"dice": "x"}}},
        }
    )
    with pytest.raises(ProfileValidationError, match=r"dice not a parameter of builtin:dice\.roll"):
        assembly.catalog.validate_profile(p)


def test_missing_tools_are_skipped_with_a_diagnostic(assembly: Assembly) -> None:
    saved = Profile.from_json(
        {"id": "p", "name": "p", "tools": {"allow": ["extension/gone:ghost", "builtin:dice.roll"]}}
    )
    snap = assembly.snapshot(saved, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv")
    assert snap.model_names == ["dice_roll"]
    assert snap.diagnostics == ("extension/gone:ghost skipped: not registered or not enabled",)


def test_default_writer_has_every_tool_it_names(assembly: Assembly) -> None:
    writer = Profile.builtin("default-writer")
    snap = assembly.snapshot(writer, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv")
    assert snap.diagnostics == ()
    assert len(snap.bindings) == len(writer.tools.allow)


def test_scene_filters_tools(assembly: Assembly, extensions: InMemoryToolSource) -> None:
    extensions.add(
        ToolDescriptor(ToolId.extension("e", "chatty"), "d", scenes=frozenset({Scene.CHAT})), ok
    )
    p = Profile.from_json({"id": "p", "name": "p", "tools": {"allow": ["extension/e:chatty"]}})
    snap = assembly.snapshot(p, Scene.SESSION, ModelProtocol.OPENAI_CHAT, "inv")
    assert snap.bindings == ()
    assert snap.diagnostics == ("extension/e:chatty skipped: not offered in session runs",)


def test_description_overrides_reach_the_model(assembly: Assembly) -> None:
    p = Profile.from_json(
        {
            "id": "p",
            "name": "p",
            "tools": {"allow": ["builtin:dice.roll"]},
            "toolDescriptions": {
                "builtin:dice.roll": {
                    "description": "Roll.",
                    "properties": {"formula": "Like 2d6."},
                }
            },
        }
    )
    (binding,) = assembly.snapshot(p, Scene.CHAT, ModelProtocol.ANTHROPIC, "inv").bindings
    assert binding.descriptor.description == "Roll."
    assert binding.parameters["properties"]["formula"]["description"] == "Like 2d6."


def test_allow_order_is_display_order(assembly: Assembly, mcp: InMemoryToolSource) -> None:
    mcp.add(ToolDescriptor(ToolId.mcp("s", "a"), "d", label="srv"), ok)
    p = Profile.from_json(
        {"id": "p", "name": "p", "tools": {"allow": ["mcp/s:a", "builtin:dice.roll"]}}
    )
    snap = assembly.snapshot(p, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv")
    assert snap.model_names == ["mcp__srv__a", "dice_roll"]


async def test_snapshot_written_reloaded_and_reused(
    tmp_path: Path, assembly: Assembly, mcp: InMemoryToolSource
) -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"type": ["string", "null"]}},
        "additionalProperties": False,
    }
    for i in range(3):
        mcp.add(ToolDescriptor(ToolId.mcp(f"r{i}", "same.name"), "d", schema, label="dup"), ok)
    p = Profile.from_json(
        {
            "id": "p",
            "name": "p",
            "tools": {
                "allow": [
                    "builtin:dice.roll",
                    "mcp/r0:same.name",
                    "mcp/r1:same.name",
                    "mcp/r2:same.name",
                ]
            },
            "limits": {"maxCallsPerInvocation": 5, "maxCallsPerTool": {"mcp/r1:same.name": 2}},
        }
    )
    snap = assembly.snapshot(p, Scene.CHAT, ModelProtocol.GEMINI, "inv_1")
    path = tmp_path / "input" / "invocations" / "inv_1" / "tool_snapshot.json"
    snap.save(path)
    with pytest.raises(AlreadyWritten):
        snap.save(path)
    loaded = ToolSnapshot.load(path)
    assert loaded == snap
    assert loaded.model_names == [
        "dice_roll",
        "mcp__dup__same.name",
        "mcp__dup__same.name__2",
        "mcp__dup__same.name__3",
    ]
    assert [b.max_calls for b in loaded.bindings] == [None, None, 2, None]
    assert loaded.max_calls_per_invocation == 5
    assert loaded.bindings[1].protocol_parameters["properties"]["v"] == {
        "type": "string",
        "nullable": True,
    }
    # Reused: the catalog may change, the loaded snapshot still resolves the same names.
    mcp.remove(ToolId.mcp("r0", "same.name"))
    gate = assembly.gate(loaded)
    second = (await gate.handle(ToolCall("a", "mcp__dup__same.name__2", "{}"))).result
    assert (second.tool_id, second.content) == (ToolId.mcp("r1", "same.name"), "ok")
    first = (await gate.handle(ToolCall("b", "mcp__dup__same.name", "{}"))).result
    assert first.error_code is ErrorCode.TOOL_UNAVAILABLE


def test_corrupt_snapshot_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"schemaVersion": 1, "id": "x"}')
    with pytest.raises(SnapshotError, match="malformed snapshot"):
        ToolSnapshot.load(path)
    path.write_text('{"schemaVersion": 9}')
    with pytest.raises(SnapshotError, match="unsupported snapshot schemaVersion 9"):
        ToolSnapshot.load(path)
