"""Rules for the texts a model reads, kept in one place.

Every error a tool or the gate returns names the problem and one next step.
The next step may only name tools of the snapshot the call came from, so the
hints here take the snapshot and fall back to plain words (or to no hint)
when it lacks the tool. A text never contains a host path: a model works with
workspace paths only, and an exception from outside code is cut to its first
line with host paths replaced.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tavern_agent.core.tool_ids import LIST_FILES, SEARCH_FILES, SHELL, TASK_RETURN
from tavern_agent.workspace.paths import without_host_paths

if TYPE_CHECKING:
    from tavern_agent.tools.snapshot import ToolSnapshot

EXCEPTION_CHARS = 300
OUTSIDE_FAILURE_STEP = "Try other arguments, or go on without it."


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 call``, ``3 calls``."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


def either(items: list[str], word: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c`` (``word="and"``: ``a, b and c``)."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"


def past_the_end(what: str, offset: int, total: int) -> str:
    """``offset`` beyond the last of ``total`` lines of ``what``, and the offsets that work."""
    fix = "Use offset 1." if total == 1 else f"Use an offset from 1 to {total:,}."
    return f"{what} has {count(total, 'line')}, so offset {offset} is past its end. {fix}"


def call(name: str, **args: Any) -> str:
    """A call as a model would write it: ``workspace_read_file {"file_path": …}``."""
    return f"{name} {json.dumps(args, ensure_ascii=False)}" if args else name


def exception_text(exc: BaseException, *, with_type: bool = True) -> str:
    """A short, path-free description of an exception from outside code."""
    message = str(exc).strip()
    first = message.splitlines()[0] if message else ""
    if not first:
        return type(exc).__name__
    return outside_text(f"{type(exc).__name__}: {first}" if with_type else first)


def outside_text(text: str, limit: int = EXCEPTION_CHARS) -> str:
    """An error text from outside code as a model may read it: one line, no host paths."""
    lines = text.strip().splitlines()
    return short(without_host_paths(lines[0] if lines else ""), limit)


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def find_file_hint(snapshot: ToolSnapshot, folder: str) -> str:
    """How to see which files exist in ``folder`` with this snapshot's tools, or ``""``."""
    lister = snapshot.name_of(LIST_FILES)
    if lister:
        return f"See what is there with {call(lister, path=folder) if folder else lister}."
    shell = snapshot.name_of(SHELL)
    if shell:
        return f"See what is there with {shell}: ls /{folder}"
    search = snapshot.name_of(SEARCH_FILES)
    if search:
        return f"Find it with {call(search, pattern='<text in the file>')}."
    return ""


def child_return_hint(snapshot: ToolSnapshot) -> str | None:
    """For a delegated agent (its snapshot has ``task.return``): how its work ends."""
    name = snapshot.name_of(TASK_RETURN)
    if name is None:
        return None
    return f"Delegated agents return their result with {name} instead."
