"""How a run ends: completed, failed or partly successful, or cancelled.

Every ending stops the run's live tasks, journals one terminal event with the
run's counters and saves the checkpoint; a completed chat run first promotes
its ``persist/`` folder to the chat's. :class:`RunResult` is what the caller
gets back, and what a resumed run that had ended reads from its journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tavern_agent.core.errors import ErrorCode
from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.calls import CallRunner
from tavern_agent.runtime.checkpoint import Checkpoints
from tavern_agent.runtime.journal import Event, Journal
from tavern_agent.runtime.persist import PersistStore
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.state import RunState

TERMINAL = {
    "run_completed": "completed",
    "run_partial_success": "partial_success",
    "run_failed": "failed",
    "run_cancelled": "cancelled",
}
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
    def from_event(cls, event: Event) -> RunResult:
        """The result a terminal journal event records."""
        p = event["payload"]
        return cls(
            event["runId"],
            TERMINAL[event["type"]],
            int(p.get("rounds", 0)),
            int(p.get("commits", 0)),
            p.get("errorCode"),
            p.get("message", ""),
            p.get("floor"),
            p.get("finalText"),
        )


class Endings:
    """Ends one run: the terminal event, the stopped tasks, the last checkpoint."""

    def __init__(
        self,
        run: Run,
        journal: Journal,
        state: RunState,
        tasks: AgentTasks,
        calls: CallRunner,
        checkpoints: Checkpoints,
    ) -> None:
        self.run = run
        self.journal = journal
        self.state = state
        self.tasks = tasks
        self.calls = calls
        self.checkpoints = checkpoints

    def complete(self, final_text: str | None = None) -> RunResult:
        """The run is done (a finish accepted, or a session's answer)."""
        run, state = self.run, self.state
        chat_ws = run.chat_workspace
        if chat_ws is not None and run.persist_base is not None:
            promotion = PersistStore(chat_ws).promote(
                run.workspace.root / "persist", run.persist_base, run.id
            )
            level = "warn" if promotion.status == "conflict" else "info"
            self.journal.append(
                f"persist_{promotion.status}",
                {"version": promotion.version, "sha": promotion.sha, "base": run.persist_base.sha},
                level=level,
            )
        payload = state.summary() | ({"finalText": final_text} if final_text is not None else {})
        self.end("run_completed", None, "", payload)
        return RunResult(
            run.id,
            "completed",
            state.rounds,
            state.commits_confirmed,
            floor=state.floor,
            final_text=final_text,
        )

    def fail(self, code: ErrorCode, message: str) -> RunResult:
        """The run cannot go on: failed, or partly successful once it committed."""
        state = self.state
        kind = "run_partial_success" if state.commits_confirmed else "run_failed"
        try:
            self.end(kind, code, message)
        except OSError as exc:
            # A full disk may not take the ending either. The outcome is still reported;
            # the journal shows an interrupted run, which --resume continues.
            if code is not ErrorCode.RUN_STORAGE_FAILED:
                code, message = ErrorCode.RUN_STORAGE_FAILED, f"{type(exc).__name__}: {exc}"
        return RunResult(
            self.run.id,
            TERMINAL[kind],
            state.rounds,
            state.commits_confirmed,
            code.value,
            message,
            state.floor,
        )

    def storage_failed(self, exc: Exception) -> RunResult:
        """The run's storage failed (a full disk): a resume goes on once there is room."""
        return self.fail(ErrorCode.RUN_STORAGE_FAILED, f"{type(exc).__name__}: {exc}")

    def cancel(self) -> RunResult:
        """End the run as cancelled; the open calls of its current invocation are paired."""
        state = self.state
        self.calls.pair_pending(state.current, cancelled=True)
        self.end("run_cancelled", ErrorCode.RUN_CANCELLED, CANCELLED_MESSAGE)
        return RunResult(
            self.run.id,
            "cancelled",
            state.rounds,
            state.commits_confirmed,
            ErrorCode.RUN_CANCELLED.value,
            CANCELLED_MESSAGE,
            state.floor,
        )

    def end(
        self, kind: str, code: ErrorCode | None, message: str, payload: dict[str, Any] | None = None
    ) -> None:
        """Stop the live tasks, journal the terminal event ``kind``, save the checkpoint."""
        self.tasks.stop_all("the run ended" if code is None else message.rstrip("."))
        body = payload or self.state.summary()
        if code is not None:
            body = body | {"errorCode": code.value, "message": message}
        self.journal.append(kind, body, level="info" if code is None else "error", sync=True)
        self.checkpoints.save(self.run.invocations)
