"""The extension host: web pages register tools over a WebSocket, the runtime calls them.

One process (``tavern-agent serve``) listens on 127.0.0.1 only and serves:

* ``GET /ext/tavern-agent.js`` — the page client (``tavernAgent.connect(url, token)``);
* ``GET /pages/<file>`` — static pages from an optional folder;
* ``/ext/ws`` — the page channel: a browser page registers tools and answers calls;
* ``/ext/runtime`` — the runtime channel: a tavern-agent process (see
  :mod:`tavern_agent.extensions.remote`) reads the catalog and invokes tools.

Every request must name a loopback host (``127.0.0.1``, ``localhost``, ``::1``)
or the host of an allowed origin in its ``Host`` header; anything else is
refused with 421, so a DNS-rebound name cannot read ``/pages/`` as its own.

Both WebSocket paths demand the token created at start, offered as the
subprotocol ``token.<hex>`` beside ``tavern-agent.v1`` (browsers cannot set
headers). The page channel demands an ``Origin`` from the allow list; the
runtime channel refuses any ``Origin``, so no web page can call tools. Both
checks happen before the handshake completes, so a refused client never gets
to send a message. Messages are capped in size; a malformed message closes
that connection only.

The messages of both channels are in :mod:`tavern_agent.extensions.protocol`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from tavern_agent.core.descriptors import ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import InvalidToolId, ToolId
from tavern_agent.extensions.protocol import (
    CLIENT_PATH,
    CLOSE_MALFORMED,
    MAX_MESSAGE_BYTES,
    PAGE_PATH,
    PAGES_PREFIX,
    RUNTIME_PATH,
    SUBPROTOCOL,
    TOKEN_PREFIX,
    UNKNOWN,
    CallMeta,
    MalformedMessage,
    Refused,
    descriptor_json,
    invoke_request,
    page_descriptor,
    parse_message,
    receipt_json,
)
from tavern_agent.extensions.python import receipt_for_value, unavailable
from tavern_agent.tools.catalog import ExternalReceipt, RegisteredTools
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import OUTSIDE_FAILURE_STEP, outside_text

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
DEFAULT_CALL_TIMEOUT = 60.0


def client_script() -> bytes:
    """The page client, ``tavern-agent.js``."""
    return resources.files("tavern_agent.extensions").joinpath("tavern-agent.js").read_bytes()


@dataclass(eq=False)
class Page:
    """One connected page; its registrations live as long as its connection."""

    connection: ServerConnection
    label: str
    tools: set[ToolId] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)

    async def send(self, message: Mapping[str, Any]) -> None:
        """Send one protocol message to the page."""
        await self.connection.send(json.dumps(message, ensure_ascii=False))


@dataclass(slots=True)
class WebTool:
    """A tool a page registered; it lives as long as the page's connection."""

    descriptor: ToolDescriptor
    page: Page
    enabled: bool

    @property
    def origin(self) -> str:
        """The page that registered the tool."""
        return self.page.label


@dataclass(slots=True)
class Pending:
    """A call sent to a page and not yet answered."""

    page: Page
    future: asyncio.Future[ExternalReceipt]
    name: str


def host_name(header: str | None) -> str | None:
    """The lower-case host name of a ``Host`` header, without port or trailing dot."""
    if not header:
        return None
    try:
        name = urlsplit(f"http://{header.strip()}").hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


def offered_token(request: Request) -> str | None:
    """The token a client offered as the subprotocol ``token.<hex>``, if any."""
    for header in request.headers.get_all("Sec-WebSocket-Protocol"):
        for item in header.split(","):
            item = item.strip()
            if item.startswith(TOKEN_PREFIX):
                return item[len(TOKEN_PREFIX) :]
    return None


