"""The agent endpoint as an ASGI app: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Every request is checked in this order, and a refusal starts nothing:

1. an ``Origin`` header (a browser page) must be on the allow list, and on a
   loopback address the ``Host`` must name this machine (403);
2. the bearer key must match (401; an empty key or ``undefined`` never does);
3. the body must be within the size limit and a well-formed request (400);
4. ``model`` must name a profile (404);
5. a run slot must be free (503 with ``Retry-After``: a 429 would make some
   frontends retry on their own for minutes).

Then the request becomes a run (:mod:`tavern_agent.endpoint.runs`). Without
``"stream": true`` the answer comes when the run ends; with it, as server-sent
``chat.completion.chunk`` events: each tool call's name and outcome as
``delta.reasoning_content`` while the run works, ``: keep-alive`` comments
while it is quiet, then the committed message as ``delta.content`` and
``[DONE]``. A client that disconnects cancels its run. Paths are matched with
repeated slashes collapsed (``/v1//chat/completions``), with or without ``/v1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import Profile
from tavern_agent.endpoint.keys import REFUSED_KEYS
from tavern_agent.endpoint.protocol import (
    MODEL_PREFIX,
    CompletionRequest,
    FrontendChat,
    RequestError,
    bad_request,
    chunk,
    completion,
    completion_id,
    error_body,
    frontend_chat,
    model_list,
    now,
    parse_request,
    without_speaker,
)
from tavern_agent.endpoint.run_page import RunPages
from tavern_agent.endpoint.runs import RunOutcome, RunService, profile_for, profile_ids
from tavern_agent.extensions.host import LOOPBACK_HOSTS, host_name
from tavern_agent.runtime.run import new_run_id

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
HEARTBEAT_SECONDS = 10.0
RETRY_AFTER_SECONDS = 5


@dataclass
class EndpointSettings:
    """How the endpoint admits requests."""

    key: str
    max_concurrent_runs: int = 8
    allowed_origins: Sequence[str] = ()
    max_body_bytes: int = MAX_BODY_BYTES
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    loopback_only: bool = True  # bound to 127.0.0.1: requests must name a loopback host


def error_response(
    status: int, message: str, kind: str, code: str | None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An OpenAI-style error response."""
    return JSONResponse(error_body(message, kind, code), status, headers=headers)


def refusal(exc: RequestError) -> JSONResponse:
    """The error response for a refused request."""
    return JSONResponse(exc.body(), exc.status)


