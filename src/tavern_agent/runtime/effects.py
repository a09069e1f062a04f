"""Applying a call's effect: commits, the agent tools' effects, handoff and finish.

A tool returns its effect as a value; the handler registered here for the
effect's type applies it and gives the result the model sees, with what comes
next (a finish or a handoff accepted; ``None``: the turn goes on). The
auto-publish of the message body at a turn's end is here too, since it is a
commit the run makes on its own. Which calls are refused, and when a body is
published, is the policy's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tavern_agent.chat.repository import CommitReceipt
from tavern_agent.core.results import (
    AgentToolEffect,
    AgentToolResult,
    AwaitRequested,
    CommitRequested,
    DelegateRequested,
    Finish,
    HandoffAccepted,
    TaskReturned,
)
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.handoff import Handoffs
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.parts import RunPart, RunParts
from tavern_agent.runtime.policy import (
    AUTO_PUBLISH_REASON,
    candidate_after,
    finish_refusal,
    should_auto_publish,
)
from tavern_agent.runtime.turns import Finished, HandedOff, Next
from tavern_agent.tools.snapshot import ToolBinding
from tavern_agent.workspace.roots import MESSAGE_BODY

# An effect handler: (invocation, call, binding, result, effect, failed calls of the
# turn so far) -> the result the model sees, and what happens next (None: go on).
EffectHandler = Callable[
    [Invocation, RecordedCall, ToolBinding, AgentToolResult, Any, Sequence[str]],
    Awaitable[tuple[AgentToolResult, Next | None]],
]


class Effects(RunPart):
    """Applies the effects of one run's calls, by the effect's type."""

    def __init__(self, parts: RunParts, handoffs: Handoffs) -> None:
        super().__init__(parts)
        self.handoffs = handoffs
        self._handlers: dict[type, EffectHandler] = {
            CommitRequested: self._on_commit,
            DelegateRequested: self._on_agent,
            AwaitRequested: self._on_agent,
            TaskReturned: self._on_agent,
            HandoffAccepted: self._on_handoff,
            Finish: self._on_finish,
        }

    async def apply(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding | None,
        result: AgentToolResult,
        effect: AgentToolEffect,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        """The result the model sees and what comes next; unchanged for an effect
        without a handler (a file written or patched: its tool did the work)."""
        handler = self._handlers.get(type(effect))
        if handler is None:
            return result, None
        assert binding is not None  # effects come only from dispatched tools
        return await handler(inv, rc, binding, result, effect, failed)

    # ------------------------------------------------------------ handlers

    async def _on_commit(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: CommitRequested,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        await self._commit(rc.call_id, effect)
        return result, None

    async def _on_agent(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: DelegateRequested | AwaitRequested | TaskReturned,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        return await self.tasks.apply(inv, rc, binding, effect), None

    async def _on_handoff(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: HandoffAccepted,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        commits = self.state.commits_confirmed
        answer, target = self.handoffs.accept(inv, rc, binding, effect, commits=commits)
        return answer, None if target is None else HandedOff(target)

    async def _on_finish(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: Finish,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        refusal = finish_refusal(
            rc,
            inv.snapshot,
            is_child=inv.is_child,
            foreground=self.run.foreground,
            explicit_commits=self.state.explicit_commits,
            failed_before=failed,
        )
        if refusal is not None:
            return refusal, None
        self.journal.write(
            ev.FinishAccepted(call_id=rc.call_id, invocation_id=inv.id, reason=effect.reason)
        )
        return result, Finished()

    # ------------------------------------------------------------ auto-publish and commits

    def note_candidate(self, result: AgentToolResult, effect: AgentToolEffect) -> None:
        """After a call of the main line: is the message body the auto-commit candidate?"""
        candidate = candidate_after(result, effect, self.state.candidate)
        if self.state.set_candidate(candidate):
            self.journal.write(ev.AutoCommitCandidate(candidate=candidate))

    def publish_if_due(self, number: int) -> None:
        """At the end of the main line's turn ``number``: auto-publish if the policy says so."""
        state = self.state
        if should_auto_publish(
            foreground=self.run.foreground,
            explicit_commits=state.explicit_commits,
            candidate=state.candidate,
            published_round=state.published_round,
            round=number,
        ):
            self._auto_publish(number)

    def _auto_publish(self, number: int) -> None:
        """Publish the message body (the policy decided it is due this round)."""
        self.state.set_candidate(False, published_round=number)
        self.journal.write(ev.AutoCommitCandidate(candidate=False, round=number))
        try:
            if not self.run.workspace.read_bytes(MESSAGE_BODY).strip():
                return  # an emptied body is not a reply
        except FileNotFoundError:  # removed by a later call of the turn
            return
        chat = self.run.chat
        if chat is None:
            return
        call_id = f"auto_round_{number:03d}"
        effect = CommitRequested(MESSAGE_BODY, "replace", AUTO_PUBLISH_REASON)
        index = self._commit_requested(call_id, effect, auto=True)
        receipt = chat.apply_effect(effect, self.run.workspace)
        self._commit_confirmed(call_id, index, receipt, auto=True)

    async def _commit(self, call_id: str, effect: CommitRequested) -> None:
        chat = self.run.chat
        if chat is None:  # the commit tool refuses without a chat; defensive
            return
        index = self._commit_requested(call_id, effect, auto=False)
        receipt = await asyncio.to_thread(chat.apply_effect, effect, self.run.workspace)
        self._commit_confirmed(call_id, index, receipt, auto=False)

    def _commit_requested(self, call_id: str, effect: CommitRequested, *, auto: bool) -> int:
        index = self.state.request_commit()
        requested = ev.CommitRequested(
            call_id=call_id, index=index, path=effect.path, mode=effect.mode, auto=auto
        )
        self.journal.write(requested, sync=True)
        return index

    def _commit_confirmed(
        self, call_id: str, index: int, receipt: CommitReceipt, *, auto: bool
    ) -> None:
        self.state.confirm_commit(index, receipt.floor, auto=auto)
        self.journal.write(
            ev.CommitConfirmed(
                call_id=call_id,
                index=index,
                floor=receipt.floor,
                created=receipt.created,
                chars=receipt.chars,
                auto=auto,
            )
        )
