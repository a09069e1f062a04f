"""Serving the endpoint's ASGI app with uvicorn inside an event loop that is already running.

``tavern-agent serve`` runs the extension host and the agent endpoint in one
process and one event loop, so uvicorn is started and stopped here rather
than through ``uvicorn.run`` (which wants the loop and the signals to itself).
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp

# Open streams get this long to end on shutdown; then their runs are cancelled.
GRACEFUL_SECONDS = 3


class EndpointServer:
    """uvicorn on one already-bound socket, started and stopped by the caller's loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets that say so,
        # and with Nagle on, each keep-alive response waits ~40 ms for a delayed ACK.
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))  # OSError (port taken, bad host) reaches the caller
        except OSError:
            self.sock.close()
            raise
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.server: uvicorn.Server | None = None

    @property
    def url(self) -> str:
        """The base URL the server listens on (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, app: ASGIApp) -> str:
        """Serve ``app``; return the base URL."""
        config = uvicorn.Config(
            app,
            # httptools parses in C and ends a chunked body in one write with its last
            # chunk (h11 takes two): about 0.25 ms less CPU per streamed request.
            http="httptools",
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SECONDS,
            server_header=False,
        )
        config.load()
        self.server = uvicorn.Server(config)
        self.server.lifespan = config.lifespan_class(config)
        await self.server.startup(sockets=[self.sock])
        return self.url

    async def aclose(self) -> None:
        """Stop serving and close the listening socket."""
        if self.server is not None and self.server.started:
            await self.server.shutdown(sockets=[self.sock])
        self.sock.close()
