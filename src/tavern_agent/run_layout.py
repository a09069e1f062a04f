"""Every path inside a run folder, in one place.

A chat run's folder is also its workspace, so some of these paths are seen by
the model's file tools (``tool-results/``, ``summaries/``, ``scratch/``); the
rest are internal and hidden from tools (see ``workspace/roots.py``). All
functions return paths relative to the run folder (or the workspace root, for
model-visible ones), with ``/`` separators::

    run.json                                        what the run is
    events.jsonl                                    the journal (small arguments and
                                                    every result are kept inline)
    checkpoints/state.json                          read states for resume
    input/chat.json, input/card.json, input/persist.json
    input/frontend-chat.jsonl                       an endpoint request's chat
    input/invocations/<inv>/tool_snapshot.json      written once (a child's: snap_<hex>,
                                                    shared by children of one profile)
    input/invocations/<inv>/prompt.json             not for children: journaled
    model-responses/round-NNN.json                  the run's main line (root, revisions, handoffs)
    model-responses/<inv>/round-NNN.json            a delegated child's own rounds
    tool-args/<inv>/round-NNN-call_<hex>.json       large raw arguments as the model sent them
    tool-results/<inv>/round-NNN-call_<hex>.txt     a spilled long result (model-readable)
    tool-results/<inv>/round-NNN-call_<hex>.raw.json   the spilled result's raw reply (audit)
    tool-results/<inv>/round-NNN-call_<hex>-K.<ext>    files a reply brought (images, resources)
    scratch/turn-NNN.md                             text of a turn without tool calls
    .step.lock                                      held by a durable engine's step (one
                                                    writer of the journal at a time)

This module imports nothing from the project, so every layer may use it.
"""

from __future__ import annotations

import hashlib

RUN_FILE = "run.json"
JOURNAL_FILE = "events.jsonl"
STEP_LOCK_FILE = ".step.lock"
# The workspace's own lock (a chat run's folder is its workspace).
LOCK_FILE = ".lock"
INPUT_DIR = "input"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_FILE = f"{CHECKPOINTS_DIR}/state.json"
CLI_READS_FILE = f"{CHECKPOINTS_DIR}/cli-reads.json"
CHAT_INPUT_FILE = f"{INPUT_DIR}/chat.json"
CARD_FILE = f"{INPUT_DIR}/card.json"
PERSIST_FILE = f"{INPUT_DIR}/persist.json"
# The chat a request to the agent endpoint brought (user and assistant messages).
FRONTEND_CHAT_FILE = f"{INPUT_DIR}/frontend-chat.jsonl"
INVOCATIONS_DIR = f"{INPUT_DIR}/invocations"
RESPONSES_DIR = "model-responses"
TOOL_ARGS_DIR = "tool-args"
RESULTS_DIR = "tool-results"
# Delegated tasks' folders, written by older versions (still hidden from tools).
TASKS_DIR = "tasks"
# Every top-level name of a run folder that is internal: never visible to the model.
INTERNAL_NAMES = frozenset(
    {
        INPUT_DIR,
        TOOL_ARGS_DIR,
        RESPONSES_DIR,
        CHECKPOINTS_DIR,
        JOURNAL_FILE,
        TASKS_DIR,
        LOCK_FILE,
        STEP_LOCK_FILE,
    }
)


def call_hex(call_id: str) -> str:
    """The first 8 bytes of SHA-256(call id): call ids may hold any character."""
    return hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def snapshot_file(snapshot_id: str) -> str:
    """The run-relative path of an invocation's tool snapshot."""
    return f"{INVOCATIONS_DIR}/{snapshot_id}/tool_snapshot.json"


def prompt_file(invocation_id: str) -> str:
    """The run-relative path of an invocation's prompt record."""
    return f"{INVOCATIONS_DIR}/{invocation_id}/prompt.json"


def model_response(round: int, child_invocation: str | None = None) -> str:
    """A stored model response: the main line's round, or a child's own round."""
    folder = RESPONSES_DIR if child_invocation is None else f"{RESPONSES_DIR}/{child_invocation}"
    return f"{folder}/round-{round:03d}.json"


def _call_stem(folder: str, invocation_id: str, round: int, call_id: str) -> str:
    return f"{folder}/{invocation_id}/round-{round:03d}-call_{call_hex(call_id)}"


def tool_arguments(invocation_id: str, round: int, call_id: str) -> str:
    """The path, under ``tool-args/``, of one call's raw arguments (an audit file)."""
    return _call_stem(TOOL_ARGS_DIR, invocation_id, round, call_id) + ".json"


def spilled_text(invocation_id: str, round: int, call_id: str) -> str:
    """The path, under ``tool-results/``, of one call's
    full result text when it was too long to inline."""
    return _call_stem(RESULTS_DIR, invocation_id, round, call_id) + ".txt"


def spilled_audit(invocation_id: str, round: int, call_id: str) -> str:
    """The path of one call's raw result, kept beside its spilled text."""
    return _call_stem(RESULTS_DIR, invocation_id, round, call_id) + ".raw.json"


def reply_file(invocation_id: str, round: int, call_id: str, index: int, suffix: str) -> str:
    """The ``index``-th file a tool's reply brought (``suffix`` like ``.png``)."""
    return f"{_call_stem(RESULTS_DIR, invocation_id, round, call_id)}-{index}{suffix}"


def turn_text(round: int) -> str:
    """The workspace path where a turn's bare assistant text
    is saved before the model is reminded to use its tools."""
    return f"scratch/turn-{round:03d}.md"
