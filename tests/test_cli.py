"""The command line, run as a real process, as a user or a script would."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tavern_agent.core.naming import ModelProtocol


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tavern_agent", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_call_dice_roll_json(tmp_path: Path) -> None:
    proc = run("call", "dice_roll", '{"formula":"3d6+4"}', "--json", data_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert re.fullmatch(r"Rolled 3d6\+4: \d \+ \d \+ \d \+ 4 = \d+\.", result["content"])
    assert 7 <= result["structured"]["total"] <= 22
    assert result["toolId"] == "builtin:dice.roll" and result["isError"] is False


def test_call_string_encoded_arguments(tmp_path: Path) -> None:
    proc = run(
        "call",
        "dice_roll",
        '"{\\"formula\\":\\"3d6+4\\"}"',
        "--json",
        "--seed",
        "5",
        data_dir=tmp_path,
    )
    plain = run(
        "call", "dice_roll", '{"formula":"3d6+4"}', "--json", "--seed", "5", data_dir=tmp_path
    )
    assert json.loads(proc.stdout)["structured"] == json.loads(plain.stdout)["structured"]


def test_call_array_is_invalid_arguments_and_exits_zero(tmp_path: Path) -> None:
    proc = run("call", "dice_roll", "[1,2]", "--json", data_dir=tmp_path)
    assert proc.returncode == 0
    result = json.loads(proc.stdout)
    assert result["errorCode"] == "tool.invalid_arguments"
    assert "[1,2]" in result["content"]


def test_call_unknown_name(tmp_path: Path) -> None:
    proc = run("call", "dice_rol", data_dir=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("[model.unknown_tool_call]")
    assert "dice_roll" in proc.stdout


def test_call_missing_arguments_field(tmp_path: Path) -> None:
    proc = run("call", "dice_roll", "--json", data_dir=tmp_path)
    result = json.loads(proc.stdout)
    assert (
        result["content"]
        == "Arguments for dice_roll do not fit: Missing required parameter `formula`. "
        'Send: {"formula": string}.'
    )


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    for args in (
        ["call"],
        ["call", "x", "--protocol", "nope"],
        ["tools", "list", "--profile", "ghost"],
    ):
        proc = run(*args, data_dir=tmp_path)
        assert proc.returncode == 2, args
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tavern-agent: error:"), (
            proc.stderr
        )


@pytest.mark.parametrize("protocol", [p.value for p in ModelProtocol])
def test_tools_list_json_per_protocol(tmp_path: Path, protocol: str) -> None:
    proc = run("tools", "list", "--json", "--protocol", protocol, data_dir=tmp_path)
    listing = json.loads(proc.stdout)
    names = [t["name"] for t in listing["tools"]]
    assert "dice_roll" in names and len(set(names)) == len(names)
    dice = next(t for t in listing["tools"] if t["name"] == "dice_roll")
    assert dice["toolId"] == "builtin:dice.roll"
    assert dice["parameters"]["required"] == ["formula"]
    assert ("additionalProperties" in dice["parameters"]) == (protocol != "gemini")


def test_tools_list_text_and_profile(tmp_path: Path) -> None:
    proc = run("tools", "list", data_dir=tmp_path)
    assert "dice_roll  (builtin:dice.roll)" in proc.stdout
    assert "formula: string (required)" in proc.stdout
    writer = run("tools", "list", "--profile", "default-writer", data_dir=tmp_path)
    assert writer.returncode == 0
    assert writer.stderr == ""
    assert "workspace_shell" in writer.stdout and "workspace_finish" in writer.stdout
    ghost = tmp_path / "ghost.json"
    ghost.write_text(json.dumps({"id": "g", "name": "G", "tools": {"allow": ["extension/x:gone"]}}))
    noted = run("tools", "list", "--profile", str(ghost), data_dir=tmp_path)
    assert "note: extension/x:gone skipped" in noted.stderr


def test_profile_new_and_validate(tmp_path: Path) -> None:
    made = run("profile", "new", "mine", data_dir=tmp_path)
    assert made.returncode == 0
    stored = json.loads((tmp_path / "profiles" / "mine.json").read_text())
    assert stored["tools"]["allow"] == ["builtin:workspace.shell"]
    again = run("profile", "new", "mine", data_dir=tmp_path)
    assert again.returncode == 2 and "exists already" in again.stderr
    ghost = tmp_path / "ghost.json"
    ghost.write_text(
        json.dumps({"id": "g", "name": "G", "tools": {"allow": ["extension/none:ghost"]}})
    )
    checked = run("profile", "validate", str(ghost), data_dir=tmp_path)
    assert checked.returncode == 1
    assert "extension/none:ghost is not a registered tool" in checked.stderr
    good = tmp_path / "dice.json"
    good.write_text(
        json.dumps({"id": "dice", "name": "Dice", "tools": {"allow": ["builtin:dice.roll"]}})
    )
    assert run("profile", "validate", str(good), data_dir=tmp_path).stdout == "dice: ok\n"


def test_help_lists_the_commands(tmp_path: Path) -> None:
    proc = run("--help", data_dir=tmp_path)
    assert proc.returncode == 0
    for word in ("tools", "call", "profile"):
        assert word in proc.stdout
