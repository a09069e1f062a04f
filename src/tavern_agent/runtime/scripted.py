"""A scripted model: the test double for :class:`~tavern_agent.providers.gateway.ModelGateway`.

A model cannot run on the machines this project is tested on, so tests,
benchmarks and the kill harness drive runs with a list of turns: turn N
answers the run's request N (so a resumed process gets the same answers).
Each turn is an assistant text and tool calls given as ``(name, arguments)``;
arguments may be a dict (sent as JSON text) or a raw string (sent as is).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tavern_agent.core.calls import ToolCall
from tavern_agent.providers.gateway import ModelError, ModelReply, ModelRequest
from tavern_agent.providers.transcript import (
    AssistantMessage,
    DecodedResponse,
    FinishReason,
    RecordedCall,
)

CallSpec = tuple[str, Mapping[str, Any] | str]


@dataclass(frozen=True)
class Turn:
    """One scripted model answer: an assistant text and tool calls given as
    ``(name, arguments)``; ``truncated`` ends it as cut off at the output limit."""

    text: str = ""
    calls: tuple[CallSpec, ...] = ()
    truncated: bool = False

    def message(self, round: int) -> AssistantMessage:
        """The assistant message this turn makes in ``round`` (call ids ``call_r<round>_<i>``)."""
        recorded = tuple(
            RecordedCall(
                ToolCall(
                    f"call_r{round}_{i}",
                    name,
                    args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                )
            )
            for i, (name, args) in enumerate(self.calls)
        )
        if self.truncated:
            finish = FinishReason.LENGTH
        else:
            finish = FinishReason.TOOL_CALLS if recorded else FinishReason.STOP
        return AssistantMessage(self.text, recorded, finish)

    def to_json(self) -> dict[str, Any]:
        """The turn's JSON form, as a script file holds it."""
        return {"text": self.text, "calls": [[n, a] for n, a in self.calls]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Turn:
        """A turn from its JSON form."""
        return cls(data.get("text", ""), tuple((n, a) for n, a in data.get("calls", ())))


def call(name: str, args: Mapping[str, Any] | str | None = None) -> Turn:
    """A turn with one call."""
    return Turn(calls=((name, {} if args is None else args),))


def calls(*specs: CallSpec, text: str = "") -> Turn:
    """A turn with several calls (and optional text)."""
    return Turn(text, tuple(specs))


def say(text: str) -> Turn:
    """A turn with text only."""
    return Turn(text)


Script = Sequence[Turn | Callable[[ModelRequest], Turn]]


@dataclass
class ScriptedGateway:
    """Answers request N with ``turns[N-1]`` (a :class:`Turn` or a function of the request)."""

    turns: Script
    delay: float = 0.0  # seconds per answer, as a model's latency
    requests: list[ModelRequest] = field(default_factory=list)

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The script's turn for the request's round;
        raises ``ModelError`` past the script's end."""
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if request.round > len(self.turns):
            raise ModelError(f"the script has no turn {request.round}")
        entry = self.turns[request.round - 1]
        turn = entry if isinstance(entry, Turn) else entry(request)
        message = turn.message(request.round)
        return ModelReply(DecodedResponse(message, message.finish.value), {"scripted": True})

    async def aclose(self) -> None:
        """Nothing to free."""
        return None

    @classmethod
    def load(cls, path: Path, delay: float = 0.0) -> ScriptedGateway:
        """A gateway from a script file ``{"turns": [...]}``."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls([Turn.from_json(t) for t in data["turns"]], delay)


AgentScript = Sequence[Turn | Callable[[ModelRequest], Turn | Awaitable[Turn]]]


@dataclass
class ScriptedAgents:
    """Several agents, each answered from its own script (keyed by profile id).

    Each invocation counts its own requests: the Nth request of an invocation
    gets ``scripts[agent][N-1]``, so every child of one agent runs the same
    script. A turn may be a function of the request, also an ``async`` one
    (which may wait, as a slow model does). Call ids are unique in the run.
    """

    scripts: Mapping[str, AgentScript]
    requests: list[ModelRequest] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The next turn of the requesting agent's script;
        raises ``ModelError`` when it has none."""
        self.requests.append(request)
        count = self._counts.get(request.invocation_id, 0) + 1
        self._counts[request.invocation_id] = count
        script = self.scripts.get(request.snapshot.profile_id)
        if script is None or count > len(script):
            raise ModelError(f"no turn {count} for agent {request.snapshot.profile_id}")
        entry = script[count - 1]
        made = entry if isinstance(entry, Turn) else entry(request)
        turn = await made if inspect.isawaitable(made) else made
        message = turn.message(len(self.requests))
        return ModelReply(DecodedResponse(message, message.finish.value), {"scripted": True})

    async def aclose(self) -> None:
        """Nothing to free."""
        return None
