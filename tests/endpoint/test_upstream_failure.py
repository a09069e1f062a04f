"""When the upstream model fails, the client gets an OpenAI error, streaming or not."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.endpoint.helpers import MESSAGES, TURNS, serve_endpoint
from tests.runtime.openai_server import OpenAIServer


def test_a_failing_upstream_model_is_a_502_or_an_error_event(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with OpenAIServer(TURNS) as upstream, serve_endpoint(data, f"{upstream.origin}/nope") as s:
        url, auth = f"{s.url}/chat/completions", {"authorization": f"Bearer {s.key}"}
        whole = httpx.post(url, json={"messages": MESSAGES}, headers=auth, timeout=60)
        assert whole.status_code == 502
        error = whole.json()["error"]
        assert error["code"] == "model.request_failed" and "404" in error["message"]
        assert "runs show" in error["message"]

        streamed = httpx.post(
            url, json={"messages": MESSAGES, "stream": True}, headers=auth, timeout=60
        )
        assert streamed.status_code == 200  # the stream had begun before the run failed
        events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["error"]["code"] == "model.request_failed"
        assert last["choices"][0]["index"] == 0  # clients reading choices[0] do not crash
        assert all("content" not in json.loads(e)["choices"][0]["delta"] for e in events[:-1])
