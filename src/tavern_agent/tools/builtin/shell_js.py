"""``node`` and ``js`` inside the shell: QuickJS-ng as a Bashkit command.

Bashkit's own TypeScript runtime lacks ``Map``, ``Set``, ``Date``, ``RegExp``
and ``Error`` and its ``sort()`` does not sort, so the shell registers a real
engine instead: QuickJS-ng compiled to WebAssembly (PyPI ``quickjs-rs``, run
by wasmtime). Unlike the native ``quickjs`` binding, its host calls work while
a time limit is set, so ``console.log`` and file access are plain host
functions under the engine's own wall-time and memory limits.

Every run is a fresh runtime on a worker thread, so the event loop never
waits on JavaScript. File access goes through Bashkit's live virtual
filesystem (``BuiltinContext.fs``), so JavaScript sees exactly the mounted
roots, with their read-only flags, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bashkit import BuiltinContext, BuiltinResult, FileSystem

if TYPE_CHECKING:
    from quickjs_rs import Context, JSError

VERSION = "v20.0.0-quickjs"
USAGE = "usage: node [-e CODE | -p EXPR | FILE | -] [ARGS…]  (QuickJS-ng; no npm modules)\n"
HIDDEN_ENV = frozenset({"BASHKIT_ALLOW_INPROCESS_PYTHON"})
DEADLINE_MARGIN = 0.25


@dataclass(slots=True)
class JsLimits:
    """The engine's own limits; ``deadline`` is the shell call's (``time.monotonic``).

    A pooled sandbox keeps its ``JsLimits`` and gets each call's deadline set here.
    """

    deadline: float
    max_seconds: float
    memory_bytes: int
    output_bytes: int
    stack_bytes: int = 1024 * 1024

    def seconds_left(self) -> float:
        """Stops a little before the shell's deadline, so the engine reports its own limit."""
        left = self.deadline - time.monotonic() - DEADLINE_MARGIN
        return max(0.0, min(self.max_seconds, left))


class OutputLimit(Exception):
    """Raised by the output host function when a stream passes its cap."""


@dataclass
class _Io:
    limit: int
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    size: int = 0

    def write(self, stream: int, text: str) -> None:
        self.size += len(text)
        if self.size > self.limit:
            raise OutputLimit(f"output above {self.limit:,} characters")
        (self.err if stream == 2 else self.out).append(text)


