"""workspace.shell (Bashkit) against host bash and host jq, same run.

1. Per-call latency of ``echo hi | wc -c``, the four taking turns:
   * a new sandbox (new ``BashTool``, every root of a chat run's workspace
     mounted, the chat mount included, ``node``/``js`` registered) and one
     ``execute``: what every call paid before sandboxes were pooled;
   * a pooled sandbox: taken from the pool, one ``execute``, reset and given back;
   * the whole tool call through the gate (argument checks, pool, result text);
   * ``subprocess.run(["bash", "-c", …])`` on the host.
2. jq: a table of 32 filters over a small document, the sandbox's jq (libjq
   in a worker process) against the host ``jq`` binary, answers compared;
   then one filter over generated 10 MB and 100 MB files, timed taking turns
   (Bashkit's own jq stopped at its 32 MB value cap before).

Goals: the whole ``workspace_shell`` call at least 3× faster than spawning
bash; jq within 2× of host jq (wall time; CPU time is printed beside it, and
libjq alone without the sandbox, which bounds how close the sandbox can come).
Run: .venv/bin/python benchmarks/shell.py [--calls N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Limits, ShellLimits
from tavern_agent.tools.builtin.shell import POOL, new_sandbox
from tavern_agent.tools.builtin.shell_jq import WORKER_ENV
from tavern_agent.workspace.store import Workspace

ECHO = "echo hi | wc -c"
JQ_FILTER = "[.[] | select(.level > 50) | .name] | length"
CHAT = "\n".join(
    ['{"user_name":"U","character_name":"S","chat_metadata":{"integrity":"bench-shell"}}']
    + [f'{{"name":"S","is_user":false,"mes":"floor {i}"}}' for i in range(20)]
)


def make_json(path: Path, target_bytes: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    rows = []
    size = 2
    i = 0
    while size < target_bytes:
        row = {
            "id": i,
            "name": f"npc-{i}-{rng.choice(['bard', 'smith', 'guard', 'thief'])}",
            "level": rng.randint(1, 99),
            "tags": [rng.choice(["elf", "dwarf", "human", "orc"]) for _ in range(3)],
            "note": "x" * rng.randint(10, 60),
        }
        text = json.dumps(row)
        rows.append(text)
        size += len(text) + 1
        i += 1
    path.write_text("[" + ",".join(rows) + "]")
    return path.stat().st_size


async def time_async(fn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return times


def time_sync(fn: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.3f} ms"


DOC = {
    "party": [
        {"name": "Seraphina", "class": "mage", "level": 12, "hp": 31.5, "tags": ["elf", "healer"]},
        {"name": "Brom", "class": "fighter", "level": 9, "hp": 88, "tags": ["dwarf"]},
        {"name": "Ilya", "class": "rogue", "level": 12, "hp": 40.25, "tags": []},
    ],
    "inn": {"name": "The Prancing Pony", "rooms": 7, "open": True, "owner": None},
    "notes": "Rain tonight; the river is high.\nBring lanterns.",
    "gold": 1234567,
    "ratio": 0.125,
}
FILTERS = [
    "jq .", "jq -c .party[0]", "jq -r .party[].name",
    "jq -c '[.party[] | select(.level > 10) | .name]'",
    "jq -c '.party | map({name, level}) | sort_by(.level)'", "jq '[.party[].hp] | add / length'",
    "jq -c '.party | group_by(.level) | map(length)'", "jq -r .notes", "jq -c '.inn | keys'",
    "jq -c '.inn | to_entries | map(select(.value != null)) | from_entries'",
    "jq '.party | length'", "jq -c '[.party[] | .tags | length] | max'",
    """jq -r '.party[] | "\\(.name) (\\(.class)) L\\(.level)"'""",
    """jq -c '[paths(type == "number")]'""",
    """jq -c '.party[] | select(.tags | index("elf")) | .name'""",
    """jq -r '.party | map(.name) | join(", ")'""",
    """jq -c '[.party[].name | ascii_downcase | test("^s")]'""",
    "jq -c '.gold, .ratio, (.gold / 1000), (.ratio * 3)'", "jq -c '[.party[] | .hp | floor]'",
    "jq -c 'reduce .party[] as $p ({}; .[$p.class] += $p.level)'", "jq -S -c .inn",
    "jq -c '[limit(2; .party[])] | map(.name)'", """jq -c '.notes | split("\\n")'""",
    "jq -c '[.party[].name] | unique'", """jq -c '.inn.missing // "none"'""",
    "jq -c '[.party[] | {(.name): .level}] | add'", "jq -r '.party[] | [.name, .level] | @csv'",
    "jq -r '.party[] | [.name, .class] | @tsv'",
    """jq -c 'with_entries(select(.key | startswith("n")))'""", "jq -c '[.. | numbers] | length'",
    "jq -e .inn.owner", "jq -n -c --arg x hi --argjson y '[1,2]' '{x: $x, y: $y}'",
]  # fmt: skip


async def jq_table(ws: Workspace, sandbox: Callable[[str], Awaitable[str]], jq: str) -> None:
    """Each filter over DOC in the sandbox and with host jq: the answers must be the same."""
    doc = ws.root / "scratch" / "doc.json"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(json.dumps(DOC, ensure_ascii=False))
    same, differ = 0, []
    for command in FILTERS:
        inside = await sandbox(f"{command} /scratch/doc.json")
        host = subprocess.run(
            ["bash", "-c", f"{command.replace('jq', jq, 1)} {doc}"], capture_output=True, text=True
        )
        outside = host.stdout if host.returncode == 0 else f"exit {host.returncode}: {host.stderr}"
        if inside == outside:
            same += 1
        else:
            differ.append(f"    {command}\n      sandbox: {inside!r}\n      host:    {outside!r}")
    print(f"\njq filter table: {same} of {len(FILTERS)} answers the same as host jq")
    print("\n".join(differ))


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


# libjq alone: a bare Python process reads the file and runs the filter, nothing else.
LIBJQ_ALONE = "import jq, sys; list(jq.compile(sys.argv[1]).input_text(open(sys.argv[2]).read()))"


def libjq_alone(path: Path, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of libjq with no sandbox around it (the worker's
    environment, so the same allocator settings): the bound the sandbox cannot beat."""
    walls, cpus = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
        argv = [sys.executable, "-I", "-c", LIBJQ_ALONE, JQ_FILTER, str(path)]
        subprocess.run(argv, check=True, env=WORKER_ENV)
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu(resource.RUSAGE_CHILDREN) - c)
    return statistics.median(walls), statistics.median(cpus)


