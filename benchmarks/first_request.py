"""Tokens of ``default-writer``'s first request on the example chat: o200k_base and SmolLM2.

The run is made as ``make run`` makes it (``examples/chat.jsonl`` with its card
and world info, seed 7), but with the built-in ``default-writer`` profile; the
first request is the ``openai_chat`` body as the HTTP gateway sends it (compact
JSON: model, length cap, system and user messages, tools, stream fields) and
is counted whole with ``bpe-openai``'s o200k_base. Chat Completions wraps each
message in a few tokens of its own, so a server's count differs by a handful.

It is counted again as ``make try-local``'s model counts it: SmolLM2-135M's own
tokenizer (from its GGUF) after llama.cpp's server has rendered the request
through the chat template ``make try-local`` serves it with (tools included),
asked of that server (``POST /apply-template``, ``POST /tokenize``) when
``make try-local`` has built it; without it the script says so.
The goal: the request leaves at least 256 tokens to answer in a 2,048-token
window (≤ 1,792). Run: ``python benchmarks/first_request.py`` (``--json``
prints the body).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

import bpe_openai
import httpx

from tavern_agent.assembly import Assembly
from tavern_agent.chat.cards import parse_card
from tavern_agent.chat.world_books import parse_world
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.providers.codec import RequestSettings
from tavern_agent.providers.incremental import RequestEncoder
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.window import server_count
from tavern_agent.runtime.run import Run, RunSpec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the llama-server launcher `make try-local` and the tests use
from tests.peers.llama_server import LlamaServer, missing  # noqa: E402

EXAMPLES = ROOT / "examples"
ENCODING = "o200k_base"
PROFILE = "default-writer"
WINDOW = 2_048
ANSWER_ROOM = 256
STREAM_FIELDS = {"stream": True, "stream_options": {"include_usage": True}}


def first_request(profile: Profile | None = None, max_tokens: int = ANSWER_ROOM) -> bytes:
    """The first ``openai_chat`` request body of ``profile`` (default-writer) on the example."""
    with tempfile.TemporaryDirectory() as tmp:
        chat = Path(tmp) / "chat.jsonl"
        shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
        spec = RunSpec(
            profile or Profile.builtin(PROFILE),
            chat_file=chat,
            books=(parse_world((EXAMPLES / "eldoria-world.json").read_bytes(), "eldoria-world"),),
            card=parse_card((EXAMPLES / "seraphina-card.json").read_bytes()),
            seed=7,
        )
        run = Run.start(Assembly(Path(tmp) / "data"), spec)
        try:
            inv = run.invocations[0]
            encoder = RequestEncoder(codec_for(ModelProtocol.OPENAI_CHAT), STREAM_FIELDS)
            return encoder.encode(
                inv.id, inv.transcript, inv.snapshot, RequestSettings("model", max_tokens)
            )
        finally:
            if run.chat is not None:
                run.chat.settle()


def first_request_tokens(profile: Profile | None = None) -> int:
    """o200k_base tokens of :func:`first_request` (what a context benchmark reports)."""
    body = first_request(profile).decode("utf-8")
    return len(bpe_openai.get_encoding(ENCODING).encode_ordinary(body))


def smollm2_counts(body: bytes) -> dict[str, int] | str:
    """SmolLM2's tokens of the request's parts and of the whole rendered prompt, from the
    llama-server ``make try-local`` built; why not, as one line, when it is not built."""
    reason = missing()
    if reason is not None:
        return reason
    data = json.loads(body)
    parts = {f"{m['role']} message": m["content"] for m in data["messages"]}
    parts[f"tools ({len(data['tools'])})"] = json.dumps(data["tools"], ensure_ascii=False)
    with tempfile.TemporaryDirectory() as tmp, LlamaServer(Path(tmp) / "llama-server.log") as srv:

        async def count() -> dict[str, int]:
            root = srv.base_url.removesuffix("/v1")
            async with httpx.AsyncClient() as client:
                counts: dict[str, int] = {}
                for name, text in parts.items():
                    answer = await client.post(f"{root}/tokenize", json={"content": text})
                    counts[name] = len(answer.json()["tokens"])
                whole = await server_count(client, srv.base_url, body)
                if whole is None:
                    raise RuntimeError("llama-server did not count the request")
                counts["whole prompt"] = whole
                return counts

        return asyncio.run(count())


def main(argv: list[str] | None = None) -> None:
    """Print the counts, their parts and the verdict against the 2,048-token window."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the request body too")
    args = parser.parse_args(argv)
    encoding = bpe_openai.get_encoding(ENCODING)
    body = first_request()
    data = json.loads(body)

    def tokens(value: object) -> int:
        text = (
            value
            if isinstance(value, str)
            else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        )
        return len(encoding.encode_ordinary(text))

    o200k = {f"{m['role']} message": tokens(m["content"]) for m in data["messages"]}
    o200k[f"tools ({len(data['tools'])})"] = tokens(data["tools"])
    o200k["whole body"] = tokens(body.decode("utf-8"))
    smol = smollm2_counts(body)
    theirs = list(smol.values()) if isinstance(smol, dict) else [None] * len(o200k)
    print(f"First request of {PROFILE} on the example chat (compact openai_chat JSON)")
    print(f"  {'':<24} {ENCODING:>11} {'SmolLM2-135M':>13}")
    for (name, count), other in zip(o200k.items(), theirs, strict=True):
        print(f"  {name:<24} {count:>11,} {'—' if other is None else f'{other:,}':>13}")
    if isinstance(smol, str):
        print(f"  SmolLM2: not counted: {smol}")
    else:
        print("  (SmolLM2's whole: the request rendered by llama.cpp's chat template, tools in it)")
    for name, total in ((ENCODING, o200k["whole body"]), ("SmolLM2", theirs[-1])):
        if total is None:
            continue
        room = WINDOW - total
        verdict = "fits" if room >= ANSWER_ROOM else "does NOT fit"
        print(
            f"  {name}: {total:,} tokens; in a {WINDOW:,}-token window {room:,} left to answer, "
            f"{verdict} (goal ≤ {WINDOW - ANSWER_ROOM:,})"
        )
    if args.json:
        print(body.decode("utf-8"))


if __name__ == "__main__":
    main()