_PRELUDE = r"""
(() => {
const g = globalThis;
const fmt = (v, depth = 0) => {
  if (typeof v === 'string') {
    return depth ? `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'` : v;
  }
  if (v instanceof Error) return v.stack ? `${v.name}: ${v.message}\n${v.stack}`.trimEnd()
                                        : `${v.name}: ${v.message}`;
  if (typeof v === 'function') return `[Function: ${v.name || '(anonymous)'}]`;
  if (typeof v === 'bigint') return String(v) + 'n';
  if (typeof v === 'symbol') return String(v);
  if (v === undefined) return 'undefined';
  if (v instanceof Map) return `Map(${v.size}) {${[...v].map(([k, x]) =>
    ` ${fmt(k, depth + 1)} => ${fmt(x, depth + 1)}`).join(',')}${v.size ? ' ' : ''}}`;
  if (v instanceof Set) return `Set(${v.size}) {${[...v].map(x =>
    ` ${fmt(x, depth + 1)}`).join(',')}${v.size ? ' ' : ''}}`;
  if (v instanceof Date) return isNaN(v) ? 'Invalid Date' : v.toISOString();
  if (v instanceof RegExp) return String(v);
  if (v !== null && typeof v === 'object') {
    if (depth > 4) return Array.isArray(v) ? '[Array]' : '[Object]';
    try {
      if (Array.isArray(v)) {
        return v.length ? `[ ${v.map(x => fmt(x, depth + 1)).join(', ')} ]` : '[]';
      }
      const keys = Object.keys(v);
      if (!keys.length) return '{}';
      return `{ ${keys.map(k => `${/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k)}: ${
        fmt(v[k], depth + 1)}`).join(', ')} }`;
    } catch (e) { return String(v); }
  }
  return String(v);
};
const line = (args) => {
  if (typeof args[0] === 'string' && /%[sdifjoO%]/.test(args[0]) && args.length > 1) {
    let i = 1;
    const head = args[0].replace(/%([sdifjoO%])/g, (m, c) => {
      if (c === '%') return '%';
      if (i >= args.length) return m;
      const a = args[i++];
      if (c === 'd') return String(Number(a));
      if (c === 'i') return String(parseInt(a));
      if (c === 'f') return String(parseFloat(a));
      if (c === 'j') return JSON.stringify(a);
      return fmt(a, c === 's' ? 0 : 1);
    });
    args = [head, ...args.slice(i)];
  }
  return args.map(a => fmt(a)).join(' ') + '\n';
};
const out = (...a) => { __host_write(1, line(a)); };
const err = (...a) => { __host_write(2, line(a)); };
g.console = { log: out, info: out, debug: out, trace: err, warn: err, error: err,
  dir: (v) => out(v), table: (v) => out(v) };

class ExitSignal extends Error {}
const state = JSON.parse(__host_state());
let stdinUsed = false;
const stdinText = () => { stdinUsed = true; return state.stdin; };

const fsCall = (op, path, data) => {
  const r = JSON.parse(__host_fs(op, path, data === undefined ? null : data));
  if (r.error) {
    const e = new Error(`${r.error}: ${r.message}, ${op} '${path}'`);
    e.code = r.error; e.path = path; e.syscall = op;
    throw e;
  }
  return r.value;
};
const resolve = (...parts) => {
  let p = state.cwd;
  for (const part of parts) {
    const s = String(part);
    p = s.startsWith('/') ? s : (p.endsWith('/') ? p + s : p + '/' + s);
  }
  const stack = [];
  for (const seg of p.split('/')) {
    if (!seg || seg === '.') continue;
    if (seg === '..') stack.pop(); else stack.push(seg);
  }
  return '/' + stack.join('/');
};
const isStdin = (p) => p === 0 || p === '/dev/stdin' || p === '-';
const enc = (o) => typeof o === 'string' ? o : (o && o.encoding) || null;
const text = (d) => typeof d === 'string' ? d : (d === undefined || d === null ? '' :
  (ArrayBuffer.isView(d) ? new TextDecoder().decode(d) : String(d)));
const statOf = (s) => ({ size: s.size, mode: s.mode, mtimeMs: s.modified * 1000,
  mtime: new Date(s.modified * 1000), isFile: () => s.file_type === 'file',
  isDirectory: () => s.file_type === 'directory',
  isSymbolicLink: () => s.file_type === 'symlink' });

const fs = {
  readFileSync(p, o) {
    const t = isStdin(p) ? stdinText() : fsCall('read', resolve(p));
    return t;
  },
  writeFileSync(p, d) { fsCall('write', resolve(p), text(d)); },
  appendFileSync(p, d) { fsCall('append', resolve(p), text(d)); },
  existsSync(p) { return fsCall('exists', resolve(p)); },
  readdirSync(p, o) {
    const names = fsCall('readdir', resolve(p));
    if (o && o.withFileTypes) return names.map(([n, t]) => ({ name: n,
      isFile: () => t === 'file', isDirectory: () => t === 'directory' }));
    return names.map(([n]) => n);
  },
  mkdirSync(p, o) { fsCall('mkdir', resolve(p), o && o.recursive ? '1' : ''); },
  rmSync(p, o) { fsCall('remove', resolve(p), o && o.recursive ? '1' : ''); },
  unlinkSync(p) { fsCall('remove', resolve(p), ''); },
  renameSync(a, b) { fsCall('rename', resolve(a), resolve(b)); },
  copyFileSync(a, b) { fsCall('write', resolve(b), fsCall('read', resolve(a))); },
  statSync(p) { return statOf(fsCall('stat', resolve(p))); },
};
fs.lstatSync = fs.statSync;
const later = (f) => (...a) => new Promise((res, rej) => {
  try { res(f(...a)); } catch (e) { rej(e); }
});
fs.promises = {};
for (const [k, v] of Object.entries(fs)) {
  if (k.endsWith('Sync')) fs.promises[k.slice(0, -4)] = later(v);
}
fs.promises.readFile = later(fs.readFileSync);
fs.promises.access = later((p) => { if (!fs.existsSync(p)) fsCall('stat', resolve(p)); });
for (const [k, v] of Object.entries(fs.promises)) {
  if (!(k in fs)) fs[k] = (...a) => {
    const cb = typeof a[a.length - 1] === 'function' ? a.pop() : () => {};
    v(...a).then((r) => cb(null, r), (e) => cb(e));
  };
}

const path = {
  sep: '/', delimiter: ':',
  resolve: (...p) => resolve(...p),
  join: (...p) => {
    const j = p.filter(x => x !== '').join('/');
    if (!j) return '.';
    const abs = j.startsWith('/');
    const stack = [];
    for (const seg of j.split('/')) {
      if (!seg || seg === '.') continue;
      if (seg === '..' && stack.length && stack[stack.length - 1] !== '..') stack.pop();
      else if (seg !== '..' || !abs) stack.push(seg);
    }
    return (abs ? '/' : '') + (stack.join('/') || (abs ? '' : '.'));
  },
  normalize: (p) => path.join(p),
  isAbsolute: (p) => String(p).startsWith('/'),
  basename: (p, ext) => {
    const b = String(p).replace(/\/+$/, '').split('/').pop();
    return ext && b.endsWith(ext) ? b.slice(0, -ext.length) : b;
  },
  dirname: (p) => {
    const s = String(p).replace(/\/+$/, '');
    const i = s.lastIndexOf('/');
    return i < 0 ? '.' : (i === 0 ? '/' : s.slice(0, i));
  },
  extname: (p) => {
    const b = path.basename(p), m = /(\.[^./]*)$/.exec(b);
    return m && m[1] !== b ? m[1] : '';
  },
  relative: (a, b) => {
    const x = resolve(a).split('/').filter(Boolean), y = resolve(b).split('/').filter(Boolean);
    let i = 0;
    while (i < x.length && i < y.length && x[i] === y[i]) i++;
    return [...x.slice(i).map(() => '..'), ...y.slice(i)].join('/');
  },
  parse: (p) => ({ root: String(p).startsWith('/') ? '/' : '', dir: path.dirname(p),
    base: path.basename(p), ext: path.extname(p),
    name: path.basename(p, path.extname(p)) }),
};
path.posix = path;

// Timers: a host sleep per timer, so microtasks always run before the next timer.
const timers = new Map();
let nextId = 1, idle = null;
// Idle only once microtasks queued by the last timer have run (they may arm new timers).
const settle = () => {
  if (timers.size || !idle) return;
  __host_sleep(0).then(() => { if (!timers.size && idle) { const f = idle; idle = null; f(); } });
};
const failed = (e) => {
  if (!(e instanceof ExitSignal)) {
    __host_write(2, 'Uncaught ' + fmt(e) + '\n');
    g.process.exitCode = 1;
  }
  timers.clear();
  settle();
};
const arm = (id, fn, ms, args, repeat) => {
  __host_sleep(Math.max(0, Number(ms) || 0)).then(() => {
    if (!timers.has(id)) return;
    if (!repeat) timers.delete(id);
    try { fn(...args); } catch (e) { failed(e); return; }
    if (repeat && timers.has(id)) arm(id, fn, ms, args, repeat); else settle();
  });
};
const timer = (repeat) => (fn, ms, ...args) => {
  const id = nextId++;
  timers.set(id, 1);
  arm(id, fn, ms, args, repeat);
  return id;
};
g.setTimeout = timer(false);
g.setInterval = timer(true);
g.setImmediate = (fn, ...args) => g.setTimeout(fn, 0, ...args);
g.clearTimeout = g.clearInterval = g.clearImmediate = (id) => { timers.delete(id); settle(); };
g.queueMicrotask = (fn) => { Promise.resolve().then(fn); };
g.__idle = () => new Promise((r) => { idle = r; settle(); });

const listeners = {};
const stdin = {
  fd: 0, isTTY: false,
  setEncoding() { return stdin; }, resume() { return stdin; }, pause() { return stdin; },
  on(ev, cb) {
    (listeners[ev] = listeners[ev] || []).push(cb);
    if (!stdin.started && (ev === 'data' || ev === 'end' || ev === 'readable')) {
      stdin.started = true;
      g.setTimeout(() => {
        const t = stdinText();
        if (t) (listeners.data || []).forEach(f => f(t));
        (listeners.end || []).forEach(f => f());
        (listeners.close || []).forEach(f => f());
      }, 0);
    }
    return stdin;
  },
  read() { return stdinUsed ? null : stdinText(); },
  async *[Symbol.asyncIterator]() { const t = stdinText(); if (t) yield t; },
};
stdin.once = stdin.on; stdin.addListener = stdin.on;
const stream = (fd) => ({ fd, isTTY: false,
  write: (s) => { __host_write(fd, text(s)); return true; } });

g.process = {
  argv: state.argv, env: state.env, platform: 'linux', version: state.version,
  versions: { node: state.version.slice(1), quickjs: 'ng' }, pid: 1, exitCode: undefined,
  cwd: () => state.cwd, chdir: () => { throw new Error('process.chdir is not supported'); },
  exit: (code) => {
    g.__exit_code = code === undefined ? (g.process.exitCode ?? 0) : Number(code) | 0;
    throw new ExitSignal('process.exit');
  },
  stdin, stdout: stream(1), stderr: stream(2),
  nextTick: (fn, ...a) => { Promise.resolve().then(() => fn(...a)); },
  hrtime: Object.assign(() => [0, 0], { bigint: () => 0n }),
  memoryUsage: () => ({ rss: 0, heapUsed: 0, heapTotal: 0 }),
  on() { return g.process; },
};

const readline = {
  createInterface({ input } = {}) {
    const lines = () => { const t = stdinText(); const ls = t.split('\n');
      if (ls.length && ls[ls.length - 1] === '') ls.pop(); return ls; };
    const rl = {
      on(ev, cb) {
        if (ev === 'line') g.setTimeout(() => { lines().forEach(l => cb(l)); rl.closed = true;
          (rl.onclose || []).forEach(f => f()); }, 0);
        if (ev === 'close') (rl.onclose = rl.onclose || []).push(cb);
        return rl;
      },
      close() {}, question(q, cb) { __host_write(1, q); cb(lines()[0] || ''); },
      async *[Symbol.asyncIterator]() { for (const l of lines()) yield l; },
    };
    return rl;
  },
};

const modules = { fs, path, readline, process: g.process, 'fs/promises': fs.promises,
  util: { format: (...a) => line(a).slice(0, -1), inspect: (v) => fmt(v, 1) },
  os: { EOL: '\n', platform: () => 'linux', tmpdir: () => '/tmp', homedir: () => '/home/user' } };
g.require = (name) => {
  const key = String(name).replace(/^node:/, '');
  if (key in modules) return modules[key];
  const e = new Error(`Cannot find module '${name}' (only fs, path, readline, util, os; no npm)`);
  e.code = 'MODULE_NOT_FOUND';
  throw e;
};
g.module = { exports: {} }; g.exports = g.module.exports;
g.__filename = state.filename; g.__dirname = path.dirname(state.filename);
if (typeof g.TextDecoder === 'undefined') {
  g.TextDecoder = class { decode(b) { let s = ''; for (const c of b) s += String.fromCharCode(c);
    try { return decodeURIComponent(escape(s)); } catch (e) { return s; } } };
  g.TextEncoder = class { encode(s) { return Uint8Array.from(unescape(encodeURIComponent(s)),
    c => c.charCodeAt(0)); } };
}
})();
"""


