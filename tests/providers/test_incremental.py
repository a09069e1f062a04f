"""Incremental request encoding gives the bytes a whole encoding gives, at every step
of a growing transcript, after a rewind, and when the snapshot or system text changes."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings

from tavern_agent.core.calls import ToolCall
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.codec import RequestSettings
from tavern_agent.providers.incremental import RequestEncoder
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from tests.providers.conftest import DICE, snapshot_for
from tests.providers.test_properties import transcripts

SNAPSHOTS = {p: snapshot_for(p) for p in ModelProtocol}
EXTRA = {"stream": True}
M = RequestSettings("m")


def whole(protocol: ModelProtocol, transcript: Transcript, **kw: Any) -> bytes:
    """What httpx sends for ``build_request(...)`` plus the extra fields."""
    body = codec_for(protocol).build_request("m", transcript, SNAPSHOTS[protocol], **kw)
    body.update(EXTRA)
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts())
def test_every_prefix_encodes_as_the_whole(transcript: Transcript) -> None:
    for protocol in ModelProtocol:
        encoder = RequestEncoder(codec_for(protocol), EXTRA)
        items = transcript.items
        for n in range(len(items) + 1):
            grown = Transcript(items[:n], transcript.system)
            assert encoder.encode("c", grown, SNAPSHOTS[protocol], M) == whole(protocol, grown)
        # A rewind (a revision) and a new system text start over, still exact.
        for again in (Transcript(items[: len(items) // 2], transcript.system), Transcript(items)):
            assert encoder.encode("c", again, SNAPSHOTS[protocol], M) == whole(protocol, again)


def rounds(n: int, *, reuse_ids: bool = False) -> list[Transcript]:
    """A run's transcripts: each round adds one assistant message with two calls
    and, from the next round on, their results. Some local servers number calls
    from 0 every round (``reuse_ids``): the wire ids must still differ."""
    items: list[Any] = [UserMessage("Roll for the tavern.")]
    out = []
    for r in range(n):
        calls = tuple(
            RecordedCall(ToolCall(f"call_{0 if reuse_ids else r}_{i}", "dice_roll", "{}"))
            for i in range(2)
        )
        items.append(AssistantMessage(f"Round {r}.", calls))
        out.append(Transcript(tuple(items), "Be brief."))  # calls still waiting
        items.extend(
            ToolResultMessage(AgentToolResult(c.call_id, DICE, f"Rolled {r}.")) for c in calls
        )
        out.append(Transcript(tuple(items), "Be brief."))
    return out


def test_a_run_keeps_only_what_is_settled_and_each_request_is_exact() -> None:
    for protocol, reuse_ids in itertools.product(ModelProtocol, (False, True)):
        encoder = RequestEncoder(codec_for(protocol), EXTRA)
        for transcript in rounds(6, reuse_ids=reuse_ids):
            body = encoder.encode("run/inv", transcript, SNAPSHOTS[protocol], M)
            assert body == whole(protocol, transcript)
            kept = encoder._prefixes["run/inv"]
            waiting = isinstance(transcript.items[-1], AssistantMessage)
            # The prefix stops before the message whose calls wait for results.
            assert len(kept.items) == len(transcript.items) - (1 if waiting else 0)


def test_conversations_are_kept_apart_and_the_oldest_is_forgotten() -> None:
    protocol = ModelProtocol.ANTHROPIC
    encoder = RequestEncoder(codec_for(protocol), EXTRA, keep=2)
    runs = rounds(3)
    for name in ("a", "b", "c"):
        assert encoder.encode(name, runs[-1], SNAPSHOTS[protocol], M) == whole(protocol, runs[-1])
    assert list(encoder._prefixes) == ["b", "c"]
    # "a" comes back with a different transcript: encoded whole, still right.
    assert encoder.encode("a", runs[1], SNAPSHOTS[protocol], M) == whole(protocol, runs[1])


def test_a_lone_surrogate_in_arguments_is_sent_as_an_escape() -> None:
    call = RecordedCall(ToolCall("call_1", "dice_roll", '{"formula":"\\ud800"}'))
    transcript = Transcript(
        (
            UserMessage("go"),
            AssistantMessage("", (call,)),
            ToolResultMessage(AgentToolResult("call_1", DICE, "bad formula", is_error=True)),
        )
    )
    for protocol in ModelProtocol:
        body = RequestEncoder(codec_for(protocol), EXTRA).encode(
            "c", transcript, SNAPSHOTS[protocol], M
        )
        assert b"\\ud800" in body
        assert body == whole(protocol, transcript)
