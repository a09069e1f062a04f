"""A threaded HTTP server on 127.0.0.1 for the provider test peers."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connections when many runs call at once,
    # and each dropped connect waits a second for the SYN to be sent again.
    request_queue_size = 128


class LoopbackServer:
    """Serves ``handler`` on a free loopback port for the length of a ``with`` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