def _stat(fs: FileSystem, path: str) -> dict[str, Any]:
    info = fs.stat(path)
    return {
        "size": info.get("size", 0),
        "mode": info.get("mode", 0),
        "modified": info.get("modified", 0) or 0,
        "file_type": info.get("file_type", "file"),
    }


def _fs_op(fs: FileSystem, op: str, path: str, data: str | None) -> str:
    """One file operation on Bashkit's virtual filesystem, answered as JSON for the prelude."""
    try:
        value: Any = None
        if op == "read":
            if not fs.exists(path):
                raise FileNotFoundError(path)
            if _stat(fs, path)["file_type"] == "directory":
                raise IsADirectoryError(path)
            value = fs.read_file(path).decode("utf-8", errors="replace")
        elif op == "write":
            fs.write_file(path, (data or "").encode("utf-8", "surrogatepass"))
        elif op == "append":
            if fs.exists(path):
                fs.append_file(path, (data or "").encode("utf-8", "surrogatepass"))
            else:
                fs.write_file(path, (data or "").encode("utf-8", "surrogatepass"))
        elif op == "exists":
            value = fs.exists(path)
        elif op == "readdir":
            if not fs.exists(path):
                raise FileNotFoundError(path)
            entries = fs.read_dir(path)
            value = sorted(
                [e["name"], (e.get("metadata") or {}).get("file_type", "file")] for e in entries
            )
        elif op == "mkdir":
            if fs.exists(path) and not data:
                raise FileExistsError(path)
            fs.mkdir(path, recursive=bool(data))
        elif op == "remove":
            if not fs.exists(path):
                raise FileNotFoundError(path)
            fs.remove(path, recursive=bool(data))
        elif op == "rename":
            fs.rename(path, data or "")
        elif op == "stat":
            if not fs.exists(path):
                raise FileNotFoundError(path)
            value = _stat(fs, path)
        else:
            return json.dumps({"error": "ENOSYS", "message": f"unknown operation {op}"})
        return json.dumps({"value": value})
    except FileNotFoundError:
        return json.dumps({"error": "ENOENT", "message": "no such file or directory"})
    except IsADirectoryError:
        return json.dumps({"error": "EISDIR", "message": "illegal operation on a directory"})
    except FileExistsError:
        return json.dumps({"error": "EEXIST", "message": "file already exists"})
    except Exception as exc:  # Bashkit reports read-only mounts and the like as plain errors
        text = str(exc) or type(exc).__name__
        code = (
            "EROFS"
            if "read-only" in text
            else "ENOENT"
            if "not found" in text
            else "EACCES"
            if "escape" in text
            else "EIO"
        )
        return json.dumps({"error": code, "message": text})


