"""Request bodies for a growing transcript, encoded only where it grew.

A run sends its whole history with every request, and the history only grows:
each round adds the model's message and one result per call. Encoding it
whole each time (repair, replaying every call's arguments, JSON) costs time
in proportion to the run's length. :class:`RequestEncoder` keeps, per
conversation, what it made of the *settled* prefix (the part after which no
call waits for a result, see :func:`~tavern_agent.providers.repair.repair`):
the JSON text of each message, the call-id map at that point and the last
message (Anthropic joins a following message of the same role into it). The
next request repairs and encodes only the items after that prefix and splices
the kept text into the body.

The bytes are exactly what ``httpx`` would send for
``codec.build_request(...)`` plus the endpoint's extra fields: same keys, same
order, same compact JSON. Anything that does not continue the kept prefix (a
revision, another snapshot, a different system text) is encoded whole and
starts a new prefix.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tavern_agent.providers.codec import Codec, RequestSettings, check_protocol
from tavern_agent.providers.ids import CallIdMap
from tavern_agent.providers.repair import repair
from tavern_agent.providers.transcript import Transcript, TranscriptItem
from tavern_agent.tools.snapshot import ToolSnapshot

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


@dataclass(slots=True)
class _Prefix:
    """What one conversation's settled prefix encodes to."""

    items: tuple[TranscriptItem, ...]
    system: str | None
    snapshot: ToolSnapshot
    texts: list[str]  # JSON text of each message
    ids: CallIdMap
    first: dict[str, Any] | None
    last: dict[str, Any] | None
    frame: tuple[RequestSettings, str] | None = None  # (settings, body text around the history)


class RequestEncoder:
    """Encodes request bodies for one codec, remembering up to ``keep`` conversations.

    ``extra`` holds body fields the endpoint adds (``stream`` and the like);
    they go last, as ``body.update(extra)`` would put them.
    """

    def __init__(self, codec: Codec, extra: Mapping[str, Any] | None = None, keep: int = 64):
        self.codec = codec
        self.extra = dict(extra or {})
        self.keep = keep
        self._prefixes: OrderedDict[str, _Prefix] = OrderedDict()
        # A random marker where the history list goes in the body text; only
        # the frame (head, system, tools) is searched for it.
        self._marker = f"\x00history-{uuid.uuid4().hex}\x00"
        self._marker_json = _dumps(self._marker)

    def encode(
        self,
        conversation: str,
        transcript: Transcript,
        snapshot: ToolSnapshot,
        settings: RequestSettings,
    ) -> bytes:
        """The request body for ``transcript``, as UTF-8 JSON."""
        check_protocol(snapshot, self.codec.protocol)
        prefix = self._settle(conversation, transcript, snapshot)
        rest = transcript.items[len(prefix.items) :]
        texts = prefix.texts
        first = prefix.first
        if rest:  # calls still waiting for results: encode them, but keep nothing
            texts, first = self._extend(prefix, rest, snapshot)[:2]
        top, leading = self.codec.history_frame(transcript.system, first)
        history = ",".join([*map(_dumps, leading), *texts])
        # The system text and snapshot are the prefix's own (a change starts a new
        # prefix), so only the request's own settings can change the frame.
        if prefix.frame is None or prefix.frame[0] != settings:
            body = self.codec.request_body(settings, self._marker, top, snapshot)
            body.update(self.extra)
            prefix.frame = (settings, _dumps(body))
        text = prefix.frame[1].replace(self._marker_json, f"[{history}]", 1)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (a model can send "\\ud800" in its arguments) has no
            # UTF-8 form; JSON spells it as an escape, which ASCII output does.
            return json.dumps(json.loads(text), separators=(",", ":")).encode("ascii")

    def _settle(self, conversation: str, transcript: Transcript, snapshot: ToolSnapshot) -> _Prefix:
        """The conversation's settled prefix, grown over ``transcript`` as far as it is settled."""
        prefix = self._prefixes.pop(conversation, None)
        items = transcript.items
        if (
            prefix is None
            or prefix.snapshot is not snapshot
            or prefix.system != transcript.system
            or items[: len(prefix.items)] != prefix.items
        ):
            ids = CallIdMap(self.codec.protocol)
            prefix = _Prefix((), transcript.system, snapshot, [], ids, None, None)
        rest = items[len(prefix.items) :]
        if rest:
            texts, first, last, ids, settled = self._extend(prefix, rest, snapshot, settle=True)
            if settled:
                frame = prefix.frame
                prefix = _Prefix(
                    items[: len(prefix.items) + settled],
                    transcript.system,
                    snapshot,
                    texts,
                    ids,
                    first,
                    last,
                    frame,
                )
        self._prefixes[conversation] = prefix
        while len(self._prefixes) > self.keep:
            self._prefixes.popitem(last=False)
        return prefix

    def _extend(
        self,
        prefix: _Prefix,
        rest: tuple[TranscriptItem, ...],
        snapshot: ToolSnapshot,
        *,
        settle: bool = False,
    ) -> tuple[list[str], dict[str, Any] | None, dict[str, Any] | None, CallIdMap, int]:
        """Texts, first and last message, id map and settled item count after encoding
        ``rest`` (only its settled part when ``settle``) onto ``prefix``; ``prefix``
        itself is left as it was."""
        repaired = repair(Transcript(rest, prefix.system))
        entries = repaired.entries[: repaired.settled_entries] if settle else repaired.entries
        ids = prefix.ids.copy()
        out = [prefix.last] if prefix.last is not None else []
        self.codec.encode_entries(entries, snapshot, ids, out)
        texts = prefix.texts
        if prefix.last is not None:
            replaced = out[0] is not prefix.last  # a merge replaced the last message
            new = out[1:]
            texts = [*texts[:-1], _dumps(out[0])] if replaced else texts[:]
        else:
            new = out
            texts = []
        texts.extend(map(_dumps, new))
        first = prefix.first if prefix.first is not None else (out[0] if out else None)
        last = out[-1] if out else None
        return texts, first, last, ids, repaired.settled_items
