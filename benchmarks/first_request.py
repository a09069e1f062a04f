"""Tokens of ``default-writer``'s first request on the example chat, counted with o200k_base.

The run is made as ``make run`` makes it (``examples/chat.jsonl`` with its card
and world info, seed 7), but with the built-in ``default-writer`` profile; the
first request is the ``openai_chat`` body as the HTTP gateway sends it (compact
JSON: model, length cap, system and user messages, tools, stream fields) and
is counted whole with ``bpe-openai``'s o200k_base. Chat Completions wraps each
message in a few tokens of its own, so a server's count differs by a handful.
The goal: the request leaves at least 256 tokens to answer in a 2,048-token
window. Run: ``python benchmarks/first_request.py`` (``--json`` prints the body).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import bpe_openai

from tavern_agent.assembly import Assembly
from tavern_agent.chat.cards import parse_card
from tavern_agent.chat.world_books import parse_world
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.providers.incremental import RequestEncoder
from tavern_agent.providers.registry import codec_for
from tavern_agent.runtime.run import Run, RunSpec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
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
                inv.id, "model", inv.transcript, inv.snapshot, max_tokens=max_tokens
            )
        finally:
            if run.chat is not None:
                run.chat.settle()


def first_request_tokens(profile: Profile | None = None) -> int:
    """o200k_base tokens of :func:`first_request` (what a context benchmark reports)."""
    body = first_request(profile).decode("utf-8")
    return len(bpe_openai.get_encoding(ENCODING).encode_ordinary(body))


def main(argv: list[str] | None = None) -> None:
    """Print the count, its parts and the verdict against the 2,048-token window."""
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

    total = tokens(body.decode("utf-8"))
    print(f"First request of {PROFILE} on the example chat ({ENCODING}, compact openai_chat JSON)")
    for message in data["messages"]:
        print(f"  {message['role'] + ' message':<24} {tokens(message['content']):>6,}")
    print(f"  {'tools (' + str(len(data['tools'])) + ')':<24} {tokens(data['tools']):>6,}")
    print(f"  {'whole body':<24} {total:>6,}")
    room = WINDOW - total
    verdict = "fits" if room >= ANSWER_ROOM else "does NOT fit"
    print(f"  {WINDOW:,}-token window: {room:,} left to answer; {verdict} (goal ≥ {ANSWER_ROOM})")
    if args.json:
        print(body.decode("utf-8"))


if __name__ == "__main__":
    main()