@dataclass(frozen=True, slots=True)
class _Invocation:
    code: str
    filename: str
    argv: list[str]
    print_result: bool


def _parse_argv(
    name: str, argv: list[str], stdin: str | None, fs: FileSystem, cwd: str
) -> _Invocation | BuiltinResult:
    args = list(argv)
    while args and args[0] in ("--no-warnings", "--experimental-vm-modules", "--"):
        args.pop(0)
    if args and args[0] in ("-v", "--version"):
        return BuiltinResult(stdout=VERSION + "\n")
    if args and args[0] in ("-h", "--help"):
        return BuiltinResult(stdout=USAGE)
    if args and args[0] in ("-e", "--eval", "-p", "--print"):
        if len(args) < 2:
            return BuiltinResult(stderr=f"{name}: {args[0]} requires an argument\n", exit_code=9)
        printing = args[0] in ("-p", "--print")
        return _Invocation(args[1], "[eval]", [name, *args[2:]], printing)
    if not args or args[0] == "-":
        if stdin is None:
            return BuiltinResult(stderr=USAGE, exit_code=2)
        return _Invocation(stdin, "[stdin]", [name, *args[1:]], False)
    if args[0].startswith("-"):
        return BuiltinResult(stderr=f"{name}: unsupported option {args[0]}\n{USAGE}", exit_code=9)
    script = posixpath.normpath(posixpath.join(cwd, args[0]))
    try:
        source = fs.read_file(script).decode("utf-8", errors="replace")
    except Exception:
        return BuiltinResult(stderr=f"{name}: cannot find module '{script}'\n", exit_code=1)
    if source.startswith("#!"):
        source = "//" + source
    return _Invocation(source, script, [name, script, *args[1:]], False)