async def bench_jq(
    ws: Workspace, sandbox: Callable[[str], Awaitable[str]], jq: str, mb: float, runs: int
) -> None:
    big = ws.root / "scratch" / f"big-{mb}.json"
    big.parent.mkdir(parents=True, exist_ok=True)
    size = make_json(big, int(mb * 1024 * 1024))
    command = f"jq '{JQ_FILTER}' /scratch/{big.name}"
    host_argv = [jq, JQ_FILTER, str(big)]
    inside = (await sandbox(command)).strip()
    outside = subprocess.run(host_argv, check=True, capture_output=True, text=True).stdout.strip()
    times: dict[str, list[float]] = {"sandbox": [], "host": []}
    cpu: dict[str, list[float]] = {"sandbox": [], "host": []}
    for _ in range(runs):  # taking turns
        # CPU: this process (the sandbox, reading the file) plus its children (the
        # worker); host jq is a child too. Steadier than wall time on a busy machine.
        t, c = time.perf_counter(), _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
        await sandbox(command)
        times["sandbox"].append(time.perf_counter() - t)
        cpu["sandbox"].append(_cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - c)
        t, c = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
        subprocess.run(host_argv, check=True, capture_output=True)
        times["host"].append(time.perf_counter() - t)
        cpu["host"].append(_cpu(resource.RUSAGE_CHILDREN) - c)
    alone_wall, alone_cpu = libjq_alone(big, runs)
    med = statistics.median
    print(f"\njq '{JQ_FILTER}' over {size / 2**20:.1f} MB, median of {runs}, taking turns")
    print(f"{'':40s} {'wall':>11s} {'CPU':>11s}")
    for label, key, answer in (
        ("sandbox jq (libjq worker)", "sandbox", inside),
        ("host jq (baseline)", "host", outside),
    ):
        print(f"  {label:38s} {ms(times[key])} {med(cpu[key]) * 1e3:8.1f} ms  -> {answer}")
    print(f"  {'libjq alone, no sandbox (the bound)':38s} {alone_wall * 1e3:8.3f} ms "
          f"{alone_cpu * 1e3:8.1f} ms")  # fmt: skip
    ratio = med(times["sandbox"]) / med(times["host"])
    cpu_ratio = med(cpu["sandbox"]) / med(cpu["host"])
    verdict = "met" if ratio <= 2 and inside == outside else "NOT met"
    same = "same answer" if inside == outside else "DIFFERENT answers"
    print(
        f"  sandbox / host jq: {ratio:.2f}× wall, {cpu_ratio:.2f}× CPU (goal ≤ 2×: {verdict}), "
        f"{same}; libjq alone / host jq: {alone_cpu / med(cpu['host']):.2f}× CPU"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--jq-runs", type=int, default=5)
    parser.add_argument("--mb", type=float, nargs="+", default=[10.0, 100.0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="100 calls; jq on 10 MB 3 runs, on 100 MB 1 run: what make bench runs",
    )
    args = parser.parse_args()
    if args.quick:
        args.calls, args.jq_runs, args.mb = 100, 3, [10.0, 100.0]
    tmp = Path(tempfile.mkdtemp(prefix="shell-bench-"))
    try:
        assembly = Assembly(tmp / "data")
        limits = ShellLimits()
        profile = assembly.everything(Scene.CHAT)
        profile = profile.model_copy(update={"limits": Limits(max_calls_per_invocation=100_000)})
        snap = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv_b")
        # A chat run's workspace: every chat root plus the chat mount (floors and chat.json).
        chat_file = tmp / "chat.jsonl"
        chat_file.write_text(CHAT)
        chat, _, root = assembly.chat_run(
            ChatSource(chat_file), tmp / "ws", run_id="run_bench", profile_id=profile.id
        )
        ws = assembly.workspace(root, Scene.CHAT, profile, chat)
        gate = assembly.gate(snap, run_id="run_bench", workspace=ws, chat=chat)
        counter = iter(range(10**9))

        async def sandbox(command: str) -> str:
            sandbox = new_sandbox(ws, limits, "/", time.monotonic() + limits.timeout_seconds)
            result = await sandbox.bash.execute(command)
            if result.exit_code != 0:
                return f"exit {result.exit_code}: {result.stderr}"
            return result.stdout

        async def tool_call() -> None:
            call = ToolCall(f"call_{next(counter)}", "workspace_shell", {"command": ECHO})
            executed = await gate.handle(call, round=1)
            assert not executed.result.is_error, executed.result.content

        def host_bash() -> None:
            subprocess.run(["bash", "-c", ECHO], check=True, capture_output=True)

        async def pooled() -> None:
            deadline = time.monotonic() + limits.timeout_seconds
            sandbox, key = POOL.take(ws, limits, "/", deadline)
            await sandbox.bash.execute(ECHO)
            POOL.give(key, sandbox)

        async def host_async() -> None:
            host_bash()

        assert (await sandbox(ECHO)).strip() == "3"
        runners: dict[str, Callable[[], Awaitable[object]]] = {
            "fresh": lambda: sandbox(ECHO),
            "pooled": pooled,
            "full": tool_call,
            "host": host_async,
        }
        for _ in range(20):  # warm-up
            for fn in runners.values():
                await fn()
        n = args.calls
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(n):  # taking turns, so a busy machine slows all of them alike
            for name, fn in runners.items():
                t = time.perf_counter()
                await fn()
                times[name].append(time.perf_counter() - t)
        fresh, reused, full, host = (times[k] for k in ("fresh", "pooled", "full", "host"))
        print(f"`{ECHO}`, median of {n} calls each, taking turns")
        print(f"  new sandbox each call (mounts + node)  {ms(fresh)}")
        print(f"  pooled sandbox (reset, reused)         {ms(reused)}")
        print(f"  whole workspace_shell call (gate)      {ms(full)}")
        print(f"  subprocess.run(['bash','-c',…])        {ms(host)}")
        ratio_full = statistics.median(host) / statistics.median(full)
        ratio_fresh = statistics.median(host) / statistics.median(fresh)
        verdict = "met" if ratio_full >= 3 else "NOT met"
        print(
            f"  host bash / whole call: {ratio_full:.1f}× (goal ≥ 3×: {verdict}); "
            f"host bash / new sandbox alone: {ratio_fresh:.1f}×"
        )

        jq = shutil.which("jq")
        if jq is None:
            print("\nhost jq is not installed (make bench installs it): no jq comparison")
            return
        version = subprocess.run([jq, "--version"], capture_output=True, text=True).stdout
        print(f"\nhost jq: {version.strip()}")
        await jq_table(ws, sandbox, jq)
        for mb in args.mb:
            runs = 1 if args.quick and mb >= 100 else args.jq_runs
            await bench_jq(ws, sandbox, jq, mb, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
