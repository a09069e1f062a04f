"""workspace.search_files against ripgrep and grep on the same generated tree.

Generates a workspace of 10,000 files / about 200 MB under scratch/, then times
one search through the real tool (gate, RE2 over each file's bytes, result
text) beside `rg -n` and `grep -rn` on the same folder, same pattern, in the
same run. Also times a read_file preview of a 50 MB file.

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
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
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


def timed(fn: object, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rg, grep = shutil.which("rg"), shutil.which("grep")
    tmp = Path(tempfile.mkdtemp(prefix="tavern-search-"))
    try:
        print(f"generating {args.files:,} files, {args.mb} MB …", flush=True)
        generate(tmp, args.files, args.mb)
        gate = make_gate(tmp)
        rows = []
        for label, pattern, flags in [
            ("literal", "NEEDLE_literal", []),
            ("(?i) literal", "(?i)needle_LITERAL", ["-i"]),
        ]:
            rg_pattern = pattern.removeprefix("(?i)")

            def ours(pattern: str = pattern) -> str:
                call = ToolCall(
                    "c", "workspace_search_files", {"pattern": pattern, "path": "scratch"}
                )
                return asyncio.run(gate.handle(call)).result.content

            ours_ms, text = timed(ours, args.repeat)
            hits = str(text).count("\n")
            line = [label, f"{ours_ms:.0f}", str(hits)]
            for tool, argv in [
                (rg, [str(rg), "-n", "--no-heading", *flags, rg_pattern, str(tmp / "scratch")]),
                (grep, [str(grep), "-rn", *flags, rg_pattern, str(tmp / "scratch")]),
            ]:
                if tool is None:
                    line.append("n/a")
                    continue
                ms, _ = timed(
                    lambda argv=argv: subprocess.run(argv, capture_output=True), args.repeat
                )
                line.append(f"{ms:.0f}")
            rows.append(line)
        print(f"\nsearch over {args.files:,} files / {args.mb} MB (median of {args.repeat}, ms)")
        print(f"{'pattern':<14}{'ours':>8}{'hits':>6}{'rg':>8}{'grep -rn':>10}{'ours/rg':>9}")
        for label, ours_ms, hits, rg_ms, grep_ms in rows:
            ratio = f"{float(ours_ms) / float(rg_ms):.2f}" if rg_ms != "n/a" else "n/a"
            print(f"{label:<14}{ours_ms:>8}{hits:>6}{rg_ms:>8}{grep_ms:>10}{ratio:>9}")
        print("goal: ours within 2x of rg for both patterns")

        big = tmp / "scratch" / "big.txt"
        line = "The quick brown fox jumps over the lazy dog, again and again.\n"
        big.write_text(line * (50 * 1024 * 1024 // len(line)))

        def preview() -> str:
            call = ToolCall("r", "workspace_read_file", {"file_path": "scratch/big.txt"})
            return asyncio.run(gate.handle(call)).result.content

        ms, _ = timed(preview, 5)
        print(f"\nread_file preview of a 50 MB file: {ms:.1f} ms (median of 5; goal < 50 ms)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
