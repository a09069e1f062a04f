"""Connections to MCP servers: one session per server, started lazily, reused, restarted.

Each connection runs in its own task, which enters the SDK's transport and
``ClientSession`` context managers and leaves them again (anyio requires the
same task for both). Calls from any task use the session. A stdio server's
stderr goes to a capped per-server log file, never to the terminal. A response
the SDK cannot parse (a ``result`` that is not an object, or neither ``result``
nor ``error``) is turned into a parse-error response for its request at once,
as the SDK's HTTP transport does, instead of leaving the call to time out. When the stream
from the server ends (a crash), the connection is marked dead; the next use
starts a new one, after a backoff that grows with consecutive crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any, Self

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR
from pydantic import ValidationError

from tavern_agent.core.closing import AsyncClosing
from tavern_agent.mcp.logs import StderrPipe
from tavern_agent.mcp.oauth import FileTokenStorage, run_auth
from tavern_agent.mcp.registrations import HttpTransport, Registration, StdioTransport

log = logging.getLogger(__name__)
BACKOFF_FIRST = 0.25
BACKOFF_MAX = 8.0
_CLOSE_WAIT = 5.0


class ConnectError(Exception):
    """The server could not be started or reached; nothing was sent."""

    def __init__(self, message: str, *, login_needed: bool = False) -> None:
        super().__init__(message)
        self.login_needed = login_needed


# Parse errors the client side makes up for a response it could not read: ours
# below, and the SDK's HTTP transport's ("Failed to parse JSON response: ...").
MALFORMED_PREFIX = "Failed to parse"


def _as_error_response(exc: Exception) -> SessionMessage | None:
    """A parse-error response for the request a malformed response answered, if any.

    Only a JSON object with an ``id`` and no ``method`` is a response; anything
    else (garbage, a broken request or notification) has no waiter to wake.
    """
    if not isinstance(exc, ValidationError):
        return None
    for error in exc.errors():
        found = error.get("input")
        if isinstance(found, dict) and "method" not in found:
            req_id = found.get("id")
            if isinstance(req_id, str | int) and not isinstance(req_id, bool):
                what = error["msg"] if "result" in found else "it has neither result nor error"
                if "result" in found and not isinstance(found["result"], dict):
                    what = "its result is not an object"
                message = f"{MALFORMED_PREFIX} the server's response: {what}"
                data = types.ErrorData(code=PARSE_ERROR, message=message)
                return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=req_id, error=data))
    return None


class _WatchedReadStream(AsyncClosing):
    """The transport's read stream, noting when it ends (the server went away) and
    answering a request at once when its response cannot be parsed."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        if isinstance(item, Exception):
            return _as_error_response(item) or item
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class Connection:
    """One live session to one server."""

    def __init__(
        self,
        reg: Registration,
        log_path: Path,
        on_notification: Callable[[Any], None],
        elicitation: ElicitationFnT | None = None,
        token_path: Path | None = None,
    ) -> None:
        self.transport = reg.transport
        self.reg_id = reg.id
        self.log_path = log_path
        self.token_path = token_path
        # Set when an HTTP server answered 401 and only `mcp login` can help.
        self.login_needed = False
        self._on_notification = on_notification
        self._elicitation = elicitation
        self._stop = asyncio.Event()
        self._ended = False
        self._task: asyncio.Task[None] | None = None
        self.session: ClientSession | None = None

    @property
    def alive(self) -> bool:
        """Whether the session is up and its task still runs."""
        return (
            self.session is not None
            and not self._ended
            and self._task is not None
            and not self._task.done()
        )

    def mark_dead(self) -> None:
        """Mark the connection lost, so the pool opens a new one for the next call."""
        self._ended = True

    async def start(self, timeout: float) -> ClientSession:
        """Connect and initialize within ``timeout`` seconds; raises ``ConnectError``
        saying why not (a login needed, no answer, the server's error)."""
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp-{self.reg_id}")
        try:
            async with asyncio.timeout(timeout):
                self.session = await asyncio.shield(ready)
        except BaseException as exc:
            await self.close()
            if self.login_needed and isinstance(exc, Exception):
                raise ConnectError("the server needs a login", login_needed=True) from None
            if isinstance(exc, TimeoutError):
                raise ConnectError(f"no answer to initialize within {timeout:g} s") from None
            if isinstance(exc, Exception):
                raise ConnectError(describe_error(exc)) from exc
            raise
        return self.session

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):
            log.debug("mcp %s: transport error %s", self.reg_id, message)
            return
        self._on_notification(message)

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack)
                watched = _WatchedReadStream(read, self.mark_dead)
                session = await stack.enter_async_context(
                    ClientSession(
                        watched,
                        write,
                        message_handler=self._message,
                        elicitation_callback=self._elicitation,
                    )
                )
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # the task owns its errors; callers see them via ready
            self._ended = True
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:
                    ready.set_exception(ConnectError("connection task was cancelled"))
            else:
                log.debug("mcp %s: connection ended: %r", self.reg_id, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._ended = True

    async def _open(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        transport = self.transport
        if isinstance(transport, StdioTransport):
            header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {transport.command}\n"
            pipe = StderrPipe(self.log_path, header)
            stack.callback(pipe.close)
            errlog = pipe.writer
            params = StdioServerParameters(
                command=transport.command,
                args=list(transport.args),
                env=dict(transport.env) or None,
                cwd=transport.cwd,
            )
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            return streams[0], streams[1]
        assert isinstance(transport, HttpTransport)
        auth = None
        if self.token_path is not None:
            auth = run_auth(transport.url, FileTokenStorage(self.token_path), self._needs_login)
        client = create_mcp_http_client(headers=dict(transport.headers) or None, auth=auth)
        await stack.enter_async_context(client)
        streams = await stack.enter_async_context(
            streamable_http_client(transport.url, http_client=client)
        )
        return streams[0], streams[1]

    def _needs_login(self) -> None:
        """The server refused our token (or we have none): stop, so a waiting call
        is answered at once instead of at its timeout."""
        self.login_needed = True
        self._ended = True
        self._stop.set()

    async def close(self) -> None:
        """End the session and its task (cancelled if it does not end in time)."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(_CLOSE_WAIT):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except Exception:
            log.debug("mcp %s: error while closing", self.reg_id, exc_info=True)


def describe_error(exc: BaseException) -> str:
    """An exception's message, the messages of a group's members joined."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return text


class ConnectionPool:
    """The live connections of one manager, by registration id."""

    def __init__(
        self,
        log_path: Callable[[str], Path],
        token_path: Callable[[str], Path] | None = None,
    ) -> None:
        self._log_path = log_path
        self._token_path = token_path
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._crashes: dict[str, tuple[int, float]] = {}  # id → (consecutive, monotonic time)
        self.on_notification: Callable[[str, Any], None] = lambda reg_id, message: None
        # The answer to a server's elicitation request, per registration id.
        self.elicitation: Callable[[str], ElicitationFnT | None] = lambda reg_id: None

    def current(self, reg_id: str) -> Connection | None:
        """The registration's live connection, if there is one."""
        conn = self._connections.get(reg_id)
        return conn if conn is not None and conn.alive else None

    def ready(self, reg: Registration) -> Connection | None:
        """The live connection for ``reg`` as registered now, without awaiting: the
        common case of :meth:`get`, which a call takes first (no coroutine)."""
        conn = self._connections.get(reg.id)
        # `is` first: an unchanged registration file gives the same cached object.
        if (
            conn is not None
            and conn.alive
            and (conn.transport is reg.transport or conn.transport == reg.transport)
        ):
            return conn
        return None

    async def get(self, reg: Registration) -> Connection:
        """A live connection for ``reg``, started if needed; raises :class:`ConnectError`."""
        conn = self.ready(reg)
        if conn is not None:
            return conn
        lock = self._locks.setdefault(reg.id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(reg.id)
            if conn is not None and conn.alive and conn.transport == reg.transport:
                return conn
            if conn is not None:
                if not conn.alive:
                    self._note_crash(reg.id)
                self._connections.pop(reg.id, None)
                await conn.close()
            await self._backoff(reg.id)
            fresh = Connection(
                reg,
                self._log_path(reg.id),
                partial(self._notify, reg.id),
                self.elicitation(reg.id),
                self._token_path(reg.id) if self._token_path is not None else None,
            )
            try:
                await fresh.start(reg.timeouts.connect_seconds)
            except ConnectError:
                self._note_crash(reg.id)
                raise
            self._connections[reg.id] = fresh
            return fresh

    def _notify(self, reg_id: str, message: Any) -> None:
        self.on_notification(reg_id, message)

    def _note_crash(self, reg_id: str) -> None:
        count, _ = self._crashes.get(reg_id, (0, 0.0))
        self._crashes[reg_id] = (count + 1, time.monotonic())

    def note_success(self, reg_id: str) -> None:
        """Forget the registration's crashes, so its next connect waits no backoff."""
        self._crashes.pop(reg_id, None)

    def backoff_seconds(self, reg_id: str) -> float:
        """How long to wait before connecting again to a
        server that kept crashing (0 if it did not)."""
        count, when = self._crashes.get(reg_id, (0, 0.0))
        if count == 0:
            return 0.0
        delay: float = min(BACKOFF_FIRST * 2.0 ** (count - 1), BACKOFF_MAX)
        return max(delay - (time.monotonic() - when), 0.0)

    async def _backoff(self, reg_id: str) -> None:
        delay = self.backoff_seconds(reg_id)
        if delay > 0:
            await asyncio.sleep(delay)

    async def drop(self, reg_id: str) -> None:
        """Close and forget the registration's connection."""
        conn = self._connections.pop(reg_id, None)
        if conn is not None:
            await conn.close()

    async def close_all(self) -> None:
        """Close every connection at once."""
        conns = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
