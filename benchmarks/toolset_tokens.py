"""Tokens the tool definitions cost in a request, counted with o200k_base.

Each tool is counted as the compact JSON of its Chat Completions ``tools`` entry,
``{"type":"function","function":{"name","description","parameters"}}``, with the
name and parameter schema of an ``openai_chat`` snapshot. Two tool sets:

* every built-in tool (``Profile.allowing`` all registered built-in ToolIds, in
  every scene; a tool serving both scenes is counted once);
* the built-in ``default-writer`` profile, in the chat scene.

The counts come from the ``bpe-openai`` package, which ships the o200k_base
ranks, so nothing is downloaded. Providers wrap tool definitions in their own
prompt format, so the billed count differs by a few tokens per tool; this
measures the definitions themselves. Run: ``python benchmarks/toolset_tokens.py``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import bpe_openai

from tavern_agent.assembly import Assembly
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.snapshot import ToolBinding

ENCODING = "o200k_base"
PROTOCOL = ModelProtocol.OPENAI_CHAT
WRITER_PROFILE = "default-writer"
WRITER_BUDGET = 1_200
ALL_BUILTINS_BUDGET = 2_800


@dataclass(frozen=True)
class Counted:
    """One tool's ``tools`` entry and its size."""

    model_name: str
    tool_id: ToolId
    chars: int
    tokens: int


def tools_entry(binding: ToolBinding) -> dict[str, Any]:
    """The Chat Completions ``tools`` array entry for one binding."""
    return {
        "type": "function",
        "function": {
            "name": binding.model_name,
            "description": binding.descriptor.description,
            "parameters": binding.protocol_parameters,
        },
    }


def compact_json(value: Any) -> str:
    """JSON as a client library would send it: no spaces, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def count_bindings(bindings: Sequence[ToolBinding], encoding: Any) -> list[Counted]:
    """Tokens and characters of each binding's entry."""
    out = []
    for b in bindings:
        text = compact_json(tools_entry(b))
        out.append(Counted(b.model_name, b.tool_id, len(text), len(encoding.encode_ordinary(text))))
    return out


def all_builtin_bindings(assembly: Assembly) -> tuple[list[ToolBinding], list[str]]:
    """Bindings of every built-in tool across all scenes, each tool once, in registry order.

    A tool that serves only one scene is skipped in the other scene's snapshot; only a
    tool missing from every scene is reported.
    """
    ids = [tool.tool_id for tool in assembly.catalog.builtins]
    profile = Profile.allowing(ids, "all-builtins")
    found: dict[ToolId, ToolBinding] = {}
    for scene in Scene:
        for child in (False, True):  # task.return is only in a delegated child's snapshot
            snap = assembly.snapshot(profile, scene, PROTOCOL, f"tokens-{scene.value}", child=child)
            for b in snap.bindings:
                found.setdefault(b.tool_id, b)
    missing = [f"{t} is in no scene's snapshot" for t in ids if t not in found]
    return [found[t] for t in ids if t in found], missing


def writer_bindings(assembly: Assembly) -> tuple[list[ToolBinding], list[str]]:
    """Bindings of the built-in default-writer profile in the chat scene."""
    profile = Profile.builtin(WRITER_PROFILE)
    snap = assembly.snapshot(profile, Scene.CHAT, PROTOCOL, "tokens-writer")
    return list(snap.bindings), list(snap.diagnostics)


def print_set(title: str, counted: Sequence[Counted], budget: int, notes: Sequence[str]) -> None:
    """A per-tool table, the total and its budget."""
    print(title)
    print(f"  {'model name':<32} {'ToolId':<40} {'chars':>7} {'tokens':>7}")
    for c in counted:
        print(f"  {c.model_name:<32} {c.tool_id!s:<40} {c.chars:>7,} {c.tokens:>7,}")
    if not counted:
        print("  (no tools)")
    total = sum(c.tokens for c in counted)
    chars = sum(c.chars for c in counted)
    verdict = "within budget" if total <= budget else "OVER budget"
    label = f"total ({len(counted)} tools)"
    print(f"  {label:<73} {chars:>7,} {total:>7,}")
    print(f"  budget ≤ {budget:,} tokens: {verdict} ({total:,} / {budget:,})")
    for note in notes:
        print(f"  note: {note}")
    print()


def main(argv: list[str] | None = None) -> None:
    """Count both tool sets and print them."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the tools arrays too")
    args = parser.parse_args(argv)

    encoding = bpe_openai.get_encoding(ENCODING)
    assembly = Assembly(Path("/nonexistent-data-root"))
    print(
        f"Tool definition tokens ({ENCODING} via bpe-openai {metadata.version('bpe-openai')}), "
        f"compact Chat Completions `tools` entries, {PROTOCOL.value} snapshot"
    )
    print()
    sets = [
        (
            f"All built-in tools ({len(assembly.catalog.builtins)} registered)",
            *all_builtin_bindings(assembly),
            ALL_BUILTINS_BUDGET,
        ),
        (f"Profile {WRITER_PROFILE} (chat scene)", *writer_bindings(assembly), WRITER_BUDGET),
    ]
    for title, bindings, notes, budget in sets:
        print_set(title, count_bindings(bindings, encoding), budget, notes)
        if args.json:
            print(compact_json([tools_entry(b) for b in bindings]))
            print()


if __name__ == "__main__":
    main()
