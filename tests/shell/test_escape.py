"""Escape attempts: each ends with a clear result, the host around the workspace is unchanged
(hashed before and after, links included), and the next call works."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tavern_agent.core.errors import ErrorCode
from tests.shell.conftest import sh, stdout_of
from tests.workspace.conftest import Agent

SECRET = "TOP SECRET"


def tree_hash(root: Path) -> str:
    """Names, kinds, link targets and contents of everything below ``root``."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            digest.update(str(path.relative_to(root)).encode())
            if path.is_symlink():
                digest.update(b"L" + os.readlink(path).encode())
            elif path.is_file():
                digest.update(b"F" + path.read_bytes())
            else:
                digest.update(b"D")
    return digest.hexdigest()


@pytest.fixture
def watched(agent: Agent, sandbox_home: Path) -> Iterator[Agent]:
    """Hash the folder around the workspace (minus the results the calls write)."""
    agent.workspace.root.joinpath("tool-results").mkdir(exist_ok=True)
    outside = [p for p in sandbox_home.iterdir() if p.name != "ws"]
    before = {p.name: tree_hash(p) for p in outside}
    ws_before = _ws_hash(agent.workspace.root)
    yield agent
    assert {p.name: tree_hash(p) for p in outside} == before
    assert (sandbox_home / "secret" / "key.txt").read_text() == SECRET + "\n"
    assert _ws_hash(agent.workspace.root) == ws_before


def _ws_hash(root: Path) -> str:
    return tree_hash(root / "output")


async def _next_call_works(agent: Agent) -> None:
    assert stdout_of(await sh(agent, "echo still-fine")) == "still-fine"


def _leaks(content: str) -> bool:
    return SECRET in content


async def test_dotdot_traversal(watched: Agent) -> None:
    for cmd in (
        "cat ../secret/key.txt",
        "cat /../../secret/key.txt",
        "cd /output && cat ../../secret/key.txt ../../../secret/key.txt",
        "cd /output/../.. && ls && cat secret/key.txt",
        "python3 -c \"print(open('/output/../../secret/key.txt').read())\"",
        "node -e \"console.log(require('fs').readFileSync('/output/../../secret/key.txt'))\"",
        "echo pwned > /output/../../secret/key.txt",
    ):
        r = await sh(watched, cmd)
        assert not _leaks(r.content), cmd
    await _next_call_works(watched)


async def test_absolute_host_paths(watched: Agent, sandbox_home: Path) -> None:
    secret = sandbox_home / "secret" / "key.txt"
    for cmd in (
        f"cat {secret}",
        f"ls {sandbox_home}",
        f"echo pwned > {secret}",
        f"cat {watched.workspace.root}/output/main.md",
        "cat /etc/passwd /etc/shadow; ls /root /home",
        f"python3 -c \"print(open('{secret}').read())\"",
        f"node -e \"console.log(require('fs').readFileSync('{secret}','utf8'))\"",
    ):
        r = await sh(watched, cmd)
        assert not _leaks(r.content), cmd
        assert "root:x:0:0" not in r.content
    await _next_call_works(watched)


async def test_proc_is_synthetic(watched: Agent) -> None:
    os.environ["SHELL_TEST_CANARY"] = "canary-" + SECRET
    try:
        r = await sh(watched, "cat /proc/self/environ; cat /proc/1/cmdline; ls /proc; env")
    finally:
        del os.environ["SHELL_TEST_CANARY"]
    assert not _leaks(r.content) and "canary" not in r.content
    await _next_call_works(watched)


async def test_symlinks_made_inside_the_sandbox(watched: Agent, sandbox_home: Path) -> None:
    secret = sandbox_home / "secret" / "key.txt"
    for cmd in (
        f"ln -s {secret} /scratch/l1; cat /scratch/l1",
        "ln -s ../../secret/key.txt /scratch/l2; cat /scratch/l2",
        "ln -s /etc/passwd /scratch/l3; cat /scratch/l3",
        f"ln -s {secret} /scratch/l4; echo pwned > /scratch/l4",
    ):
        r = await sh(watched, cmd)
        assert not _leaks(r.content), cmd
    scratch = watched.workspace.root / "scratch"
    for link in scratch.iterdir() if scratch.exists() else []:
        if link.is_symlink():  # whatever was created must not lead out of the workspace
            target = (link.parent / os.readlink(link)).resolve()
            assert target.is_relative_to(watched.workspace.root.resolve()), link
    await _next_call_works(watched)


async def test_symlinks_planted_on_the_host(watched: Agent, sandbox_home: Path) -> None:
    secret = sandbox_home / "secret" / "key.txt"
    output = watched.workspace.root / "output"
    os.symlink(secret, output / "abs-link")
    os.symlink("../../secret/key.txt", output / "rel-link")
    os.symlink(sandbox_home / "secret", output / "dir-link")
    try:
        for cmd in (
            "cat /output/abs-link",
            "cat /output/rel-link",
            "ls /output/dir-link; cat /output/dir-link/key.txt",
            "echo pwned >> /output/abs-link",
            "echo pwned > /output/rel-link",
            "echo pwned > /output/dir-link/new.txt",
            "python3 -c \"print(open('/output/rel-link').read())\"",
            "node -e \"console.log(require('fs').readFileSync('/output/abs-link','utf8'))\"",
            "node -e \"require('fs').writeFileSync('/output/dir-link/x','pwned')\"",
        ):
            r = await sh(watched, cmd)
            assert not _leaks(r.content), cmd
    finally:
        for name in ("abs-link", "rel-link", "dir-link"):
            (output / name).unlink()
    assert not (sandbox_home / "secret" / "new.txt").exists()
    assert not (sandbox_home / "secret" / "x").exists()
    await _next_call_works(watched)


