"""chat.search, chat.read_messages and world info activation on a large generated chat.

* a 100,000-floor SillyTavern chat (about 100 MB of JSONL; one floor in ten is
  Chinese or Japanese) is written to a temporary folder;
* **baseline**: reading the chat file and JSON-decoding each of its lines once;
* **cold search**: the first ``chat_search`` call of a run, made right after
  the run started (the run start reads the chat once and starts the index build
  on a worker thread; it writes no floor files): in the first run ever on the
  chat and in a run whose saved index was deleted (both answered by a scan of
  the chat in memory while the index is built: the scan path), the same query
  once the index is ready (the index path), in a later run (waits for the
  saved index to load), and in a run after 1,000 floors were appended (waits
  for the saved index to be updated). Load and index build are also shown
  alone, and each run start's time;
* **time to the first model request** of the first run ever on the chat, with
  a scripted model, side by side: as the run start did before (it also wrote
  the floor mount, two files per floor) and as it does now (``chat/floors/``
  served from memory); then the first ``workspace_shell`` call of the new run,
  which now syncs the shell's floor copy;
* **warm search**: the median of 30 further, different queries;
* **read_messages**: the median of 30 calls reading 5 floors each;
* **activation**: a 5,000-entry lorebook (2-3 keys per entry, some whole-word,
  regex and selective entries, recursion on) against a 50-message window,
  median of 20 runs.

Calls go through the real gate (argument parsing, schema check, dispatch).
Goals from the issues: warm search < 50 ms, cold ≤ 3× the baseline (and < 3 s),
activation < 100 ms; the first model request never waits for the index.
Run: ``python benchmarks/chat.py [--floors N] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat import mount
from tavern_agent.chat.activation import ScanMessage, activate
from tavern_agent.chat.formats import ChatFile, collection_paused, new_message
from tavern_agent.chat.index_store import load_or_build
from tavern_agent.chat.mount import sync_floors
from tavern_agent.chat.repository import FileChatRepository
from tavern_agent.chat.run_input import ChatRun
from tavern_agent.chat.world_books import parse_world
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.json_input import loads
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, Turn, say
from tavern_agent.tools.gate import ToolRequestGate

CJK = "森林神殿龙宝藏古老旅人酒馆雨夜剑魔法城堡河流山脉商人歌声灯笼马车村庄月光"
KANA = "のはをにがでとへもやかなたしまう"


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "etaoinshrdlcumwfgypbvk"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def floor_text(rng: random.Random, vocab: list[str], i: int) -> str:
    if i % 10 == 7:
        chars = [rng.choice(CJK) if rng.random() < 0.8 else rng.choice(KANA) for _ in range(160)]
        return "".join(chars)
    words = [vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] for _ in range(75)]
    return " ".join(words)


def write_chat(path: Path, floors: int, rng: random.Random) -> None:
    vocab = vocabulary(rng)
    header = {
        "user_name": "User",
        "character_name": "Seraphina",
        "create_date": "2025-12-01@10h00m00s",
        "chat_metadata": {"integrity": "bench-chat"},
    }
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header))
        for i in range(floors):
            text = floor_text(rng, vocab, i)
            msg = {
                "name": "User" if i % 2 == 0 else "Seraphina",
                "is_user": i % 2 == 0,
                "is_system": False,
                "send_date": "December 1, 2025 10:00am",
                "mes": text,
                "swipes": [text],
                "swipe_id": 0,
                "extra": {"api": "openai"},
            }
            out.write("\n" + json.dumps(msg, ensure_ascii=False, separators=(",", ":")))


def lorebook(rng: random.Random, entries: int) -> dict[str, Any]:
    vocab = vocabulary(rng, 8_000)
    chat_words = vocabulary(random.Random(42))[:200]  # common words of the chat
    out: dict[str, Any] = {}
    for uid in range(entries):
        # Keys are names (rarely in the chat); one entry in fifty keys on a common chat word.
        keys = [
            f"{rng.choice(vocab).title()}-{rng.choice(vocab)}" for _ in range(rng.randint(2, 3))
        ]
        if uid % 50 == 1:
            keys.append(rng.choice(chat_words))
        entry: dict[str, Any] = {
            "uid": uid,
            "key": keys,
            "keysecondary": [],
            "content": " ".join(rng.choice(vocab) for _ in range(60)),
            "order": rng.randint(1, 500),
            "position": 0,
        }
        if uid % 10 == 0:
            entry["matchWholeWords"] = True
        if uid % 50 == 0:
            entry["key"] = [f"/{keys[0]}s?/i", *keys[1:]]
        if uid % 7 == 0:
            entry["selective"], entry["keysecondary"] = True, [rng.choice(vocab)]
        out[str(uid)] = entry
    return {"entries": out}


def read_and_decode(path: Path) -> float:
    """Seconds to read the chat file and JSON-decode each of its lines once: the baseline.

    With the decoder and the paused collector of the chat's own load, so the
    baseline is the fastest way this package has to decode the file.
    """
    start = time.perf_counter()
    with collection_paused():
        decoded = [loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    took = time.perf_counter() - start
    assert decoded
    return took


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def entries_below(folder: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder))


async def first_request(
    path: Path, data_dir: Path, *, mount_floors: bool
) -> tuple[float, int, bool]:
    """Seconds from ``Run.start`` to the model's first request, files then in the data root,
    and whether the search index was still being built then.

    ``mount_floors`` also writes the floor mount before the first request, as
    the run start did before ``chat/floors/`` was served from memory (each file
    through a temporary file and a rename, as then).
    """
    assembly = Assembly(data_dir)
    profile = assembly.everything(Scene.CHAT)
    seen: list[tuple[float, int, bool]] = []

    def first(request: ModelRequest) -> Turn:
        building = run.chat is not None and not run.chat.index_ready()
        seen.append((time.perf_counter(), entries_below(data_dir), building))
        return say("done")

    start = time.perf_counter()
    run = Run.start(assembly, RunSpec(profile, chat_file=path, seed=1))
    if mount_floors and run.chat is not None:
        # As the old run start wrote them: every file through a temporary file and a rename.
        saved, mount._create = mount._create, mount._put
        folder = assembly.data.chat_mount_dir(run.chat.input.stable_chat_id)
        try:
            sync_floors(run.chat.chat(), folder)
        finally:
            mount._create = saved
    engine = Engine(run, ScriptedGateway([first]), fsync=False)
    try:
        await engine.start()
    finally:
        engine.close()
        if run.chat is not None:
            run.chat.settle()
    return seen[0][0] - start, seen[0][1], seen[0][2]


async def first_shell_call(path: Path, data_dir: Path) -> float:
    """The first ``workspace_shell`` call of a new run on a chat whose floors were never copied."""
    assembly = Assembly(data_dir)
    profile = assembly.everything(Scene.CHAT)
    snap = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "bench_shell")
    chat_run, _, root = assembly.chat_run(
        ChatSource(path), data_dir / "shell_run", run_id="shell_run", profile_id=profile.id
    )
    ws = assembly.workspace(root, Scene.CHAT, profile, chat_run)
    gate = assembly.gate(snap, run_id="shell_run", workspace=ws, chat=chat_run)
    start = time.perf_counter()
    result = await gate.handle(
        ToolCall("s1", "workspace_shell", {"command": "ls /chat/floors | wc -l"})
    )
    took = time.perf_counter() - start
    assert not result.result.is_error, result.result.content
    chat_run.settle()
    return took


async def run_start_side_by_side(path: Path, tmp: Path, floors: int, quick: bool) -> None:
    """Time to the first model request; without ``quick`` also the old run start beside it
    and the first shell call (each writes two files per floor: minutes on a slow disk)."""
    after, after_files, building = await first_request(path, tmp / "data_after", mount_floors=False)
    print(f"time to the first model request, first run ever on the {floors:,}-floor chat:")
    if not quick:
        before, before_files, _ = await first_request(path, tmp / "data_before", mount_floors=True)
        print(
            f"  before (run start also wrote the floor mount): {ms(before):>12}"
            f"  {before_files:,} files"
        )
    print(
        f"  now (chat/floors/ served from memory):         {ms(after):>12}  {after_files:,} files"
        f"  (index {'still being built' if building else 'already built'} then)"
    )
    if not quick:
        shell = await first_shell_call(path, tmp / "data_shell")
        print(
            f"  first workspace_shell call of a new run (syncs the shell's floor copy): {ms(shell)}"
        )


async def main(floors: int, only_start: bool, quick: bool) -> None:
    rng = random.Random(42)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        write_chat(path, floors, rng)
        size = path.stat().st_size
        print(f"chat: {floors:,} floors, {size / 1e6:,.1f} MB")
        await run_start_side_by_side(path, Path(tmp), floors, quick)
        if only_start:
            return
        repo = FileChatRepository(path)
        t0 = time.perf_counter()
        chat = repo.load()
        load = time.perf_counter() - t0
        assembly = Assembly(Path(tmp) / "data")
        profile = assembly.everything(Scene.CHAT)
        snap = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "bench")
        n = 0
        setups: list[float] = []

        runs: list[ChatRun] = []

        def new_run() -> ToolRequestGate:
            # As a run starts: load and freeze the chat, start the index build.
            run_id = f"run_{len(setups)}"
            start = time.perf_counter()
            chat_run, _, root = assembly.chat_run(
                ChatSource(path), Path(tmp) / run_id, run_id=run_id, profile_id=profile.id
            )
            setups.append(time.perf_counter() - start)
            runs.append(chat_run)
            ws = assembly.workspace(root, Scene.CHAT, profile, chat_run)
            return assembly.gate(snap, run_id=run_id, workspace=ws, chat=chat_run)

        floors_found: list[list[int]] = []

        async def call(gate: ToolRequestGate, name: str, args: dict[str, Any]) -> float:
            nonlocal n
            n += 1
            start = time.perf_counter()
            result = await gate.handle(ToolCall(f"c{n}", name, args))
            elapsed = time.perf_counter() - start
            assert not result.result.is_error, result.result.content
            if name == "chat_search":
                floors_found.append([h["floor"] for h in result.result.structured["hits"]])
            return elapsed

        query = {"query": "森林 神殿"}
        english = {"query": " ".join(vocabulary(random.Random(42))[100:103])}
        baseline = read_and_decode(path)
        # First run ever on this chat: load, start the index build on a worker thread,
        # then the first search: a scan of the chat while the index is built.
        gate = new_run()
        scanned = not runs[-1].index_ready()
        cold = await call(gate, "chat_search", query)
        scan_english = await call(gate, "chat_search", english)
        scanned_english = not runs[-1].index_ready()
        runs[-1].settle()  # the index is ready: the index path
        indexed = await call(gate, "chat_search", query)
        index_english = await call(gate, "chat_search", english)
        # Floors both paths returned (of 20 at most) for each query.
        same = [len(set(floors_found[i]) & set(floors_found[i + 2])) for i in (0, 1)]
        t0 = time.perf_counter()
        load_or_build(chat, None)
        rebuilt = time.perf_counter() - t0
        # The saved index is gone: the search scans again.
        for saved in (Path(tmp) / "data").glob("chats/*/mount/search-index.bin"):
            saved.unlink()
        cold_unsaved = await call(new_run(), "chat_search", query)
        runs[-1].settle()
        # A later run on the same chat: load, then the saved index.
        gate = new_run()
        cold_saved = await call(gate, "chat_search", query)
        runs[-1].settle()  # the warm searches below are the index's
        queries = [" ".join(rng.sample(vocabulary(random.Random(42)), 2)) for _ in range(20)]
        queries += ["龙的宝藏", "古老的城堡", "酒馆の夜", "月光", "魔法"] * 2
        warm = [await call(gate, "chat_search", {"query": q}) for q in queries]
        reads = []
        for _ in range(30):
            picks = [{"floor": rng.randrange(floors)} for _ in range(5)]
            reads.append(await call(gate, "chat_read_messages", {"floors": picks}))
        # The chat grew by 1,000 floors since: the saved index is updated, not rebuilt.
        grown = ChatFile(chat.header, list(chat.messages), chat.header_line)
        vocab = vocabulary(random.Random(42))
        more = random.Random(7)  # not `rng`: the lorebook below stays the one of earlier runs
        grown.messages += [
            new_message("Seraphina", floor_text(more, vocab, i)) for i in range(1000)
        ]
        path.write_bytes(grown.encode())
        cold_grown = await call(new_run(), "chat_search", {"query": "森林 神殿"})
        print(f"baseline: read and JSON-decode the {size / 1e6:,.0f} MB file once: {ms(baseline)}")
        print(f"load (parse {size / 1e6:,.0f} MB JSONL):          {ms(load)}")
        print(f"index build alone (the wait if nothing ran beside it): {ms(rebuilt)}")
        print(
            "first chat_search of a run, right after the run started "
            f"(goal <= 3x the baseline = {ms(3 * baseline)}):"
        )
        how = "scan, index not ready" if scanned else "index was already ready"
        for label, took in [
            (f"first run ever on the chat ({how})", cold),
            ("saved index deleted (scan while the index is built)", cold_unsaved),
            ("later run (waits for the saved index)", cold_saved),
            ("saved index updated for 1,000 appended floors", cold_grown),
        ]:
            verdict = "met" if took <= 3 * baseline else "NOT met"
            print(f"  {label + ':':<62}{ms(took):>12}  {took / baseline:.2f}x baseline  {verdict}")
        print(
            "the two paths in the first run, same queries: scan (index not ready) / index (ready)"
        )
        print(
            f"  {query['query']}: {ms(cold)} / {ms(indexed)}, floors in common: {same[0]}"
            f" of {len(floors_found[2])};  {english['query']}: {ms(scan_english)}"
            f"{'' if scanned_english else ' (index ready by then)'} / {ms(index_english)},"
            f" floors in common: {same[1]} of {len(floors_found[3])}"
        )
        print(
            "run start (load, freeze, index build started), runs 1-4: "
            + ", ".join(ms(s) for s in setups)
        )
        median = statistics.median(warm)
        print(
            f"warm chat_search, median of {len(warm)}:        {ms(median)}"
            f"   goal < 50 ms: {'met' if median < 0.05 else 'NOT met'} (max {ms(max(warm))})"
        )
        print(f"chat_read_messages (5 floors), median: {ms(statistics.median(reads))}")

        book = parse_world(lorebook(rng, 5_000), "bench")
        t0 = time.perf_counter()
        activate([book], [ScanMessage(m.name, m.mes) for m in chat.messages[-50:]])
        first = time.perf_counter() - t0
        window = [ScanMessage(m.name, m.mes) for m in chat.messages[-50:]]
        runs = []
        active = 0
        for seed in range(20):
            t0 = time.perf_counter()
            active = len(activate([book], window, rng=random.Random(seed)))
            runs.append(time.perf_counter() - t0)
        print(
            f"activation, 5,000 entries x 50 messages, median of 20: {ms(statistics.median(runs))}"
            f"   goal < 100 ms: {'met' if statistics.median(runs) < 0.1 else 'NOT met'}"
            f" ({active} active; first call, compiling the book: {ms(first)})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--floors", type=int, default=100_000)
    parser.add_argument(
        "--only-start", action="store_true", help="only the run start and first shell call"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="no floor files written (old run start, first shell call): what make bench runs",
    )
    args = parser.parse_args()
    asyncio.run(main(args.floors, args.only_start, args.quick))
