"""Protocol-level checks of an encoded history: each call has exactly one result.

Written from each provider's pairing rules (every tool call answered by exactly
one result, in the place its API reference requires); the hypothesis test and
the cross-protocol replay test use it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.ids import ID_RULES


def _object(value: Any) -> None:
    assert isinstance(value, dict), f"arguments are not an object: {value!r}"


def check_pairing(protocol: ModelProtocol, body: Mapping[str, Any]) -> int:
    """Assert the pairing rules; returns the number of calls seen."""
    rule = ID_RULES[protocol]
    if protocol is ModelProtocol.OPENAI_CHAT:
        return _chat(body["messages"], rule.accepts)
    if protocol is ModelProtocol.OPENAI_RESPONSES:
        return _responses(body["input"], rule.accepts)
    if protocol is ModelProtocol.ANTHROPIC:
        return _anthropic(body["messages"], rule.accepts)
    return _gemini(body["contents"], rule.accepts)


def _chat(messages: list[dict[str, Any]], valid: Any) -> int:
    calls = 0
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"tool message {i} answers no preceding call"
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [tc["id"] for tc in m["tool_calls"]]
            for tc in m["tool_calls"]:
                _object(json.loads(tc["function"]["arguments"]))
            answered = []
            while i < len(messages) and messages[i]["role"] == "tool":
                answered.append(messages[i]["tool_call_id"])
                i += 1
            assert Counter(answered) == Counter(ids) and len(set(ids)) == len(ids)
            assert all(valid(x) for x in ids), ids
            calls += len(ids)
    return calls


def _responses(items: list[dict[str, Any]], valid: Any) -> int:
    open_calls: Counter[str] = Counter()
    seen: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            assert valid(item["call_id"]) and item["call_id"] not in seen
            seen.add(item["call_id"])
            _object(json.loads(item["arguments"]))
            open_calls[item["call_id"]] += 1
        elif item.get("type") == "function_call_output":
            assert open_calls[item["call_id"]] == 1, f"output without call {item['call_id']}"
            open_calls[item["call_id"]] -= 1
    assert not +open_calls, f"calls without output: {list(+open_calls)}"
    return len(seen)


def _anthropic(messages: list[dict[str, Any]], valid: Any) -> int:
    calls = 0
    assert not messages or messages[0]["role"] == "user"
    for i, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else []
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if m["role"] == "user" and results:
            k = len(results)
            assert all(b.get("type") == "tool_result" for b in blocks[:k]), (
                "results must come first"
            )
            prev = messages[i - 1]
            prev_ids = [b["id"] for b in prev["content"] if b.get("type") == "tool_use"]
            assert [b["tool_use_id"] for b in results] == prev_ids
        if uses:
            ids = [b["id"] for b in uses]
            assert all(valid(x) for x in ids) and len(set(ids)) == len(ids)
            for b in uses:
                _object(b["input"])
            nxt = messages[i + 1]
            got = [b["tool_use_id"] for b in nxt["content"] if b.get("type") == "tool_result"]
            assert got == ids
            calls += len(ids)
    return calls


def _gemini(contents: list[dict[str, Any]], valid: Any) -> int:
    calls = 0
    for i, c in enumerate(contents):
        fcs = [p["functionCall"] for p in c["parts"] if "functionCall" in p]
        frs = [p["functionResponse"] for p in c["parts"] if "functionResponse" in p]
        if frs:
            prev = [p["functionCall"] for p in contents[i - 1]["parts"] if "functionCall" in p]
            assert [(r["id"], r["name"]) for r in frs] == [(f["id"], f["name"]) for f in prev]
            for r in frs:
                assert set(r["response"]) <= {"output", "error"}
        if fcs:
            assert c["role"] == "model" and i > 0
            for f in fcs:
                _object(f["args"])
                assert valid(f["id"])
            nxt = contents[i + 1]
            assert nxt["role"] == "user"
            assert len([p for p in nxt["parts"] if "functionResponse" in p]) == len(fcs)
            calls += len(fcs)
    return calls
