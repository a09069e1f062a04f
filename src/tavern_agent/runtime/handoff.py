"""``agent.handoff``: the caller's part of the run ends, another agent goes on.

:meth:`Handoffs.accept` checks the caller and the target (the rules are the
policy's), builds the target's snapshot and prompt (a markdown brief of the
caller's), adds its invocation to the run and journals ``handoff_accepted``;
the loop then continues the run's main line with that invocation.
"""

from __future__ import annotations

import secrets

from tavern_agent import run_layout
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import AgentToolResult, HandoffAccepted
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.briefs import directory, handoff_brief
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.policy import handoff_depth_refusal, handoff_refusal
from tavern_agent.runtime.prompt import system_prompt
from tavern_agent.runtime.run import Run
from tavern_agent.tools.snapshot import ToolBinding


class Handoffs:
    """Accepts (or refuses) the handoffs of one run."""

    def __init__(self, run: Run, journal: Journal, tasks: AgentTasks) -> None:
        self.run = run
        self.journal = journal
        self.tasks = tasks

    def accept(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        effect: HandoffAccepted,
        *,
        commits: int,
    ) -> tuple[AgentToolResult, Invocation | None]:
        """The result, and the target's new invocation (``None`` if refused).

        ``commits`` is the run's count of confirmed commits, for the target's brief.
        """
        run, tasks = self.run, self.tasks
        caller = tasks.caller(inv)
        denied = ErrorCode.AGENT_HANDOFF_POLICY_DENIED
        running = [t.id for t in tasks.live(inv)]
        refused = handoff_refusal(
            rc, binding, inv.snapshot, caller, is_child=inv.is_child, running=running
        )
        if refused is not None:
            return refused, None
        target = tasks.target(rc, binding, caller, effect.agent_id, "handoff", denied)
        if isinstance(target, AgentToolResult):
            return target, None
        depth = sum(1 for i in run.invocations if i.kind == "handoff")
        refused = handoff_depth_refusal(rc, binding, caller, depth)
        if refused is not None:
            return refused, None
        inv_id = f"inv_{secrets.token_hex(6)}"
        snapshot = run.tools.snapshot(target, inv_id)
        snapshot.save(run.run_dir / run_layout.snapshot_file(inv_id))
        character = run.chat.input.character if run.chat is not None else ""
        system = system_prompt(target, snapshot, character)
        listing = directory(tasks.source, target, snapshot)
        if listing:
            system = f"{system}\n\n{listing}"
        brief = handoff_brief(caller.id, effect.brief, commits)
        new = run.add_invocation(
            inv_id, snapshot, system, brief, kind="handoff", profile=target, parent_id=inv.id
        )
        self.journal.write(
            ev.HandoffAccepted(
                call_id=rc.call_id,
                from_invocation_id=inv.id,
                to_invocation_id=inv_id,
                agent_id=target.id,
                depth=depth + 1,
            )
        )
        text = f"Handoff accepted for Agent {target.id}. Your part is complete."
        structured = {"agentId": target.id, "invocationId": inv_id}
        return AgentToolResult(rc.call_id, binding.tool_id, text, structured), new
