"""OAuth 2.1 for Streamable HTTP servers, on the MCP SDK's ``OAuthClientProvider``.

The SDK does the protocol: protected-resource and authorization-server
metadata discovery, dynamic client registration, authorization code with
PKCE, and refresh. This module adds what is ours:

* token storage: ``<data>/mcp/oauth/<id>.json`` (mode 0600) holds the client
  registration, the tokens and when the access token expires, so a later
  process refreshes an expired token instead of sending it;
* the login (``tavern-agent mcp login``): the authorization URL opens in the
  browser (or is printed), and a one-shot HTTP listener on 127.0.0.1 receives
  the redirect;
* runs never wait for a person: when a server needs a login, the provider for
  runs stops the flow with :class:`LoginRequired` instead of opening a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import union_scopes
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth import OAuthClientMetadata as _ClientMetadata
from pydantic import BaseModel, ValidationError

from tavern_agent.fsutil import atomic_write

CLIENT_NAME = "tavern-agent"
CALLBACK_PATH = "/callback"
LOGIN_WAIT_SECONDS = 300.0
_M = TypeVar("_M", bound=BaseModel)


class LoginRequired(Exception):
    """The server needs a login that only ``tavern-agent mcp login`` can do."""


class FileTokenStorage:
    """The SDK's ``TokenStorage`` as one JSON file per registration, mode 0600."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.on_tokens: Callable[[], None] = lambda: None  # after tokens were stored

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _store(self, data: dict[str, Any]) -> None:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        atomic_write(self.path, text.encode(), mode=0o600)

    def _entry(self, key: str, kind: type[_M]) -> _M | None:
        """The stored ``key`` read as ``kind``, or ``None`` (not stored, or damaged)."""
        raw = self._load().get(key)
        try:
            return None if raw is None else kind.model_validate(raw)
        except ValidationError:
            return None

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, or ``None`` (also for a damaged entry)."""
        return self._entry("tokens", OAuthToken)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store new tokens with their expiry time; a wanted scope is settled."""
        data = self._load()
        data["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        data["expiresAt"] = None if tokens.expires_in is None else time.time() + tokens.expires_in
        data.pop("wantedScope", None)  # a login or refresh settled it
        self._store(data)
        self.on_tokens()

    def set_metadata(
        self, server: OAuthMetadata | None, resource: ProtectedResourceMetadata | None
    ) -> None:
        """Keep the discovered metadata (a later process refreshes at its token endpoint)."""
        if server is None:
            return
        data = self._load()
        data["authorizationServer"] = server.model_dump(mode="json", exclude_none=True)
        if resource is not None:
            data["protectedResource"] = resource.model_dump(mode="json", exclude_none=True)
        self._store(data)

    def metadata(self) -> tuple[OAuthMetadata, ProtectedResourceMetadata | None] | None:
        """The stored authorization server (and protected
        resource) metadata, if discovery saved them."""
        data = self._load()
        try:
            server = OAuthMetadata.model_validate(data["authorizationServer"])
            raw = data.get("protectedResource")
            resource = None if raw is None else ProtectedResourceMetadata.model_validate(raw)
        except (KeyError, ValidationError):
            return None
        return server, resource

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The stored client registration, or ``None`` (also for a damaged entry)."""
        return self._entry("client", OAuthClientInformationFull)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Store the client registration."""
        data = self._load()
        data["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._store(data)

    def expires_at(self) -> float | None:
        """When the stored access token expires (Unix time), if the server said."""
        value = self._load().get("expiresAt")
        return float(value) if isinstance(value, int | float) else None

    def has_tokens(self) -> bool:
        """Whether tokens are stored (the server was logged in to)."""
        return "tokens" in self._load()

    def set_wanted_scope(self, scope: str | None) -> None:
        """Remember the scope a run was refused for; the next login asks for it."""
        data = self._load()
        if scope and data.get("wantedScope") != scope:
            data["wantedScope"] = scope
            self._store(data)

    def wanted_scope(self) -> str | None:
        """The scope a call was refused for, which the next login asks for."""
        value = self._load().get("wantedScope")
        return value if isinstance(value, str) else None

    def has_client(self) -> bool:
        """Whether a client registration is stored."""
        return "client" in self._load()

    def forget_client(self) -> None:
        """Drop the stored client registration (the server no longer knows it), keeping the rest."""
        data = self._load()
        if data.pop("client", None) is not None:
            self._store(data)

    def remove(self) -> bool:
        """Delete the file (``mcp logout``); whether there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def forget_tokens(self) -> None:
        """Drop the tokens, keep the client registration (for the next login)."""
        data = self._load()
        if data.pop("tokens", None) is not None or data.pop("expiresAt", None) is not None:
            self._store(data)

    def redirect_port(self) -> int | None:
        """The loopback port the stored client registration redirects to, if any."""
        client = self._load().get("client") or {}
        for uri in client.get("redirect_uris") or ():
            parts = urlsplit(str(uri))
            if parts.hostname == "127.0.0.1" and parts.port:
                return parts.port
        return None


class _Provider(OAuthClientProvider):
    """The SDK's provider, keeping what a later process needs to refresh.

    The SDK learns the token's expiry and the authorization server's metadata
    (its token endpoint) only during a login; a later process that loads the
    stored tokens would send an expired token, or refresh at a guessed URL,
    and need a new login where a refresh would do. So both are stored with
    the tokens and restored when they are loaded.
    """

    def __init__(self, storage: FileTokenStorage, **kwargs: Any) -> None:
        super().__init__(storage=storage, **kwargs)
        self._file = storage
        storage.on_tokens = self._save_metadata

    async def _initialize(self) -> None:
        await super()._initialize()
        self.context.token_expiry_time = self._file.expires_at()
        found = self._file.metadata()
        if found is not None:
            self.context.oauth_metadata, self.context.protected_resource_metadata = found

    def _save_metadata(self) -> None:
        self._file.set_metadata(
            self.context.oauth_metadata, self.context.protected_resource_metadata
        )


def _metadata(redirect_uri: str) -> _ClientMetadata:
    return _ClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )


class _LoginDetector(httpx2.Auth):
    """For a server never logged in to: send as is, and note a 401 (no OAuth flow,
    so a run registers no client and opens no browser)."""

    def __init__(self, on_login_needed: Callable[[], None]) -> None:
        self._on_login_needed = on_login_needed

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        response = yield request
        if response.status_code == 401:
            self._on_login_needed()


def run_auth(
    url: str, storage: FileTokenStorage, on_login_needed: Callable[[], None]
) -> httpx2.Auth:
    """The HTTP auth for runs: stored tokens, refreshed when expired; never a browser.

    ``on_login_needed`` is called when the server wants a login that only
    ``tavern-agent mcp login`` can do (no tokens, or they were revoked).
    """
    if not storage.has_client():
        return _LoginDetector(on_login_needed)

    async def refuse(authorization_url: str) -> None:
        # The scope the SDK would have asked for (on a step-up, the union of the
        # old and the newly challenged scopes), for the next `mcp login`.
        storage.set_wanted_scope(provider.context.client_metadata.scope)
        on_login_needed()
        raise LoginRequired("the server needs a login")

    async def no_callback() -> AuthorizationCodeResult:  # never reached: refuse raises first
        raise LoginRequired("the server needs a login")

    port = storage.redirect_port() or 1
    provider = _Provider(
        storage,
        server_url=url,
        client_metadata=_metadata(f"http://127.0.0.1:{port}{CALLBACK_PATH}"),
        redirect_handler=refuse,
        callback_handler=no_callback,
    )
    return provider


class CallbackReceiver:
    """A one-shot HTTP listener on 127.0.0.1 for the authorization redirect."""

    def __init__(self) -> None:
        self._result: asyncio.Future[AuthorizationCodeResult] | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> CallbackReceiver:
        """Listen on 127.0.0.1 at ``port`` (any free port if it is taken)."""
        self._result = asyncio.get_running_loop().create_future()
        try:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        except OSError:  # the stored port is taken: any free one (a new registration follows)
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def redirect_uri(self) -> str:
        """The redirect URI to register and send with the authorization request."""
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode("latin-1")
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.split(" ")
            target = urlsplit(parts[1] if len(parts) > 1 else "/")
            query = {k: v[0] for k, v in parse_qs(target.query).items()}
            if target.path != CALLBACK_PATH or not ("code" in query or "error" in query):
                body, status = "Not the login callback.", "404 Not Found"
            elif "error" in query:
                body, status = f"Login failed: {query['error']}.", "400 Bad Request"
                self._finish(None, query)
            else:
                body, status = "Logged in. You can close this tab.", "200 OK"
                self._finish(query["code"], query)
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        finally:
            writer.close()

    def _finish(self, code: str | None, query: dict[str, str]) -> None:
        if self._result is None or self._result.done():
            return
        if code is None:
            self._result.set_exception(LoginRequired(f"login refused: {query.get('error')}"))
        else:
            result = AuthorizationCodeResult(
                code=code, state=query.get("state"), iss=query.get("iss")
            )
            self._result.set_result(result)

    async def wait(self) -> AuthorizationCodeResult:
        """The authorization code and state from the redirect;
        raises ``TimeoutError`` if none comes in time."""
        assert self._result is not None, "start() first"
        async with asyncio.timeout(LOGIN_WAIT_SECONDS):
            return await self._result

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


@dataclass(frozen=True, slots=True)
class ClientChoice:
    """How this client identifies itself to the authorization server at login.

    Default: dynamic client registration. ``client_id`` (with ``client_secret``
    for a confidential client, sent by HTTP Basic auth): a client registered
    beforehand. ``metadata_url``: an HTTPS URL of a client ID metadata document,
    used as the client id where the server supports that.
    """

    client_id: str | None = None
    client_secret: str | None = None
    metadata_url: str | None = None


class _LoginProvider(_Provider):
    """The login's provider: also asks for the scope a run was last refused for.

    A run cannot re-authorize when a server wants more scope (a step-up); it
    stores the wanted scope instead, and the login that follows asks for it
    with whatever the server challenges now.
    """

    def __init__(self, storage: FileTokenStorage, **kwargs: Any) -> None:
        super().__init__(storage, **kwargs)
        self._wanted = storage.wanted_scope()

    async def _perform_authorization(self) -> httpx2.Request:
        metadata = self.context.client_metadata
        metadata.scope = union_scopes(metadata.scope, self._wanted)
        return await super()._perform_authorization()


def login_provider(
    url: str,
    storage: FileTokenStorage,
    receiver: CallbackReceiver,
    show: Callable[[str], Awaitable[None]],
    metadata_url: str | None = None,
) -> OAuthClientProvider:
    """The provider for ``mcp login``: ``show`` presents the authorization URL."""
    return _LoginProvider(
        storage,
        server_url=url,
        client_metadata=_metadata(receiver.redirect_uri),
        redirect_handler=show,
        callback_handler=receiver.wait,
        client_metadata_url=metadata_url,
    )


async def login(
    url: str,
    headers: dict[str, str],
    storage: FileTokenStorage,
    show: Callable[[str], Awaitable[None]],
    timeout: float,
    client: ClientChoice | None = None,
) -> bool:
    """Log in to the server at ``url``: connect with the interactive provider, which
    runs discovery, registration and the browser step on the server's 401.

    Old tokens are dropped first, so this always asks the person. Returns
    whether the server issued tokens (``False``: it asked for no login).
    """
    storage.forget_tokens()
    receiver = await CallbackReceiver().start(storage.redirect_port() or 0)
    try:
        choice = client or ClientChoice()
        if choice.client_id is not None:
            await storage.set_client_info(
                OAuthClientInformationFull(
                    client_id=choice.client_id,
                    client_secret=choice.client_secret,
                    token_endpoint_auth_method="client_secret_basic"
                    if choice.client_secret
                    else "none",
                    redirect_uris=[receiver.redirect_uri],
                )
            )
        elif storage.redirect_port() not in (None, receiver.port) or choice.metadata_url:
            storage.forget_client()  # registered for another port: register again
        provider = login_provider(url, storage, receiver, show, choice.metadata_url)
        http = create_mcp_http_client(headers=headers or None, auth=provider)
        async with (
            asyncio.timeout(timeout + LOGIN_WAIT_SECONDS),
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            # Some servers guard only the methods after initialize.
            await session.list_tools()
    finally:
        await receiver.close()
    return storage.has_tokens()
