"""The chat's search index kept beside its shared mount, so later runs load it.

Building the BM25 index of a large chat costs seconds; loading a saved one
costs a fraction of that. The index lives in the chat workspace's mount
folder (``<data-root>/chats/<id>/mount/search-index.bin``, one per stable
chat id) and records the SHA-1 of every floor's line it was built from, the
same per-floor digests as the mount's ``state.json``. When a run opens it:

* floors whose digests still match, from the first floor on, are kept;
* the floors after the first difference (appended, edited, swiped or
  deleted ones) are indexed again (:meth:`ChatIndex.updated`), which gives
  the same index as a build from scratch;
* the file is rewritten when anything changed.

The file is derived data: it is written to a temporary file and renamed into
place, and anything unexpected in it (another version, another byte order,
a checksum mismatch) only means it is rebuilt. Failing to save it is not an
error either.

Layout: a magic line, one JSON header line (version, byte order, item sizes,
block names and sizes, SHA-256 of the blocks), then the blocks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path

from tavern_agent.chat.formats import ChatFile, ChatMessage, collection_paused, parse_chat
from tavern_agent.chat.progress import BuildProgress
from tavern_agent.chat.search import ChatIndex, Doc
from tavern_agent.fsutil import atomic_write

FILE = "search-index.bin"
MAGIC = b"tavern-agent chat search index\n"
VERSION = 1
DIGEST = 20  # bytes of a SHA-1
_STEP = 4096  # floors hashed between two checkpoints of a build: a few ms


def floor_digests(chat: ChatFile, progress: BuildProgress | None = None) -> list[bytes]:
    """SHA-1 of each floor's line (as in the mount's ``state.json``).

    With ``progress``, a build's: it passes a checkpoint every :data:`_STEP` floors.
    """
    messages = chat.messages
    digests: list[bytes] = []
    for start in range(0, len(messages), _STEP):
        digests += [hashlib.sha1(m.encoded()).digest() for m in messages[start : start + _STEP]]
        if progress is not None:
            progress.checkpoint()
    return digests


def docs(messages: Sequence[ChatMessage]) -> list[Doc]:
    """The search index's documents for ``messages``: each message's text, role and hidden flag."""
    return [Doc(m.mes, m.role, m.hidden) for m in messages]


def _header() -> dict[str, object]:
    return {
        "version": VERSION,
        "byteorder": sys.byteorder,
        "itemsize": [array("I").itemsize, array("Q").itemsize],
    }


def save(path: Path, index: ChatIndex, digests: Sequence[bytes]) -> None:
    """Write the index and the digests of the floors it holds, atomically."""
    blocks = index.to_blocks()
    blocks["digests"] = b"".join(digests)
    payload = b"".join(blocks.values())
    header = _header() | {
        "blocks": [[name, len(data)] for name, data in blocks.items()],
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = MAGIC + json.dumps(header).encode("utf-8") + b"\n"
    # An index can always be rebuilt from the chat: no fsync.
    atomic_write(path, head + payload, durable=False)


def load(path: Path) -> tuple[ChatIndex, list[bytes]] | None:
    """The saved index and its floor digests; ``None`` if missing or not usable."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(MAGIC):
        return None
    try:
        end = data.index(b"\n", len(MAGIC))
        header = json.loads(data[len(MAGIC) : end])
        if not isinstance(header, dict) or any(header.get(k) != v for k, v in _header().items()):
            return None
        payload = memoryview(data)[end + 1 :]
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            return None
        blocks: dict[str, bytes] = {}
        at = 0
        for name, size in header["blocks"]:
            blocks[str(name)] = bytes(payload[at : at + int(size)])
            at += int(size)
        if at != len(payload):
            return None
        raw = blocks.pop("digests")
        digests = [raw[i : i + DIGEST] for i in range(0, len(raw), DIGEST)]
        index = ChatIndex.from_blocks(blocks)
    except (ValueError, KeyError, TypeError):
        return None
    if len(digests) != len(index) or len(raw) != DIGEST * len(index):
        return None
    return index, digests


def _build(messages: Sequence[ChatMessage], progress: BuildProgress) -> ChatIndex:
    progress.step = "indexing the chat"
    progress.total = len(messages)
    with collection_paused():
        return ChatIndex(docs(messages), progress)


def _common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


Saved = tuple[ChatIndex, list[bytes]]
Prepared = tuple[list[bytes], Saved | None]  # what read_chat found besides the chat


def read_chat(path: Path, folder: Path) -> tuple[ChatFile, list[bytes], Saved | None]:
    """The chat file, its floor digests and the saved index.

    Lines whose digest the saved index holds were parsed when it was built, so
    they are left to be parsed when a tool uses them: with a saved index, a run
    parses only the floors it reads and the lines that changed.
    """
    saved = load(folder / FILE)
    seen = frozenset(saved[1]) if saved is not None else frozenset()
    hashed: dict[int, tuple[bytes, bytes]] = {}  # id(line) → (line, digest)

    def known(line: bytes) -> bool:
        digest = hashlib.sha1(line).digest()
        hashed[id(line)] = (line, digest)
        return digest in seen

    data = path.read_bytes()
    with collection_paused():
        chat = parse_chat(data, known=known)
    digests = []
    for message in chat.messages:
        found = hashed.get(id(message.line))
        if found is not None and found[0] is message.line:
            digests.append(found[1])
        else:  # a line ``known`` was not asked about (the first one of a headerless chat)
            digests.append(hashlib.sha1(message.encoded()).digest())
    return chat, digests, saved


def load_or_build(
    chat: ChatFile,
    folder: Path | None,
    *,
    prepared: Prepared | None = None,
    progress: BuildProgress | None = None,
) -> ChatIndex:
    """The search index of ``chat``, through the copy saved in ``folder`` when there is one.

    ``prepared`` is what :func:`read_chat` gave besides the chat, when it read it;
    ``progress`` counts the floors indexed.
    """
    progress = progress or BuildProgress()
    if folder is None:
        return _build(chat.messages, progress)
    path = folder / FILE
    if prepared is None:
        progress.step = "loading the saved index"
        prepared = (floor_digests(chat, progress), load(path))
    digests, saved = prepared
    if saved is not None:
        index, old = saved
        keep = _common_prefix(old, digests)
        if keep == len(old) == len(digests):
            return index
        progress.step = "updating the index"
        progress.total = len(digests) - keep
        with collection_paused():
            index = index.updated(keep, docs(chat.messages[keep:]), progress)
    else:
        index = _build(chat.messages, progress)
    with contextlib.suppress(OSError, ValueError):
        folder.mkdir(parents=True, exist_ok=True)
        save(path, index, digests)
    return index
