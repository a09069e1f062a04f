"""Today's workflow code replays the histories of runs recorded by earlier code.

A workflow change that would break runs in flight on a deployed cluster (a
step scheduled differently for the same history) fails here, without a server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tavern_agent.temporal.workflow import RunWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "data" / "temporal-histories"


@pytest.mark.parametrize("name", ["run-completed", "run-cancelled-mid-step"])
def test_a_recorded_history_replays_on_today_s_workflow(name: str) -> None:
    text = (HISTORIES / f"{name}.json").read_text(encoding="utf-8")
    history = WorkflowHistory.from_json(f"wf-{name}", text)
    result = asyncio.run(Replayer(workflows=[RunWorkflow]).replay_workflow(history))
    assert result.replay_failure is None
