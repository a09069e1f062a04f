"""Running a turn's calls: each through the gate, its effect applied, its result stored.

The calls of one turn run in order, each seeing the effects of those before.
A call is journaled as requested (its raw arguments inline, or in
``tool-args/`` when large), then started, which is a barrier before a call
whose effect must not be repeated blindly; the gate runs it, its effect is
applied (:mod:`tavern_agent.runtime.effects`), and its result is stored in the
journal and fed back. A call that a finishing call must follow, or a second
handoff, is refused without running (the policy's rules). At the turn's end
the main line may auto-publish, the budget rule may stop the run, and the
journal is synced once. A child running as a task of this process shares its
barriers with the rest of the family: its turn's end is made durable by the
family's next barrier, and its calls that must not be repeated wait for a sync
shared with the children asking at the same moment (the journal's group commit).

A call journaled as started that has no result (the process was killed) is
never run again: it gets the "outcome unknown" result, or the commit result
that the chat file confirmed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tavern_agent import run_layout
from tavern_agent.core.arguments import MISSING
from tavern_agent.core.results import (
    AgentToolResult,
    CommitRequested,
    FilePatched,
    FileWritten,
)
from tavern_agent.core.tool_ids import HANDOFF
from tavern_agent.fsutil import AlreadyWritten
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    outcome_unknown_result,
    truncated_result,
)
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.effects import Effects
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.parts import RunPart, RunParts
from tavern_agent.runtime.policy import (
    HINT_AT,
    after_finish_result,
    budget_stop,
    cancelled_result,
    confirmed_commit_result,
    failure_streaks,
    repeat_hint,
    repeats,
    second_handoff_result,
    stuck_stop,
)
from tavern_agent.runtime.requests import write_audit
from tavern_agent.runtime.turns import Next, NextCall, NextRound, Stopped

# Raw arguments up to this size are journaled inline; larger ones get a file.
INLINE_ARGUMENTS_CHARS = 4_096


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _failed_names(inv: Invocation, turn: AssistantMessage) -> list[str]:
    """Names of the calls of ``turn`` whose stored result is an error."""
    names = {rc.call_id: str(rc.name) for rc in turn.calls}
    failed: list[str] = []
    for item in reversed(inv.transcript.items):
        if item is turn:
            break
        if isinstance(item, ToolResultMessage) and item.result.is_error:
            failed.append(names.get(item.result.call_id, "?"))
    return failed[::-1]


def _calls_with_results(inv: Invocation) -> Iterator[tuple[RecordedCall, AgentToolResult]]:
    """The invocation's calls that have a result, with it, in order."""
    calls: dict[str, RecordedCall] = {}
    for item in inv.transcript.items:
        if isinstance(item, AssistantMessage):
            calls.update((rc.call_id, rc) for rc in item.calls)
        elif isinstance(item, ToolResultMessage):
            call = calls.get(item.result.call_id)
            if call is not None:
                yield call, item.result


def _raw_json(raw: Any) -> Any:
    if raw is MISSING:
        return {"missing": True}
    if isinstance(raw, bytes):
        return {"bytes": raw.decode("utf-8", "replace")}
    return {"raw": raw}


