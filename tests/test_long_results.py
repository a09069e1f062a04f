"""The shared long-result step: spill files, the preview and reading hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Limits, Profile, ToolSelection
from tavern_agent.core.results import ToolOutcome
from tavern_agent.run_layout import call_hex
from tavern_agent.tools.builtin.registry import BuiltinRegistry, BuiltinTool
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext

from .conftest import make_gate

BIG = "\n".join(f"line {i:05d} " + "x" * 40 for i in range(1, 2001))  # ~100k chars


def setup(extensions: InMemoryToolSource, text: str) -> Profile:
    async def big(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
        return ExternalReceipt(
            text, structured={"rows": 2000}, raw={"content": [{"type": "text", "text": text}]}
        )

    extensions.add(ToolDescriptor(ToolId.extension("e", "dump"), "d", name_hint="dump"), big)
    return Profile(
        id="p",
        name="p",
        tools=ToolSelection(allow=("extension/e:dump",)),
        limits=Limits(external_result_inline_char_limit=50_000),
    )


async def test_long_result_goes_to_a_file_with_a_preview(
    tmp_path: Path, assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    gate = make_gate(assembly, setup(extensions, BIG), workspace=tmp_path)
    result = (await gate.handle(ToolCall("call_1", "dump", None), round=3)).result
    path = f"tool-results/inv_test/round-003-call_{call_hex('call_1')}.txt"
    assert (tmp_path / path).read_text() == BIG
    audit = (tmp_path / path.replace(".txt", ".raw.json")).read_text()
    assert '"rows": 2000' in audit and '"type": "text"' in audit
    assert result.structured == {
        "externalized": True,
        "path": path,
        "auditPath": path.replace(".txt", ".raw.json"),
        "charCount": len(BIG),
        "charLimit": 50_000,
    }
    assert result.resource_refs == (path,)
    header, _, preview = result.content.partition("\n---\n")
    assert f"{len(BIG):,} characters in 2,000 lines" in header
    assert "inline limit of 50,000" in header
    assert "the rest has not been read" in header
    assert path in header
    assert "No tool here can read files; work from this preview." in header
    assert preview == BIG[:3000]
    assert len(result.content) < 3_600


async def test_hints_use_this_snapshots_tool_names(
    tmp_path: Path, extensions: InMemoryToolSource
) -> None:
    async def unused(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
        raise AssertionError("not called")

    # Built-ins registered under the ids the hints look for (their real bodies
    # land with the workspace issue); only their names matter here.
    registry = BuiltinRegistry(
        BuiltinTool(ToolDescriptor(ToolId.builtin(n), "d"), unused)
        for n in ("workspace.read_file", "workspace.search_files", "workspace.shell")
    )
    assembly = Assembly(tmp_path / "data", builtins=registry, extensions=extensions)
    profile = setup(extensions, BIG)
    allow = ("builtin:workspace.read_file", "extension/e:dump", "builtin:workspace.shell")
    profile = profile.model_copy(update={"tools": ToolSelection(allow=allow)})
    gate = make_gate(assembly, profile, workspace=tmp_path)
    result = (await gate.handle(ToolCall("c", "dump", None))).result
    path = result.structured["path"]
    nxt = BIG[:3000].count("\n") + 1  # the first line the preview did not show in full
    assert nxt == 58
    assert (
        f'workspace_read_file {{"file_path": "{path}", "offset": {nxt}, "limit": 200}}'
        in result.content
    )
    assert f"workspace_shell: sed -n '{nxt},{nxt + 199}p' /{path}" in result.content
    assert "workspace_search_files" not in result.content  # not in this snapshot


async def test_short_results_stay_inline(
    tmp_path: Path, assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    gate = make_gate(assembly, setup(extensions, "small"), workspace=tmp_path)
    result = (await gate.handle(ToolCall("c", "dump", None))).result
    assert result.content == "small"
    assert not (tmp_path / "tool-results").exists()


async def test_the_same_text_is_spilled_only_once(
    tmp_path: Path, assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    gate = make_gate(assembly, setup(extensions, BIG), workspace=tmp_path)
    first = (await gate.handle(ToolCall("a", "dump", None))).result
    second = (await gate.handle(ToolCall("b", "dump", None))).result
    assert first.structured["path"] == second.structured["path"]
    assert len(list((tmp_path / "tool-results" / "inv_test").iterdir())) == 2  # one .txt, one .json


async def test_very_long_lines_are_wrapped_for_paging(
    tmp_path: Path, assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    one_line = "y" * 70_000
    gate = make_gate(assembly, setup(extensions, one_line), workspace=tmp_path)
    result = (await gate.handle(ToolCall("c", "dump", None))).result
    stored = (tmp_path / result.structured["path"]).read_text()
    assert stored.replace("\n", "") == one_line
    assert max(len(line) for line in stored.split("\n")) == 3000


async def test_the_preview_respects_a_lower_inline_limit(
    tmp_path: Path, assembly: Assembly, extensions: InMemoryToolSource
) -> None:
    profile = setup(extensions, BIG)
    profile = profile.model_copy(update={"limits": Limits(external_result_inline_char_limit=1_000)})
    gate = make_gate(assembly, profile, workspace=tmp_path)
    result = (await gate.handle(ToolCall("c", "dump", None))).result
    header, _, preview = result.content.partition("\n---\n")
    assert preview == BIG[:1000]
    assert "Below are the first 1,000 characters" in header


async def test_a_lone_shell_hint_has_no_dangling_or(
    tmp_path: Path, extensions: InMemoryToolSource
) -> None:
    async def unused(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
        raise AssertionError("not called")

    registry = BuiltinRegistry(
        [BuiltinTool(ToolDescriptor(ToolId.builtin("workspace.shell"), "d"), unused)]
    )
    assembly = Assembly(tmp_path / "data", builtins=registry, extensions=extensions)
    allow = ("extension/e:dump", "builtin:workspace.shell")
    profile = setup(extensions, BIG).model_copy(update={"tools": ToolSelection(allow=allow)})
    result = (
        await make_gate(assembly, profile, workspace=tmp_path).handle(ToolCall("c", "dump"))
    ).result
    path = result.structured["path"]
    assert f"To continue, page it with workspace_shell: sed -n '58,257p' /{path}." in result.content
    assert " or " not in result.content.split("\n")[1]
