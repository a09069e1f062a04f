"""``docs/journal.md``: each journal event kind with its fields, generated from the types.

A kind's description is its class's docstring; its fields' are the docstring's
``name: text`` lines, a base class's describing the fields it gives its kinds.
``python -m tavern_agent.runtime.journal_doc > docs/journal.md`` writes the
file; a test keeps it equal to :func:`journal_doc`.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

import msgspec
from msgspec import UNSET, UnsetType

from tavern_agent.runtime.events import JournalEvent
from tavern_agent.runtime.journal import KINDS

_FIELD_LINE = re.compile(r"(\w+): (.*)")
DOC_HEAD = """# The run journal

Each run folder holds `events.jsonl`: one JSON object per line,

```json
{"seq": 1, "id": "evt_…", "runId": "run_…", "timestamp": "…", "level": "info",
 "type": "run_started", "payload": {…}}
```

`seq` counts from 1 without gaps; `level` is `info`, `warn` or `error`; `type`
is the event's kind and `payload` its fields, listed below with when each is
written. Readers keep a kind they do not know (or a payload that does not fit
its kind) as it is, and pass it by.

This file is generated from `src/tavern_agent/runtime/events.py`
(`python -m tavern_agent.runtime.journal_doc > docs/journal.md`); a test keeps it
equal to the types.
"""


def _docstring(cls: type) -> tuple[str, dict[str, str]]:
    """The summary of a class's own docstring, and its ``name: text`` lines."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    head, _, rest = doc.partition("\n\n")
    fields: dict[str, str] = {}
    name = None
    for line in rest.splitlines():
        match = _FIELD_LINE.fullmatch(line)
        if match is not None and not line.startswith(" "):
            name = match.group(1)
            fields[name] = match.group(2)
        elif name is not None and line.strip():
            fields[name] += " " + line.strip()
    return " ".join(head.split()), fields


def field_docs(cls: type[JournalEvent]) -> tuple[str, dict[str, str]]:
    """A kind's description and its fields' (by Python name, in the order of its fields):
    its own docstring's, then its bases' for the fields they give it."""
    summary, own = _docstring(cls)
    described: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if issubclass(base, JournalEvent):
            described |= _docstring(base)[1]
    described |= own
    names = [f.name for f in msgspec.structs.fields(cls)]
    return summary, {n: described[n] for n in names if n in described}


def _type_name(tp: Any) -> str:
    if tp is Any:
        return "any"
    if tp is type(None):
        return "null"
    if get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not UnsetType)
    if get_origin(tp) is list:
        return f"list of {_type_name(get_args(tp)[0])}"
    if get_origin(tp) is dict or tp is dict:
        return "object"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return "object (" + ", ".join(f.encode_name for f in msgspec.structs.fields(tp)) + ")"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, str(tp))


def _markdown(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|")


def _kind_doc(cls: type[JournalEvent]) -> Iterator[str]:
    text, described = field_docs(cls)
    yield f"## `{cls.kind}`"
    yield ""
    yield f"{_markdown(text)} Level: `{cls.default_level}`."
    yield ""
    yield "| field | type | written | meaning |"
    yield "|---|---|---|---|"
    for f in msgspec.structs.fields(cls):
        if f.default is msgspec.NODEFAULT:
            when = "always"
        elif f.default is UNSET:
            when = "see meaning"
        else:
            when = "when " + {None: "not null", False: "true"}[f.default]
        meaning = _markdown(described.get(f.name, ""))
        yield f"| `{f.encode_name}` | {_type_name(f.type)} | {when} | {meaning} |"
    yield ""


def journal_doc() -> str:
    """``docs/journal.md``: every kind with its fields, generated from the classes."""
    lines = [DOC_HEAD]
    for cls in KINDS.values():
        lines.extend(_kind_doc(cls))
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(journal_doc(), end="")
