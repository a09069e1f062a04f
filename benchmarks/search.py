"""workspace.search_files against ripgrep and grep on the same generated tree.

Generates a workspace of 10,000 files / about 200 MB under scratch/, then times
one search through the real tool (gate, RE2 over each file's bytes, result
text) beside `rg -n` and `grep -rn` on the same folder, same pattern, in the
same run, and the same tool kept to one process (no search worker) beside it.
Also times a read_file preview of a 50 MB file.

Run: .venv/bin/python benchmarks/search.py [--files N] [--mb M] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.tools.builtin import search_worker
from tavern_agent.tools.gate import ToolRequestGate

WORDS = [
    "the",
    "dragon",
    "lantern",
    "river",
    "tavern",
    "bard",
    "sword",
    "quiet",
    "ember",
    "winter",
    "market",
    "oath",
    "shadow",
    "harbor",
    "silver",
    "thread",
    "candle",
    "forest",
    "whisper",
    "raven",
]


def generate(root: Path, files: int, total_mb: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    per_file = total_mb * 1024 * 1024 // files
    line_pool = [" ".join(rng.choice(WORDS) for _ in range(12)) + "\n" for _ in range(5000)]
    for i in range(files):
        folder = root / "scratch" / f"d{i // 500:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        parts, size = [], 0
        while size < per_file:
            line = rng.choice(line_pool)
            parts.append(line)
            size += len(line)
        if i % 997 == 0:
            parts.insert(len(parts) // 2, "a NEEDLE_literal hides here\n")
        (folder / f"f{i:05d}.md").write_text("".join(parts))


def make_gate(root: Path) -> ToolRequestGate:
    assembly = Assembly(root / "data")
    profile = assembly.everything(Scene.CHAT)
    snapshot = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "bench")
    ws = assembly.workspace(root, Scene.CHAT, profile)
    return assembly.gate(snapshot, run_id="run_bench", workspace=ws)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def interleaved(runners: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median ms of each runner, taking turns so a busy machine hits all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeat):
        for name, fn in runners.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(ts) for name, ts in times.items()}


PATTERNS = [
    ("literal", "NEEDLE_literal", []),
    ("(?i) literal", "(?i)needle_LITERAL", ["-i"]),  # has a caseless run: prefiltered
    ("(?i) word", "(?i)Wyvern", ["-i"]),  # letters only: RE2's case-folding scan
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--tree", type=Path, help="keep the generated tree here and reuse it")
    parser.add_argument("--quick", action="store_true", help="median of 3: what make bench runs")
    args = parser.parse_args()
    if args.quick:
        args.repeat = 3
    rg, grep = shutil.which("rg"), shutil.which("grep")
    tmp = args.tree or Path(tempfile.mkdtemp(prefix="tavern-search-"))
    try:
        if not (tmp / "scratch").is_dir():
            print(f"generating {args.files:,} files, {args.mb} MB …", flush=True)
            generate(tmp, args.files, args.mb)
        gate = make_gate(tmp)
        folder = str(tmp / "scratch")
        helper = search_worker.helper(start=True)  # started by a first large search, as in a run
        if helper is not None:
            helper.wait_ready()
        print(f"\nsearch over {args.files:,} files / {args.mb} MB (median of {args.repeat}, ms)")
        print(
            f"{'pattern':<14}{'ours':>8}{'1 proc':>8}{'hits':>6}{'rg':>8}{'grep -rn':>10}"
            f"{'ours/rg':>9}"
        )
        met = True
        for label, pattern, flags in PATTERNS:
            plain = pattern.removeprefix("(?i)")

            def ours(pattern: str = pattern) -> str:
                call = ToolCall(
                    "c", "workspace_search_files", {"pattern": pattern, "path": "scratch"}
                )
                return asyncio.run(gate.handle(call)).result.content

            def alone(pattern: str = pattern) -> str:
                saved = search_worker.helper
                search_worker.helper = lambda start=False: None  # type: ignore[assignment]
                try:
                    return ours(pattern)
                finally:
                    search_worker.helper = saved

            hits = ours().count("\n")
            runners: dict[str, Callable[[], object]] = {"ours": ours, "alone": alone}
            for name, tool, argv in [
                ("rg", rg, ["-n", "--no-heading", *flags, plain, folder]),
                ("grep", grep, ["-rn", *flags, plain, folder]),
            ]:
                if tool is not None:
                    runners[name] = lambda argv=[tool, *argv]: subprocess.run(  # type: ignore[misc]
                        argv, capture_output=True
                    )
            got = interleaved(runners, args.repeat)
            rg_ms, grep_ms = got.get("rg"), got.get("grep")
            ratio = got["ours"] / rg_ms if rg_ms else None
            met = met and ratio is not None and ratio <= 1.0
            print(
                f"{label:<14}{got['ours']:>8.0f}{got['alone']:>8.0f}{hits:>6}"
                f"{'n/a' if rg_ms is None else f'{rg_ms:.0f}':>8}"
                f"{'n/a' if grep_ms is None else f'{grep_ms:.0f}':>10}"
                f"{'n/a' if ratio is None else f'{ratio:.2f}':>9}"
            )
        print(f"goal: ours <= 1.0x rg for every pattern: {'met' if met else 'NOT met'}")

        big = tmp / "scratch" / "big.txt"
        line = "The quick brown fox jumps over the lazy dog, again and again.\n"
        big.write_text(line * (50 * 1024 * 1024 // len(line)))

        def preview() -> str:
            call = ToolCall("r", "workspace_read_file", {"file_path": "scratch/big.txt"})
            return asyncio.run(gate.handle(call)).result.content

        fresh = median_ms(preview, args.repeat)
        time.sleep(1.1)  # a file changed in the last second is read whole (see read_state)
        ms = median_ms(preview, args.repeat)
        print(
            f"\nread_file preview of a 50 MB file: {ms:.1f} ms (median of {args.repeat}; "
            f"goal < 50 ms: {'met' if ms < 50 else 'NOT met'}); "
            f"the same file changed < 1 s before, read whole: {fresh:.1f} ms"
        )
        big.unlink()
    finally:
        if args.tree is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
