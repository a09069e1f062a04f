"""How a run ends: completed, failed or partly successful, or cancelled.

Every ending stops the run's live tasks, journals one terminal event with the
run's counters and saves the checkpoint; a completed chat run first promotes
its ``persist/`` folder to the chat's. :class:`RunResult` is what the caller
gets back, and what a resumed run that had ended reads from its journal.
"""

from __future__ import annotations

from dataclasses import dataclass

from tavern_agent.core.errors import ErrorCode
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.calls import CallRunner
from tavern_agent.runtime.parts import RunPart, RunParts
from tavern_agent.runtime.persist import PersistStore

CANCELLED_MESSAGE = "The run was cancelled."


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of a run: its status, counters and, when it failed, why."""

    run_id: str
    status: str  # completed, partial_success, failed, cancelled
    rounds: int
    commits: int
    error_code: str | None = None
    message: str = ""
    floor: int | None = None  # the chat floor this run's commits wrote
    final_text: str | None = None  # a session run's answer

    @classmethod
    def from_ended(cls, run_id: str, ended: ev.RunEnded) -> RunResult:
        """The result a run's ending event records."""
        stopped = ended if isinstance(ended, ev.RunStopped) else None
        return cls(
            run_id,
            ended.status,
            ended.rounds,
            ended.commits,
            None if stopped is None else stopped.error_code,
            "" if stopped is None else stopped.message,
            ended.floor,
            ended.final_text if isinstance(ended, ev.RunCompleted) else None,
        )


class Endings(RunPart):
    """Ends one run: the terminal event, the stopped tasks, the last checkpoint."""

    def __init__(self, parts: RunParts, calls: CallRunner) -> None:
        super().__init__(parts)
        self.calls = calls

    def complete(self, final_text: str | None = None) -> RunResult:
        """The run is done (a finish accepted, or a session's answer)."""
        run, state = self.run, self.state
        chat_ws = run.chat_workspace
        if chat_ws is not None and run.persist_base is not None:
            promotion = PersistStore(chat_ws).promote(
                run.workspace.root / "persist", run.persist_base, run.id
            )
            outcome = ev.PERSIST_OUTCOMES[promotion.status]
            self.journal.write(
                outcome(version=promotion.version, sha=promotion.sha, base=run.persist_base.sha)
            )
        ended = ev.RunCompleted(
            rounds=state.rounds,
            commits=state.commits_confirmed,
            floor=state.floor,
            final_text=final_text,
        )
        self.end(ended)
        return RunResult.from_ended(run.id, ended)

    def fail(self, code: ErrorCode, message: str) -> RunResult:
        """The run cannot go on: failed, or partly successful once it committed."""
        kind = ev.RunPartialSuccess if self.state.commits_confirmed else ev.RunFailed
        ended = self._stopped(kind, code, message)
        try:
            self.end(ended)
        except OSError as exc:
            # A full disk may not take the ending either. The outcome is still reported;
            # the journal shows an interrupted run, which --resume continues.
            if code is not ErrorCode.RUN_STORAGE_FAILED:
                why = f"{type(exc).__name__}: {exc}"
                ended = self._stopped(kind, ErrorCode.RUN_STORAGE_FAILED, why)
        return RunResult.from_ended(self.run.id, ended)

    def storage_failed(self, exc: Exception) -> RunResult:
        """The run's storage failed (a full disk): a resume goes on once there is room."""
        return self.fail(ErrorCode.RUN_STORAGE_FAILED, f"{type(exc).__name__}: {exc}")

    def cancel(self) -> RunResult:
        """End the run as cancelled; the open calls of its current invocation are paired."""
        self.calls.pair_pending(self.state.current, cancelled=True)
        ended = self._stopped(ev.RunCancelled, ErrorCode.RUN_CANCELLED, CANCELLED_MESSAGE)
        self.end(ended)
        return RunResult.from_ended(self.run.id, ended)

    def _stopped(self, kind: type[ev.RunStopped], code: ErrorCode, message: str) -> ev.RunStopped:
        """The ending event of a run that stops with ``code``, with the run's counters."""
        state = self.state
        return kind(
            rounds=state.rounds,
            commits=state.commits_confirmed,
            floor=state.floor,
            error_code=code.value,
            message=message,
        )

    def end(self, ended: ev.RunEnded) -> None:
        """Stop the live tasks, journal the ending event, save the checkpoint."""
        why = ended.message.rstrip(".") if isinstance(ended, ev.RunStopped) else "the run ended"
        self.tasks.stop_all(why)
        self.journal.write(ended, sync=True)
        self.checkpoints.save(self.run.invocations)