class CallRunner(RunPart):
    """Runs the calls of one run's turns (the main line's and its tasks')."""

    def __init__(self, parts: RunParts, effects: Effects, *, durable_call_end: bool = True) -> None:
        super().__init__(parts)
        self.effects = effects
        self._repeatable = parts.run.tools.repeatable
        # Whether a step of one call that leaves calls of its turn open makes itself
        # durable (see Engine's ``durable_steps``).
        self._durable_call_end = durable_call_end

    async def run_turn(
        self,
        inv: Invocation,
        message: AssistantMessage,
        number: int | None = None,
        *,
        only: str | None = None,
        after: Next | None = None,
    ) -> Next | NextCall:
        """Run a turn's calls in order (those without a result yet); say what comes next.

        ``only`` runs that call alone: the calls stop at the first one without
        a result that is another, which is returned as the :class:`NextCall`;
        the turn's end runs once no call is left. ``after`` is a finish or a
        handoff accepted by an earlier call of the turn (in an earlier step).
        """
        number = self.state.rounds if number is None else number
        calls = message.calls
        if message.finish.truncated:
            for rc in calls:
                if rc.call_id not in inv.resulted:
                    full = self.state.context.full_result(inv.id, rc)
                    self.store(inv, rc, full or truncated_result(rc), number, 0.0)
            return self._turn_end(inv, number, NextRound())
        last_index = len(calls) - 1
        # Calls of this turn that failed, by name (results stored before an interruption too).
        failed = _failed_names(inv, message) if inv.resulted else []
        # One handoff per turn: a second is refused without disturbing the first,
        # which counts as the turn's last call when only handoffs follow it.
        handoff = inv.snapshot.name_of(HANDOFF)
        handoffs_seen = 0
        step: Next = NextRound() if after is None else after
        for index, rc in enumerate(calls):
            is_handoff = handoff is not None and rc.name == handoff
            handoffs_seen += is_handoff
            if rc.call_id in inv.resulted:
                continue
            if only is not None and rc.call_id != only:
                return self._call_end(inv, step, rc.call_id)
            if (inv.id, rc.call_id) in self.tasks.awaiting:  # a durable step left it waiting
                result = await self._continue_await(inv, rc)
                self.store(inv, rc, result, number, 0.0)
                if result.is_error:
                    failed.append(str(rc.name))
                continue
            if rc.call_id in inv.requested:  # started before an interruption
                self.store(inv, rc, self._interrupted_result(rc), number, 0.0)
                continue
            only_handoffs_after = is_handoff and all(c.name == handoff for c in calls[index + 1 :])
            result, after = await self._run_call(
                inv,
                rc,
                number,
                failed,
                is_last=index == last_index or only_handoffs_after,
                second_handoff=is_handoff and handoffs_seen > 1,
            )
            if result.is_error:
                failed.append(str(rc.name))
            if after is not None:
                step = after
        return self._turn_end(inv, number, step)

    def _interrupted_result(self, rc: RecordedCall) -> AgentToolResult:
        """A call started before an interruption: a confirmed commit, or outcome unknown."""
        path = self.state.confirmed_calls.get(rc.call_id)
        return confirmed_commit_result(rc, path) if path is not None else outcome_unknown_result(rc)

    def _call_end(self, inv: Invocation, step: Next, next_call: str) -> NextCall:
        """The end of a step of one call, when more calls of the turn are open."""
        # An accepted finish or handoff waits for the turn's end, as the journal's
        # fold would find it on a fresh engine. (A delegated task's step never
        # touches where the run's main line stands.)
        if not inv.is_child:
            self.state.stand_at(None if isinstance(step, NextRound) else step)
        # The step's end is recorded elsewhere (a durable engine's activity completes)
        # and the next call may run on a fresh engine: the journal must be durable and
        # the read states saved now, not at the turn's end (unless the host does it
        # itself when it records the end of several steps at once).
        if self._durable_call_end:
            self.journal.sync()
            self.checkpoints.save(self.run.invocations)
        return NextCall(next_call)

    def _turn_end(self, inv: Invocation, number: int, step: Next) -> Next:
        """Auto-publish and the no-stranding rule (root invocations), then a checkpoint."""
        if not inv.is_child:
            self.effects.publish_if_due(number)
            stop = budget_stop(
                inv.snapshot,
                inv.gate.calls_used,
                foreground=self.run.foreground,
                explicit_commits=self.state.explicit_commits,
            )
            if stop is None:
                stop = self._stuck(inv)
            if stop is not None and isinstance(step, NextRound):
                step = stop
        # The end of a turn: one barrier for its repeatable calls. A child's waits for
        # the family's next barrier (its parent's turn end, any call that must not be
        # repeated, the run's end): a power loss before that costs only work to redo.
        if not self._grouped(inv):
            self.journal.sync()
        self.checkpoints.save(self.run.invocations)
        return step

    def _grouped(self, inv: Invocation) -> bool:
        """Whether ``inv``'s barriers are group commits: a child run as a task of this
        process (a durable engine's step must end durable, so it syncs at once)."""
        return inv.is_child and self.tasks.background

    def _stuck(self, inv: Invocation) -> Stopped | None:
        """The repeated-mistakes rule at the end of a turn in which a call failed."""
        turn = inv.last_turn()
        if turn is None or not _failed_names(inv, turn):
            return None
        limit = (inv.profile or self.run.profile).limits.max_identical_failures
        return stuck_stop(failure_streaks(_calls_with_results(inv)), turn.calls, limit)

    def _repeated(
        self, inv: Invocation, rc: RecordedCall, result: AgentToolResult
    ) -> tuple[AgentToolResult, int]:
        """A failed call's result, made the stronger hint the third time it failed the same
        way, and the count to journal (0 before the third time)."""
        if not result.is_error:
            return result, 0
        count = repeats(failure_streaks(_calls_with_results(inv)), rc, result)
        if count < HINT_AT:
            return result, 0
        return (repeat_hint(result, count) if count == HINT_AT else result), count

    async def _run_call(
        self,
        inv: Invocation,
        rc: RecordedCall,
        number: int,
        failed: Sequence[str],
        *,
        is_last: bool,
        second_handoff: bool = False,
    ) -> tuple[AgentToolResult, Next | None]:
        snapshot = inv.snapshot
        name = rc.name if isinstance(rc.name, str) else None
        binding = snapshot.by_name(name) if name is not None else None
        arguments, arguments_ref = self._arguments_record(inv, rc, number)
        self.journal.write(
            ev.ToolCallRequested(
                round=number,
                invocation_id=inv.id,
                call_id=rc.call_id,
                tool_id=None if binding is None else str(binding.tool_id),
                source=None if binding is None else self.run.tools.source_of(binding.tool_id),
                snapshot_id=snapshot.id,
                name=rc.name,
                arguments=arguments,
                arguments_ref=arguments_ref,
            )
        )
        inv.call_requested(rc.call_id)
        started = time.monotonic()
        if binding is not None and second_handoff:
            result = second_handoff_result(rc, binding)
        elif binding is not None and binding.tool_id in inv.gate.finishing and not is_last:
            result = after_finish_result(rc, binding)
        else:
            # A call whose effect must not be repeated blindly is preceded by a
            # barrier: after a power loss the journal then shows it as started.
            barrier = binding is None or binding.tool_id not in self._repeatable
            grouped = barrier and self._grouped(inv)
            self.journal.write(
                ev.ToolCallStarted(call_id=rc.call_id, invocation_id=inv.id, round=number),
                sync=barrier and not grouped,
            )
            if grouped:  # children starting such calls together share one fsync
                await self.journal.synced()
            executed = await inv.gate.handle(rc.call, round=number)
            effect = executed.effect
            result, after = await self.effects.apply(
                inv, rc, binding, executed.result, effect, failed
            )
            result, repeated = self._repeated(inv, rc, result)
            if not inv.is_child:
                self.effects.note_candidate(result, effect)
            self.store(inv, rc, result, number, time.monotonic() - started, repeated)
            if isinstance(effect, FileWritten | FilePatched | CommitRequested):
                self.checkpoints.save(self.run.invocations)  # state-changing effects
            return result, after
        result, repeated = self._repeated(inv, rc, result)
        self.store(inv, rc, result, number, time.monotonic() - started, repeated)
        return result, None

    async def _continue_await(self, inv: Invocation, rc: RecordedCall) -> AgentToolResult:
        """The result of an await call whose waiting its host did (it has no effect to repeat)."""
        binding = inv.snapshot.by_name(str(rc.name))
        assert binding is not None  # it was dispatched to the await tool
        effect = self.tasks.awaiting[inv.id, rc.call_id]
        # In one process (a durable run resumed locally) the wait blocks as usual.
        return await self.tasks.wait(inv, rc, binding, effect, block=self.tasks.background)

    def _arguments_record(
        self, inv: Invocation, rc: RecordedCall, number: int
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The raw arguments as the journal keeps them: inline, or (the path of) a file
        when large.

        Inline is the common case and writes no file; a large argument (a whole
        chapter for write_file) goes to ``tool-args/`` so the journal stays small.
        """
        raw = _raw_json(rc.call.raw_arguments)
        text = json.dumps(raw, ensure_ascii=False)
        if len(text) <= INLINE_ARGUMENTS_CHARS:
            return raw, None
        ref = run_layout.tool_arguments(inv.id, number, rc.call_id)
        record = {"callId": rc.call_id, "name": rc.name} | raw
        with contextlib.suppress(AlreadyWritten):  # written before an interruption
            write_audit(self.run.run_dir / ref, json.dumps(record, ensure_ascii=False).encode())
        return None, ref

    def store(
        self,
        inv: Invocation,
        rc: RecordedCall,
        result: AgentToolResult,
        number: int,
        elapsed: float,
        repeated: int = 0,
    ) -> None:
        """Journal a call's result and its outcome, and feed it back to the model
        (``repeated``: its identical failures in a row, from the third)."""
        # The journal is the result's record (a long one was spilled to a file in
        # tool-results/ by the gate, and the record holds its preview); the gate's
        # counters ride along so that resume folds them back.
        self.journal.write(
            ev.ToolResultStored(
                round=number,
                invocation_id=inv.id,
                call_id=rc.call_id,
                result=result.to_json(),
                gate=inv.gate.state(),
            )
        )
        outcome: dict[str, Any] = dict(
            call_id=rc.call_id,
            tool_id=None if result.tool_id is None else str(result.tool_id),
            name=rc.name,
            is_error=result.is_error,
            error_code=None if result.error_code is None else result.error_code.value,
            message=_first_line(result.content),
            elapsed_ms=round(elapsed * 1000, 2),
            resource_refs=list(result.resource_refs),
        )
        if result.is_error:
            self.journal.write(ev.ToolCallFailed(**outcome, repeated=repeated or None))
        else:
            self.journal.write(ev.ToolCallCompleted(**outcome))
        inv.add_result(ToolResultMessage(result))

    def pair_pending(self, inv: Invocation, *, cancelled: bool) -> None:
        """Give the open calls of ``inv``'s last turn a result: not run if ``cancelled``
        before they started, outcome unknown otherwise."""
        last = inv.last_turn()
        if last is None:
            return
        for rc in last.calls:
            if rc.call_id in inv.resulted:
                continue
            if rc.call_id in inv.requested or not cancelled:
                result = outcome_unknown_result(rc)
            else:
                result = cancelled_result(rc)
            self.store(inv, rc, result, self.state.rounds, 0.0)
