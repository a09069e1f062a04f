"""``jq`` inside the shell: the real jq engine (libjq, PyPI ``jq``) for inputs of any size.

Bashkit's own jq refuses values above 32 MB, so a 10 MB file of records
already fails there. This builtin replaces it: the sandbox reads the input
(files through the interpreter's live filesystem, so exactly the mounted
roots are reachable, or stdin), and libjq runs it in a child process
(:mod:`tavern_agent.tools.builtin.jq_worker`) that

* sees only the sandbox's environment variables (``env``/``$ENV``);
* may not load jq modules (``import``/``include``/``modulemeta``), the one
  way a jq program reads files by itself;
* is killed at the shell call's deadline, and gets at most
  :data:`MEMORY_BYTES` of address space and :data:`MAX_INPUT_BYTES` of input
  (a parsed 100 MB file takes about 1 GB in libjq, far above the
  interpreter's own memory cap, so jq has its own);
* prints at most :data:`OUTPUT_BYTES` (it is stopped there, not buffered).

Options: ``-r -j -c -n -s -e -S -a -M -C``, ``--tab``, ``--indent N``,
``--arg NAME VALUE``, ``--argjson NAME JSON``, short flags combined (``-rc``).
Output is printed like jq's: pretty by default, numbers as libjq gives them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bashkit import BuiltinContext, BuiltinResult

from tavern_agent.fsutil import memory_fd
from tavern_agent.tools.builtin.shell_js import HIDDEN_ENV, JsLimits

WORKER = Path(__file__).with_name("jq_worker.py")
# glibc's fast bins off: libjq's parser frees millions of small blocks, and merging
# them back (malloc_consolidate) took about 13 % of the worker's CPU on a 10 MB file.
# The worker clears its environment before jq runs, so jq's `env` never shows these.
WORKER_ENV = {"LC_ALL": "C.UTF-8", "GLIBC_TUNABLES": "glibc.malloc.mxfast=0"}
MEMORY_BYTES = 4 * 1024**3
MAX_INPUT_BYTES = 256 * 1024**2
OUTPUT_BYTES = 16 * 1024**2
STDERR_BYTES = 64 * 1024
USAGE = "usage: jq [-rjcnseSa] [--arg NAME VALUE] [--argjson NAME JSON] FILTER [FILE…]\n"
# The jq builtins that read files or show host paths; a program using them is refused.
_FORBIDDEN = re.compile(
    r"\b(import|include|modulemeta|get_search_list|get_jq_origin|get_prog_origin)\b"
)
_FLAGS = {
    "r": "raw",
    "j": "join",
    "c": "compact",
    "n": "null_input",
    "s": "slurp",
    "e": "exit_status",
    "S": "sort_keys",
    "a": "ascii",
}
_LONG = {
    "--raw-output": "raw",
    "--join-output": "join",
    "--compact-output": "compact",
    "--null-input": "null_input",
    "--slurp": "slurp",
    "--exit-status": "exit_status",
    "--sort-keys": "sort_keys",
    "--ascii-output": "ascii",
    "--tab": "tab",
}


class UsageError(Exception):
    """Bad command line: exit status 2 with the message and the usage line."""


class InputError(Exception):
    """An input file that cannot be read: exit status 2 with the message."""


@dataclass
class Request:
    """One jq command line, parsed."""

    filter: str = ""
    files: list[str] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(
        default_factory=lambda: dict.fromkeys([*_FLAGS.values(), "tab"], False) | {"indent": 2}
    )


def parse_argv(argv: list[str]) -> Request:
    """The filter, files, named arguments and options of a jq command line."""
    req = Request()
    rest = iter(argv)
    positional: list[str] = []
    for arg in rest:
        if arg in ("-M", "-C", "--monochrome-output", "--color-output"):
            continue
        if arg in _LONG:
            req.options[_LONG[arg]] = True
        elif arg == "--indent":
            spaces = next(rest, "")
            if not spaces.isdigit() or int(spaces) > 7:
                raise UsageError("jq: --indent takes a number of spaces from 0 to 7")
            req.options["indent"] = int(spaces)
        elif arg in ("--arg", "--argjson"):
            name, text = next(rest, None), next(rest, None)
            if name is None or text is None:
                raise UsageError(f"jq: {arg} takes a name and a value")
            if arg == "--arg":
                req.args[name] = text
            else:
                try:
                    req.args[name] = json.loads(text)
                except ValueError:
                    raise UsageError(f"jq: invalid JSON text passed to --argjson {name}") from None
        elif arg == "--":
            positional.extend(rest)
        elif arg.startswith("-") and len(arg) > 1:  # options may follow the filter, as in jq
            for flag in arg[1:]:
                if flag not in _FLAGS:
                    raise UsageError(f"jq: unknown option -{flag} (this jq knows -rjcnseSaMC)")
                req.options[_FLAGS[flag]] = True
        else:
            positional.append(arg)
    if not positional:
        raise UsageError("jq: no filter given")
    req.filter, req.files = positional[0], positional[1:]
    if _FORBIDDEN.search(req.filter):
        raise UsageError("jq: modules (import/include) are not available in this sandbox")
    return req


def _read_inputs(req: Request, bctx: BuiltinContext) -> bytes:
    """The files (through the sandbox's filesystem) or stdin, within the input cap."""
    if not req.files:
        data = (bctx.stdin or "").encode("utf-8", "surrogatepass")
    else:
        parts = []
        for name in req.files:
            path = posixpath.normpath(posixpath.join(bctx.cwd or "/", name))
            try:
                parts.append(bctx.fs.read_file(path))
            except Exception as exc:  # Bashkit reports a missing file as a RuntimeError
                why = "No such file or directory" if "No such file" in str(exc) else str(exc)
                raise InputError(f"jq: error: Could not open {name}: {why}") from None
        data = b"\n".join(parts)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"jq: input of {len(data):,} bytes is above the {MAX_INPUT_BYTES:,} cap")
    return data


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """What the stream gives, up to ``cap`` bytes; ``True`` when there was more."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(1 << 16):
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


async def _feed(proc: asyncio.subprocess.Process, header: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(header)
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker stopped early (an error, or it was killed): its streams say why
    finally:
        proc.stdin.close()


async def _exchange(proc: asyncio.subprocess.Process, header: bytes) -> tuple[bytes, bool, bytes]:
    """Send the request line, read stdout (killing the worker past the cap) and stderr."""
    assert proc.stdout is not None and proc.stderr is not None
    feeder = asyncio.ensure_future(_feed(proc, header))
    errors = asyncio.ensure_future(_read_capped(proc.stderr, STDERR_BYTES))
    try:
        out, cut = await _read_capped(proc.stdout, OUTPUT_BYTES)
        if cut:
            _kill(proc)
        err, _ = await errors
        await feeder
        await proc.wait()
        return out, cut, err
    finally:
        feeder.cancel()
        errors.cancel()


async def _input_fd(data: bytes) -> int:
    """A file descriptor holding ``data``, for the worker to read in one go; written off
    the event loop for a large input (100 MB: 75-120 ms).

    Through a pipe, 10 MB took 160 hand-offs of 64 KiB between the event loop
    and the worker, each a wake-up on a busy machine; an anonymous in-memory
    file is one copy.
    """
    if len(data) <= 1 << 20:
        return memory_fd(data, "jq-input")
    writing = asyncio.ensure_future(asyncio.to_thread(memory_fd, data, "jq-input"))
    try:
        return await asyncio.shield(writing)
    except asyncio.CancelledError:
        writing.add_done_callback(_close_written)  # the thread cannot be stopped
        raise


def _close_written(writing: asyncio.Future[int]) -> None:
    if not writing.cancelled() and writing.exception() is None:
        os.close(writing.result())


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def run_jq(req: Request, data: bytes, env: dict[str, str], seconds: float) -> BuiltinResult:
    """Run one request in a fresh worker process, killed ``seconds`` after this call began."""
    # The wait is what is left of ``seconds`` once the worker is up: on a busy machine
    # starting it takes a noticeable share, and the shell's own deadline comes right after.
    ends = time.monotonic() + seconds
    env = {k: v for k, v in env.items() if k not in HIDDEN_ENV}
    header = json.dumps(
        {"filter": req.filter, "args": req.args, "options": req.options, "env": env}
    )
    fd = await _input_fd(data)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(WORKER),
            str(MEMORY_BYTES),
            str(int(seconds) + 1),
            str(fd),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(fd,),
            env=WORKER_ENV,  # the sandbox's variables travel in the request, never to the loader
        )
    finally:
        os.close(fd)  # the worker holds its own descriptor of the input
    try:
        request = header.encode("utf-8") + b"\n"
        left = max(ends - time.monotonic(), 0.01)
        out, cut, err = await asyncio.wait_for(_exchange(proc, request), left)
    except TimeoutError:
        return BuiltinResult(
            stderr="jq: stopped: the call's time limit was reached\n", exit_code=124
        )
    finally:
        if proc.returncode is None:
            _kill(proc)
            await proc.wait()
    stderr = err.decode("utf-8", "replace")
    if cut:
        stderr += f"jq: stopped: output above {OUTPUT_BYTES:,} bytes\n"
        code = 1
    else:
        code = proc.returncode if proc.returncode is not None else 1
        if code < 0 or "out of memory" in stderr:
            limit = f"{MEMORY_BYTES // 1024**3} GiB of memory or the call's time"
            stderr = f"jq: stopped: the program needed more than {limit}\n"
            code = 137
    return BuiltinResult(stdout=out.decode("utf-8", "replace"), stderr=stderr, exit_code=code)


def jq_command(clock: JsLimits) -> Any:
    """A Bashkit ``custom_builtins`` callback: jq under the shell call's deadline ``clock``."""

    async def jq(bctx: BuiltinContext) -> BuiltinResult:
        try:
            req = parse_argv(list(bctx.argv))
            data = b"" if req.options["null_input"] else _read_inputs(req, bctx)
        except UsageError as exc:
            return BuiltinResult(stderr=f"{exc}\n{USAGE}", exit_code=2)
        except InputError as exc:
            return BuiltinResult(stderr=f"{exc}\n", exit_code=2)
        seconds = clock.deadline - time.monotonic() - 0.5
        if seconds <= 0:
            return BuiltinResult(stderr="jq: no time left in this call\n", exit_code=124)
        return await run_jq(req, data, dict(bctx.env), seconds)

    return jq
