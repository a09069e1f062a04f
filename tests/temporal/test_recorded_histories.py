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

pytestmark = pytest.mark.temporal
HISTORIES = Path(__file__).resolve().parents[1] / "data" / "temporal-histories"


# run-completed and run-cancelled-mid-step: one activity per step (a model request, or
# a whole turn's calls); run-completed-per-call: one per model request and per call;
# run-completed-local: the same, the model requests and quick calls local activities;
# run-completed-loop-1: the same, started with the loop named in its input (RunInput.loop).
@pytest.mark.parametrize(
    "name",
    [
        "run-completed",
        "run-cancelled-mid-step",
        "run-completed-per-call",
        "run-completed-local",
        "run-completed-loop-1",
    ],
)
def test_a_recorded_history_replays_on_today_s_workflow(name: str) -> None:
    text = (HISTORIES / f"{name}.json").read_text(encoding="utf-8")
    history = WorkflowHistory.from_json(f"wf-{name}", text)
    result = asyncio.run(Replayer(workflows=[RunWorkflow]).replay_workflow(history))
    assert result.replay_failure is None


def test_the_per_call_history_has_an_activity_per_model_request_and_per_call() -> None:
    text = (HISTORIES / "run-completed-per-call.json").read_text(encoding="utf-8")
    history = WorkflowHistory.from_json("wf-per-call", text)
    names = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    # The example run: 8 model requests and 15 calls.
    assert (names.count("model_request"), names.count("tool_call"), len(names)) == (8, 15, 23)


@pytest.mark.parametrize(("name", "patches"), [("local", 2), ("loop-1", 0)])
def test_a_run_started_with_its_loop_in_its_input_records_no_patch_markers(
    name: str, patches: int
) -> None:
    text = (HISTORIES / f"run-completed-{name}.json").read_text(encoding="utf-8")
    history = WorkflowHistory.from_json(f"wf-{name}", text)
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    ]
    upsert = "upsert_workflow_search_attributes_event_attributes"
    upserts = [e for e in history.events if e.HasField(upsert)]
    # Each patch is a marker and a search attribute that the SDK upserts with it.
    assert (markers.count("core_patch"), len(upserts)) == (patches, patches)
