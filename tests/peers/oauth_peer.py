"""An OAuth 2.1 authorization server and an MCP server it protects, on 127.0.0.1.

Run: ``python oauth_peer.py AS_PORT RS_PORT``. Both are built from the MCP SDK's
server-side auth: the authorization server (metadata, dynamic client
registration, authorize with PKCE, token, refresh, revoke) on ``AS_PORT`` and a
Streamable HTTP MCP server at ``http://127.0.0.1:RS_PORT/mcp`` that accepts only
its access tokens and publishes protected-resource metadata.

The "person" approves at once: ``/authorize`` redirects straight back with a
code. Access tokens live ``$ACCESS_SECONDS`` (default 3600). For tests:
``POST /admin/revoke`` revokes every token; ``GET /admin/stats`` counts
registrations, authorizations and refreshes.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

AS_PORT, RS_PORT = int(sys.argv[1]), int(sys.argv[2])
AS_URL = f"http://127.0.0.1:{AS_PORT}"
RS_URL = f"http://127.0.0.1:{RS_PORT}/mcp"
ACCESS_SECONDS = int(os.environ.get("ACCESS_SECONDS", "3600"))


class Provider:
    """In-memory clients, codes and tokens."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats = {"registrations": 0, "authorizations": 0, "refreshes": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.stats["registrations"] += 1

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.stats["authorizations"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + ACCESS_SECONDS
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            expires_in=ACCESS_SECONDS,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        self.stats["refreshes"] += 1
        return self._issue(
            refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.load_access_token(token)


provider = Provider()


async def revoke_all(request: Request) -> JSONResponse:
    provider.access.clear()
    provider.refresh.clear()
    return JSONResponse({"revoked": True})


async def stats(request: Request) -> JSONResponse:
    return JSONResponse(provider.stats)


auth_app = Starlette(
    routes=[
        *create_auth_routes(
            provider,
            AnyHttpUrl(AS_URL),
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
        ),
        Route("/admin/revoke", revoke_all, methods=["POST"]),
        Route("/admin/stats", stats, methods=["GET"]),
    ]
)

mcp_server = MCPServer(
    "protected",
    token_verifier=provider,
    auth=AuthSettings(
        issuer_url=AnyHttpUrl(AS_URL),
        resource_server_url=AnyHttpUrl(RS_URL),
        validate_token_resource=True,
    ),
)


@mcp_server.tool(description="Say hello to whoever holds a valid token.")
def whoami() -> str:
    return "hello, logged-in user"


def serve(app: object, port: int) -> None:
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")  # type: ignore[arg-type]


if __name__ == "__main__":
    threading.Thread(target=serve, args=(auth_app, AS_PORT), daemon=True).start()
    serve(mcp_server.streamable_http_app(), RS_PORT)