class ExtensionHost(RegisteredTools[WebTool]):
    """Pages' tools as the :class:`~tavern_agent.tools.catalog.ExtensionTools` port.

    Usable in-process (``async with ExtensionHost() as host``, then pass it to
    a :class:`~tavern_agent.tools.catalog.ToolCatalog`) or from another
    process through the runtime channel.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        allowed_origins: Iterable[str] = (),
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        pages_dir: Path | None = None,
    ) -> None:
        self.token = token or secrets.token_hex(32)
        self.extra_origins = {o.rstrip("/") for o in allowed_origins}
        self.call_timeout = call_timeout
        self.max_message_bytes = max_message_bytes
        self.pages_dir = pages_dir.resolve() if pages_dir is not None else None
        self.tools: dict[ToolId, WebTool] = {}
        self.pages: set[Page] = set()
        self.pending: dict[str, Pending] = {}
        self.runtimes: set[ServerConnection] = set()
        self.port = 0
        self._server: Server | None = None
        self._script = client_script()

    # ------------------------------------------------------------ lifecycle

    async def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1:``port`` (0 picks a free one); return the base URL."""
        self._server = await serve(
            self._handle,
            "127.0.0.1",
            port,
            process_request=self._process_request,
            select_subprotocol=self._select_subprotocol,
            max_size=self.max_message_bytes,
            compression=None,
            server_header=None,
        )
        sockets = list(self._server.sockets)
        self.port = int(sockets[0].getsockname()[1])
        return self.url

    @property
    def url(self) -> str:
        """The base URL the host listens on."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def allowed_origins(self) -> set[str]:
        """Origins whose pages may connect: the host's own and the configured ones."""
        own = {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}
        return own | self.extra_origins

    async def aclose(self) -> None:
        """Stop listening; connected pages and runtimes are closed."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ExtensionHost:
        if self._server is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ HTTP and handshake

    def _select_subprotocol(
        self, connection: ServerConnection, offered: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        return SUBPROTOCOL if SUBPROTOCOL in offered else None

    @property
    def allowed_hosts(self) -> set[str]:
        """Host names a request may carry: loopback ones and those of the allowed origins."""
        configured = {urlsplit(o).hostname or "" for o in self.extra_origins}
        return set(LOOPBACK_HOSTS | configured) - {""}

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        host = host_name(request.headers.get("Host"))
        if host not in self.allowed_hosts:
            # DNS rebinding: a page of evil.example whose name now points at 127.0.0.1
            # would otherwise read /pages/ as its own origin.
            log.warning("extension host: refused request for host %r", host)
            return connection.respond(421, "Host not allowed: use 127.0.0.1 or localhost\n")
        if path == CLIENT_PATH:
            return self._static(self._script, "text/javascript; charset=utf-8")
        if path.startswith(PAGES_PREFIX):
            return self._page_file(connection, path[len(PAGES_PREFIX) :])
        if path not in (PAGE_PATH, RUNTIME_PATH):
            return connection.respond(404, "Not found\n")
        token = offered_token(request)
        if token is None or not hmac.compare_digest(token.encode(), self.token.encode()):
            return connection.respond(401, "A valid token is required\n")
        origin = request.headers.get("Origin")
        if path == PAGE_PATH and (origin is None or origin.rstrip("/") not in self.allowed_origins):
            log.warning("extension host: refused page connection from origin %r", origin)
            return connection.respond(403, "Origin not allowed\n")
        if path == RUNTIME_PATH and origin is not None:
            return connection.respond(403, "The runtime channel is not for web pages\n")
        return None

    def _static(self, body: bytes, content_type: str) -> Response:
        headers = Headers(
            [
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ]
        )
        return Response(200, "OK", headers, body)

    def _page_file(self, connection: ServerConnection, relative: str) -> Response:
        if self.pages_dir is None:
            return connection.respond(404, "Not found\n")
        target = (self.pages_dir / relative).resolve()
        if not target.is_relative_to(self.pages_dir) or not target.is_file():
            return connection.respond(404, "Not found\n")
        kind = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}.get(
            target.suffix, "application/octet-stream"
        )
        return self._static(target.read_bytes(), f"{kind}; charset=utf-8")

    async def _handle(self, connection: ServerConnection) -> None:
        assert connection.request is not None
        if connection.request.path.split("?", 1)[0] == RUNTIME_PATH:
            await self._serve_runtime(connection)
        else:
            await self._serve_page(connection)

    # ------------------------------------------------------------ page channel

    async def _serve_page(self, connection: ServerConnection) -> None:
        assert connection.request is not None
        origin = connection.request.headers.get("Origin", "?")
        page = Page(connection, f"page {origin} #{uuid.uuid4().hex[:6]}")
        self.pages.add(page)
        try:
            async for raw in connection:
                try:
                    await self._page_message(page, parse_message(raw))
                except MalformedMessage as exc:
                    log.warning("extension host: %s: %s; closing it", page.label, exc)
                    await connection.close(CLOSE_MALFORMED, str(exc)[:120])
                    break
        except ConnectionClosed:
            pass
        finally:
            self._drop_page(page)

    def _drop_page(self, page: Page) -> None:
        self.pages.discard(page)
        for tool_id in page.tools:
            self.tools.pop(tool_id, None)
        for key in list(page.pending):
            pending = self.pending.get(key)
            if pending is not None and not pending.future.done():
                pending.future.set_result(
                    ExternalReceipt.failure(
                        ErrorCode.EXTENSION_TOOL_DISCONNECTED,
                        f"{pending.name} lost its extension page mid-call. {UNKNOWN}",
                    )
                )
        if page.tools:
            page.tools.clear()
            self._catalog_changed()

    async def _page_message(self, page: Page, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "resolve":
            self._resolve(page, message)
            return
        request_id = message.get("id")
        if not isinstance(request_id, int):
            raise MalformedMessage(f"{kind!r} message without an integer id")
        try:
            result = self._page_request(page, kind, message)
        except Refused as refused:
            await page.send(
                {
                    "type": "ack",
                    "id": request_id,
                    "ok": False,
                    "code": refused.code.value,
                    "message": refused.message,
                }
            )
            return
        await page.send({"type": "ack", "id": request_id, "ok": True, "result": result})

    def _page_request(self, page: Page, kind: Any, message: dict[str, Any]) -> Any:
        if kind == "register":
            tool = message.get("tool")
            if not isinstance(tool, dict):
                raise MalformedMessage("register without a tool object")
            descriptor, enabled = page_descriptor(tool)
            if descriptor.tool_id in self.tools:
                raise Refused(
                    ErrorCode.EXTENSION_TOOL_ALREADY_REGISTERED,
                    f"{descriptor.tool_id} is registered already "
                    f"(by {self.tools[descriptor.tool_id].page.label})",
                )
            self.tools[descriptor.tool_id] = WebTool(descriptor, page, enabled)
            page.tools.add(descriptor.tool_id)
            self._catalog_changed()
            return {"toolId": str(descriptor.tool_id)}
        if kind in ("set_enabled", "unregister"):
            tool_id = self._own_tool(page, message.get("toolId"))
            if kind == "unregister":
                self.tools.pop(tool_id, None)
                page.tools.discard(tool_id)
            else:
                self.tools[tool_id].enabled = bool(message.get("enabled"))
            self._catalog_changed()
            return {"toolId": str(tool_id)}
        if kind == "list":
            return {"tools": self.listing(), "diagnostics": []}
        raise MalformedMessage(f"unknown message type {kind!r}")

    def _own_tool(self, page: Page, raw: Any) -> ToolId:
        try:
            tool_id = ToolId.parse(raw)
        except InvalidToolId as exc:
            raise Refused(ErrorCode.TOOL_INVALID_ARGUMENTS, str(exc)) from None
        if tool_id not in page.tools:
            raise Refused(ErrorCode.TOOL_UNAVAILABLE, f"{tool_id} is not registered by this page")
        return tool_id

    def _resolve(self, page: Page, message: dict[str, Any]) -> None:
        key = message.get("callId")
        if not isinstance(key, str):
            raise MalformedMessage("resolve without a callId")
        pending = self.pending.get(key)
        if pending is None or pending.page is not page or pending.future.done():
            log.debug("extension host: late or unknown receipt %s ignored", key)
            return
        if message.get("ok") is True:
            receipt = receipt_for_value(message.get("result"), pending.name)
        elif message.get("unavailable") is True:  # the page's tool went before the call came
            receipt = unavailable(pending.name)
        else:
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            # The page's full error stays in the result file; the model gets one path-free line.
            shown = outside_text(str(text)) if text else "the extension reported an error"
            receipt = ExternalReceipt.failure(
                ErrorCode.EXTENSION_TOOL_ERROR,
                f"{pending.name} failed: {shown}. {OUTSIDE_FAILURE_STEP}",
                error,
                structured={"error": error},
            )
        pending.future.set_result(receipt)

    # ------------------------------------------------------------ the port

    def listing(self) -> list[dict[str, Any]]:
        """Every registered tool as the protocol's descriptor JSON, by ToolId."""
        return [
            descriptor_json(t.descriptor, t.page.label, t.enabled)
            for t in sorted(self.tools.values(), key=lambda t: t.descriptor.tool_id)
        ]

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Call the tool on the page that registered it (the port's ``invoke``)."""
        return await self.call(tool_id, arguments, CallMeta.of(tool_id, context), context.cancelled)

    async def call(
        self,
        tool_id: ToolId,
        arguments: dict[str, Any],
        meta: CallMeta,
        cancelled: asyncio.Event,
    ) -> ExternalReceipt:
        """Send a call event to the owning page and wait for its receipt."""
        tool = self.tools.get(tool_id)
        if tool is None or not tool.enabled:
            return unavailable(meta.name)
        page = tool.page
        key = uuid.uuid4().hex
        future: asyncio.Future[ExternalReceipt] = asyncio.get_running_loop().create_future()
        self.pending[key] = Pending(page, future, meta.name)
        page.pending.add(key)
        waiter: asyncio.Future[Any] = asyncio.ensure_future(cancelled.wait())
        both: set[asyncio.Future[Any]] = {future, waiter}
        reason = ""
        try:
            try:
                await page.send(
                    {
                        "type": "call",
                        "callId": key,
                        "toolId": str(tool_id),
                        "arguments": arguments,
                        "context": meta.to_json(),
                    }
                )
            except ConnectionClosed:
                return ExternalReceipt.failure(
                    ErrorCode.EXTENSION_TOOL_DISCONNECTED,
                    f"{meta.name} lost its extension page mid-call. {UNKNOWN}",
                )
            done, _ = await asyncio.wait(
                both, timeout=self.call_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if future in done:
                return future.result()
            if waiter in done:
                reason = "cancelled"
                return ExternalReceipt.failure(
                    ErrorCode.EXTENSION_TOOL_CANCELLED,
                    f"{meta.name} was cancelled with the run. {UNKNOWN}",
                )
            reason = "timeout"
            return ExternalReceipt.failure(
                ErrorCode.EXTENSION_TOOL_TIMEOUT,
                f"{meta.name} got no answer within {self.call_timeout:g} s. {UNKNOWN}",
            )
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        finally:
            waiter.cancel()
            self.pending.pop(key, None)
            page.pending.discard(key)
            if reason and page in self.pages:
                with contextlib.suppress(ConnectionClosed):
                    await page.send({"type": "cancel", "callId": key, "reason": reason})

    # ------------------------------------------------------------ runtime channel

    def _catalog_changed(self) -> None:
        if not self.runtimes:
            return
        message = json.dumps({"type": "catalog", "tools": self.listing()}, ensure_ascii=False)
        for connection in list(self.runtimes):
            task = asyncio.ensure_future(connection.send(message))
            task.add_done_callback(_quiet)

    async def _serve_runtime(self, connection: ServerConnection) -> None:
        events: dict[Any, asyncio.Event] = {}
        tasks: set[asyncio.Task[None]] = set()
        self.runtimes.add(connection)
        try:
            await connection.send(json.dumps({"type": "catalog", "tools": self.listing()}))
            async for raw in connection:
                try:
                    message = parse_message(raw)
                    if message.get("type") == "cancel":
                        event = events.get(message.get("id"))
                        if event is not None:
                            event.set()
                        continue
                    if message.get("type") != "invoke":
                        raise MalformedMessage(f"unknown message type {message.get('type')!r}")
                    request_id, tool_id, arguments, meta = invoke_request(message)
                except MalformedMessage as exc:
                    await connection.close(CLOSE_MALFORMED, str(exc)[:120])
                    break
                event = events[request_id] = asyncio.Event()
                task = asyncio.ensure_future(
                    self._run_for(connection, request_id, tool_id, arguments, meta, event, events)
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            self.runtimes.discard(connection)
            for event in events.values():  # the runtime went away: abort its calls
                event.set()

    async def _run_for(
        self,
        connection: ServerConnection,
        request_id: Any,
        tool_id: ToolId,
        arguments: dict[str, Any],
        meta: CallMeta,
        cancelled: asyncio.Event,
        events: dict[Any, asyncio.Event],
    ) -> None:
        try:
            receipt = await self.call(tool_id, arguments, meta, cancelled)
            reply = {"type": "receipt", "id": request_id, "receipt": receipt_json(receipt)}
            with contextlib.suppress(ConnectionClosed):
                await connection.send(json.dumps(reply, ensure_ascii=False))
        finally:
            events.pop(request_id, None)


def _quiet(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
