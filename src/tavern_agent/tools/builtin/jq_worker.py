"""The child process behind the shell's ``jq``: libjq (PyPI ``jq``) on one request.

Run as a script (``python -I jq_worker.py MEMORY_BYTES CPU_SECONDS INPUT_FD``) by
:mod:`tavern_agent.tools.builtin.shell_jq`, with a fixed minimal environment.
It first limits its own address space and CPU time, then takes the sandbox's
environment variables from the request (what jq's ``env`` and ``$ENV`` show;
set after start-up, so none of them changes how this process was loaded). It
imports nothing from tavern-agent, so it starts in milliseconds.

stdin: one JSON line with the filter, options and environment; the descriptor
INPUT_FD: the input text (a file, read in one go).
stdout: the outputs as the jq command prints them; stderr: jq's messages.
Exit status as jq's: 0, 1 or 4 with ``-e``, 2 usage, 3 compile error, 5 runtime error.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
from typing import Any

import jq

BIG = 1.7976931348623157e308  # jq prints an infinity as the largest double


def _finite(value: Any) -> Any:
    """NaN as null and infinities as ±the largest double, as jq prints them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else math.copysign(BIG, value)
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def dump(value: Any, opts: dict[str, Any]) -> str:
    """One output as ``jq`` prints it (pretty by default; ``-c``, ``--tab``, ``--indent``)."""
    if opts["raw"] and isinstance(value, str):
        return value
    indent: int | str | None = "\t" if opts["tab"] else opts["indent"]
    compact = opts["compact"] or indent == 0
    kwargs: dict[str, Any] = {
        "ensure_ascii": opts["ascii"],
        "sort_keys": opts["sort_keys"],
        "allow_nan": False,
        "indent": None if compact else indent,
        "separators": (",", ":") if compact else (",", ": "),
    }
    try:
        return json.dumps(value, **kwargs)
    except ValueError:  # NaN or an infinity somewhere inside
        return json.dumps(_finite(value), **kwargs)


def main() -> int:
    """Run one jq filter under memory and CPU limits: the request on stdin's
    first line, the input from ``INPUT_FD``; the exit status says how it went."""
    memory, cpu, input_fd = (int(arg) for arg in sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    request = json.loads(sys.stdin.buffer.readline())
    os.environ.clear()
    os.environ.update(request["env"])
    with open(input_fd, "rb", buffering=0) as source:
        data = source.read().decode("utf-8", errors="replace")
    opts = request["options"]
    try:
        program = jq.compile(request["filter"], args=request["args"])
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    try:
        if opts["null_input"]:
            results = program.input_value(None)
        else:
            results = program.input_text(data, slurp=opts["slurp"])
        out = sys.stdout.buffer
        end = "" if opts["join"] else "\n"
        last: Any = None
        count = 0
        for value in results:
            out.write((dump(value, opts) + end).encode("utf-8", "surrogatepass"))
            last, count = value, count + 1
    except ValueError as exc:
        sys.stdout.flush()
        sys.stderr.write(f"jq: error (at <stdin>:0): {exc}\n")
        return 5
    except MemoryError:
        sys.stderr.write("jq: error: out of memory\n")
        return 5
    if opts["exit_status"]:
        if count == 0:
            return 4
        return 1 if last is None or last is False else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
