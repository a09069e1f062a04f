"""A frame or body nested 100,000 deep: refused in one line, never a traceback."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin, Subprotocol

from tavern_agent.core import json_input
from tests.endpoint.helpers import serve_endpoint
from tests.ext_helpers import serve
from tests.runtime.openai_server import OpenAIServer

DEEP = "[" * 100_000 + "]" * 100_000


async def test_the_extension_host_closes_a_too_deep_frame_in_one_line(tmp_path: Path) -> None:
    with serve(tmp_path / "data") as served:
        protocols = [Subprotocol("tavern-agent.v1"), Subprotocol("token." + served.token)]
        for path, origin in (("/ext/ws", Origin(served.url)), ("/ext/runtime", None)):
            url = served.url.replace("http://", "ws://") + path
            async with connect(url, subprotocols=protocols, origin=origin, max_size=None) as ws:
                await ws.send(DEEP)
                with pytest.raises(ConnectionClosed) as closed:
                    for _ in range(10):  # a page may be greeted first
                        await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
                assert "nested too deeply" in closed.value.rcvd.reason
        served.process.terminate()
        assert served.process.stdout is not None
        output = served.process.stdout.read()
    assert "Traceback" not in output and "RecursionError" not in output
    logged = [line for line in output.splitlines() if "nested too deeply" in line]
    assert len(logged) == 1 and "closing it" in logged[0], output


def test_the_endpoint_refuses_a_too_deep_body_with_a_400(tmp_path: Path) -> None:
    with OpenAIServer([]) as upstream, serve_endpoint(tmp_path, upstream.base_url) as served:
        host, port = served.url.removeprefix("http://").removesuffix("/v1").split(":")
        for body in (DEEP, json.dumps({"model": "x"})[:-1] + ', "messages": ' + DEEP + "}"):
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            headers = {"Authorization": f"Bearer {served.key}"}
            conn.request("POST", "/v1/chat/completions", body.encode(), headers)
            reply = conn.getresponse()
            error = json.loads(reply.read())["error"]
            assert reply.status == 400 and "nested too deeply" in error["message"], error
            conn.close()
        served.process.terminate()
        served.process.wait(15)
        output = "".join(served.banner)
    assert "Traceback" not in output and "RecursionError" not in output


def test_depth_is_counted_outside_strings_only() -> None:
    assert json_input.loads('["' + "[" * 5_000 + '"]') == ["[" * 5_000]
    assert json_input.loads("[" * 512 + "]" * 512) is not None
    with pytest.raises(json_input.JsonInputError, match="nested too deeply"):
        json_input.loads(b"[" * 513 + b"]" * 513)
    with pytest.raises(json_input.JsonInputError, match="nested too deeply"):
        json_input.loads('{"a": ' * 600 + "1" + "}" * 600)
