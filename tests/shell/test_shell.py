"""``workspace.shell`` with real Bashkit on real folders: results, files, limits, skills."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import ShellLimits
from tavern_agent.tools.builtin import shell
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace
from tests.shell.conftest import SHELL, limited_agent, sh, stdout_of
from tests.workspace.conftest import Agent

# ---------------------------------------------------------------- results


async def test_result_labels_streams_and_structured(agent: Agent) -> None:
    r = await sh(agent, "echo out; echo err >&2")
    assert not r.is_error
    assert r.content == "exit_code: 0\nstdout:\nout\nstderr:\nerr"
    assert r.structured == {
        "exit_code": 0,
        "stdout_chars": 4,
        "stderr_chars": 4,
        "timed_out": False,
    }


async def test_non_zero_exit_is_a_normal_result_with_the_code(agent: Agent) -> None:
    r = await sh(agent, "echo partial; exit 7")
    assert r.is_error and r.error_code is ErrorCode.WORKSPACE_SHELL_EXIT
    assert r.structured["exit_code"] == 7
    assert "exit_code: 7" in r.content and "partial" in r.content
    assert "exited with status 7" in r.content
    r = await sh(agent, "false")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_EXIT and r.structured["exit_code"] == 1
    r = await sh(agent, "true")
    assert not r.is_error and "stdout: (empty)" in r.content and "stderr: (empty)" in r.content


async def test_jq_python_and_node_read_workspace_files_and_stdin(agent: Agent) -> None:
    r = await sh(agent, """echo '{"a":[1,2]}' | jq '.a|length'""")
    assert stdout_of(r) == "2"
    r = await sh(agent, "python3 -c \"print(open('/output/main.md').read().splitlines()[0])\"")
    assert stdout_of(r) == "# Chapter one"
    r = await sh(
        agent, "jq -n '[1,2,3]|add' > /scratch/n.json && python3 /scratch/../scratch/n.json"
    )
    assert stdout_of(r) == "6"
    r = await sh(
        agent, "node -e \"const m=new Map([[2,'b'],[1,'a']]); console.log([...m].sort())\""
    )
    assert stdout_of(r) == "[ [ 1, 'a' ], [ 2, 'b' ] ]"
    r = await sh(
        agent,
        "printf 'x\\ny\\n' | node -e "
        "\"console.log(require('fs').readFileSync(0,'utf8').split('\\n').length)\"",
    )
    assert stdout_of(r) == "3"
    r = await sh(agent, "js -p '[3,20,100].sort((a,b)=>a-b).join()'")
    assert stdout_of(r) == "3,20,100"


async def test_node_errors_and_limits_come_back_as_exit_codes(quick: Agent) -> None:
    r = await sh(quick, "node -e 'throw new TypeError(\"bad thing\")'")
    assert r.structured["exit_code"] == 1 and "TypeError: bad thing" in r.content
    r = await sh(quick, "node -e 'while (true) {}'; echo after=$?")
    assert "after=124" in r.content and "time limit" in r.content
    r = await sh(quick, "node -e 'while (true) {}'")  # the script itself ends by its time limit
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_TIMEOUT and r.structured["timed_out"]
    r = await sh(quick, "node -e \"console.log('x'.repeat(1e8).length)\"; echo rc=$?")
    assert "rc=137" in r.content and "memory limit" in r.content
    r = await sh(quick, "node -e 'function f(n){return f(n+1)+1} f(0)'; echo rc=$?")
    assert "rc=0" not in r.content
    r = await sh(quick, "node -e 'require(\"child_process\")'")
    assert r.structured["exit_code"] == 1 and "Cannot find module" in r.content
    assert stdout_of(await sh(quick, "echo next")) == "next"


# ---------------------------------------------------------------- files and state


async def test_writes_reach_the_file_tools_at_once(agent: Agent) -> None:
    r = await sh(agent, "mkdir -p /scratch/notes && echo 'from the shell' > /scratch/notes/a.md")
    assert not r.is_error, r.content
    assert (agent.workspace.root / "scratch/notes/a.md").read_text() == "from the shell\n"
    read = await agent("workspace_read_file", file_path="scratch/notes/a.md")
    assert "from the shell" in read.content
    wrote = await agent("workspace_write_file", file_path="plan/p.md", content="step 1\n")
    assert not wrote.is_error
    r = await sh(agent, "cd /plan && ls && cat p.md")
    assert stdout_of(r) == "p.md\nstep 1"


async def test_shell_keeps_no_read_state_file_tools_catch_the_stale_read(agent: Agent) -> None:
    read = await agent("workspace_read_file", file_path="output/main.md")
    assert not read.is_error
    r = await sh(agent, "sed -i 's/quiet/loud/' /output/main.md")
    assert not r.is_error, r.content
    stale = await agent("workspace_write_file", file_path="output/main.md", content="new body\n")
    assert stale.error_code is ErrorCode.WORKSPACE_WRITE_STALE_FILE
    print(stale.content)  # what the model reads
    patch = await agent(
        "workspace_apply_patch", file_path="output/main.md", old_string="loud", new_string="x"
    )
    assert patch.error_code is ErrorCode.WORKSPACE_PATCH_STALE_FILE
    again = await agent("workspace_read_file", file_path="output/main.md")
    assert "The tavern is loud." in again.content
    ok = await agent("workspace_write_file", file_path="output/main.md", content="new body\n")
    assert not ok.is_error, ok.content
    assert (agent.workspace.root / "output/main.md").read_text() == "new body\n"


async def test_every_call_starts_fresh(agent: Agent) -> None:
    r = await sh(agent, "export FOO=1; cd /scratch; f() { echo hi; }; echo x > /tmp/t; alias ll=ls")
    assert not r.is_error, r.content
    r = await sh(agent, "echo ${FOO:-unset}; pwd; type f >/dev/null 2>&1 || echo nof; ls /tmp/t")
    out = stdout_of(r)
    assert out.startswith("unset\n/\nnof"), r.content
    assert r.is_error  # /tmp/t is gone: the sandbox's /tmp lives and dies with the call


def idle_sandboxes() -> int:
    return sum(len(idle) for idle in shell.POOL._idle.values())


async def test_a_reused_sandbox_starts_fresh_and_a_stopped_one_is_dropped(ws: object) -> None:
    shell.POOL.clear()
    agent = limited_agent(ws, timeout_seconds=1.5)  # type: ignore[arg-type]
    assert not (await sh(agent, "X=1; f() { :; }; cd /output; echo x > /tmp/t")).is_error
    assert idle_sandboxes() == 1  # ended normally: reset and kept
    r = await sh(agent, "echo ${X:-unset}; pwd; type f 2>&1; ls /tmp")
    assert stdout_of(r).startswith("unset\n/\n") and "/tmp/t" not in r.content
    assert idle_sandboxes() == 1  # the same sandbox came back
    timed_out = await sh(agent, "sleep 5")
    assert timed_out.error_code is ErrorCode.WORKSPACE_SHELL_TIMEOUT
    assert idle_sandboxes() == 0  # stopped by a limit: dropped, not reused
    assert stdout_of(await sh(agent, "echo next")) == "next"


async def test_a_reused_sandbox_runs_javascript_under_the_new_calls_deadline(
    ws: Workspace,
) -> None:
    pool, limits = shell.SandboxPool(), ShellLimits()
    sandbox, key = pool.take(ws, limits, "/", time.monotonic() - 1)  # a deadline long gone
    late = await sandbox.bash.execute("node -e 'console.log(6 * 7)'")
    assert late.exit_code == 124 and "no time left" in late.stderr
    pool.give(key, sandbox)
    again, _ = pool.take(ws, limits, "/", time.monotonic() + 30)
    assert again is sandbox
    assert (await again.bash.execute("node -e 'console.log(6 * 7)'")).stdout == "42\n"


async def test_workdir(agent: Agent) -> None:
    assert stdout_of(await sh(agent, "pwd")) == "/"
    assert stdout_of(await sh(agent, "pwd; ls", workdir="output")) == "/output\nmain.md"
    assert stdout_of(await sh(agent, "pwd", workdir="/skills/dice")) == "/skills/dice"
    bad = await sh(agent, "pwd", workdir="input")
    assert bad.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE
    bad = await sh(agent, "pwd", workdir="output/main.md")
    assert bad.error_code is ErrorCode.WORKSPACE_PATH_NOT_FOUND and "is a file" in bad.content
    bad = await sh(agent, "pwd", workdir="../x")
    assert bad.error_code is ErrorCode.WORKSPACE_INVALID_PATH


async def test_every_folder_the_sandbox_shows_is_a_workdir(sandbox_home: Path) -> None:
    """A fresh workspace has no root folders on disk yet; the sandbox shows them all."""
    ws = Workspace(
        sandbox_home / "fresh",
        RootPolicy.for_scene(Scene.CHAT),
        skills_dir=sandbox_home / "skills",
        visible_skills=frozenset({"dice"}),
    )
    agent = Agent(ws)
    assert stdout_of(await sh(agent, "pwd", workdir="output")) == "/output"
    shown = stdout_of(await sh(agent, "find / -maxdepth 2 -type d | grep -v '^/proc'"))
    folders = sorted(set(shown.split("\n")) - {"/"})
    assert {"/output", "/scratch", "/tmp", "/home/user", "/skills/dice"} <= set(folders)
    for folder in folders:
        r = await sh(agent, "pwd", workdir=folder)
        assert not r.is_error and stdout_of(r) == folder, (folder, r.content)
    bad = await sh(agent, "pwd", workdir="/etc/hosts")
    assert bad.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE
    bad = await sh(agent, "pwd", workdir="/skills/hidden")
    assert bad.error_code is ErrorCode.WORKSPACE_PATH_NOT_VISIBLE


async def test_command_size_limit(agent: Agent) -> None:
    r = await sh(agent, "#" + "x" * (128 * 1024))
    assert r.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "128 KiB" in r.content and "workspace_write_file" in r.content
    r = await sh(agent, "#" + "x" * (128 * 1024 - 20) + "\necho fits")
    assert stdout_of(r) == "fits"


# ---------------------------------------------------------------- skills


async def test_skills_run_but_stay_unchanged(agent: Agent, sandbox_home: object) -> None:
    assert stdout_of(await sh(agent, "bash /skills/dice/run.sh hello")) == "skill says hello"
    assert stdout_of(await sh(agent, "python3 /skills/dice/tool.py")) == "6"
    assert stdout_of(await sh(agent, "node /skills/dice/tool.js")) == "1,2 true"
    assert stdout_of(await sh(agent, "cd /skills/dice && bash run.sh x")) == "skill says x"
    assert stdout_of(await sh(agent, "ls /skills")) == "dice"
    hidden = await sh(agent, "cat /skills/hidden/SKILL.md")
    assert hidden.is_error and "not for this agent" not in hidden.content
    for cmd in (
        "echo x > /skills/dice/run.sh",
        "rm /skills/dice/tool.py",
        "touch /skills/dice/new",
        "python3 -c \"open('/skills/dice/new','w').write('x')\"",
        "node -e \"require('fs').writeFileSync('/skills/dice/new','x')\"",
        "echo x > /tool-results/forged.txt",
    ):
        r = await sh(agent, cmd)
        assert r.is_error, (cmd, r.content)
    skills = agent.workspace.skills_dir
    assert skills is not None
    assert sorted(p.name for p in (skills / "dice").iterdir()) == ["run.sh", "tool.js", "tool.py"]
    assert (skills / "dice" / "run.sh").read_text() == 'echo "skill says $1"\n'
    assert not (agent.workspace.root / "tool-results" / "forged.txt").exists()


# ---------------------------------------------------------------- limits and long output


async def test_timeout_keeps_output_and_the_next_call_works(ws: object) -> None:
    agent = limited_agent(ws, timeout_seconds=1)  # type: ignore[arg-type]
    r = await sh(agent, "echo before; echo warn >&2; sleep 5; echo after")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_TIMEOUT
    assert r.structured["timed_out"] is True
    assert stdout_of(r) == "before" and "warn" in r.content
    assert "Stopped by a time limit (a call may run 1 s)" in r.content
    assert stdout_of(await sh(agent, "echo next")) == "next"


async def test_limit_breach_names_the_limit_and_keeps_partial_output(quick: Agent) -> None:
    r = await sh(quick, "echo before; while true; do :; done")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_LIMIT
    assert "before" in stdout_of(r)
    assert "command count" in r.structured["limit"]
    assert "sandbox limit: maximum command count" in r.content
    r = await sh(quick, "echo before; s=x; for i in $(seq 1 28); do s=$s$s; done; echo ${#s}")
    assert r.error_code is ErrorCode.WORKSPACE_SHELL_LIMIT and "memory" in r.structured["limit"]
    assert "before" in stdout_of(r)


async def test_huge_output_spills_to_tool_results(agent: Agent) -> None:
    r = await sh(agent, "seq 1 100000")
    assert not r.is_error
    path = r.structured["path"]
    assert path.startswith("tool-results/inv_ws/") and path.endswith(".txt")
    assert r.structured["exit_code"] == 0 and r.structured["stdout_chars"] == 588_895
    assert r.structured["externalized"] is True
    saved = (agent.workspace.root / path).read_text()
    assert (
        saved.startswith("exit_code: 0\nstdout:\n1\n2\n") and "\n100000\nstderr: (empty)" in saved
    )
    assert "Full text: " + path in r.content and len(r.content) < 10_000
    assert "workspace_read_file" in r.content
    paged = await sh(agent, f"sed -n '100002p' /{path}")  # the spill file is readable in the shell
    assert stdout_of(paged) == "100000"


async def test_a_stream_above_128_kib_spills_even_under_a_high_inline_limit(ws: object) -> None:
    agent = limited_agent(ws, inline=1_000_000)  # type: ignore[arg-type]
    small = await sh(agent, "seq 1 20000")  # 108,894 chars: stays inline under this profile
    assert "externalized" not in small.structured and stdout_of(small).endswith("20000")
    big = await sh(agent, "seq 1 30000")  # 168,894 chars on stdout
    assert big.structured["externalized"] is True and big.structured["charLimit"] == 128 * 1024
    assert "over the inline limit of 131,072" in big.content


async def test_stdout_cap_is_stated_not_silent(agent: Agent) -> None:
    r = await sh(agent, "for i in $(seq 1 40000); do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxx; done")
    saved = (agent.workspace.root / r.structured["path"]).read_text()
    assert "keeps at most 1 MiB of stdout" in saved
    assert r.structured["stdout_truncated"] is True


async def test_cancelled_run_stops_the_call(ws: object) -> None:
    agent = limited_agent(ws, timeout_seconds=2)  # type: ignore[arg-type]
    cancelled = asyncio.Event()
    call = ToolCall("call_c", SHELL, {"command": "echo started; sleep 10"})
    task = asyncio.ensure_future(agent.gate.handle(call, round=1, cancelled=cancelled))
    await asyncio.sleep(0.3)
    cancelled.set()
    result = (await task).result
    assert result.error_code is ErrorCode.WORKSPACE_SHELL_CANCELLED
    assert "Cancelled" in result.content
    cancelled_before = asyncio.Event()
    cancelled_before.set()
    call = ToolCall("call_d", SHELL, {"command": "echo x > /scratch/never"})
    early = (await agent.gate.handle(call, round=1, cancelled=cancelled_before)).result
    assert early.error_code is ErrorCode.WORKSPACE_SHELL_CANCELLED
    assert not (agent.workspace.root / "scratch" / "never").exists()


async def test_ten_parallel_calls_leave_the_event_loop_free(agent: Agent) -> None:
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    tick = asyncio.ensure_future(ticker())
    commands = [
        f"sleep 0.3; python3 -c 'print({i} * 2)'; node -e 'console.log({i} + 100)'; "
        f"echo {i} > /scratch/p{i}.txt"
        for i in range(10)
    ]
    results = await asyncio.gather(*(sh(agent, c) for c in commands))
    stop.set()
    await tick
    for i, r in enumerate(results):
        assert stdout_of(r) == f"{i * 2}\n{i + 100}", r.content
        assert (agent.workspace.root / f"scratch/p{i}.txt").read_text() == f"{i}\n"
    assert len(lags) > 5
    assert max(lags) < 0.5, f"event loop stalled for {max(lags):.3f} s"


def test_shell_limits_come_from_the_profile_and_survive_the_snapshot() -> None:
    from tavern_agent.assembly import Assembly
    from tavern_agent.core.descriptors import Scene as S
    from tavern_agent.core.naming import ModelProtocol
    from tavern_agent.core.profile import Profile
    from tavern_agent.tools.snapshot import ToolSnapshot

    default = Profile.builtin("default-writer").limits.shell
    assert default.timeout_seconds == 30 and default.max_loop_iterations > 10_000
    assert default.max_commands > 10_000 and default.max_memory_bytes >= 32 * 2**20
    profile = Profile.from_json(
        {
            "id": "p",
            "name": "p",
            "tools": {"allow": ["builtin:workspace.shell"]},
            "limits": {"shell": {"timeoutSeconds": 5, "jsMemoryBytes": 8 * 2**20}},
        }
    )
    snap = Assembly(Path("/nonexistent-data-root")).snapshot(
        profile, S.CHAT, ModelProtocol.OPENAI_CHAT, "inv"
    )
    again = ToolSnapshot.from_json(snap.to_json())
    assert again.shell_limits.timeout_seconds == 5
    assert again.shell_limits.js_memory_bytes == 8 * 2**20
    old = snap.to_json()
    del old["shellLimits"]  # snapshots written before the shell existed
    assert ToolSnapshot.from_json(old).shell_limits == default