async def test_a_root_replaced_by_a_host_link_is_not_mounted(
    watched: Agent, sandbox_home: Path
) -> None:
    plan = watched.workspace.root / "plan"
    os.symlink(sandbox_home / "secret", plan)
    try:
        r = await sh(watched, "ls /plan; cat /plan/key.txt; echo pwned > /plan/key.txt")
        assert r.is_error and not _leaks(r.content)
    finally:
        plan.unlink()
    await _next_call_works(watched)


async def test_read_only_roots_refuse_writes(watched: Agent) -> None:
    results = watched.workspace.root / "tool-results"
    (results / "old.txt").write_text("kept\n")
    try:
        for cmd in (
            "echo x > /tool-results/old.txt",
            "rm /tool-results/old.txt",
            "mv /tool-results/old.txt /scratch/",
            "mkdir /tool-results/new",
            "echo x > /skills/dice/run.sh",
            "chmod 777 /skills/dice/run.sh",
        ):
            r = await sh(watched, cmd)
            assert r.error_code is ErrorCode.WORKSPACE_SHELL_EXIT, (cmd, r.content)
            assert "read-only" in r.content, (cmd, r.content)
        assert (results / "old.txt").read_text() == "kept\n"
    finally:
        (results / "old.txt").unlink()
    await _next_call_works(watched)


async def test_no_host_programs(watched: Agent) -> None:
    r = await sh(watched, "perl -e 'print 42'")
    assert r.structured["exit_code"] == 127 and "42" not in stdout_of(r)
    r = await sh(watched, "/usr/bin/env python3 -c 'import sys; print(sys.version)'")
    assert "Monty" in r.content  # Bashkit's embedded Python, not the host's
    for cmd in ("gcc --version", "git status", "ssh localhost", "nc -l 1234"):
        r = await sh(watched, cmd)
        assert r.structured["exit_code"] == 127, cmd
    r = await sh(watched, "exec /bin/ls /")  # Bashkit's own ls, listing the sandbox root
    assert {"output", "skills", "tool-results"} <= set(stdout_of(r).split())
    r = await sh(watched, "python3 -c 'import subprocess'")
    assert r.is_error
    await _next_call_works(watched)


async def test_network_stays_off(watched: Agent) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        r = await sh(
            watched,
            f"curl -s http://127.0.0.1:{port}/; wget -q -O - http://127.0.0.1:{port}/; "
            f"http GET http://127.0.0.1:{port}/; echo hi > /dev/tcp/127.0.0.1/{port}",
        )
        assert r.is_error
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody ever connected
    finally:
        server.close()
    await _next_call_works(watched)


async def test_fork_bomb(watched: Agent, ws: object) -> None:
    from tests.shell.conftest import limited_agent

    agent = limited_agent(ws, timeout_seconds=3)  # type: ignore[arg-type]
    r = await sh(agent, ":(){ :|:& };:")
    # Bashkit ends it either at the wall time or (in background jobs, exit 0) at its
    # function-depth limit; both say so.
    assert r.error_code in (
        None,
        ErrorCode.WORKSPACE_SHELL_LIMIT,
        ErrorCode.WORKSPACE_SHELL_TIMEOUT,
    )
    assert "resource limit exceeded" in r.content
    await _next_call_works(agent)


async def test_endless_output_and_loops(quick: Agent) -> None:
    r = await sh(quick, "yes | head -c 2000000000 | wc -c")
    assert not _leaks(r.content) and r.structured["exit_code"] in (0, 1)
    assert int(stdout_of(r).split()[0]) < 2_000_000_000  # Bashkit's per-command caps
    assert "yes: output limit" in r.content  # …and it says so on stderr
    r = await sh(quick, "while true; do :; done")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_LIMIT
    r = await sh(quick, "while true; do sleep 0.5; done")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_TIMEOUT
    r = await sh(quick, "node -e 'for(;;){}'")
    assert r.structured["exit_code"] == 124 and "time limit" in r.content
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_TIMEOUT
    r = await sh(quick, "python3 -c 'while True: pass'")
    assert r.is_error
    await _next_call_works(quick)


async def test_a_100_mb_string(quick: Agent) -> None:
    for cmd in (
        's=$(head -c 100000000 /dev/zero | tr "\\0" x); echo ${#s}',
        "s=x; for i in $(seq 1 27); do s=$s$s; done; echo ${#s}",
        "python3 -c \"s='x'*100_000_000; print(len(s))\"",
        "node -e \"console.log('x'.repeat(1e8).length)\"",
    ):
        r = await sh(quick, cmd)
        assert r.is_error or "100000000" not in r.content, (cmd, r.content)
        assert "134217728" not in r.content
    await _next_call_works(quick)
