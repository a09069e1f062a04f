"""What happens after a step of the run loop, as a value.

A step (one model request, or one turn's calls) returns a :data:`Next`; the
loop in :mod:`tavern_agent.runtime.loop` acts on it. Nothing else carries a
turn's outcome: there are no ``finished`` or ``pending handoff`` flags to keep
in step, and a resumed run starts from the :data:`Next` that its journal's
fold ends on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tavern_agent.core.errors import ErrorCode

if TYPE_CHECKING:
    from tavern_agent.runtime.invocation import Invocation


@dataclass(frozen=True, slots=True)
class NextRound:
    """Ask the model again (after a turn's calls, a reminder, or injected task results)."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The run is done: a finishing call was accepted, or a session answered in text."""

    final_text: str | None = None


@dataclass(frozen=True, slots=True)
class HandedOff:
    """The current agent's part ended; ``target`` (a new invocation) goes on."""

    target: Invocation


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run cannot go on; it ends failed, or partly successful if it committed."""

    code: ErrorCode
    message: str


Next = NextRound | Finished | HandedOff | Stopped


@dataclass(frozen=True, slots=True)
class Awaiting:
    """A durable engine's step ended at an ``agent.await`` call that waits for tasks.

    Not a :data:`Next` of the local loop (there the call blocks): the engine's
    host waits until the tasks ended (``mode``: all of them, or the next one) or
    ``timeout_ms`` passed, then takes the next step, which answers the call.
    """

    call_id: str
    task_ids: tuple[str, ...]
    mode: str
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class NextCall:
    """The open turn has calls without a result; ``call_id`` runs next.

    Only a step of one call at a time returns it (``Engine.step_once(one_call=True)``,
    a durable engine's activity per tool call): the next step runs that call, not a
    model request. The loop's policy never sees it.
    """

    call_id: str
