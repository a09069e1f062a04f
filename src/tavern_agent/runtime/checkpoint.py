"""The checkpoint: live run state that the journal alone does not give back.

``checkpoints/state.json`` (rewritten atomically, and only when it changed)
holds each invocation's read states: what the model has read of which file,
which the write and patch rules check (in the form of
:func:`~tavern_agent.workspace.read_state.reads_to_json`). Everything else is rebuilt from the
journal: the transcript (every assistant message and every result), the
counters (each stored result carries its gate's counters) and the commits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.fsutil import atomic_write
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.workspace.read_state import reads_from_json, reads_to_json

SCHEMA_VERSION = 1


def save_checkpoint(run_dir: Path, state: Mapping[str, Any], *, durable: bool = True) -> None:
    """Replace the checkpoint atomically; ``durable`` also fsyncs it (power-loss safe)."""
    data = {"schemaVersion": SCHEMA_VERSION, **state}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    atomic_write(
        run_dir / run_layout.CHECKPOINT_FILE, text.encode("utf-8", "surrogatepass"), durable=durable
    )


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The run's saved read states and the rest of its checkpoint, or ``None`` when it
    has none or it was cut short; raises ``ValueError`` for another schema version."""
    try:
        data: dict[str, Any] = json.loads(
            (run_dir / run_layout.CHECKPOINT_FILE).read_text(encoding="utf-8")
        )
    except FileNotFoundError:
        return None
    except ValueError:  # cut short by a power loss (it is written without fsync)
        return None
    if data.get("schemaVersion") != SCHEMA_VERSION:
        raise ValueError(f"unknown checkpoint schema {data.get('schemaVersion')!r}")
    return data


class Checkpoints:
    """A run's checkpoint: written when the read states changed, read back on resume."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._saved: dict[str, Any] | None = None  # the state last written

    def save(self, invocations: Iterable[Invocation]) -> None:
        """Save the read states when they changed (the rest of the state is in the journal)."""
        state = {
            "invocations": {inv.id: {"reads": reads_to_json(inv.gate.reads)} for inv in invocations}
        }
        if state == self._saved:
            return
        # Not fsync'd: the journal is the record. A checkpoint lost to a power
        # failure is older or missing, which only asks the model to read a file
        # again (a stale read state refuses writes).
        save_checkpoint(self.run_dir, state, durable=False)
        self._saved = state

    def restore(self, by_id: Mapping[str, Invocation], *, replace: bool = False) -> None:
        """Give the invocations their saved read states (and gate counts of older versions);
        ``replace``: instead of those they hold (a live engine catching up)."""
        if replace:
            for inv in by_id.values():
                inv.gate.reads.clear()
            self._saved = None  # another engine wrote the file since: the next save writes
        checkpoint = load_checkpoint(self.run_dir)
        if checkpoint is None:
            return
        for inv_id, state in checkpoint.get("invocations", {}).items():
            found = by_id.get(inv_id)
            if found is None:
                continue
            if "gate" in state and found.gate.calls_used == 0:  # written by older versions
                found.gate.restore(state["gate"])
            found.gate.reads.update(reads_from_json(state.get("reads", {})))
