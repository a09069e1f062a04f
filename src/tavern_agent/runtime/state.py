"""The run's live counters and where its main line stands, in one small value.

One :class:`RunState` belongs to one engine. Its parts (the calls, the
effects, the endings, the journal's fold) read it freely and change it only
through its methods, one per transition, so every way a counter moves is
listed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tavern_agent.runtime import events as ev
from tavern_agent.runtime.context import ContextKeeper
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.turns import Next


@dataclass
class RunState:
    """Rounds, commits, the auto-publish candidate and the current invocation of a run."""

    current: Invocation  # the invocation the run's main line is on
    rounds: int = 0  # the main line's model rounds
    commits_requested: int = 0
    commits_confirmed: int = 0
    explicit_commits: int = 0  # commits made by a commit call (not auto-published)
    candidate: bool = False  # the message body was edited since the last publish
    published_round: int = 0  # the last round whose end auto-published the body
    floor: int | None = None  # the chat floor the run's commits wrote
    # Where the journal's fold says the main line stands: a finish or a handoff
    # accepted but not yet acted on (None: go on as usual).
    resume_at: Next | None = None
    pending_commit: ev.CommitRequested | None = None  # journaled, not confirmed
    confirmed_calls: dict[str, str] = field(default_factory=dict)  # commit call id → path
    context: ContextKeeper = field(default_factory=ContextKeeper)  # the window and compactions

    # ------------------------------------------------------------ the main line

    def enter(self, inv: Invocation) -> None:
        """The main line goes on with ``inv`` (a revision, a handoff's target)."""
        self.current = inv

    def started(self, inv: Invocation) -> None:
        """The journal shows ``inv`` started: the main line is there, at its start."""
        self.current = inv
        self.resume_at = None

    def stand_at(self, step: Next | None) -> None:
        """Where the main line stands when the next step begins."""
        self.resume_at = step

    def take_resume_at(self) -> Next | None:
        """Where the main line stands, once: a live engine's next step must not repeat it."""
        step, self.resume_at = self.resume_at, None
        return step

    def round_stored(self, number: int) -> None:
        """The main line's model response of round ``number`` was stored."""
        self.rounds = number

    # ------------------------------------------------------------ commits

    def request_commit(self) -> int:
        """A new commit is requested; its index."""
        self.commits_requested += 1
        return self.commits_requested

    def commit_journaled(self, requested: ev.CommitRequested) -> None:
        """A ``commit_requested`` event: the commit's outcome is unknown until confirmed."""
        self.commits_requested = requested.index
        self.pending_commit = requested

    def confirm_commit(self, index: int, floor: int | None, *, auto: bool) -> None:
        """Commit ``index`` is in the chat, at ``floor``."""
        self.commits_confirmed = index
        self.explicit_commits += not auto
        self.floor = floor

    def confirm_on_resume(self, call_id: str, path: str) -> None:
        """The chat file confirms the interrupted commit call ``call_id``."""
        self.confirmed_calls[call_id] = path

    def commit_not_applied(self, index: int) -> None:
        """The chat file shows that commit ``index`` did not happen."""
        self.commits_requested = index - 1
        self.pending_commit = None

    def commit_settled(self) -> None:
        """The pending commit's outcome is known now."""
        self.pending_commit = None

    # ------------------------------------------------------------ auto-publish

    def set_candidate(self, candidate: bool, published_round: int | None = None) -> bool:
        """Whether the body is the auto-commit candidate; True if that changed."""
        changed = candidate != self.candidate
        self.candidate = candidate
        if published_round is not None:
            self.published_round = published_round
        return changed