@dataclass
class Endpoint:
    """The routes' state: the service that runs requests, the key and the run slots."""

    service: RunService
    settings: EndpointSettings
    active: int = 0  # requests admitted whose run has not ended
    running: set[str] = field(default_factory=set)  # their run ids, for the run page

    # ------------------------------------------------------------ checks

    def authorized(self, request: Request) -> bool:
        """Whether the request carries the endpoint's key
        as its bearer token (compared in constant time)."""
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or given in REFUSED_KEYS:
            return False
        return hmac.compare_digest(given.encode(), self.settings.key.encode())

    def unauthorized(self) -> JSONResponse:
        """The 401 answer, saying which key to use."""
        return error_response(
            401,
            "Incorrect API key provided. Use the key `tavern-agent serve` printed "
            "(kept in <data-dir>/endpoint/api-key) as the bearer token.",
            "invalid_request_error",
            "invalid_api_key",
        )

    async def body(self, request: Request) -> bytes:
        """The request body; raises a ``request_too_large`` refusal past the size limit."""
        limit = self.settings.max_body_bytes
        too_large = bad_request(f"The body is larger than {limit} bytes", "request_too_large")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        data = bytearray()
        async for piece in request.stream():
            data += piece
            if len(data) > limit:
                raise too_large
        return bytes(data)

    # ------------------------------------------------------------ routes

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: one model per profile."""
        if not self.authorized(request):
            return self.unauthorized()
        return JSONResponse(model_list(profile_ids(self.service.data_dir)))

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``: check the key, the body and the free
        run slots, then answer with the agent run (streamed or whole)."""
        if not self.authorized(request):
            return self.unauthorized()
        try:
            parsed = parse_request(await self.body(request))
            profile = profile_for(parsed.model, self.service.data_dir)
            chat = frontend_chat(parsed, self.service.names)
        except RequestError as exc:
            return refusal(exc)
        except ClientDisconnect:
            return Response(status_code=400)
        if self.active >= self.settings.max_concurrent_runs:
            return error_response(
                503,
                f"{self.active} runs are in progress, the most this server runs at once. "
                f"Retry in {RETRY_AFTER_SECONDS} seconds.",
                "server_error",
                "too_many_runs",
                {"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self.active += 1  # taken before any await, so the limit is exact; freed by the response
        return RunResponse(self, parsed, chat, profile)


class RunResponse(Response):
    """Runs the request's agent run while it answers, and cancels it if the client leaves."""

    def __init__(
        self, endpoint: Endpoint, request: CompletionRequest, chat: FrontendChat, profile: Profile
    ) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.request = request
        self.chat = chat
        self.profile = profile
        self.cid = completion_id()
        self.created = now()
        self.model = MODEL_PREFIX + profile.id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer with the run, and free its slot when the response ends."""
        try:
            await self._answer(scope, receive, send)
        finally:
            self.endpoint.active -= 1  # the slot taken when the request was admitted

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.endpoint.service
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        stream = self.request.stream
        run_id = new_run_id()
        if stream:  # the client sees the answer begin before the run's input is prepared
            await self._open_stream(send, run_id)
        try:
            on_line = lines.put_nowait if stream else None
            task = await service.begin(self.chat, self.profile, on_line, run_id)
        except (OSError, ValueError) as exc:
            log.warning("agent endpoint: cannot start a run: %s", exc)
            text = f"The run could not start: {exc}"
            body = error_body(text, "server_error", "run_start_failed")
            if stream:
                await self._close_stream(send, self._error_event(body))
            else:
                await JSONResponse(body, 500)(scope, receive, send)
            return
        self.endpoint.running.add(run_id)
        task.add_done_callback(lambda _: lines.put_nowait(None))
        answer = self._stream(task, lines, send) if stream else self._whole(task, send)
        try:
            await until_disconnect(receive, answer)
        except OSError:  # the client went away while we were writing
            pass
        finally:
            if not task.done():
                task.cancel()  # the loop journals run_cancelled and pairs pending calls
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            self.endpoint.running.discard(run_id)

    # ------------------------------------------------------------ the two ways to answer

    async def _whole(self, task: asyncio.Task[RunOutcome], send: Send) -> None:
        outcome = await task
        message = self._reply(outcome)
        if message is None:
            status, body = failure(outcome)
            response: Response = JSONResponse(body, status)
        else:
            payload = completion(self.cid, self.created, self.model, message, outcome.usage)
            response = JSONResponse(payload, headers={"X-Tavern-Agent-Run": outcome.run_id})
        await response({"type": "http"}, _no_receive, send)

    def _reply(self, outcome: RunOutcome) -> str | None:
        """The committed message, without a ``Name: `` the frontend adds itself."""
        message = outcome.reply
        return None if message is None else without_speaker(message, self.chat.character)

    def _chunk(self, delta: dict[str, Any], **more: Any) -> dict[str, Any]:
        return chunk(self.cid, self.created, self.model, delta, **more)

    async def _open_stream(self, send: Send, run_id: str) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            (b"x-tavern-agent-run", run_id.encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await _write(send, sse(self._chunk({"role": "assistant"})))

    async def _close_stream(self, send: Send, *events: dict[str, Any]) -> None:
        """Send the last ``events`` and ``[DONE]``, and end the body, in one write."""
        body = b"".join(map(sse, events)) + sse("[DONE]")
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _error_event(self, error: dict[str, Any]) -> dict[str, Any]:
        # Clients treat a top-level "error" as a failure; the choices array keeps
        # those that read every event's choices[0] from crashing on it.
        return error | self._chunk({}, finish_reason="stop")

    async def _stream(
        self, task: asyncio.Task[RunOutcome], lines: asyncio.Queue[str | None], send: Send
    ) -> None:
        heartbeat = self.endpoint.settings.heartbeat_seconds
        ended = False
        while not ended:
            try:
                line = await asyncio.wait_for(lines.get(), heartbeat)
            except TimeoutError:
                await _write(send, b": keep-alive\n\n")
                continue
            if line is None:
                break
            # The lines queued meanwhile go out in the same write: one send per burst.
            batch = [line]
            while not ended and not lines.empty():
                more = lines.get_nowait()
                ended = more is None
                batch += [] if more is None else [more]
            events = (self._chunk({"reasoning_content": text + "\n"}) for text in batch)
            await _write(send, b"".join(map(sse, events)))
        outcome = task.result()
        message = self._reply(outcome)
        if message is None:
            await self._close_stream(send, self._error_event(failure(outcome)[1]))
            return
        await self._close_stream(
            send,
            self._chunk({"content": message}),
            self._chunk({}, finish_reason="stop", usage=outcome.usage),
        )


async def _write(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


def sse(data: Any) -> bytes:
    """One server-sent event: a JSON chunk, or the ``[DONE]`` marker."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


def failure(result: RunOutcome) -> tuple[int, dict[str, Any]]:
    """The status and error body for a run that ended without a committed message."""
    code = result.error_code or "run.no_commit"
    why = result.message or "the agent finished without committing a message"
    status = 502 if code == ErrorCode.MODEL_REQUEST_FAILED.value else 500
    text = (
        f"Run {result.run_id} ended {result.status} without a reply: {why} "
        f"(see `tavern-agent runs show {result.run_id}`)."
    )
    return status, error_body(text, "server_error", code)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


async def until_disconnect(receive: Receive, work: Awaitable[None]) -> None:
    """Do ``work`` unless the client disconnects first (then ``work`` is cancelled)."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    job = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (job, watch):
            t.cancel()
        for t in (job, watch):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await t
    if job in done:
        job.result()


class CollapseSlashes:
    """Matches ``/v1//chat/completions`` (a base URL typed with a trailing slash) too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with repeated slashes in its path collapsed."""
        if scope["type"] == "http" and "//" in scope["path"]:
            scope = dict(scope, path=re.sub("/{2,}", "/", scope["path"]))
        await self.app(scope, receive, send)


class OriginGate:
    """Refuses, before anything, a browser request from an origin off the allow list (403).

    With ``loopback_only`` the ``Host`` header must also name this machine (or
    an allowed origin's host): a site that rebinds its DNS name to 127.0.0.1
    is refused even before the key is checked.
    """

    def __init__(self, app: ASGIApp, allowed: Sequence[str], loopback_only: bool) -> None:
        self.app = app
        self.allowed = {o.rstrip("/") for o in allowed}
        hosts = {urlsplit(o).hostname or "" for o in self.allowed}
        self.hosts = (LOOPBACK_HOSTS | hosts) - {""} if loopback_only else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a request from an origin (or, loopback only,
        a host) off the allow list; pass on the rest."""
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            origin = headers.get(b"origin")
            host = headers.get(b"host")
            problem = None
            if origin is not None and origin.decode("latin-1").rstrip("/") not in self.allowed:
                problem = "This origin is not allowed; start serve with --allow-origin ORIGIN."
                code = "origin_not_allowed"
            elif self.hosts is not None and (
                host is None or host_name(host.decode("latin-1")) not in self.hosts
            ):
                problem, code = "Use http://127.0.0.1 or http://localhost.", "host_not_allowed"
            if problem is not None:
                response = error_response(403, problem, "invalid_request_error", code)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = {
        404: f"No route {request.url.path}; use /v1/chat/completions or /v1/models.",
        405: f"{request.method} is not allowed on {request.url.path}.",
    }.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, message, "invalid_request_error", code)


def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("agent endpoint: unexpected error", exc_info=exc)
    return error_response(500, "Internal error; see the server log.", "server_error", "internal")


def create_app(service: RunService, settings: EndpointSettings) -> ASGIApp:
    """The endpoint's ASGI app (wrap nothing around it: it collapses slashes and checks origins)."""
    endpoint = Endpoint(service, settings)
    handler: Callable[[Request], Awaitable[Response]]
    routes = []
    for prefix in ("/v1", ""):
        for path, handler, method in (
            ("/chat/completions", endpoint.chat_completions, "POST"),
            ("/models", endpoint.models, "GET"),
        ):
            routes.append(Route(prefix + path, handler, methods=[method]))
    routes += RunPages(service.data_dir, settings.key, lambda: endpoint.running).routes()
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                OriginGate,
                allowed=settings.allowed_origins,
                loopback_only=settings.loopback_only,
            ),
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.allowed_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
                expose_headers=["x-tavern-agent-run", "retry-after"],
                max_age=600,
            ),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    app.state.endpoint = endpoint
    return CollapseSlashes(app)