async def _evaluate(inv: _Invocation, bctx: BuiltinContext, limits: JsLimits) -> BuiltinResult:
    io = _Io(limits.output_bytes)
    env = {k: v for k, v in bctx.env.items() if k not in HIDDEN_ENV}
    state = {
        "argv": inv.argv,
        "env": env,
        "cwd": bctx.cwd or "/",
        "stdin": bctx.stdin or "",
        "filename": inv.filename,
        "version": VERSION,
    }
    fs = bctx.fs

    async def host_sleep(ms: float) -> None:
        await asyncio.sleep(min(float(ms) / 1000.0, limits.seconds_left()))

    # Imported at the first node call: the engine (QuickJS on wasmtime) is most
    # of the package's import time, and most runs never start it.
    from quickjs_rs import Context, JSError, MemoryLimitError, QuickJSError, Runtime
    from quickjs_rs import TimeoutError as JsTimeout

    runtime = Runtime(memory_limit=limits.memory_bytes, stack_limit=limits.stack_bytes)
    ctx = Context(runtime, timeout=max(limits.seconds_left(), 0.001))
    exit_code: int = 0
    try:
        ctx.register("__host_write", lambda fd, text: io.write(int(fd), str(text)))
        ctx.register("__host_state", lambda: json.dumps(state))
        ctx.register("__host_fs", lambda op, path, data: _fs_op(fs, op, path, data))
        ctx.register("__host_sleep", host_sleep, is_async=True)
        ctx.eval(_PRELUDE, filename="<node-prelude>")
        code = inv.code
        if inv.print_result:
            code = f"console.log(eval({json.dumps(code)}))"
        # Timers run inside the same evaluation; its completion value is not marshalled back.
        code += "\n;await __idle();\nundefined"
        try:
            await asyncio.wait_for(
                ctx.eval_async(code, filename=inv.filename, timeout=limits.seconds_left()),
                timeout=limits.seconds_left() + 0.05,
            )
            exit_code = _exit_code(ctx, default=0) or 0
        except (JsTimeout, TimeoutError):
            io.err.append(f"node: time limit reached ({limits.max_seconds:g} s or the call's)\n")
            exit_code = 124
        except MemoryLimitError:
            io.err.append(f"node: memory limit reached ({limits.memory_bytes // 2**20} MiB)\n")
            exit_code = 137
        except JSError as exc:
            known = _exit_code(ctx, default=None)
            if known is not None:
                exit_code = known
            else:
                cause = exc.__cause__ or exc.__context__
                if isinstance(cause, OutputLimit):
                    io.err.append(f"node: {cause}; stopped\n")
                else:
                    io.err.append(f"Uncaught {_js_error_text(exc)}\n")
                exit_code = 1
        except OutputLimit as exc:
            io.err.append(f"node: {exc}; stopped\n")
            exit_code = 1
        except (QuickJSError, RuntimeError, ValueError) as exc:  # engine traps, e.g. deep recursion
            io.err.append(f"node: the engine stopped: {_engine_error_text(exc)}\n")
            exit_code = 134
    finally:
        ctx.close()
        runtime.close()
    return BuiltinResult(stdout="".join(io.out), stderr="".join(io.err), exit_code=exit_code)


