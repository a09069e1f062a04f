"""Hostile bytes in every file the CLI reads: a one-line error naming the file, or a clean run.

Each payload is planted in an otherwise valid file (a chat message line, a
world info, a character card, a profile, an ``mcp import`` file). The CLI
either accepts it and finishes, or refuses with exit code 1 or 2 and one
stderr line that names the file. It never prints a traceback and never
changes a file it refused (a chat it accepted gets the run's commit).

A chat line that is not readable JSON is skipped, as SillyTavern skips it,
and kept byte for byte when the chat is written back.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tavern_agent.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HUGE = 8 * 1024 * 1024

# Each value is planted as the value of an extra key; "bom" and "crlf" change the whole file.
VALUES: dict[str, bytes] = {
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000,
    "nesting-near-the-limit": b"[" * 900 + b"]" * 900,
    "huge-integer": b"9" * 5000,
    "huge-line": b'"' + b"x" * HUGE + b'"',
    "invalid-utf8": b'"\xff\xfe\xc3"',
    "lone-surrogate": b'"\\ud800 and \\udfff"',
    "nul-byte": b'"a\x00b"',
}
WHOLE_FILE: dict[str, Callable[[bytes], bytes]] = {
    "bom": lambda data: b"\xef\xbb\xbf" + data,
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
}
PAYLOADS = [*VALUES, *WHOLE_FILE]
# Not JSON that can be read at all: these must be refused, never used.
UNREADABLE = {"deep-nesting", "huge-integer", "invalid-utf8", "nul-byte"}
KINDS = ["chat", "world", "card", "profile", "mcp-import", "replay"]
MCP_FILE = b'{\n "mcpServers": {\n  "notes": {"command": "node", "args": ["server.js"]}\n }\n}\n'


def plant(data: bytes, payload: str, *, line: int = 0) -> bytes:
    """``data`` with the payload inserted after the first ``{`` of line ``line``."""
    if payload in WHOLE_FILE:
        return WHOLE_FILE[payload](data)
    lines = data.split(b"\n")
    head, brace, rest = lines[line].partition(b"{")
    lines[line] = head + brace + b'"zz_hostile":' + VALUES[payload] + b"," + rest
    return b"\n".join(lines)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_input_file_is_refused_in_one_line_or_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, payload: str
) -> None:
    files = {
        "chat": tmp_path / "chat.jsonl",
        "world": tmp_path / "eldoria-world.json",
        "card": tmp_path / "seraphina-card.json",
        "profile": tmp_path / "profile.json",
    }
    for name, path in files.items():
        shutil.copyfile(EXAMPLES / (path.name if name != "profile" else "profile.json"), path)
    replay = tmp_path / "recorded-run"
    shutil.copytree(EXAMPLES / "recorded-run", replay)
    target = files.get(kind, tmp_path / "servers.json")
    if kind == "replay":
        target = replay / "model-responses" / "round-001.json"
        target.write_bytes(plant(target.read_bytes(), payload))
    elif kind == "mcp-import":
        target.write_bytes(plant(MCP_FILE, payload))
    else:  # in a chat, the payload goes into a message line, not the header
        target.write_bytes(plant(target.read_bytes(), payload, line=2 if kind == "chat" else 0))
    before_bytes = target.read_bytes()
    before = hashlib.sha256(before_bytes).hexdigest()
    data = tmp_path / "data"
    if kind == "mcp-import":
        args = ["--data-dir", str(data), "mcp", "import", str(target)]
    else:
        args = ["--data-dir", str(data), "run", str(files["chat"]), "--json"]
        args += ["--character", str(files["card"]), "--world", str(files["world"])]
        args += ["--profile", str(files["profile"]), "--replay", str(replay)]
        args += ["--seed", "7"]
    code, out, err = cli(capsys, *args)
    assert "Traceback" not in out + err
    if payload in UNREADABLE and kind != "chat":
        assert code != 0
    if code == 0:
        if kind != "chat":  # a chat that was used gets the run's reply
            assert hashlib.sha256(target.read_bytes()).hexdigest() == before
        elif payload in VALUES:  # the planted line, read or skipped, is still there
            assert before_bytes.split(b"\n")[2] in target.read_bytes().split(b"\n")
        return
    assert code in (1, 2)
    if kind == "replay":  # the model step fails: the run ends and its outcome names the file
        assert json.loads(out)["errorCode"] == "model.request_failed" and not err
        err = json.loads(out)["message"]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(target) in lines[0] and len(lines[0]) < 400
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding one finished run of the example."""
    root = tmp_path_factory.mktemp("recorded")
    shutil.copyfile(EXAMPLES / "chat.jsonl", root / "chat.jsonl")
    args = ["--data-dir", str(root / "data"), "run", str(root / "chat.jsonl"), "--json"]
    args += [
        "--profile",
        str(EXAMPLES / "profile.json"),
        "--replay",
        str(EXAMPLES / "recorded-run"),
    ]
    main(args)  # returns: the run completed
    return root


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("name", ["run.json", "events.jsonl"])
def test_a_damaged_run_record_is_listed_or_refused_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    recorded: Path,
    name: str,
    payload: str,
) -> None:
    shutil.copytree(recorded, tmp_path / "copy")
    data = tmp_path / "copy" / "data"
    run_dir = next(data.glob("chats/*/runs/*"))
    target = run_dir / name
    target.write_bytes(plant(target.read_bytes(), payload))
    capsys.readouterr()
    for args in (
        ["runs", "list"],
        ["runs", "show", run_dir.name],
        ["run", "--resume", run_dir.name],
    ):
        code, out, err = cli(capsys, "--data-dir", str(data), *args)
        assert "Traceback" not in out + err
        assert code in (0, 1, 2), (args, code)
        if code:
            assert len(err.strip().splitlines()) == 1 and str(run_dir) in err, (args, err)
