"""One model request of an invocation: asked once, stored before it is used.

The main line's responses are ``model-responses/round-NNN.json``, a delegated
child's are under ``model-responses/<inv>/``. A response stored before an
interruption is read back instead of asked again; the journal's
``model_response_stored`` carries the assistant message itself, which is what
a resumed run folds.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from tavern_agent import run_layout
from tavern_agent.fsutil import AlreadyWritten, write_once
from tavern_agent.providers.gateway import (
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
    reply_from_json,
    reply_to_json,
)
from tavern_agent.providers.transcript import Transcript
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.state import RunState


def write_audit(path: Path, data: bytes) -> None:
    """Create an audit file once, atomically (temp file + link), without an fsync.

    The journal, which is fsync'd, carries what resume needs inline (each
    assistant message and each result), so an audit file lost to a power
    failure loses no run state; a killed process loses nothing at all.
    """
    write_once(path, data, durable=False)


class ModelRequests:
    """Asks one run's model for the next turn of an invocation."""

    def __init__(self, run: Run, gateway: ModelGateway, journal: Journal, state: RunState) -> None:
        self.run = run
        self.gateway = gateway
        self.journal = journal
        self.state = state
        journal.listeners.append(state.context.listen)

    async def request(self, inv: Invocation) -> None:
        """Add the model's next turn to ``inv`` (asked, or read back if it was stored)."""
        run = self.run
        child: int | None = None
        if inv.is_child:  # children count their own rounds and store their own responses
            number = inv.round + 1
            child = [i.id for i in run.invocations if i.is_child].index(inv.id)
            path = run.run_dir / run_layout.model_response(number, inv.id)
        else:
            number = self.state.rounds + 1
            path = run.run_dir / run_layout.model_response(number)
        if path.exists():  # stored before an interruption: never ask twice
            reply = reply_from_json(json.loads(path.read_text(encoding="utf-8")))
        else:
            reply = await self._ask(inv, number, child, path)
        message = reply.response.message
        if not inv.is_child:
            self.state.round_stored(number)
        self.journal.write(
            ev.ModelResponseStored(
                round=number,
                invocation_id=inv.id,
                ref=path.relative_to(run.run_dir).as_posix(),
                message=Transcript((message,)).to_json()["items"][0],
                finish=message.finish.value,
                calls=len(message.calls),
                usage=dict(reply.response.usage),
            )
        )
        inv.add_turn(message)

    async def _ask(self, inv: Invocation, number: int, child: int | None, path: Path) -> ModelReply:
        """Ask the gateway, and store the reply and its raw form for the audit.

        With a known window the request is kept within it (:mod:`~.context`); a
        provider that refuses it as too long gets one more, compacted more strongly.
        """
        context = self.state.context
        window = await context.resolve(self.gateway, inv.profile or self.run.profile, self.journal)
        if window is not None:  # the server's own count, where it gives one, before any usage
            whole = ModelRequest(
                self.run.id, inv.id, number, inv.transcript, inv.snapshot, child, window.max_tokens
            )
            await context.count(self.gateway, inv, whole, self.journal)
        started = time.monotonic()
        for retry in (False, True):
            request = self._request(inv, number, child)
            try:
                reply = await self.gateway.respond(request)
                break
            except ModelError as exc:
                if retry or window is None or not exc.overflow:
                    raise
                context.force(inv.id, "overflow")
        reply = ModelReply(reply.response, reply.raw, reply.attempts)
        record = reply_to_json(request, reply) | {
            "elapsedMs": round((time.monotonic() - started) * 1000, 1)
        }
        with contextlib.suppress(AlreadyWritten):
            write_audit(path, json.dumps(record, ensure_ascii=False).encode("utf-8"))
        return reply

    def _request(self, inv: Invocation, number: int, child: int | None) -> ModelRequest:
        """The request for ``inv``'s next turn (within the window, if one is known), journaled."""
        context = self.state.context
        transcript, tokens, max_tokens = inv.transcript, None, None
        if context.window is not None:
            transcript, tokens = context.request_view(inv, number, self.run.workspace, self.journal)
            max_tokens = context.window.max_tokens
        self.journal.write(
            ev.ModelRequest(
                round=number,
                invocation_id=inv.id,
                snapshot_id=inv.snapshot.id,
                items=len(transcript.items),
                prompt_tokens=tokens,
            )
        )
        return ModelRequest(
            self.run.id, inv.id, number, transcript, inv.snapshot, child, max_tokens
        )