def _exit_code(ctx: Context, default: int | None) -> int | None:
    try:
        value = ctx.eval("globalThis.__exit_code ?? (process.exitCode ?? null)")
    except Exception:
        return default
    return default if value is None else int(value)


def _js_error_text(exc: JSError) -> str:
    parts = [str(a) for a in exc.args if a]
    head = parts[0] if parts else "Error"
    stack = getattr(exc, "stack", None)
    if isinstance(stack, str) and stack.strip():
        head += "\n" + stack.rstrip()
    return head


def _engine_error_text(exc: Exception) -> str:
    text = str(exc).strip()
    if not text or text == "Trap()":
        return "stack overflow or engine trap (recursion too deep?)"
    return text.splitlines()[0]


def _run_in_thread(inv: _Invocation, bctx: BuiltinContext, limits: JsLimits) -> BuiltinResult:
    """One fresh engine on this worker thread, with its own event loop for timers."""
    return asyncio.run(_evaluate(inv, bctx, limits))


def _generic_error(exc: BaseException) -> BuiltinResult:
    return BuiltinResult(stderr=f"node: internal error: {exc}\n", exit_code=70)


def node_command(limits: JsLimits) -> Any:
    """A Bashkit ``custom_builtins`` callback running JavaScript under ``limits``."""

    async def node(bctx: BuiltinContext) -> BuiltinResult:
        parsed = _parse_argv(bctx.name, list(bctx.argv), bctx.stdin, bctx.fs, bctx.cwd or "/")
        if isinstance(parsed, BuiltinResult):
            return parsed
        if limits.seconds_left() <= 0:
            return BuiltinResult(stderr="node: no time left in this call\n", exit_code=124)
        try:
            return await asyncio.to_thread(_run_in_thread, parsed, bctx, limits)
        except Exception as exc:
            return _generic_error(exc)

    return node
