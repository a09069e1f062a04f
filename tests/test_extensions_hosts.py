"""``serve`` answers only requests for a loopback host name (or a configured one).

A page on evil.example whose DNS name is re-pointed at 127.0.0.1 (DNS
rebinding) sends ``Host: evil.example``; it must not read ``/pages/`` or the
client script as if they were its own.
"""

from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

from tests.ext_helpers import serve


def status(url: str, path: str, host: str | None) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_pages_are_served_only_for_loopback_and_configured_hosts(tmp_path: Path) -> None:
    with serve(tmp_path / "data", "--allow-origin", "http://tavern.lan:8000") as served:
        port = urlsplit(served.url).port
        for path in ("/pages/tools.html", "/ext/tavern-agent.js"):
            for good in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"[::1]:{port}"):
                assert status(served.url, path, good) == 200, (path, good)
            assert status(served.url, path, f"tavern.lan:{port}") == 200  # configured
            for bad in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example", ""):
                assert status(served.url, path, bad) == 421, (path, bad)
            assert status(served.url, path, None) == 421
