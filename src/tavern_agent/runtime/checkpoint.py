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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.fsutil import atomic_write

SCHEMA_VERSION = 1


def save_checkpoint(run_dir: Path, state: Mapping[str, Any], *, durable: bool = True) -> None:
    """Replace the checkpoint atomically; ``durable`` also fsyncs it (power-loss safe)."""
    data = {"schemaVersion": SCHEMA_VERSION, **state}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    atomic_write(
        run_dir / run_layout.CHECKPOINT_FILE, text.encode("utf-8", "surrogatepass"), durable=durable
    )


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
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
